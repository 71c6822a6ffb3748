"""Grain 0.2.18: ``InterleaveIterDataset`` (2 sources) under ``RepeatIterDataset(num_epochs=3)``: a
state saved one item into the second epoch restores to the START of that epoch (its first item comes
twice) and the run then ends: the third epoch is lost.

The same pipeline as ``grain_interleave_repeat.py`` (which has 2 epochs, where the restored iterator
ends at once); with a third epoch the restored iterator replays the second epoch from its start
and stops there.  Same root: the state carries the first epoch's ``exhausted`` flags.  No upstream issue found
(the shape of google/grain #1178, fixed there for the window shuffle).

Found by ``python -m properties.loaders --loader grain`` (property initial_state: "epoch 1: lost [],
repeated [316]").  Needs only grain.  Exits 1 while the bug exists.
"""

import logging
import sys

logging.getLogger("absl").setLevel(logging.ERROR)  # before the import, which logs
import grain  # noqa: E402


def pipeline():
    parts = [grain.MapDataset.source([316, 198, 294]), grain.MapDataset.source([327, 207])]
    interleaved = grain.experimental.InterleaveIterDataset(parts, cycle_length=2)
    return grain.experimental.RepeatIterDataset(interleaved, num_epochs=3)


if __name__ == "__main__":
    reference = list(pipeline())
    it = iter(pipeline())
    head = [next(it) for _ in range(6)]  # the first epoch (5 items) and one item of the second
    state = it.get_state()
    resumed = iter(pipeline())
    resumed.set_state(state)
    got = head + list(resumed)
    print("uninterrupted:", reference)
    print("saved after 6, resumed:", got)
    print("state:", state)
    if got != reference:
        print(f"FAIL: the restored run differs from item 6 on: {got[6:]} instead of {reference[6:]}")
        sys.exit(1)
    print("ok")

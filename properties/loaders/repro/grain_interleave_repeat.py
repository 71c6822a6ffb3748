"""Grain 0.2.18: InterleaveIterDataset under RepeatIterDataset: a state saved in the second epoch
carries the first epoch's 'exhausted' flags, and the restored iterator ends at once: the rest of
the epoch is silently skipped.

Found by ``python -m properties.loaders --loader grain``.  Needs only grain.  Exits 1 while the bug
exists.
"""

import sys

import grain


def pipeline():
    parts = [grain.MapDataset.source([316, 198, 294]), grain.MapDataset.source([327, 207])]
    interleaved = grain.experimental.InterleaveIterDataset(parts, cycle_length=2)
    return grain.experimental.RepeatIterDataset(interleaved, num_epochs=2)


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
    print(f"FAIL: {len(reference) - len(got)} items of the second epoch skipped after the restore")
    sys.exit(1)
print("ok")

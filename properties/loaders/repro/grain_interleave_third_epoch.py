"""Grain 0.2.18: ``InterleaveIterDataset`` over 3 sources (``cycle_length=2``) under
``RepeatIterDataset``: the third epoch of an uninterrupted run is wrong (an item twice, two lost).

No state is saved or restored: ``list(pipeline)`` itself gives epochs 1 and 2 right and epoch 3 as
``[207, 294, 327, 207]``.  With 2 sources, or over 2 epochs, the run is right.  The interleave's
per-source bookkeeping (which sources are exhausted, which iterators are in use) seems to carry over
from one pass to the next, the runtime form of ``grain_interleave_repeat.py`` (the same flags in a
saved state).  No upstream issue found.

Found by ``python -m properties.loaders --loader grain`` (property no_skip_dup: "item 207 delivered
twice in one epoch", after two reads to an epoch's end and a drain).  Needs only grain.  Exits 1 while
the bug exists.
"""

import logging
import sys
from collections import Counter

logging.getLogger("absl").setLevel(logging.ERROR)  # before the import, which logs
import grain  # noqa: E402

SOURCES = [[316, 198], [294, 327], [207]]


def pipeline(epochs):
    parts = [grain.MapDataset.source(s) for s in SOURCES]
    interleaved = grain.experimental.InterleaveIterDataset(parts, cycle_length=2)
    return grain.experimental.RepeatIterDataset(interleaved, num_epochs=epochs)


if __name__ == "__main__":
    one = list(pipeline(1))
    run = list(pipeline(3))
    epochs = [run[i:i + len(one)] for i in range(0, len(run), len(one))]
    print("one epoch:", one)
    print("three epochs:", epochs)
    bad = [(e, ep) for e, ep in enumerate(epochs) if Counter(ep) != Counter(one)] + \
        ([("count", len(epochs))] if len(epochs) != 3 else [])
    if bad:
        print(f"FAIL: epochs that do not hold each item once: {bad}")
        sys.exit(1)
    print("ok")

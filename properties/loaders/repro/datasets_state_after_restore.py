"""datasets 5.2.0: an IterableDataset's state_dict() taken right after load_state_dict() (before
iterating) is the INITIAL state, not the one just loaded: a checkpoint saved right after a resume
(a second preemption before the next step) sends the next resume back to the first example.

Found by ``python -m properties.loaders --loader datasets`` (property state_after_restore).  Needs
only datasets.  Exits 1 while the bug exists.
"""

import os
import sys

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
import datasets  # noqa: E402

IDS = [198, 294, 316, 207]


def fresh():
    return datasets.Dataset.from_dict({"id": IDS}).to_iterable_dataset(num_shards=1)


ds = fresh()
it = iter(ds)
first = next(it)["id"]
after_one = ds.state_dict()  # one example delivered

ds2 = fresh()
ds2.load_state_dict(after_one)
again = ds2.state_dict()  # a checkpoint right after the restore, before reading
print("state after one example:   ", after_one)
print("state right after restoring:", again)

ds3 = fresh()
ds3.load_state_dict(again)
rest = [x["id"] for x in ds3]
print("delivered:", [first], "then after the second resume:", rest)
if [first] + rest != IDS:
    print(f"FAIL: the second resume restarts at the first example ({rest[0]}); expected {IDS[1:]}")
    sys.exit(1)
print("ok")

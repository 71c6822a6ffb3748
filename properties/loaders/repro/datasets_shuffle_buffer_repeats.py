"""datasets 5.2.0, IterableDataset.shuffle(buffer_size=3): a resume past the buffer's size repeats an
item already delivered in the same epoch.

``IterableDataset.state_dict`` documents that examples in the shuffle buffer are LOST when resuming;
it does not say any are delivered twice.  Six rows, buffer 3, one epoch: a state saved after four items
resumes with one of those four again.  Found by ``python -m properties.loaders --loader datasets``
(variant ``buffer``, whose restores are checked for repeats only; the suite draws it, a targeted run
``--set variant=buffer`` finds it).  Needs only datasets.  Exits 1 while the bug exists.
"""

import os
import sys
from collections import Counter

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import datasets  # noqa: E402

IDS = [120, 297, 361, 232, 315, 348]


def dataset():
    ds = datasets.Dataset.from_dict({"id": IDS}).to_iterable_dataset(num_shards=1)
    return ds.shuffle(seed=0, buffer_size=3)


if __name__ == "__main__":
    full = [r["id"] for r in dataset()]
    ds = dataset()
    it = iter(ds)
    head = [next(it)["id"] for _ in range(4)]
    state = ds.state_dict()
    restored = dataset()
    restored.load_state_dict(state)
    tail = [r["id"] for r in restored]
    again = sorted((Counter(head + tail) - Counter(IDS)).elements())
    print(f"uninterrupted: {full}; read {head}, state saved; resumed: {tail}")
    if again:
        print(f"FAIL: {again} delivered twice in one epoch after the resume")
        sys.exit(1)
    print("ok")

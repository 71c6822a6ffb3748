"""datasets 5.2.0, IterableDataset: without ``set_epoch`` between epochs, a restored dataset starts every
later epoch at the restored position, so each later epoch is short (the restored epoch's first items are
skipped again, and an end-of-epoch state gives empty epochs).

``set_epoch(e)`` is optional in the docs (it reseeds a shuffle); a loop that never calls it reads every
epoch whole while uninterrupted, and only after a resume loses data.  Found by ``python -m
properties.loaders --loader datasets`` (the configurations with ``set_epoch=False``: properties
initial_state, workers, serialised).  Needs only datasets.  Exits 1 while the bug exists.
"""

import os
import sys

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import datasets  # noqa: E402

IDS = [198, 294, 207, 110]
EPOCHS = 3


def dataset():
    return datasets.Dataset.from_dict({"id": IDS}).to_iterable_dataset(num_shards=1)


def epochs(ds, start_epoch):
    return [[r["id"] for r in ds] for _ in range(start_epoch, EPOCHS)]  # no set_epoch(e): optional


if __name__ == "__main__":
    ds = dataset()
    full = epochs(ds, 0)
    ds = dataset()
    it = iter(ds)
    head = [next(it)["id"]]  # one item of epoch 0
    state = ds.state_dict()
    restored = dataset()
    restored.load_state_dict(state)
    got = epochs(restored, 0)
    want = [full[0][1:]] + full[1:]
    print(f"uninterrupted epochs: {full}")
    print(f"after {head}, restored: {got}; expected {want}")
    if got != want:
        print("FAIL: without set_epoch, every epoch after a restore starts at the restored position")
        sys.exit(1)
    print("ok")

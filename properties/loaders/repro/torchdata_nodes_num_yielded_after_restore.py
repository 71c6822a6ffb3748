"""torchdata 0.11.0, torchdata.nodes: after ``load_state_dict`` the Loader's ``num_yielded`` counts one
batch too many (the first batch after a restore is counted twice).

A state saved after k batches, loaded into a fresh Loader, then one more batch read: ``state_dict()``
says ``num_yielded`` = k + 2, the uninterrupted loader says k + 1 at the same place.  Every later state
carries the extra count (a trainer that derives its step from it is off by one per resume).  Found by
``python -m properties.loaders --loader torchdata-nodes`` (property counters).
Upstream: docs/loaders.md cited
meta-pytorch/data #1453 for ``num_yielded`` after a restore (not re-checked here).  Needs only
torchdata (and torch).  Exits 1 while the bug exists.
"""

import sys

from torch.utils.data import SequentialSampler
from torchdata import nodes

IDS = [100, 101, 102, 103, 104]


def loader():
    node = nodes.SamplerWrapper(SequentialSampler(IDS))
    node = nodes.ParallelMapper(node, map_fn=IDS.__getitem__, num_workers=1, in_order=True, method="thread")
    return nodes.Loader(nodes.Batcher(node, batch_size=1), restart_on_stop_iteration=True)


if __name__ == "__main__":
    bad = 0
    for k in (0, 2):
        first = loader()
        it = iter(first)
        for _ in range(k):
            next(it)
        state = first.state_dict()
        next(it)
        want = first.state_dict()["num_yielded"]
        restored = loader()
        restored.load_state_dict(state)
        batch = next(iter(restored))
        got = restored.state_dict()["num_yielded"]
        print(f"saved after {k} batches; one more batch ({batch}): uninterrupted num_yielded {want}, "
              f"restored {got}")
        if got != want:
            bad += 1
            print(f"FAIL: num_yielded after a restore is {got}, expected {want}")
    sys.exit(1 if bad else 0)

"""torchdata 0.11.0, torchdata.nodes: ``Loader.state_dict()`` called on a fresh loader before
``load_state_dict()`` makes the load do nothing: the next ``iter(loader)`` starts from scratch.

``Loader.state_dict()`` with no iterator yet creates one "solely for getting a state_dict" and the next
``iter()`` hands that iterator back as it is, without applying the state loaded in between.  A training
script whose checkpoint hook (or a logger) reads the loader's state before the resume code loads the
saved one silently repeats the epoch from its start.  Found by ``python -m properties.loaders --loader
torchdata-nodes`` (property initial_state: "restore into a loader whose state was read first").  Needs
only torchdata (and torch).  Exits 1 while the bug exists.
"""

import sys

from torch.utils.data import SequentialSampler
from torchdata import nodes

IDS = [100, 101, 102, 103, 104, 105]


def loader():
    node = nodes.SamplerWrapper(SequentialSampler(IDS))
    node = nodes.ParallelMapper(node, map_fn=IDS.__getitem__, num_workers=1, in_order=True, method="thread")
    return nodes.Loader(nodes.Batcher(node, batch_size=1), restart_on_stop_iteration=True)


if __name__ == "__main__":
    first = loader()
    it = iter(first)
    head = [next(it)[0] for _ in range(2)]
    state = first.state_dict()  # after two items
    expected = [b[0] for b in it]

    plain = loader()
    plain.load_state_dict(state)
    resumed = [b[0] for b in plain]

    touched = loader()
    touched.state_dict()  # e.g. a checkpoint hook that runs before the resume code
    touched.load_state_dict(state)
    got = [b[0] for b in touched]
    print(f"read {head}, state saved; rest of the epoch {expected}")
    print(f"fresh loader, load_state_dict: {resumed}")
    print(f"fresh loader, state_dict() then load_state_dict: {got}")
    if got != expected:
        print("FAIL: load_state_dict after state_dict() on a fresh Loader is ignored")
        sys.exit(1)
    print("ok")

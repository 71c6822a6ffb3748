"""torchdata 0.11.0, torchdata.nodes: a ``Loader(restart_on_stop_iteration=True)`` over a
``SamplerWrapper(RandomSampler(generator=...))`` (shuffle=True): a state saved in epoch 1 (or later)
resumes with epoch 0's order, for 1 and 2 mapper workers.

The uninterrupted run's epoch 1 is a fresh permutation; a fresh loader that loads the state saved two
items into epoch 1 delivers the rest of epoch 0's permutation instead (the same items, the wrong order,
so every later epoch differs too).  Found by ``python -m properties.loaders --loader torchdata-nodes``
(property resume).  Needs only torchdata (and torch).  Exits 1 while the bug exists.
"""

import sys

import torch
from torch.utils.data import RandomSampler
from torchdata import nodes

IDS = [100, 101, 102, 103, 104, 105]


def loader(workers):
    sampler = RandomSampler(IDS, generator=torch.Generator().manual_seed(0))
    node = nodes.SamplerWrapper(sampler)
    node = nodes.ParallelMapper(node, map_fn=IDS.__getitem__, num_workers=workers, in_order=True,
                                method="thread")
    node = nodes.Batcher(node, batch_size=1)
    return nodes.Loader(node, restart_on_stop_iteration=True)


if __name__ == "__main__":
    bad = 0
    for workers in (1, 2):
        first = loader(workers)
        epoch0 = [b[0] for b in first]  # the user's loop: for epoch in range(E): for batch in loader
        it = iter(first)
        head = [next(it)[0] for _ in range(2)]
        state = first.state_dict()  # two items into epoch 1
        tail = [b[0] for b in it]
        restored = loader(workers)
        restored.load_state_dict(state)
        got = [b[0] for b in restored]
        print(f"workers={workers}: epoch 0 {epoch0}, epoch 1 {head + tail}; "
              f"resumed after {head}: {got}, expected {tail}")
        if got != tail:
            bad += 1
            print(f"FAIL: workers={workers}: a state from epoch 1 resumes epoch 0's order "
                  f"(the rest of epoch 0: {got == epoch0[2:]})")
    sys.exit(1 if bad else 0)

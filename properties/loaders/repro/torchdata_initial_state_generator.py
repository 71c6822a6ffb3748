"""torchdata 0.11.0: a StatefulDataLoader state taken before the first batch, restored into a
fresh loader (same seeded generator), gives a different SECOND epoch.

Found by ``python -m properties.loaders --loader torchdata`` (properties initial_state and
state_after_restore).  Needs only torch and torchdata.  Exits 1 while the bug exists.
"""

import sys

import torch
from torchdata.stateful_dataloader import StatefulDataLoader

DATA = [207, 316, 198, 327, 294]


def loader():
    return StatefulDataLoader(DATA, batch_size=1, shuffle=True, generator=torch.Generator().manual_seed(0))


def two_epochs(dl):
    return [[int(b) for b in dl] for _ in range(2)]


reference = two_epochs(loader())
dl = loader()
state = dl.state_dict()  # before anything was consumed
resumed = loader()
resumed.load_state_dict(state)
got = two_epochs(resumed)
print("uninterrupted:", reference)
print("resumed from the initial state:", got)
if got != reference:
    print("FAIL: the restored loader's second epoch differs (first wrong item:",
          next((i, a, b) for i, (a, b) in enumerate(zip(sum(reference, []), sum(got, []))) if a != b), ")")
    sys.exit(1)
print("ok")

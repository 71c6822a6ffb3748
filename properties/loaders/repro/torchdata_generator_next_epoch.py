"""torchdata 0.11.0: with an explicit ``generator=``, a StatefulDataLoader restored from a state
taken before the first batch, or at the end of an epoch, gives a different NEXT epoch than the
uninterrupted run (same seeded generator in the fresh loader; without ``generator=`` and with the
global seed set, both cuts resume exactly).

Found by ``python -m properties.loaders --loader torchdata`` (properties resume, initial_state,
state_after_restore).  Needs only torch and torchdata.  Exits 1 while the bug exists.
"""

import sys

import torch
from torchdata.stateful_dataloader import StatefulDataLoader

DATA = [207, 316, 198, 327, 294]


def loader():
    return StatefulDataLoader(DATA, batch_size=1, shuffle=True, generator=torch.Generator().manual_seed(0))


def epochs(dl, n):
    return [[int(b) for b in dl] for _ in range(n)]


reference = epochs(loader(), 2)
print("uninterrupted, two epochs:", reference)
bad = False

# cut 1: a state read before anything was consumed
state = loader().state_dict()
dl = loader()
dl.load_state_dict(state)
got = epochs(dl, 2)
print("restored from the initial state:", got)
bad |= got != reference

# cut 2: a state taken at the end of the first epoch (every batch delivered, StopIteration not seen)
dl = loader()
it = iter(dl)
first = [int(next(it)) for _ in range(len(DATA))]
state = dl.state_dict()
dl = loader()
dl.load_state_dict(state)
remainder, second = epochs(dl, 2)  # the rest of epoch 1 (empty), then epoch 2
print("restored at the end of epoch 1: remainder", remainder, "then", second)
bad |= first + remainder != reference[0] or second != reference[1]

if bad:
    print("FAIL: the epoch after the restore is not the uninterrupted run's")
    sys.exit(1)
print("ok")

"""torchdata 0.11.0: restoring a state taken right after restoring an end-of-epoch state makes
``iter(loader)`` raise StopIteration (an IterableDataset without state of its own, so the loader
fast-forwards, as its docs say).

Found by ``python -m properties.loaders --loader torchdata`` (property resume).  Needs only torch
and torchdata.  Exits 1 while the bug exists.
"""

import sys

import torch.utils.data
from torchdata.stateful_dataloader import StatefulDataLoader


class Ids(torch.utils.data.IterableDataset):
    def __iter__(self):
        yield from [316, 198, 294, 327, 207]


def loader():
    return StatefulDataLoader(Ids(), batch_size=1)


dl = loader()
it = iter(dl)
print("epoch:", [int(next(it)) for _ in range(5)])
end_of_epoch = dl.state_dict()  # all 5 items delivered, StopIteration not yet seen

dl2 = loader()
dl2.load_state_dict(end_of_epoch)
again = dl2.state_dict()  # a checkpoint right after the restore, before reading
dl3 = loader()
dl3.load_state_dict(again)
try:
    rest = [int(b) for b in dl3]
except StopIteration:
    print("FAIL: iter(loader) raised StopIteration instead of returning an (empty) iterator")
    sys.exit(1)
print("rest of the epoch:", rest)
print("ok" if rest == [] else "FAIL: items after the end of the epoch")
sys.exit(0 if rest == [] else 1)

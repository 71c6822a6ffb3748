"""torchdata 0.11.0, StatefulDataLoader with 2 worker processes over an IterableDataset without state:
restore a state taken after the epoch's last batch, read the state at once, restore that: ``iter(loader)``
raises StopIteration (for ``batch_size`` 1, 2 and 3 with ``drop_last``), where restoring the first state
directly gives the expected empty rest of the epoch.

The worker-process form of ``torchdata_iterable_end_of_epoch.py`` (``num_workers=0``): the state read
right after the restore counts the restored batches twice, and the fast-forward runs past the epoch's end.
A training loop that checkpoints right after a resume and resumes again crashes in ``for batch in loader``.
Upstream: the end-of-epoch family of meta-pytorch/data #1437; no issue found for worker processes.

Found by ``python -m properties.loaders --loader torchdata`` (property serialised: ``next`` raised
StopIteration at stateful_dataloader.py).  Needs only torchdata (and torch).  Exits 1 while the bug exists.
"""

import sys
import warnings

import torch.utils.data as tud
from torchdata.stateful_dataloader import StatefulDataLoader

warnings.filterwarnings("ignore")  # (its "naively fast-forwarding by N steps" log lines go to stderr)
IDS = [316, 198, 294, 327, 207]


class Ids(tud.IterableDataset):
    def __iter__(self):
        info = tud.get_worker_info()
        yield from (IDS if info is None else IDS[info.id::info.num_workers])


def loader(batch, drop_last):
    return StatefulDataLoader(Ids(), batch_size=batch, drop_last=drop_last, num_workers=2,
                              multiprocessing_context="fork")


def rest(dl):
    try:
        return [b.tolist() for b in dl]
    except StopIteration:
        return "StopIteration"


def run(batch, drop_last):
    first = loader(batch, drop_last)
    epoch = list(first)  # the whole epoch
    first = loader(batch, drop_last)
    it = iter(first)
    head = [next(it).tolist() for _ in epoch]  # every batch, StopIteration not yet seen
    end_of_epoch = first.state_dict()
    direct = loader(batch, drop_last)
    direct.load_state_dict(end_of_epoch)
    resumed = loader(batch, drop_last)
    resumed.load_state_dict(end_of_epoch)
    again = loader(batch, drop_last)
    again.load_state_dict(resumed.state_dict())  # a checkpoint right after the resume
    got, want = rest(again), rest(direct)
    print(f"batch_size={batch}, drop_last={drop_last}: epoch {head}; rest restored from its end: {want}; "
          f"from the state read right after that restore: {got}")
    return got == want


if __name__ == "__main__":
    ok = [run(b, d) for b, d in ((1, False), (2, False), (3, True))]
    if not all(ok):
        print(f"FAIL: {ok.count(False)} of {len(ok)} cases: a re-saved end-of-epoch state "
              "breaks iter(loader)")
        sys.exit(1)
    print("ok")

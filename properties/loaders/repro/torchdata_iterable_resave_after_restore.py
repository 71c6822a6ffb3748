"""torchdata 0.11.0, StatefulDataLoader over an IterableDataset without state: a state read right after
``load_state_dict`` (before iterating) counts the restored batches twice, so a checkpoint saved right after
a resume loses data on the next resume.

The loader fast-forwards such a dataset by re-reading ``_num_yielded`` batches, as its docs say.  Read 1
of 5 items, save (``_num_yielded`` 1), restore into a fresh loader and read its state at once: it says 2.
Restored from that second state the loader skips the item after the first (``num_workers=0``); with 2
worker processes the same moves make ``iter`` raise ``ValueError: last_yielded_worker_id does not
match``.  The state itself is right when it is restored directly.  Same family as the end-of-epoch case
(``torchdata_iterable_end_of_epoch.py``: there the doubled count makes ``iter`` raise StopIteration) and
meta-pytorch/data #1437; no issue found for a mid-epoch state.

Found by ``python -m properties.loaders --loader torchdata`` (property counters: the state's counter one
batch ahead right after the restore).  Needs only torchdata (and torch).  Exits 1 while the bug exists.
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


def loader(workers):
    kw = {"batch_size": 1, "num_workers": workers}
    if workers:
        kw["multiprocessing_context"] = "fork"
    return StatefulDataLoader(Ids(), **kw)


def run(workers):
    first = loader(workers)
    it = iter(first)
    head = [int(next(it))]
    saved = first.state_dict()
    resumed = loader(workers)
    resumed.load_state_dict(saved)
    resaved = resumed.state_dict()  # a checkpoint right after the resume, before reading
    direct = loader(workers)
    direct.load_state_dict(saved)
    want = head + [int(b) for b in direct]
    again = loader(workers)
    again.load_state_dict(resaved)
    try:
        got = head + [int(b) for b in again]
    except Exception as exc:  # noqa: BLE001 - what the user sees
        got = f"{type(exc).__name__}: {exc}"
    counts = {k: s.get("_num_yielded", s.get("_snapshot", {}).get("_snapshot_step")) for k, s in
              (("saved", saved), ("resaved", resaved))}
    print(f"num_workers={workers}: batches counted {counts}; resumed from the saved state: {want}; "
          f"from the state read right after that resume: {got}")
    return got == want


if __name__ == "__main__":
    ok = [run(w) for w in (0, 2)]
    if not all(ok):
        print(f"FAIL: a state read right after a restore does not resume where the restore did "
              f"(num_workers {[w for w, k in zip((0, 2), ok, strict=True) if not k]})")
        sys.exit(1)
    print("ok")

"""torchdata 0.11.0, StatefulDataLoader with 2 worker processes over a stateful IterableDataset: a state taken
after the epoch's last batch (before StopIteration) restores into a loader that delivers a worker's items of
that epoch again, where the same moves with ``num_workers=0`` resume at the epoch's end (nothing more).

The dataset is the pattern of torchdata's README (a position it saves and restores, reset when its iterator
ends, so the next epoch starts again); each worker reads ``ids[w::2]``.  Worker 0 finished its share and
reset its position before the snapshot, and the restored loader starts that worker over: its items come
twice in one run.  Upstream: the end-of-epoch family of meta-pytorch/data #1437 (PR #1439 fixed the
sampler side); no issue found for worker processes.

Found by ``python -m properties.loaders --loader torchdata`` (property resume, workers drawn).  Needs only
torchdata (and torch).  Exits 1 while the bug exists.
"""

import sys
import warnings

import torch.utils.data as tud
from torchdata.stateful_dataloader import StatefulDataLoader

warnings.filterwarnings("ignore")


class Ids(tud.IterableDataset):
    def __init__(self, ids):
        self.ids, self.pos = ids, 0

    def __iter__(self):
        info = tud.get_worker_info()
        mine = self.ids if info is None else self.ids[info.id::info.num_workers]
        while self.pos < len(mine):
            x = mine[self.pos]
            self.pos += 1
            yield x
        self.pos = 0  # the next epoch starts again

    def state_dict(self):
        return {"pos": self.pos}

    def load_state_dict(self, sd):
        self.pos = sd["pos"]


def run(workers):
    ids = [316, 198, 294, 327, 207]
    kw = {"batch_size": 2, "num_workers": workers}
    if workers:
        kw["multiprocessing_context"] = "fork"
    first = StatefulDataLoader(Ids(ids), **kw)
    it = iter(first)
    got = [x for _ in range(3) for x in next(it).tolist()]  # all 5 items: 3 batches, StopIteration not seen
    state = first.state_dict()
    restored = StatefulDataLoader(Ids(ids), **kw)
    restored.load_state_dict(state)
    rest = [x for b in restored for x in b.tolist()]
    print(f"num_workers={workers}: the epoch {got}; restored from the state after its last batch: {rest}")
    return got, rest


if __name__ == "__main__":
    run(0)
    got, rest = run(2)
    if rest:
        print(f"FAIL: with 2 workers the restored epoch delivers {rest} again (each already in {got})")
        sys.exit(1)
    print("ok")

"""LitData 0.2.76: calling ``state_dict()`` on a StreamingDataLoader that was just restored (before its first
batch: a checkpoint hook at the start of a resumed run) changes what that loader then delivers: the rest of
epoch 1 comes in epoch 0's shuffle order, so with ``batch_size=2`` an item of the epoch is lost and another
repeated.

Root: ``StreamingDataset.state_dict`` updates the pending resume state it was loaded with
(``self._state_dict.update(payload)``) with the dataset's own ``current_epoch``, which is still the fresh
dataset's 1 until the first ``iter``; that state is what the next ``iter`` resumes from.  The same root as
litdata_state_dict_aliases_checkpoint.py (the caller's checkpoint is written), seen here in the data.

Found by ``python -m properties.loaders --loader litdata`` (property workers: its plain restores, then a save,
then the rest of the run).  Needs only litdata (and torch).  Exits 1 while the bug exists.
"""

import sys
import tempfile
import warnings

import litdata

warnings.filterwarnings("ignore")


def row(x):
    return {"id": x}


def flat(batches):
    return [int(x) for b in batches for x in b["id"]]


if __name__ == "__main__":
    out = tempfile.mkdtemp(prefix="litdata-repro-")
    litdata.optimize(fn=row, inputs=[316, 198, 294, 327, 207], output_dir=out, chunk_size=5, num_workers=1,
                     verbose=False)

    def loader():
        ds = litdata.StreamingDataset(out, shuffle=True, seed=0, drop_last=False)
        return litdata.StreamingDataLoader(ds, batch_size=2)

    first = loader()
    flat(first)  # epoch 0
    it = iter(first)
    head = flat([next(it)])  # one batch into epoch 1
    checkpoint = first.state_dict()
    tail = flat(it)
    print("uninterrupted epoch 1:", head + tail)

    plain = loader()
    plain.load_state_dict(checkpoint)
    print("restored:", head, "+", flat(plain))

    hooked = loader()
    hooked.load_state_dict(checkpoint)
    hooked.state_dict()  # e.g. a checkpoint callback at the start of the resumed run
    got = flat(hooked)
    epoch = head + got
    print("restored, state_dict(), then iterated:", head, "+", got)
    lost = sorted(set(head + tail) - set(epoch))
    repeated = sorted({x for x in epoch if epoch.count(x) > 1})
    if got != tail:
        print(f"FAIL: state_dict() changed the restored stream: expected {tail}, got {got} "
              f"(epoch 1 lost {lost}, repeated {repeated})")
        sys.exit(1)
    print("ok")

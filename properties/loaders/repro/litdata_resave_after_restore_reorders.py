"""LitData 0.2.76: a state saved right after a restore (before the first batch) resumes the epoch in the
previous epoch's shuffle order: restore a state taken one item into epoch 1, save at once, restore that
second state, and the rest of epoch 1 comes in epoch 0's order (the same items, reordered; other
configurations lose and repeat items: litdata_state_dict_after_restore_changes_stream.py).

The second state says ``dataset.current_epoch = 1`` where the first said 2: ``StreamingDataset.state_dict``
writes the fresh dataset's own epoch counter (still 1 before any ``iter``) into the state it was loaded with
and returns it (the root of litdata_state_dict_aliases_checkpoint.py too).

Found by ``python -m properties.loaders --loader litdata`` (property state_after_restore: restore, save at
once, restore that state).  Needs only litdata (and torch).  Exits 1 while the bug exists.
"""

import copy
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
        return litdata.StreamingDataLoader(ds, batch_size=1)

    first = loader()
    print("uninterrupted epoch 0:", flat(first))
    it = iter(first)
    head = flat([next(it)])
    checkpoint = copy.deepcopy(first.state_dict())  # one item into epoch 1, as written to disk
    tail = flat(it)
    print("uninterrupted epoch 1:", head + tail)

    resumed = loader()
    resumed.load_state_dict(copy.deepcopy(checkpoint))
    second = copy.deepcopy(resumed.state_dict())  # saved again at once, before the first batch
    print("dataset.current_epoch: first state", checkpoint["dataset"]["current_epoch"],
          "second state", second["dataset"]["current_epoch"])

    again = loader()
    again.load_state_dict(second)
    got = flat(again)
    print("restored from the second state:", head, "+", got)
    if got != tail:
        print(f"FAIL: the state saved right after a restore resumes epoch 1 differently: expected {tail}, "
              f"got {got}")
        sys.exit(1)
    print("ok")

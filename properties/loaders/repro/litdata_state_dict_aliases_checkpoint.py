"""LitData 0.2.76: ``state_dict()`` of a StreamingDataLoader that was just restored returns the very
``dataset`` dict of the checkpoint it loaded, and writes into it: the checkpoint object the caller
still holds changes (``current_epoch`` 2 -> 1 here), so retrying from it is not the same restore.

Found by ``python -m properties.loaders --loader litdata`` (property restore_twice: "the state object
changed after it was returned"; the data properties restore a fresh copy and hold).  Needs only litdata (and
torch).  Exits 1 while the bug exists.
"""

import copy
import sys
import tempfile

import litdata


def row(x):
    return {"id": x}


if __name__ == "__main__":
    out = tempfile.mkdtemp(prefix="litdata-repro-")
    litdata.optimize(fn=row, inputs=[316, 198, 294, 327, 207], output_dir=out, chunk_size=5, num_workers=1,
                     verbose=False)

    def loader():
        return litdata.StreamingDataLoader(litdata.StreamingDataset(out, drop_last=False), batch_size=1)

    first = loader()
    print("epoch:", [int(b["id"]) for b in first])
    checkpoint = first.state_dict()  # after one whole epoch
    kept = copy.deepcopy(checkpoint)

    restored = loader()
    restored.load_state_dict(checkpoint)
    again = restored.state_dict()  # a checkpoint right after the restore
    print("aliased:", again["dataset"] is checkpoint["dataset"])
    changed = [f"dataset.{k}: {kept['dataset'][k]!r} -> {checkpoint['dataset'][k]!r}"
               for k in kept["dataset"] if kept["dataset"][k] != checkpoint["dataset"].get(k)]
    changed += [
        f"{k}: {kept[k]!r} -> {checkpoint[k]!r}" for k in kept if k != "dataset" and kept[k] != checkpoint[k]
    ]
    print("the first checkpoint after state_dict() on the restored loader:", changed or "unchanged")
    if changed:
        print("FAIL: state_dict() wrote into the checkpoint that was loaded")
        sys.exit(1)
    print("ok")

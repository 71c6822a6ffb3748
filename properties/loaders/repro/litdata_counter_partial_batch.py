"""LitData 0.2.76: StreamingDataLoader's ``num_samples_yielded`` counts batches x batch_size, so
after an epoch whose last batch is partial it reports more samples than were delivered (8 for an
epoch of 7 with batch_size=2).

Found by ``python -m properties.loaders --loader litdata`` (property counters).  Needs only litdata
(and torch).  Exits 1 while the bug exists.
"""

import sys
import tempfile

import litdata


def row(x):
    return {"id": x}


if __name__ == "__main__":
    ids = [297, 315, 120, 232, 361, 348, 307]
    out = tempfile.mkdtemp(prefix="litdata-repro-")
    litdata.optimize(fn=row, inputs=ids, output_dir=out, chunk_size=7, num_workers=1, verbose=False)
    loader = litdata.StreamingDataLoader(litdata.StreamingDataset(out), batch_size=2)
    delivered = []
    for batch in loader:
        delivered += batch["id"].tolist()
    state = loader.state_dict()
    print("delivered:", len(delivered), delivered)
    print("num_samples_yielded:", state["num_samples_yielded"], "current_epoch:", state["current_epoch"])
    if state["num_samples_yielded"] != len(delivered):
        print(
            f"FAIL: the loader counts {state['num_samples_yielded']} samples, {len(delivered)} were delivered"
        )
        sys.exit(1)
    print("ok")

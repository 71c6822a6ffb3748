"""MosaicML Streaming 0.13.0: ``load_state_dict`` into a StreamingDataLoader that already iterated is
silently ignored: the next ``iter`` starts the NEXT epoch from its first sample instead of resuming.

``StreamingDataset.load_state_dict`` says it "just save[s] the state to shared memory for workers to pick up
when __iter__ is next called", but ``_resume`` drops a state whose ``epoch`` is below the dataset's own epoch
counter ("stale"), and any ``iter`` (one sanity-check batch, a validation pass over the same object) has
already moved that counter on.  No error, no warning: the resumed run repeats the samples delivered before the
checkpoint and loses the ones after it (here epoch 0 resumes as epoch 1's full order).  The same class as
torchdata.nodes' "load after state_dict() does nothing" (torchdata_nodes_state_before_load.py).

Found by ``python -m properties.loaders --loader streaming`` (property initial_state: "restore into a loader
that already iterated").  Needs only mosaicml-streaming (and torch; its ``streaming.vision`` imports
torchvision: where torchvision is absent a placeholder module is put in its place, which this script never
calls).  Exits 1 while the bug exists.
"""

import sys
import tempfile
import types
import warnings

warnings.filterwarnings("ignore")
try:
    import torchvision  # noqa: F401
except Exception:  # noqa: BLE001 - only streaming.vision needs it, and this script never uses that
    import importlib.machinery

    for name in ("torchvision", "torchvision.datasets", "torchvision.transforms",
                 "torchvision.transforms.functional"):
        sys.modules[name] = types.ModuleType(name)
        sys.modules[name].__spec__ = importlib.machinery.ModuleSpec(name, None)
    sys.modules["torchvision.datasets"].VisionDataset = object
    sys.modules["torchvision.transforms.functional"].to_tensor = None

from streaming import MDSWriter, StreamingDataLoader, StreamingDataset  # noqa: E402


def ids(batches):
    return [int(b["id"][0]) for b in batches]


if __name__ == "__main__":
    local = tempfile.mkdtemp(prefix="streaming-repro-")
    with MDSWriter(out=local, columns={"id": "int"}) as w:
        for x in [316, 198, 294, 327, 207]:
            w.write({"id": x})

    def loader():
        ds = StreamingDataset(local=local, shuffle=True, shuffle_seed=0, batch_size=1, num_canonical_nodes=1)
        return StreamingDataLoader(ds, batch_size=1)

    first = loader()
    it = iter(first)
    head = ids([next(it), next(it)])
    checkpoint = first.state_dict()  # two samples into epoch 0
    tail = ids(it)
    print("uninterrupted epoch 0:", head + tail, "checkpoint after 2:", checkpoint)
    del it, first

    fresh = loader()
    fresh.load_state_dict(checkpoint)
    print("restored into a fresh loader:", ids(fresh))
    del fresh

    used = loader()
    next(iter(used))  # one batch first (a sanity check), then the resume
    used.load_state_dict(checkpoint)
    got = ids(used)
    print("restored into a loader that iterated once:", got)
    if got != tail:
        print(f"FAIL: the loaded state was ignored: expected the rest of epoch 0 {tail}, got {got}")
        sys.exit(1)
    print("ok")

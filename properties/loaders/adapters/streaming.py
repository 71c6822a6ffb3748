"""MosaicML Streaming 0.13.0 ``StreamingDataset`` (local MDS) as a generic stateful loader.

The dataset is written once per ids with ``MDSWriter(columns={"id": "int"})`` into a local
temporary directory and read with ``StreamingDataset(local=..., shuffle, shuffle_seed,
batch_size, num_canonical_nodes=1)`` under ``StreamingDataLoader(batch_size, num_workers)``;
the loader's ``state_dict()`` / ``load_state_dict()`` on a fresh loader resume mid-epoch, as
Streaming's docs say (the dataset counts epochs itself; each ``iter`` is the next one).  The user's
loop is ``for epoch in range(E): for batch in loader``; the state is ``{"epoch": e, "loader":
loader.state_dict()}``.  Counters: ``epoch`` and ``sample_in_epoch`` of the state.

Importing streaming 0.13.0 imports ``torchvision`` (for ``streaming.vision``) and
``transformers``; neither is used here, and the only torchvision wheels on PyPI for torch 2.13
need CUDA.  When torchvision is absent, :func:`_import_streaming` installs a placeholder module
whose two names (``VisionDataset``, ``to_tensor``) raise if called, and says so in ``version()``.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.machinery
import io
import os
import sys
import tempfile
import types
import warnings
from collections.abc import Mapping
from typing import Any

from properties.loaders.adapters.torchdata import _EpochLoop, _ints
from properties.loaders.core import EpochSpec, LoaderConfig, dataset_ids

__all__ = ["STREAMING", "StreamingAdapter"]


class _State:
    placeholder = False
    swept = False
    live = 0  # runs built and not yet closed
    closes = 0
    dirs: dict[tuple[int, ...], str] = {}  # plain-ok: a cache of written test datasets


def _import_streaming() -> Any:
    try:
        import torchvision  # noqa: F401
    except Exception:  # noqa: BLE001 - absent or unloadable (a CUDA wheel on CPU torch)
        if "torchvision" not in sys.modules or getattr(
            sys.modules["torchvision"], "_zephon_placeholder", False
        ):

            class VisionDataset:
                def __init__(self, *a: Any, **k: Any) -> None:
                    raise RuntimeError("torchvision is not installed (a placeholder for importing streaming)")

            def to_tensor(*a: Any, **k: Any) -> Any:
                raise RuntimeError("torchvision is not installed (a placeholder for importing streaming)")

            mods = {
                n: types.ModuleType(n)
                for n in (
                    "torchvision",
                    "torchvision.datasets",
                    "torchvision.transforms",
                    "torchvision.transforms.functional",
                )
            }
            for n, m in mods.items():
                m.__spec__ = importlib.machinery.ModuleSpec(n, None)
            mods["torchvision"]._zephon_placeholder = True  # type: ignore[attr-defined]
            mods["torchvision"].datasets = mods["torchvision.datasets"]  # type: ignore[attr-defined]
            mods["torchvision"].transforms = mods["torchvision.transforms"]  # type: ignore[attr-defined]
            mods["torchvision.transforms"].functional = mods["torchvision.transforms.functional"]  # type: ignore[attr-defined]
            mods["torchvision.datasets"].VisionDataset = VisionDataset  # type: ignore[attr-defined]
            mods["torchvision.datasets"].CIFAR10 = VisionDataset  # type: ignore[attr-defined]
            mods["torchvision.transforms.functional"].to_tensor = to_tensor  # type: ignore[attr-defined]
            sys.modules.update(mods)
            _State.placeholder = True
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import streaming

    return streaming


def release_shared_memory(ds: Any) -> int:
    """Close (and unlink, where this process created them) the shared-memory blocks a dropped
    ``StreamingDataset`` holds; returns how many.

    The file-descriptor leak is Streaming's, not ours: ``streaming.base.shared.memory.SharedMemory``
    registers ``atexit.register(self.cleanup)`` for every block (0.13.0, memory.py), and that bound method
    keeps the block, its file descriptor and its mapping alive until the interpreter exits, however the
    dataset is dropped.  Measured with /proc/self/fd: 12 descriptors left per build / read / close of
    this adapter's run (6 named blocks, each open twice), 36 per bare ``StreamingDataset(...)`` built and
    dropped; a property run builds thousands, so it reached the open-file limit (and the errors, appearing
    at different places in Hypothesis' replays, were reported as Flaky).  With this release: 0 per run.
    This walks the dataset's own objects (Streaming's classes only),
    runs each block's ``cleanup`` and removes it from atexit, which is what the library would do at exit."""
    import atexit

    from streaming.base.shared.memory import SharedMemory

    found, seen, stack = 0, set(), [(ds, 0)]
    while stack:
        obj, depth = stack.pop()
        if id(obj) in seen or depth > 4:
            continue
        seen.add(id(obj))
        if isinstance(obj, SharedMemory):
            atexit.unregister(obj.cleanup)
            with contextlib.suppress(Exception):
                obj.cleanup()
            found += 1
            continue
        for v in getattr(obj, "__dict__", {}).values():
            if type(v).__module__.startswith("streaming"):
                stack.append((v, depth + 1))
    return found


def stop_threads(ds: Any) -> None:
    """Stop a dropped dataset's background threads (``_prepare_thread`` / ``_ready_thread``, which run on
    after an abandoned epoch) before its shared memory is released under them: set the event they poll,
    as the dataset itself does when its main loop fails, and wait for its executor.  Without this a thread
    of a released dataset read a shard state of 0 and raised "Invalid shard state: 0" in a callback."""
    event, executor = getattr(ds, "_event", None), getattr(ds, "_executor", None)
    if event is not None:
        event.set()
    if executor is not None:
        executor.shutdown(wait=True)


def sweep_unreachable_shared_memory() -> int:
    """Close every Streaming ``SharedMemory`` block still alive in this process; returns how many.

    Only called when no run is alive.  ``StreamingDataset._resume`` (each ``iter`` of a restored
    dataset) opens the resume block into a local variable, and its atexit registration keeps it (and
    its descriptor) until exit, out of reach of :func:`release_shared_memory`: measured 4 descriptors
    per restore-and-drain.  The garbage collector's list of objects still holds such blocks."""
    import atexit
    import gc

    from streaming.base.shared.memory import SharedMemory

    found = 0
    for obj in gc.get_objects():
        if type(obj) is SharedMemory:  # not isinstance: that asks every object (deprecated proxies warn)
            atexit.unregister(obj.cleanup)
            with contextlib.suppress(Exception):
                obj.cleanup()
            found += 1
    return found


def release_filelocks(ds: Any) -> int:
    """Remove the two lock files a dropped ``StreamingDataset`` left in the temp directory; returns how many.

    The second leak, also Streaming's: each dataset takes a shared-memory prefix and creates
    ``<prefix>_barrier_filelock`` and ``<prefix>_cache_filelock`` in ``tempfile.gettempdir()``
    (dataset.py; ``filelock.FileLock`` never deletes its file), and nothing removes them.  The next
    dataset's prefix search (``streaming.base.shared.prefix._check_and_find``) skips every prefix whose
    lock file exists, with 9 x 2 ``stat`` calls per prefix, so each build costs in proportion to every
    dataset ever built under that temp directory: measured 0.36 s per build with 3,600 leftover
    prefixes (33,000 stats), against 0.01 s with none; a property run builds thousands, so the Streaming
    row's time grew quadratically (964 s).  Called after :func:`release_shared_memory`: the prefix is
    free again, so its lock files may go."""
    gone = 0
    for path in (getattr(getattr(ds, "_shared_barrier", None), "filelock_path", None),
                 getattr(ds, "_cache_filelock_path", None)):
        if isinstance(path, str):
            with contextlib.suppress(FileNotFoundError):
                os.remove(path)
                gone += 1
    return gone


def stale_filelocks() -> list[str]:
    """Lock files of Streaming prefixes that no live dataset holds (no shared memory of that prefix in
    /dev/shm): what earlier runs left behind (:func:`release_filelocks`)."""
    import re

    tmp = tempfile.gettempdir()
    try:
        live = {n[:6] for n in os.listdir("/dev/shm") if re.fullmatch(r"\d{6}_.*", n)}
        names = os.listdir(tmp)
    except OSError:
        return []
    return [os.path.join(tmp, n) for n in sorted(names)
            if re.fullmatch(r"\d{6}_(barrier|cache)_filelock", n) and n[:6] not in live]


def _mds_dir(ids: list[int]) -> str:
    key = tuple(ids)
    if key not in _State.dirs:
        from streaming import MDSWriter

        d = tempfile.mkdtemp(prefix="zephon-ref-mds-")
        with MDSWriter(out=d, columns={"id": "int"}) as w:
            for x in ids:
                w.write({"id": x})
        _State.dirs[key] = d
    return _State.dirs[key]


class _Run(_EpochLoop):
    def __init__(self, a: StreamingAdapter, cfg: LoaderConfig, state: Any, prep: str | None = None) -> None:
        self.cfg = cfg
        super().__init__(a.loader(cfg), cfg.epochs, state, a.epoch_spec(cfg).length)
        _State.live += 1
        self.closed = False
        if state is not None:
            try:
                self.prepare(prep)
                self.loader.load_state_dict(state["loader"])
            except BaseException:
                self.close()  # the caller never sees this run, so it cannot close it
                raise

    def ids(self, batch: Any) -> list[int]:
        return _ints(batch["id"])

    def next(self, n: int) -> list[list[int]]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return super().next(n)

    def state(self) -> Any:
        return {**self.loop_state(), "loader": self.loader.state_dict()}

    def counters(self) -> Mapping[str, int] | None:
        if self.it is None:
            return None
        s = self.loader.state_dict()
        return {"epoch": int(s["epoch"]), "items_in_epoch": int(s["sample_in_epoch"])}

    def close(self) -> None:
        super().close()
        if self.loader is not None:
            stop_threads(self.loader.dataset)
            release_shared_memory(self.loader.dataset)
            release_filelocks(self.loader.dataset)
        self.loader = None
        if not self.closed:
            self.closed = True
            _State.live -= 1
            _State.closes += 1
            if _State.live == 0 and _State.closes % 16 == 0:
                sweep_unreachable_shared_memory()


class StreamingAdapter:
    name = "streaming"
    #: Streaming's shared memory is named machine-wide (/dev/shm/<prefix>_...), and this adapter's
    #: ``clean_stale_shared_memory()`` before each build unlinks every block it finds: two processes
    #: running it at once unlink each other's live blocks (measured: every property "not reproducible"
    #: under ``--jobs 2``), so the CLI runs its properties in one process
    single_process = True
    primed_ok = False
    preps = ("state", "used")  # the loader's load_state_dict applies to the next iter()
    space = {"size": (5, 1, 2, 6, 7), "shuffle": (False, True), "batch": (1, 2, 3), "workers": (0, 0, 0, 2),
             "epochs": (1, 2, 3), "seed": (0, 1), "data_seed": (0, 1),
             "dups": (0, 1)}  # an int column: duplicate values, never None

    def available(self) -> str | None:
        try:
            _import_streaming()
        except ImportError as exc:
            return f"mosaicml-streaming is not importable ({exc}); scripts/install_peers.sh installs it"
        return None

    def version(self) -> str:
        from importlib.metadata import version

        note = " (torchvision placeholder)" if _State.placeholder else ""
        return f"mosaicml-streaming {version('mosaicml-streaming')}{note}"

    def declared(self) -> Mapping[str, str]:
        return {}

    def unsupported(self, cfg: LoaderConfig) -> str | None:
        return None

    def epoch_spec(self, cfg: LoaderConfig) -> EpochSpec:
        return EpochSpec(cfg.size)

    def worker_change(self, cfg: LoaderConfig) -> str:
        return "exact"  # docs: elastic determinism across GPUs, nodes and CPU workers (fixed canonical nodes)

    def loader(self, cfg: LoaderConfig) -> Any:
        _import_streaming()
        from streaming import StreamingDataLoader, StreamingDataset
        from streaming.base.util import clean_stale_shared_memory

        with contextlib.redirect_stderr(io.StringIO()):
            clean_stale_shared_memory()
        if not _State.swept:  # once per process: what earlier runs left (release_filelocks)
            _State.swept = True
            for path in stale_filelocks():
                with contextlib.suppress(OSError):
                    os.remove(path)
        d = _mds_dir(dataset_ids(cfg))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ds = StreamingDataset(local=d, shuffle=cfg.shuffle, shuffle_seed=cfg.seed, batch_size=cfg.batch,
                                  num_canonical_nodes=1)
        kw: dict[str, Any] = {"batch_size": cfg.batch, "num_workers": cfg.workers}
        if cfg.workers:
            kw["multiprocessing_context"] = "fork"
        return StreamingDataLoader(ds, **kw)

    def build(self, cfg: LoaderConfig, state: Any = None, *, primed: bool = False,
              prep: str | None = None) -> _Run:
        return _Run(self, cfg, state, prep)


STREAMING = StreamingAdapter()

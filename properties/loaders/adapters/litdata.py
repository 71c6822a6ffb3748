"""LitData 0.2.76 ``StreamingDataset`` / ``StreamingDataLoader`` as a generic stateful loader.

The dataset is written once per (ids, chunk size) with ``litdata.optimize`` into a local
temporary directory (``chunk_size = ceil(size / shards)``, so ``shards`` chunks), then read
by ``StreamingDataset(dir, shuffle=..., seed=...)`` under ``StreamingDataLoader(batch_size,
num_workers, drop_last)``, as LitData's README shows: the loader counts epochs itself (each
``iter(loader)`` is the next epoch) and ``loader.state_dict()`` / ``load_state_dict()`` on a
fresh loader resume mid-epoch.  The user's loop is ``for epoch in range(E): for batch in
loader``; the state is ``{"epoch": e, "loader": loader.state_dict()}``.
Counters: the loader's ``current_epoch`` (1-based while an epoch runs) and
``num_samples_yielded``.  A state taken at the very end of an epoch resumes straight into the next
epoch (LitData's choice; the suite accepts it), so this adapter's loop counts that as the next epoch.
"""

from __future__ import annotations

import contextlib
import io
import os
import tempfile
from collections.abc import Mapping
from typing import Any

from properties.loaders.adapters.torchdata import _EpochLoop, _ints
from properties.loaders.core import EpochSpec, LoaderConfig, dataset_ids, unavailable

__all__ = ["LITDATA", "LitDataAdapter", "optimized_dir"]


def _row(x: int) -> dict[str, int]:
    return {"id": x}


class _Written:
    """Directories already written in this process, by (ids, chunk size)."""

    dirs: dict[tuple[tuple[int, ...], int], str] = {}  # plain-ok: a cache of written test datasets
    root: str | None = None


def optimized_dir(ids: list[int], chunk_size: int) -> str:
    """A local LitData dataset of rows ``{"id": k}`` (written once per process)."""
    key = (tuple(ids), chunk_size)
    if key not in _Written.dirs:
        import litdata

        if _Written.root is None:
            _Written.root = tempfile.mkdtemp(prefix="zephon-ref-litdata-")
        out = os.path.join(_Written.root, f"d{len(_Written.dirs)}")
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            litdata.optimize(fn=_row, inputs=list(ids), output_dir=out, chunk_size=chunk_size, num_workers=1,
                             verbose=False, start_method="fork")
        _Written.dirs[key] = out
    return _Written.dirs[key]


class _Run(_EpochLoop):
    straight_on = True  # an end-of-epoch state resumes with the next epoch (see the module docstring)

    def __init__(self, a: LitDataAdapter, cfg: LoaderConfig, state: Any, prep: str | None = None) -> None:
        self.cfg = cfg
        super().__init__(a.loader(cfg), cfg.epochs, state, a.epoch_spec(cfg).length)
        if state is not None:
            self.prepare(prep)
            self.loader.load_state_dict(state["loader"])

    def ids(self, batch: Any) -> list[int]:
        return _ints(batch["id"])

    def state(self) -> Any:
        return {**self.loop_state(), "loader": self.loader.state_dict()}

    def counters(self) -> Mapping[str, int] | None:
        if self.it is None:
            return None  # between epochs: the loader has not started the next one
        s = self.loader.state_dict()
        return {"epoch": int(s["current_epoch"]) - 1, "items_in_epoch": int(s["num_samples_yielded"])}


class LitDataAdapter:
    name = "litdata"
    primed_ok = False
    preps = ("state", "used")  # the loader's load_state_dict applies to the next iter()
    space = {"size": (5, 1, 2, 6, 7), "shards": (1, 2, 3), "shuffle": (False, True), "batch": (1, 2, 3),
             "drop_last": (False, True), "workers": (0, 0, 0, 2), "epochs": (1, 2, 3), "seed": (0, 1),
             "data_seed": (0, 1), "dups": (0, 1)}  # an int column: duplicate values, never None

    def available(self) -> str | None:
        return unavailable("litdata", hint="scripts/install_peers.sh installs it without torchvision")

    def version(self) -> str:
        from importlib.metadata import version

        return f"litdata {version('litdata')}"

    def declared(self) -> Mapping[str, str]:
        return {}

    def unsupported(self, cfg: LoaderConfig) -> str | None:
        if cfg.shards > cfg.size:
            return "more shards than rows"
        if cfg.drop_last and cfg.batch == 1:
            return "drop_last needs batch > 1"
        if cfg.workers and cfg.drop_last:
            return "drop_last with workers drops per-worker partial batches (not modeled)"
        if cfg.workers and cfg.shards < cfg.workers:
            return "fewer chunks than workers"
        return None

    def epoch_spec(self, cfg: LoaderConfig) -> EpochSpec:
        if cfg.drop_last and cfg.batch > 1 and cfg.size % cfg.batch:
            return EpochSpec(cfg.size - cfg.size % cfg.batch, True, "drop_last drops the final partial batch")
        return EpochSpec(cfg.size)

    def worker_change(self, cfg: LoaderConfig) -> str:
        return "set"  # LitData documents resuming under another world size / worker count (elastic resume)

    def loader(self, cfg: LoaderConfig) -> Any:
        import litdata

        ids = dataset_ids(cfg)
        d = optimized_dir(ids, -(-cfg.size // cfg.shards))
        ds = litdata.StreamingDataset(d, shuffle=cfg.shuffle, seed=cfg.seed, drop_last=cfg.drop_last)
        kw: dict[str, Any] = {"batch_size": cfg.batch, "num_workers": cfg.workers, "drop_last": cfg.drop_last}
        if cfg.workers:
            kw["multiprocessing_context"] = "fork"
        return litdata.StreamingDataLoader(ds, **kw)

    def build(self, cfg: LoaderConfig, state: Any = None, *, primed: bool = False,
              prep: str | None = None) -> _Run:
        return _Run(self, cfg, state, prep)


LITDATA = LitDataAdapter()

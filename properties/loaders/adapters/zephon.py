"""zephon_ref and zephon 0.2.0 as generic stateful loaders.

The dataset is one zephon ``Dataset`` of ``shards`` in-memory shards whose rows are
``{"id": k}``, read by a ``StaticMixtureWorkSource`` (``chunk_size=1``: every row is
emitted; larger chunks drop a final partial chunk, a documented subset this adapter does
not model) over ``canonical_replicas=2`` lanes, with an optional ``shuffle(buffer)`` op.
Epochs are the training loop's: epoch ``e`` iterates a pipeline whose source seed is
``seed + e``; the state is ``{"epoch": e, "pipeline": pipeline.checkpoint()}``.
``workers`` selects the runner (0: inline, 2: threads with two workers); a restore under
the other runner must give the same stream (lanes do not depend on execution settings).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from properties.loaders.core import EpochSpec, LoaderConfig, shard_ids

__all__ = ["ZEPHON", "ZEPHON_REF", "ZephonAdapter"]


class _Run:
    def __init__(self, adapter: ZephonAdapter, cfg: LoaderConfig, state: Any, primed: bool) -> None:
        self.a, self.cfg = adapter, cfg
        self.epoch = 0 if state is None else int(state["epoch"])
        self.pending = None if state is None else state["pipeline"]
        self.pipeline: Any = None
        self.it: Any = None
        if primed:
            self._open()

    def _open(self) -> None:
        self.pipeline = self.a.pipeline(self.cfg, self.epoch)
        if self.pending is not None:
            self.pipeline.restore(self.pending)
            self.pending = None

    def next(self, n: int) -> list[list[int]]:
        out: list[list[int]] = []
        while len(out) < n:
            if self.epoch >= self.cfg.epochs:
                break
            if self.pipeline is None:
                self._open()
            if self.it is None:
                self.it = iter(self.pipeline)
            try:
                rec = next(self.it)
            except StopIteration:
                self.it.close()
                self.it, self.pipeline = None, None
                self.epoch += 1
                continue
            out.append([int(rec.payload["id"])])
        return out

    def state(self) -> Any:
        if self.pipeline is None:
            if self.pending is not None:
                return {"epoch": self.epoch, "pipeline": self.pending}
            self._open()
        return {"epoch": self.epoch, "pipeline": self.pipeline.checkpoint()}

    def counters(self) -> Mapping[str, int] | None:
        return None

    def close(self) -> None:
        if self.it is not None:
            self.it.close()
        self.it = self.pipeline = None


class ZephonAdapter:
    primed_ok = True

    def __init__(self, name: str, module: str) -> None:
        self.name, self.module = name, module
        self.space = {"size": (6, 1, 2, 5, 9), "shards": (1, 2, 3), "shuffle": (False, True),
                      "buffer": (0, 3), "workers": (0, 2), "epochs": (1, 2, 3), "seed": (0, 1, 7),
                      "data_seed": (0, 1)}

    def available(self) -> str | None:
        try:
            importlib.import_module(self.module)
        except ImportError as exc:
            return f"{self.module} is not importable ({exc})"
        return None

    def version(self) -> str:
        if self.module == "zephon":
            from importlib.metadata import version

            return f"zephon {version('zephon')}"
        return "zephon_ref (this tree)"

    def declared(self) -> Mapping[str, str]:
        return {"counters": "no delivered-item counter in the public API (the state is an engine state)"}

    def unsupported(self, cfg: LoaderConfig) -> str | None:
        if cfg.shards > cfg.size:
            return "more shards than rows"
        return None

    def epoch_spec(self, cfg: LoaderConfig) -> EpochSpec:
        return EpochSpec(cfg.size)

    def worker_change(self, cfg: LoaderConfig) -> str:
        return "exact"

    def pipeline(self, cfg: LoaderConfig, epoch: int) -> Any:
        if self.module == "zephon":
            import zephon as lib

            work: Any = lib
            Pipeline = lib.Pipeline
        else:
            import zephon_ref.work as work
            from zephon_ref.pipeline import Pipeline
        shards = {s: work.InMemoryShard([{"id": k} for k in ids]) for s, ids in enumerate(shard_ids(cfg))}
        ds = work.Dataset.from_dict("ids", shards)
        src = work.StaticMixtureWorkSource([ds], {"ids": 1.0}, chunk_size=1, seed=cfg.seed + epoch,
                                           shuffle_shards=cfg.shuffle, shuffle_within_shard=cfg.shuffle)
        p = Pipeline(src)
        if cfg.buffer:
            p = p.shuffle(cfg.buffer, seed=cfg.seed + epoch)
        runner = (
            {"runner": "inline"} if cfg.workers == 0 else {"runner": "threads", "max_workers": cfg.workers}
        )
        return p.options(canonical_replicas=2, **runner)

    def build(self, cfg: LoaderConfig, state: Any = None, *, primed: bool = False) -> _Run:
        return _Run(self, cfg, state, primed)


ZEPHON_REF = ZephonAdapter("zephon_ref", "zephon_ref")
ZEPHON = ZephonAdapter("zephon", "zephon")

"""Hugging Face ``datasets`` 5.2 ``IterableDataset`` as a generic stateful loader.

The dataset is ``Dataset.from_dict({"id": ids}).to_iterable_dataset(num_shards=shards)``
(local, in memory; ``HF_DATASETS_OFFLINE=1``), read as its docs show:

* ``direct``: iterate the IterableDataset itself; ``ds.state_dict()`` /
  ``ds.load_state_dict()`` on a freshly built one;
* ``loader``: under torchdata's ``StatefulDataLoader`` (``batch``, ``drop_last``,
  ``workers``, ``persistent``), which calls the dataset's state methods itself;
* ``interleave``: ``interleave_datasets`` of one IterableDataset per shard (equal lengths) with
  ``stopping_strategy="first_exhausted"`` under the loader: it stops as soon as one source has
  run out, so an epoch is the documented subset (``all_exhausted`` would oversample).

* ``buffer``: the IterableDataset ``.shuffle(seed, buffer_size=buffer)``, iterated directly.

Epochs are the user's loop; ``ds.set_epoch(e)`` before each is optional in the docs (it reseeds the
shuffle), so both are drawn (``set_epoch``).  The state is ``{"epoch": e, "state": <the loader's or
dataset's state, as returned>}``.

``shuffle(buffer_size=...)`` loses the buffer's examples on resume (documented in
``IterableDataset.state_dict``: "examples from shuffle buffers are lost when resuming"): after a restore
of a ``buffer`` configuration the suite checks only that nothing is repeated (``lossy_resume``).
Counters: the library's ``epoch`` and the loader's ``_num_yielded`` (``counters``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from properties.loaders.adapters.torchdata import _EpochLoop, _ints
from properties.loaders.core import (
    EpochSpec,
    LoaderConfig,
    dataset_ids,
    library_values,
    shard_ids,
    stream_id,
    unavailable,
)

__all__ = ["DATASETS", "DatasetsAdapter"]


def _quiet() -> None:
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
    import datasets

    datasets.logging.set_verbosity_error()
    datasets.disable_progress_bars()


class _Tables:
    """In-memory ``datasets.Dataset`` tables by ids (building one hashes it with dill, slowly);
    every run still gets a fresh IterableDataset made from it."""

    built: dict[tuple[int, ...], Any] = {}  # plain-ok: a cache of immutable test tables


def _table(ids: list[int]) -> Any:
    import datasets

    key = tuple(ids)
    if key not in _Tables.built:
        _Tables.built[key] = datasets.Dataset.from_dict({"id": library_values(ids)})
    return _Tables.built[key]


class _DirectLoop:
    """The user's epoch loop over the IterableDataset itself (``set_epoch``: whether the user calls the
    optional ``ds.set_epoch(e)`` before each epoch; the docs show it for reshuffling, many loops omit it)."""

    def __init__(self, ds: Any, epochs: int, epoch: int, set_epoch: bool = True) -> None:
        self.ds, self.epochs, self.epoch, self.set_epoch = ds, epochs, epoch, set_epoch
        self.it: Any = None

    def next(self, n: int) -> list[list[int]]:
        out: list[list[int]] = []
        while len(out) < n and self.epoch < self.epochs:
            if self.it is None:
                if self.set_epoch:
                    self.ds.set_epoch(self.epoch)
                self.it = iter(self.ds)
            try:
                out.append([stream_id(next(self.it)["id"])])
            except StopIteration:
                self.it = None
                self.epoch += 1
        return out

    def close(self) -> None:
        self.it = None


class _LoaderLoop(_EpochLoop):
    def __init__(self, loader: Any, ds: Any, epochs: int, state: Any, epoch_len: int,
                 set_epoch: bool = True) -> None:
        super().__init__(loader, epochs, state, epoch_len)
        self.ds, self.set_epoch = ds, set_epoch

    def begin_epoch(self) -> None:
        if self.set_epoch:
            self.ds.set_epoch(self.epoch)

    def ids(self, batch: Any) -> list[int]:
        return _ints(batch["id"])


class _Run:
    def __init__(self, a: DatasetsAdapter, cfg: LoaderConfig, state: Any, prep: str | None = None) -> None:
        self.cfg = cfg
        epoch = 0 if state is None else int(state["epoch"])
        ds = a.dataset(cfg)
        if cfg.variant in ("direct", "buffer"):
            self.loop: Any = _DirectLoop(ds, cfg.epochs, epoch, cfg.set_epoch)
            if state is not None:
                if prep == "state":
                    ds.state_dict()
                elif prep == "used":
                    next(iter(ds), None)
                ds.load_state_dict(state["state"])
        else:
            from torchdata.stateful_dataloader import StatefulDataLoader

            kw: dict[str, Any] = {
                "batch_size": cfg.batch,
                "drop_last": cfg.drop_last,
                "num_workers": cfg.workers,
                "persistent_workers": cfg.persistent,
            }
            if cfg.workers:
                kw["multiprocessing_context"] = "fork"
            loader = StatefulDataLoader(ds, **kw)
            self.loop = _LoaderLoop(loader, ds, cfg.epochs, state, a.epoch_spec(cfg).length, cfg.set_epoch)
            if state is not None:
                self.loop.prepare(prep)
                loader.load_state_dict(state["state"])

    def next(self, n: int) -> list[list[int]]:
        out: list[list[int]] = self.loop.next(n)
        return out

    def state(self) -> Any:
        if self.cfg.variant in ("direct", "buffer"):
            return {"epoch": self.loop.epoch, "state": self.loop.ds.state_dict()}
        return {**self.loop.loop_state(), "state": self.loop.loader.state_dict()}

    def counters(self) -> Mapping[str, int] | None:
        """The counters the library exposes: the ``epoch`` of ``IterableDataset.state_dict()`` (what the
        user's ``set_epoch`` last set: checked where the user calls it) and, under the loader (one
        process, no ``drop_last``), its ``_num_yielded`` batches of the current epoch.  The dataset's own
        position is per shard and per Arrow chunk, not a delivered-item count."""
        if self.cfg.variant in ("direct", "buffer"):
            if not self.cfg.set_epoch:
                return None
            return {"epoch": int(self.loop.ds.state_dict()["epoch"])}
        if self.cfg.workers or self.cfg.drop_last or self.cfg.variant != "loader":
            return None
        loop = self.loop
        if loop.it is None or loop.epoch >= loop.epochs:
            return None  # between epochs: the next iter() resets the count
        n = int(loop.loader.state_dict()["_num_yielded"])
        return {"epoch": loop.epoch, "items_in_epoch": min(n * self.cfg.batch, self.cfg.size)}

    def close(self) -> None:
        self.loop.close()


class DatasetsAdapter:
    name = "datasets"
    primed_ok = False
    preps = ("state", "used")  # load_state_dict: "the iteration restarts at the next iter()"
    space = {
        "variant": {
            "direct": {
                "size": (4, 1, 2, 6, 7),
                "shards": (1, 2, 3),
                "epochs": (1, 2, 3),
                "set_epoch": (True, False),
                "dups": (0, 1),
                "nones": (0, 1),  # a null in the Arrow column: the example's "id" is None
                "data_seed": (0, 1),
            },
            "buffer": {  # ds.shuffle(seed, buffer_size): the resume loses the buffer (documented)
                "size": (6, 4, 7, 2),  # a resume past the buffer's size is where items repeat
                "shards": (1, 2),
                "shuffle": (True,),
                "buffer": (3, 2),
                "epochs": (1, 2),
                "set_epoch": (True, False),
                "seed": (0, 1),
                "data_seed": (0, 1),
            },
            "loader": {
                "size": (4, 1, 2, 6, 7),
                "shards": (1, 2, 3),
                "batch": (1, 2, 3),
                "drop_last": (False, True),
                "workers": (0, 0, 0, 2),
                "persistent": (False, True),
                "epochs": (1, 2, 3),
                "set_epoch": (True, False),
                "data_seed": (0, 1),
            },
            "interleave": {
                "size": (4, 2, 6),
                "shards": (2, 3),
                "batch": (1, 2),
                "epochs": (1, 2, 3),
                "data_seed": (0, 1),
            },
        }
    }

    def available(self) -> str | None:
        return unavailable(
            "datasets", "torchdata.stateful_dataloader", hint="pip install -e '.[peers]' (see README)"
        )

    def version(self) -> str:
        from importlib.metadata import version

        return f"datasets {version('datasets')} (under torchdata {version('torchdata')})"

    def declared(self) -> Mapping[str, str]:
        return {}

    def unsupported(self, cfg: LoaderConfig) -> str | None:
        if cfg.shards > cfg.size:
            return "more shards than rows"
        loader_knobs = cfg.workers or cfg.batch > 1 or cfg.drop_last or cfg.persistent
        if cfg.variant in ("direct", "buffer") and loader_knobs:
            return "direct iteration has no loader (workers, batches)"
        if cfg.persistent and not cfg.workers:
            return "persistent_workers needs workers > 0"
        if cfg.workers and cfg.shards < cfg.workers:
            return "fewer shards than workers leaves workers idle (the library warns)"
        if cfg.variant == "interleave" and (cfg.shards < 2 or cfg.size % cfg.shards):
            return "interleave is drawn over 2+ shards of equal length"
        if cfg.variant == "interleave" and cfg.workers:
            return "an interleaved dataset has one shard: extra workers would idle"
        if cfg.drop_last and cfg.batch == 1:
            return "drop_last needs batch > 1"
        return None

    def epoch_spec(self, cfg: LoaderConfig) -> EpochSpec:
        if cfg.variant == "buffer":
            return EpochSpec(cfg.size, lossy_resume="IterableDataset.state_dict: examples from shuffle "
                             "buffers are lost when resuming")
        if cfg.variant == "interleave":
            return EpochSpec(-1, True, "first_exhausted stops as soon as one source has run out (documented)")
        if cfg.drop_last and cfg.batch > 1:
            return EpochSpec(-1, True, "drop_last drops each worker's final partial batch")
        return EpochSpec(cfg.size)

    def worker_change(self, cfg: LoaderConfig) -> str:
        return "refuse"  # StatefulDataLoader asserts the same num_workers

    def dataset(self, cfg: LoaderConfig) -> Any:
        _quiet()
        import datasets

        if cfg.variant == "interleave":
            parts = [_table(s).to_iterable_dataset(num_shards=1) for s in shard_ids(cfg)]
            return datasets.interleave_datasets(parts, stopping_strategy="first_exhausted")
        ds = _table(dataset_ids(cfg)).to_iterable_dataset(num_shards=cfg.shards)
        if cfg.variant == "buffer":
            ds = ds.shuffle(seed=cfg.seed, buffer_size=cfg.buffer)
        return ds

    def build(self, cfg: LoaderConfig, state: Any = None, *, primed: bool = False,
              prep: str | None = None) -> _Run:
        return _Run(self, cfg, state, prep)


DATASETS = DatasetsAdapter()

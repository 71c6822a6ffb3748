"""torchdata 0.11: ``StatefulDataLoader`` and ``torchdata.nodes`` as generic stateful loaders.

StatefulDataLoader (adapter ``torchdata``), used as its tutorial says: a new loader,
``load_state_dict``, then ``iter``; the epoch loop is the user's (``for epoch in
range(E): for batch in loader``, the same loader object every epoch) and the state is
``{"epoch": e, "loader": loader.state_dict()}``.  Variants:

* ``map``: a map-style dataset; ``shuffle`` uses the default RandomSampler with the
  global torch RNG seeded once (``torch.manual_seed(seed)``, as a training script does);
* ``map-gen``: the same with an explicit ``generator=torch.Generator().manual_seed(seed)``;
* ``iterable``: an IterableDataset without state (each worker reads ``ids[w::W]``):
  the loader fast-forwards by re-reading, as its docs say;
* ``iterable-stateful``: the same dataset with ``state_dict``/``load_state_dict``.

torchdata.nodes (adapter ``torchdata-nodes``): ``Loader(Prefetcher(Batcher(
MapStyleWrapper(ids, sampler))))`` with a stateful RandomSampler/SequentialSampler in a
``SamplerWrapper`` (``shuffle``), a ``ParallelMapper`` (``workers`` threads, at least 1) and
a ``Prefetcher`` (``buffer``); epochs via ``restart_on_stop_iteration`` and the user's
loop over ``iter(loader)``; the state is ``loader.state_dict()`` plus the user's epoch.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from properties.loaders.core import (
    EpochSpec,
    LoaderConfig,
    dataset_ids,
    default_epoch_spec,
    library_values,
    stream_id,
    unavailable,
)

__all__ = ["NODES", "STATEFUL_DATALOADER", "NodesAdapter", "StatefulDataLoaderAdapter"]


def _torch() -> Any:
    import torch

    return torch


class IdMap:
    """A map-style dataset of ids (module level: workers pickle it)."""

    def __init__(self, ids: list[int | None]) -> None:
        self.ids = ids

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> int | None:
        return self.ids[i]


def _iterable_base() -> Any:
    import torch.utils.data

    return torch.utils.data.IterableDataset


class _Lazy:
    """Builds the IterableDataset classes on first use (torch is imported only then)."""

    classes: dict[str, Any] = {}  # plain-ok: a cache of two classes built once, not engine state


def _iterable_classes() -> tuple[Any, Any]:
    if not _Lazy.classes:
        import torch.utils.data as tud

        class IdIterable(tud.IterableDataset):  # type: ignore[type-arg,misc]
            """Each worker reads ids[w::W]; no state of its own."""

            def __init__(self, ids: list[int]) -> None:
                self.ids = ids

            def _mine(self) -> list[int]:
                info = tud.get_worker_info()
                return self.ids if info is None else self.ids[info.id::info.num_workers]

            def __iter__(self) -> Iterator[int]:
                yield from self._mine()

        class StatefulIdIterable(IdIterable):
            """The same with a position it saves and restores (the torchdata README's pattern)."""

            def __init__(self, ids: list[int]) -> None:
                super().__init__(ids)
                self.pos = 0

            def __iter__(self) -> Iterator[int]:
                mine = self._mine()
                while self.pos < len(mine):
                    x = mine[self.pos]
                    self.pos += 1
                    yield x
                self.pos = 0  # the next epoch starts again

            def state_dict(self) -> dict[str, int]:
                return {"pos": self.pos}

            def load_state_dict(self, sd: Mapping[str, int]) -> None:
                self.pos = int(sd["pos"])

        _Lazy.classes = {"plain": IdIterable, "stateful": StatefulIdIterable}
        globals()["IdIterable"], globals()["StatefulIdIterable"] = IdIterable, StatefulIdIterable
        IdIterable.__module__ = StatefulIdIterable.__module__ = __name__
        IdIterable.__qualname__, StatefulIdIterable.__qualname__ = "IdIterable", "StatefulIdIterable"
    return _Lazy.classes["plain"], _Lazy.classes["stateful"]


def _ints(batch: Any) -> list[int]:
    """The stream ids of a delivered batch (a tensor, a list, or one item; a None item is NONE_ID)."""
    if hasattr(batch, "tolist"):
        v = batch.tolist()
        return [stream_id(x) for x in (v if isinstance(v, list) else [v])]
    if isinstance(batch, (list, tuple)):
        return [stream_id(x) for x in batch]
    return [stream_id(batch)]


def list_collate(batch: list[Any]) -> list[Any]:
    """The collate a user with None items writes (torch's default collate refuses None): the batch as a
    list (module level: worker processes pickle it)."""
    return list(batch)


def _worker_lists(cfg: LoaderConfig) -> list[list[int]]:
    ids = dataset_ids(cfg)
    w = max(cfg.workers, 1)
    return [ids[i::w] for i in range(w)]


def _iterable_batch_sizes(cfg: LoaderConfig) -> list[int]:
    """The batch sizes of one epoch, in delivery order (in-order round robin over workers)."""
    per = []
    for lst in _worker_lists(cfg):
        n, b = len(lst), cfg.batch
        sizes = [b] * (n // b) + ([] if cfg.drop_last or n % b == 0 else [n % b])
        per.append(sizes)
    out, j = [], 0
    while any(j < len(s) for s in per):
        out += [s[j] for s in per if j < len(s)]
        j += 1
    return out


class _EpochLoop:
    """The user's epoch loop around a loader whose ``iter()`` runs one epoch.

    It counts the items of the current epoch and saves, next to the loader's state, the epoch, that
    count and whether the epoch was complete (every item delivered, StopIteration not yet seen).  A
    library that goes straight on (``straight_on``: an end-of-epoch state resumes with the NEXT
    epoch's items, as torchdata.nodes' Loader documents) has the restored loop count that iterator as
    the next epoch, as its user must; one that yields an empty remainder needs nothing."""

    straight_on = False

    def __init__(self, loader: Any, epochs: int, state: Any = None, epoch_len: int = -1) -> None:
        self.loader, self.epochs, self.epoch_len = loader, epochs, epoch_len
        self.epoch = 0 if state is None else int(state["epoch"])
        self.items = 0 if state is None else int(state.get("items", 0))
        if state is not None and self.straight_on and state.get("at_end"):
            self.epoch, self.items = self.epoch + 1, 0
        self.it: Any = None

    def ids(self, batch: Any) -> list[int]:
        return _ints(batch)

    def prepare(self, prep: str | None) -> None:
        """What the user did to the fresh loader before loading the state: ``state``, read its state
        (a checkpoint hook that runs first); ``used``, iterated it (one batch of an abandoned iterator).
        Both are allowed by the library's docs ("load_state_dict applies to the next iter()")."""
        if prep == "state":
            self.loader.state_dict()
        elif prep == "used":
            it = iter(self.loader)
            next(it, None)
        elif prep is not None:
            raise ValueError(f"prep: expected None, 'state' or 'used', received {prep!r}")

    def begin_epoch(self) -> None:
        """Called before each ``iter(loader)`` (datasets' ``set_epoch``)."""

    def next(self, n: int) -> list[list[int]]:
        out: list[list[int]] = []
        while len(out) < n and self.epoch < self.epochs:
            if self.it is None:
                self.begin_epoch()
                self.it = iter(self.loader)
            try:
                b = self.ids(next(self.it))
            except StopIteration:
                self.it = None
                self.epoch, self.items = self.epoch + 1, 0
                continue
            self.items += len(b)
            out.append(b)
        return out

    def loop_state(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "items": self.items,
                "at_end": bool(self.epoch_len > 0 and self.items >= self.epoch_len)}

    def close(self) -> None:
        it, self.it = self.it, None
        shutdown = getattr(it, "_shutdown_workers", None)
        if shutdown is not None:
            shutdown()
        shutdown = getattr(self.loader, "_iterator", None)
        if shutdown is not None and hasattr(shutdown, "_shutdown_workers"):
            shutdown._shutdown_workers()


class _SDLRun(_EpochLoop):
    """A run of a loader whose whole state is ``state_dict()`` / ``load_state_dict()`` (``a``: an
    adapter with ``loader(cfg)`` and ``epoch_spec(cfg)``: StatefulDataLoader or torchdata.nodes)."""

    def __init__(self, a: Any, cfg: LoaderConfig, state: Any, prep: str | None = None) -> None:
        self.cfg = cfg
        super().__init__(a.loader(cfg), cfg.epochs, state, a.epoch_spec(cfg).length)
        if state is not None:
            self.prepare(prep)
            self.loader.load_state_dict(state["loader"])

    def state(self) -> Any:
        return {**self.loop_state(), "loader": self.loader.state_dict()}

    def counters(self) -> Mapping[str, int] | None:
        if self.epoch >= self.epochs:
            return None
        sd = self.loader.state_dict()
        if "_num_yielded" in sd:
            n = int(sd["_num_yielded"])
        else:  # worker processes: the batches at the last snapshot plus those since
            n = int(sd["_snapshot"]["_snapshot_step"]) + int(sd["_steps_since_snapshot"])
        if self.cfg.variant.startswith("map"):
            items = min(n * self.cfg.batch, default_epoch_spec(self.cfg).length)
        else:
            items = sum(_iterable_batch_sizes(self.cfg)[:n])
        return {"epoch": self.epoch, "items_in_epoch": items}


class StatefulDataLoaderAdapter:
    name = "torchdata"
    primed_ok = False  # documented: load_state_dict applies to the NEXT iterator requested
    preps = ("state", "used")  # so a loader whose state was read, or that iterated, then loads, is fine
    _common = {
        "size": (5, 1, 2, 6, 7),
        "batch": (1, 2, 3),
        "drop_last": (False, True),
        "workers": (0, 0, 0, 2),
        "persistent": (False, True),
        "epochs": (1, 2, 3),
        "dups": (0, 1),
        "nones": (0, 1),
        "data_seed": (0, 1),
    }
    space = {"variant": {
        "map": {**_common, "shuffle": (False, True), "seed": (0, 1)},
        "map-gen": {**_common, "shuffle": (True, False), "seed": (0, 1)},
        "iterable": _common,
        "iterable-stateful": _common,
    }}

    def available(self) -> str | None:
        return unavailable("torchdata.stateful_dataloader", hint="pip install -e '.[peers]' (see README)")

    def version(self) -> str:
        from importlib.metadata import version

        return f"torchdata {version('torchdata')} (torch {version('torch')})"

    def declared(self) -> Mapping[str, str]:
        return {}

    def unsupported(self, cfg: LoaderConfig) -> str | None:
        if cfg.persistent and cfg.workers == 0:
            return "persistent_workers needs workers > 0"
        if cfg.shuffle and cfg.variant.startswith("iterable"):
            return "an iterable dataset shuffles on its own; the loader's shuffle is for map-style datasets"
        return None

    def epoch_spec(self, cfg: LoaderConfig) -> EpochSpec:
        if cfg.variant.startswith("map"):
            return default_epoch_spec(cfg)
        n = sum(_iterable_batch_sizes(cfg))
        return EpochSpec(n, n < cfg.size, "drop_last drops each worker's final partial batch")

    def worker_change(self, cfg: LoaderConfig) -> str:
        return "refuse"  # restore asserts the same num_workers

    def loader(self, cfg: LoaderConfig) -> Any:
        torch = _torch()
        from torchdata.stateful_dataloader import StatefulDataLoader

        ids = library_values(dataset_ids(cfg))
        kw: dict[str, Any] = {"batch_size": cfg.batch, "drop_last": cfg.drop_last, "num_workers": cfg.workers,
                              "persistent_workers": cfg.persistent}
        if cfg.nones:
            kw["collate_fn"] = list_collate
        if cfg.workers:
            kw["multiprocessing_context"] = "fork"
        if cfg.variant.startswith("map"):
            kw["shuffle"] = cfg.shuffle
            if cfg.variant == "map-gen":
                kw["generator"] = torch.Generator().manual_seed(cfg.seed)
            else:
                torch.manual_seed(cfg.seed)
            return StatefulDataLoader(IdMap(ids), **kw)
        plain, stateful = _iterable_classes()
        ds = (stateful if cfg.variant == "iterable-stateful" else plain)(ids)
        return StatefulDataLoader(ds, **kw)

    def build(self, cfg: LoaderConfig, state: Any = None, *, primed: bool = False,
              prep: str | None = None) -> _SDLRun:
        return _SDLRun(self, cfg, state, prep)


class _NodesRun(_SDLRun):
    # Loader(restart_on_stop_iteration=True) documents that an end-of-epoch state restarts with the
    # next epoch (meta-pytorch/data PR #1358)
    straight_on = True

    def counters(self) -> Mapping[str, int] | None:
        """``num_yielded`` of ``Loader.state_dict()``: the batches the current iterator yielded (reset
        by each ``iter``), so items = batches x batch size, the last one partial."""
        if self.it is None or self.epoch >= self.epochs:
            return None  # between epochs: the next iter() resets it
        n = int(self.loader.state_dict()["num_yielded"])
        length = default_epoch_spec(self.cfg).length
        return {"epoch": self.epoch, "items_in_epoch": min(n * self.cfg.batch, length)}


class NodesAdapter:
    name = "torchdata-nodes"
    primed_ok = False
    preps = ("state", "used")  # Loader.load_state_dict: "used to initialize the next iter() requested"
    space = {
        "size": (5, 1, 2, 6, 7),
        "shuffle": (False, True),
        "batch": (1, 2, 3),
        "drop_last": (False, True),
        "workers": (1, 2),
        "buffer": (0, 2),
        "epochs": (1, 2, 3),
        "dups": (0, 1),
        "nones": (0, 1),
        "seed": (0, 1),
        "data_seed": (0, 1),
    }

    def available(self) -> str | None:
        return unavailable("torchdata.nodes", hint="pip install -e '.[peers]' (see README)")

    def version(self) -> str:
        from importlib.metadata import version

        return f"torchdata {version('torchdata')} (nodes)"

    def declared(self) -> Mapping[str, str]:
        return {}

    def unsupported(self, cfg: LoaderConfig) -> str | None:
        return None

    def epoch_spec(self, cfg: LoaderConfig) -> EpochSpec:
        return default_epoch_spec(cfg)

    def worker_change(self, cfg: LoaderConfig) -> str:
        # nothing documents restoring a ParallelMapper under another num_workers: refusing is fine,
        # silently skipping or repeating data is not
        return "refuse"

    def loader(self, cfg: LoaderConfig) -> Any:
        torch = _torch()
        from torch.utils.data import RandomSampler, SequentialSampler
        from torchdata import nodes

        ids = library_values(dataset_ids(cfg))
        ds = IdMap(ids)
        sampler = (RandomSampler(ds, generator=torch.Generator().manual_seed(cfg.seed)) if cfg.shuffle
                   else SequentialSampler(ds))
        node: Any = nodes.SamplerWrapper(sampler)
        # the same graph for every worker count (a Mapper for 0 would be another graph, another state)
        node = nodes.ParallelMapper(
            node, map_fn=ds.__getitem__, num_workers=max(cfg.workers, 1), in_order=True, method="thread"
        )
        node = nodes.Batcher(node, batch_size=cfg.batch, drop_last=cfg.drop_last)
        if cfg.buffer:
            node = nodes.Prefetcher(node, prefetch_factor=cfg.buffer)
        return nodes.Loader(node, restart_on_stop_iteration=True)

    def build(self, cfg: LoaderConfig, state: Any = None, *, primed: bool = False,
              prep: str | None = None) -> _NodesRun:
        return _NodesRun(self, cfg, state, prep)


STATEFUL_DATALOADER = StatefulDataLoaderAdapter()
NODES = NodesAdapter()

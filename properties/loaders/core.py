"""The generic stateful-loader protocol: configurations, adapters, runs and what an epoch holds.

Theory of operation
-------------------
Any loader with a state/restore API plugs into the generic suite through an
:class:`LoaderAdapter`.  The suite draws a :class:`LoaderConfig` (a dataset of
distinct integer ids drawn from ``data_seed``, sharded, maybe shuffled, batched,
read by some workers over some epochs) from the adapter's ``space`` (the values each
knob may take, simplest first, so Hypothesis shrinks towards them), asks
``unsupported(cfg)`` for a reason to skip it, and ``build(cfg)``s a :class:`LoaderRun`:

* ``next(n)`` returns up to ``n`` *yields* (each a list of ids: a batch, or one item),
  fewer only when the whole run (all epochs) is over.  Epochs are the run's business:
  an adapter whose library has no epoch loop plays the training loop a user writes
  (``for epoch in range(E): for batch in loader``) and keeps its own epoch counter in the
  state it returns, as such a user saves theirs next to the loader's state;
* ``state()`` returns an opaque value the suite stores, compares with itself (restore must
  not change it) and hands back to ``build(cfg, state=...)``, which restores it into a
  FRESH object; ``build(..., primed=True)`` creates the loader (and, where the library's
  API allows it, its iterator) before the state is loaded;
* ``counters()`` returns what the loader says it delivered (``epoch`` and
  ``items_in_epoch``), or None when it says nothing.

``epoch_spec(cfg)`` says what every epoch must hold: ``length`` items, all of the
dataset (a permutation) or, where the library documents dropping some (``drop_last``),
``length`` distinct ids of it.  The suite checks the flattened stream in blocks of
``length``: a loader that yields an empty remainder at an epoch boundary and one that goes
straight on are treated alike.

``declared()`` names the properties the library does not support at all, each with its
documented reason; ``worker_change(cfg)`` says what the library promises when the state
is restored under another worker count: ``"exact"`` (the same stream), ``"set"``
(every epoch still holds each item once) or ``"refuse"`` (documented unsupported: it must
raise, or at least not skip or repeat data silently).
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["KNOBS", "NONE_ID", "EpochSpec", "LoaderAdapter", "LoaderConfig", "LoaderRun", "Refused",
           "dataset_ids", "default_epoch_spec", "library_values", "stream_id"]


@dataclass(frozen=True)
class LoaderConfig:
    """One drawn configuration.  ``variant`` selects the adapter's flavour (e.g. a map-style or an
    iterable dataset); every other knob means the same thing for every adapter."""

    variant: str = "default"
    size: int = 6
    shards: int = 1
    shuffle: bool = False
    buffer: int = 0  # a shuffle buffer's size, 0: none (or the loader's own default)
    batch: int = 1  # 1: one item per yield
    drop_last: bool = False
    workers: int = 0
    persistent: bool = False
    epochs: int = 1
    set_epoch: bool = True  # the user calls the library's optional per-epoch hook (datasets' set_epoch)
    dups: int = 0  # the dataset's last ``dups`` items repeat values of earlier ones (duplicate-valued items)
    nones: int = 0  # the dataset's first ``nones`` items are None (NONE_ID in the stream the suite compares)
    seed: int = 0
    data_seed: int = 0

    def describe(self) -> str:
        fields = [f"{f.name}={getattr(self, f.name)!r}" for f in dataclasses.fields(self)
                  if getattr(self, f.name) != f.default or f.name in ("variant", "size")]
        return f"LoaderConfig({', '.join(fields)})"


#: the knobs a space may name, in drawing order
KNOBS = tuple(f.name for f in dataclasses.fields(LoaderConfig))


def dataset_ids(cfg: LoaderConfig) -> list[int]:
    """The dataset: ``cfg.size`` distinct ids drawn from ``cfg.data_seed`` (not 0..n-1, so an
    index leaking into the stream in place of an item shows); with ``cfg.dups`` the last items repeat the
    first ones' values (a loader that dedups, or keys its state by value, shows); with ``cfg.nones`` the first
    items are None items (:data:`NONE_ID` here; adapters hand the library None: :func:`library_values`)."""
    ids = random.Random(cfg.data_seed).sample(range(100, 100 + 50 * max(cfg.size, 1)), cfg.size)
    for j in range(min(cfg.nones, cfg.size)):  # None items (first, so a dup of item 0 is a second None)
        ids[j] = NONE_ID
    for j in range(min(cfg.dups, cfg.size - 1)):  # item size-1-j takes item j's value
        ids[cfg.size - 1 - j] = ids[j]
    return ids


#: the id a None item has in the stream the suite compares (the library itself sees None)
NONE_ID = -1


def library_values(ids: Sequence[int]) -> list[int | None]:
    """The items as the library holds them: None where the stream has :data:`NONE_ID`."""
    return [None if x == NONE_ID else x for x in ids]


def stream_id(value: Any) -> int:
    """The stream id of an item the library delivered (None is :data:`NONE_ID`)."""
    return NONE_ID if value is None else int(value)


def shard_ids(cfg: LoaderConfig) -> list[list[int]]:
    """The dataset cut into ``cfg.shards`` contiguous shards, as even as possible."""
    ids = dataset_ids(cfg)
    k, r = divmod(len(ids), cfg.shards)
    out, at = [], 0
    for s in range(cfg.shards):
        n = k + (1 if s < r else 0)
        out.append(ids[at:at + n])
        at += n
    return out


@dataclass(frozen=True)
class EpochSpec:
    """What each epoch of the stream holds: ``length`` items; ``subset``: distinct ids of the
    dataset (a documented drop), else exactly the dataset's ids in some order."""

    length: int
    subset: bool = False
    why_subset: str = ""
    #: the library documents that a resume loses items (datasets' shuffle buffer): after a restore the
    #: suite checks only that nothing is repeated or invented, and the run is not longer than it should be
    lossy_resume: str = ""


def default_epoch_spec(cfg: LoaderConfig) -> EpochSpec:
    """Batches over the whole dataset in one stream; ``drop_last`` drops the final partial batch."""
    if cfg.drop_last and cfg.batch > 1 and cfg.size % cfg.batch:
        return EpochSpec(cfg.size - cfg.size % cfg.batch, True, "drop_last drops the final partial batch")
    return EpochSpec(cfg.size)


def unavailable(*modules: str, hint: str) -> str | None:
    """Why a loader cannot run here (the first of ``modules`` that does not import, and ``hint`` on how to
    install it), or None when every one imports: what an adapter's ``available()`` returns."""
    import importlib

    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            return f"{module} is not importable ({exc}); {hint}"
    return None


class Refused(Exception):
    """Raised by an adapter when the library refused an operation on purpose (a documented,
    loud refusal, e.g. restoring under another worker count)."""


class LoaderRun(Protocol):
    def next(self, n: int) -> list[list[int]]: ...

    def state(self) -> Any: ...

    def counters(self) -> Mapping[str, int] | None: ...

    def close(self) -> None: ...


class LoaderAdapter(Protocol):
    name: str
    #: the values each knob may take (the first is the simplest); knobs not named keep the default
    space: Mapping[str, Sequence[Any]]

    def version(self) -> str: ...

    def available(self) -> str | None: ...  # None, or why the library cannot be imported

    def declared(self) -> Mapping[str, str]: ...

    def unsupported(self, cfg: LoaderConfig) -> str | None: ...

    def epoch_spec(self, cfg: LoaderConfig) -> EpochSpec: ...

    def worker_change(self, cfg: LoaderConfig) -> str: ...

    def build(self, cfg: LoaderConfig, state: Any = None, *, primed: bool = False) -> LoaderRun: ...


class Narrowed:
    """``adapter`` with its space narrowed: every knob named in ``knobs`` takes only that value
    (e.g. the minimal configuration of a known failure, or ``workers=0`` for a quick profile).
    Everything else is the adapter's own."""

    def __init__(self, adapter: Any, **knobs: Any) -> None:
        unknown = sorted(set(knobs) - set(KNOBS))
        if unknown:
            raise ValueError(f"knobs: expected names among {list(KNOBS)}, received {unknown}")
        self._a, self._knobs = adapter, knobs
        self.name = adapter.name
        self.primed_ok = getattr(adapter, "primed_ok", False)
        variants = adapter.space.get("variant")
        if isinstance(variants, Mapping):
            keep = {v: s for v, s in variants.items() if "variant" not in knobs or v == knobs["variant"]}
            if not keep:
                raise ValueError(
                    f"variant: expected one of {sorted(variants)}, received {knobs['variant']!r}"
                )
            self.space: Mapping[str, Any] = {"variant": {v: {**s, **{k: (x,) for k, x in knobs.items()
                                                                     if k != "variant"}}
                                                         for v, s in keep.items()}}
        else:
            self.space = {**adapter.space, **{k: (x,) for k, x in knobs.items()}}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._a, name)

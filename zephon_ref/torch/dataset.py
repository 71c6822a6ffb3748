"""The dataset: an IterableDataset over a Builder, split across DataLoader workers.

Theory of operation
-------------------
:func:`to_torch_dataset` wraps a :class:`~zephon_ref.pipeline.Pipeline` in a
``torch.utils.data.IterableDataset`` (see :mod:`zephon_ref.torch` for what each
worker yields).  The class needs torch, so it is built on first use
(:func:`dataset_class`) and published as ``zephon_ref.torch.TorchPipelineDataset``
(resolved lazily there, so a dataset pickled for a spawned worker unpickles).

The torch path takes a pipeline: it imports the semantic builder
(:class:`zephon_ref.builder.Builder`, the type every pipeline is) and never the facade
:mod:`zephon_ref.pipeline`, which imports this path for ``Pipeline.to_torch_dataset``.

What may not live here: pipeline logic (lanes, ordering, notification and replay
belong to the engine), and mutation of the Pipeline's state.
"""

from __future__ import annotations

import copy
import sys
import weakref
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from zephon_ref.builder import Builder
from zephon_ref.errors import (
    ConfigError,
    ConfigTypeError,
    ContractError,
    StateFormatError,
    StateMismatchError,
    expected,
)
from zephon_ref.torch.collate import collate_batch
from zephon_ref.torch.device import require_torch, resolve_device, worker_slot

__all__ = ["LOADER_STATE_FORMAT", "ZEPHON_WORKER0_PATCH", "check_pipeline", "dataset_class", "device_collate",
           "loader_stateful_class", "publish_class", "to_torch_dataset"]

_DATASET_CLASS: type[Any] | None = None


def dataset_class() -> type[Any]:
    """Build (once) the IterableDataset subclass; it needs torch, so it cannot be defined at import."""
    global _DATASET_CLASS
    if _DATASET_CLASS is not None:
        return _DATASET_CLASS
    torch = require_torch()

    class TorchPipelineDataset(torch.utils.data.IterableDataset):  # type: ignore[misc,name-defined]
        """An IterableDataset over a Builder (see :func:`to_torch_dataset`)."""

        def __init__(self, pipeline: Builder, collate: Callable[[Any], Any] | None) -> None:
            super().__init__()
            self.pipeline = pipeline
            self.collate = collate

        def __iter__(self) -> Iterator[Any]:
            slot = worker_slot()
            if not slot.in_loader:
                items: Iterator[Any] = iter(self.pipeline)
            else:
                # the worker's own copy owns only its World.worker_lanes share (none when idle,
                # so an idle worker's engine yields nothing); a pending restore travels with it
                items = iter(self.pipeline.for_worker(slot.worker_id, slot.num_workers))
            if self.collate is None:
                return items
            collate = self.collate
            return (collate(x) for x in items)

        def __getstate__(self) -> dict[str, Any]:
            return {"pipeline": self.pipeline, "collate": self.collate}

        def __setstate__(self, state: dict[str, Any]) -> None:
            self.__init__(state["pipeline"], state["collate"])  # type: ignore[misc]

    _DATASET_CLASS = publish_class(TorchPipelineDataset, "TorchPipelineDataset")
    return _DATASET_CLASS


#: the ``format`` of a :func:`loader_stateful_class` dataset's ``state_dict()``
LOADER_STATE_FORMAT = "zephon_ref.torch.loader_state/1"
_LOADER_STATEFUL_CLASS: type[Any] | None = None


def loader_stateful_class() -> type[Any]:
    """Build (once) the dataset ``to_torch_dataset()`` returns by default: the plain dataset with
    ``state_dict()`` / ``load_state_dict()`` in the protocol of torchdata's ``StatefulDataLoader``.

    How torchdata 0.11 uses them.  With ``num_workers=0`` the loader calls ``state_dict()`` in
    the main process when its own ``state_dict()`` is asked.  With workers, each worker calls it
    (a) once at start-up, after ``iter()`` of the dataset (after ``load_state_dict()`` when the
    loader resumes): the worker's *initial* state, which the loader holds until that worker's
    first item arrives; and (b) right after producing an item the loader asked to snapshot
    (every item with ``snapshot_every_n_steps=1``); the state travels with the item, and the
    loader keeps, per worker id, the state of the last item of that worker it handed out.  A
    snapshot also names the last worker that delivered (``_last_yielded_worker_id``); on resume
    worker ``w`` gets ``load_state_dict()`` with the state kept for ``w`` before it iterates, and
    the loader asks the worker after the named one first.  Persistent workers re-run (a) at
    each new pass.

    So ``state_dict()`` is the *local* state of the pipeline this copy iterates
    (:meth:`~zephon_ref.builder.Builder.local_state`: its own lanes only, no aggregation round),
    tagged with its place, and a resume continues the stream exactly (zephon 0.2.0's
    ``to_torch_dataset(stateful=True)`` default): at every position of a pass, including the
    state taken at the start of a resumed pass before its first item (the workers' initial
    states (a) are then the restored ones).  A state of another place is refused with a typed
    error.  (An in-worker state of None, as this dataset had before, makes torchdata replay the
    consumed items instead; its replay counts them twice in the snapshot it records, so the
    state at the start of a pass resumed after ``k`` items names ``2k``: a resume from it skips
    ``k`` items, or is refused with 2 workers where the parity of the last worker differs:
    issue 34, ``tests/properties/test_blind_spot_rows.py``.)
    """
    global _LOADER_STATEFUL_CLASS
    if _LOADER_STATEFUL_CLASS is not None:
        return _LOADER_STATEFUL_CLASS

    class LoaderStatefulPipelineDataset(dataset_class()):  # type: ignore[misc]
        """The plain dataset with a StatefulDataLoader's ``state_dict`` / ``load_state_dict``."""

        def __init__(self, pipeline: Builder, collate: Callable[[Any], Any] | None) -> None:
            super().__init__(pipeline, collate)
            self._resume: dict[str, Any] | None = None  # a load_state_dict() the next iteration starts from
            self._work: Builder | None = None  # the pipeline this copy iterates (after iter())
            self._items: weakref.ref[Any] | None = None  # the iterator of that pass (not kept alive)

        @staticmethod
        def _place() -> tuple[int, int]:
            slot = worker_slot()
            return (slot.worker_id, slot.num_workers) if slot.in_loader else (0, 1)

        def _fresh_work(self) -> Builder:
            """A throwaway copy of the pipeline as this place runs it (for checks)."""
            wid, n = self._place()
            work: Builder = self.pipeline.for_worker(wid, n)
            return work

        def _own_work(self) -> Builder:
            """The pipeline this place iterates: outside a loader (or with ``num_workers=0``) the
            pipeline itself, as the plain dataset iterates it (so ``pipeline.checkpoint()`` still
            reads its progress); in a worker, the worker's copy."""
            return self._fresh_work() if worker_slot().in_loader else self.pipeline

        def __iter__(self) -> Iterator[Any]:
            # a new pass supersedes this dataset's previous one where both iterate the same pipeline
            # (num_workers=0): torchdata restoring a state taken after a pass ended builds an iterator
            # (the restored pass) and, seeing it finished, at once another (the next pass)
            # divergence D-100
            # The superseded pass is closed and refuses a later next() loudly (ContractError), so a
            # caller who still reads it gets an error, never a silently shortened stream.
            previous = self._items() if self._items is not None else None
            if previous is not None and previous.open:
                previous.supersede()
            work = self._own_work()
            if self._resume is not None:
                work.restore(self._resume["engine"])  # checked at load_state_dict(); raises, changing nothing
                self._resume = None
            self._work = work
            items = _Pass(iter(work), self.collate)
            self._items = weakref.ref(items)
            return items

        def state_dict(self) -> dict[str, Any]:
            """This copy's local state after the last item it produced (see the class docstring), in
            the main process and inside DataLoader workers alike."""
            wid, n = self._place()
            if self._resume is not None:
                return copy.deepcopy(self._resume)
            work = self._work if self._work is not None else self._own_work()
            return {"format": LOADER_STATE_FORMAT, "worker_id": wid, "num_workers": n,
                    "engine": work.local_state()}

        def load_state_dict(self, state: Mapping[str, Any]) -> None:
            """Start the next iteration from ``state`` (a :meth:`state_dict` of the same worker)."""
            if not isinstance(state, Mapping) or state.get("format") != LOADER_STATE_FORMAT:
                raise StateFormatError(expected("torch dataset state", f"a state_dict() of format "
                                                f"{LOADER_STATE_FORMAT!r}", state if not isinstance(
                                                    state, Mapping) else state.get("format")))
            place = self._place()
            if (state.get("worker_id"), state.get("num_workers")) != place:
                raise StateMismatchError(expected("torch dataset state's (worker_id, num_workers)",
                                                  f"{place} (this DataLoader worker's)",
                                                  (state.get("worker_id"), state.get("num_workers")))
                                         + _worker0_patch_hint())
            self._fresh_work().restore(state["engine"])  # dry run: a refusal changes nothing
            self._resume = copy.deepcopy(dict(state))
            self._work = None

        def __getstate__(self) -> dict[str, Any]:
            return {**super().__getstate__(), "resume": self._resume}

        def __setstate__(self, state: dict[str, Any]) -> None:
            super().__setstate__(state)
            self._resume = state["resume"]

    _LOADER_STATEFUL_CLASS = publish_class(LoaderStatefulPipelineDataset, "LoaderStatefulPipelineDataset")
    return _LOADER_STATEFUL_CLASS


class _Pass:
    """One pass of the loader-stateful dataset: the pipeline's iterator, collated.  Once a newer
    ``iter()`` of the same dataset superseded it (its pipeline run is closed), ``next()`` raises
    ContractError instead of ending quietly, so nothing reads a shortened stream as a whole one."""

    __slots__ = ("__weakref__", "_collate", "_items", "superseded")

    def __init__(self, items: Any, collate: Callable[[Any], Any] | None) -> None:
        self._items = items  # a zephon_ref.builder.PipelineIterator
        self._collate = collate
        self.superseded = False

    def __iter__(self) -> _Pass:
        return self

    def __next__(self) -> Any:
        if self.superseded:
            raise ContractError(expected("next() on this torch dataset's pass", "the current pass (one pass "
                                         "at a time, as the pipeline runs one iteration at a time)",
                                         "a pass a newer iter() of the same dataset superseded and closed"))
        x = self._items.__next__()
        return x if self._collate is None else self._collate(x)

    @property
    def open(self) -> bool:
        return bool(self._items.open)

    def supersede(self) -> None:
        self.superseded = True
        self._items.close()


#: the attribute zephon 0.2.0 sets on torchdata's ``StatefulDataLoader`` when ``import zephon``
#: patches its ``state_dict()`` to copy worker 0's snapshot to every worker (docs/divergences.md D-50)
ZEPHON_WORKER0_PATCH = "_mylib_worker0_unifier"


def _worker0_patch_hint() -> str:  # divergence D-50
    """Why a worker may be handed another worker's state: zephon 0.2.0's patch, when installed."""
    module = sys.modules.get("torchdata.stateful_dataloader")
    loader = getattr(module, "StatefulDataLoader", None)
    if not getattr(loader, ZEPHON_WORKER0_PATCH, False):
        return ""
    return ("; importing zephon 0.2.0 patched torchdata's StatefulDataLoader.state_dict() in this process to "
            "copy worker 0's snapshot to every worker, and this dataset's worker states are per worker: "
            "resume it in a process that does not import zephon (docs/divergences.md D-50)")


def publish_class(cls: type[Any], name: str) -> type[Any]:
    """Name a dataset class built at first use as ``zephon_ref.torch.<name>`` (pickled by reference to
    the package, which resolves it lazily, so a dataset pickled for a spawned worker unpickles)."""
    cls.__module__ = "zephon_ref.torch"
    cls.__qualname__ = name
    return cls


def check_pipeline(pipeline: Any) -> None:
    """Refuse anything but a zephon_ref pipeline."""
    if not isinstance(pipeline, Builder):
        raise ConfigTypeError(expected("pipeline", "a zephon_ref Pipeline", type(pipeline).__name__))


def to_torch_dataset(
    pipeline: Builder,
    stateful: bool = True,
    *,
    collate: Callable[[Any], Any] | None = None,
    device: Any = None,
) -> Any:
    """An IterableDataset yielding the pipeline's delivered items (see the module docstring).

    ``stateful=True`` (zephon 0.2.0's default) gives it ``state_dict()`` / ``load_state_dict()``
    for torchdata's ``StatefulDataLoader`` (:func:`loader_stateful_class`); ``stateful=False``
    the plain dataset, which iterates ``pipeline`` itself.

    ``collate`` (called on each item, inside the worker that produced it)
    replaces the item with its result; with ``collate=None`` and a ``device``,
    items become :func:`collate_batch` tensors on that device; with neither,
    items are yielded as delivered (SampleBatch / SampleRecord).  Use it with
    ``DataLoader(dataset, batch_size=None)``: the pipeline batches already.
    """
    check_pipeline(pipeline)
    if not isinstance(stateful, bool):
        raise ConfigTypeError(expected("to_torch_dataset stateful", "a bool", stateful))
    cls = loader_stateful_class() if stateful else dataset_class()
    return cls(pipeline, device_collate(collate, device))


def device_collate(collate: Callable[[Any], Any] | None, device: Any) -> Callable[[Any], Any] | None:
    """The per-item callable a worker applies: ``collate``, or :func:`collate_batch` on ``device``.

    Validated eagerly: both at once is refused (a custom collate places its own tensors).
    """
    if collate is not None and not callable(collate):
        raise ConfigTypeError(expected("collate", "None or a callable", type(collate).__name__))
    if collate is not None and device is not None:
        raise ConfigError(expected("device", "None when a custom collate is given (the collate places its "
                                   "own tensors)", device))
    if collate is None and device is not None:
        resolve_device(device)  # validate eagerly (a CUDA device without CUDA warns here)
        return _DeviceCollate(device)
    return collate


@dataclass(frozen=True, slots=True)
class _DeviceCollate:
    """:func:`collate_batch` bound to a device (a picklable callable for spawned workers)."""

    device: Any

    def __call__(self, item: Any) -> dict[str, Any]:
        return collate_batch(item, device=self.device)

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

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from zephon_ref.builder import Builder
from zephon_ref.errors import ConfigError, ConfigTypeError, expected
from zephon_ref.torch.collate import collate_batch
from zephon_ref.torch.device import require_torch, resolve_device, worker_slot

__all__ = ["check_pipeline", "dataset_class", "device_collate", "publish_class", "to_torch_dataset"]

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
    *,
    collate: Callable[[Any], Any] | None = None,
    device: Any = None,
) -> Any:
    """An IterableDataset yielding the pipeline's delivered items (see the module docstring).

    ``collate`` (called on each item, inside the worker that produced it)
    replaces the item with its result; with ``collate=None`` and a ``device``,
    items become :func:`collate_batch` tensors on that device; with neither,
    items are yielded as delivered (SampleBatch / SampleRecord).  Use it with
    ``DataLoader(dataset, batch_size=None)``: the pipeline batches already.
    """
    check_pipeline(pipeline)
    return dataset_class()(pipeline, device_collate(collate, device))


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

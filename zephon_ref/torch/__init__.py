"""The torch path (a package): an IterableDataset over a Pipeline, the DataLoader worker split, collation.

Theory of operation
-------------------
:func:`to_torch_dataset` wraps a :class:`~zephon_ref.pipeline.Pipeline` in a
``torch.utils.data.IterableDataset``.  Where its ``__iter__`` runs decides what
it yields:

* **outside a DataLoader, or with** ``num_workers=0``: ``iter(pipeline)``
  itself, i.e. the whole DP group's stream in the pipeline's own order (the
  pipeline's engine is the one iterated, so ``pipeline.checkpoint()`` keeps
  working);
* **in DataLoader worker** ``w`` **of** ``n``: ``pipeline.for_worker(w, n)``,
  a copy whose engine owns exactly the lanes
  :func:`~zephon_ref.engine.world.worker_lanes` gives worker ``w`` (section 3.1
  of the zephon notes: ``active`` = the largest count <= ``n`` dividing the
  group's lane count; worker ``w < active`` owns list indices ``i`` with
  ``i mod active == w``).  Workers ``w >= active`` are idle and yield nothing.
  A pending ``pipeline.restore(state)`` is applied to each worker's owned lanes.

Every lane's stream depends only on the lane (its work source clone, its chunk
numbering, per-lane operator state), never on which engine runs it, so each
lane delivers the same batches in the same order whatever ``num_workers`` is;
only the interleaving of lanes across workers is the DataLoader's.

:func:`collate_batch` turns a delivered item into padded ``int64`` tensors
(layout in its docstring).  It is a pure function of the item: same item, same
tensors, on any device.

torch is imported inside functions only: ``import zephon_ref`` (and this package)
never needs it; every entry point raises :class:`~zephon_ref.errors.ConfigError`
naming the ``torch`` extra when it is missing.

One module per concern: :mod:`.device` (the torch import, the worker slot, device
rules, :func:`move_batch`), :mod:`.collate` (tensors, training tensors),
:mod:`.dataset` (the IterableDataset and its worker split), :mod:`.stateful` (the
checkpointable dataset: the state travels with each batch, ``state_dict()`` merges
what the trainer consumed), :mod:`.trainer` (the reference trainer) and
:mod:`.distributed` (ranks through torch.distributed); trainer and distributed are imported
from their modules, not from here.  The second, tensor implementation of the data path is
:mod:`zephon_ref.fast.tensor` (a faster implementation beside the oracle, not part of this path).
None of them imports the facade :mod:`zephon_ref.pipeline` (which imports this package,
lazily, for ``Pipeline.to_torch_dataset``); they take a pipeline, typed as the semantic
:class:`zephon_ref.builder.Builder`, so the two never form an import cycle.  The public names
below are importable from here.

What may not live here: pipeline logic (lanes, ordering, notification and
replay all belong to the engine), and mutation of the Pipeline's state.
"""

from __future__ import annotations

from typing import Any

from zephon_ref.torch.collate import (
    COLLATED_FIELDS,
    IGNORE_INDEX,
    TRAINING_FIELDS,
    collate_batch,
    collate_for_training,
)
from zephon_ref.torch.dataset import dataset_class, loader_stateful_class, to_torch_dataset
from zephon_ref.torch.device import WorkerSlot, move_batch, resolve_device, worker_slot
from zephon_ref.torch.stateful import (
    STATE_FORMAT,
    StampedItem,
    stateful_dataset_class,
    to_stateful_dataset,
)

__all__ = [
    "COLLATED_FIELDS",
    "IGNORE_INDEX",
    "STATE_FORMAT",
    "StampedItem",
    "TRAINING_FIELDS",
    "WorkerSlot",
    "collate_batch",
    "collate_for_training",
    "move_batch",
    "resolve_device",
    "to_stateful_dataset",
    "to_torch_dataset",
    "worker_slot",
]


def __getattr__(name: str) -> Any:
    # PEP 562: ``zephon_ref.torch.TorchPipelineDataset`` resolves lazily, so a dataset pickled
    # for a spawned DataLoader worker unpickles there (importing torch only then).
    if name == "TorchPipelineDataset":
        return dataset_class()
    if name == "StatefulPipelineDataset":
        return stateful_dataset_class()
    if name == "LoaderStatefulPipelineDataset":
        return loader_stateful_class()
    if name == "IndexablePipelineDataset":
        from zephon_ref.torch.indexable import indexable_dataset_class

        return indexable_dataset_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

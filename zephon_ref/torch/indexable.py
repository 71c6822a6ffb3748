"""The indexable torch path: zephon's ``to_indexable_torch_dataset()``, a map-style torch Dataset.

Theory of operation
-------------------
:func:`to_indexable_torch_dataset` wraps a pipeline's :class:`~zephon_ref.indexable.IndexedView`
(the semantics: which plans are indexable, what item ``i`` is) in a ``torch.utils.data.Dataset``:
``len(ds)`` and ``ds[i]`` are the view's ``len()`` and ``record_at(i)``, a SampleRecord, as zephon
0.2.0 returns them.  The class needs torch, so it is built on first use and published as
``zephon_ref.torch.IndexablePipelineDataset`` (it pickles by reference, for DataLoader workers, where
its operators and source pickle).

What may not live here: the semantics (the view's), state between items (there is none).
"""

from __future__ import annotations

from typing import Any

from zephon_ref.builder import Builder
from zephon_ref.indexable import IndexedView
from zephon_ref.torch.dataset import check_pipeline, publish_class
from zephon_ref.torch.device import require_torch

__all__ = ["indexable_dataset_class", "to_indexable_torch_dataset"]

_CLASS: type[Any] | None = None


def indexable_dataset_class() -> type[Any]:
    """Build (once) the map-style Dataset subclass; it needs torch, so it cannot be defined at import."""
    global _CLASS
    if _CLASS is not None:
        return _CLASS
    torch = require_torch()

    class IndexablePipelineDataset(torch.utils.data.Dataset):  # type: ignore[misc,name-defined]
        """A map-style Dataset over an indexable pipeline (see :func:`to_indexable_torch_dataset`)."""

        def __init__(self, view: IndexedView) -> None:
            super().__init__()
            self.view = view

        def __len__(self) -> int:
            return len(self.view)

        def __getitem__(self, index: Any) -> Any:
            return self.view.record_at(index)

    _CLASS = publish_class(IndexablePipelineDataset, "IndexablePipelineDataset")
    return _CLASS


def to_indexable_torch_dataset(pipeline: Builder) -> Any:
    """A map-style torch Dataset over ``pipeline`` (see the module docstring); ContractError (a
    RuntimeError, as zephon's) when the pipeline is not indexable."""
    check_pipeline(pipeline)
    view = pipeline.indexed_view()  # refuses a non-indexable plan before torch is needed
    return indexable_dataset_class()(view)

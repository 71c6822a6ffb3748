"""Adapter names for the CLI and the tests: each resolves lazily (a library is imported only
when its adapter is asked for)."""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["LOADERS", "UnknownLoader", "resolve"]

#: name -> "module:attribute"
LOADERS = {
    "zephon_ref": "properties.loaders.adapters.zephon:ZEPHON_REF",
    "zephon": "properties.loaders.adapters.zephon:ZEPHON",
    "torchdata": "properties.loaders.adapters.torchdata:STATEFUL_DATALOADER",
    "torchdata-nodes": "properties.loaders.adapters.torchdata:NODES",
    "grain": "properties.loaders.adapters.grain:GRAIN",
    "datasets": "properties.loaders.adapters.hf_datasets:DATASETS",
    "litdata": "properties.loaders.adapters.litdata:LITDATA",
    "streaming": "properties.loaders.adapters.streaming:STREAMING",
}


class UnknownLoader(ValueError):
    """The name is neither a known loader nor an importable ``module:attr``."""


def resolve(name: str) -> Any:
    """The adapter called ``name`` (one of LOADERS, or ``module:attr``; a class is instantiated)."""
    spec = LOADERS.get(name, name)
    if ":" not in spec:
        raise UnknownLoader(
            f"--loader: expected one of {', '.join(LOADERS)} or 'module:attr', received {name!r}"
        )
    module, attr = spec.split(":", 1)
    try:
        mod = importlib.import_module(module)
    except ImportError as exc:
        raise UnknownLoader(f"--loader {name}: module {module} is not importable ({exc})") from exc
    obj = getattr(mod, attr, None)
    if obj is None:
        raise UnknownLoader(f"--loader {name}: module {module} has no attribute {attr!r}")
    adapter = obj() if isinstance(obj, type) else obj
    for need in ("name", "space", "build", "epoch_spec", "unsupported", "declared", "worker_change"):
        if not hasattr(adapter, need):
            raise UnknownLoader(f"--loader {name}: expected a loader adapter (properties/loaders/core.py), "
                                f"received {type(adapter).__name__} without {need!r}")
    return adapter

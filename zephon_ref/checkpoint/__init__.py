"""Durable, validated checkpoints of engine state.

Theory of operation
-------------------
``codec`` turns a value tree into deterministic msgpack + zstd bytes; ``schema``
says what a stored checkpoint is (lane/universal split, capture, manifest);
``storage`` is the small file interface every durable write goes through (and
its one publish routine), ``fs`` its POSIX implementation; ``store`` owns the
files of one directory (durable publish, generations, the refusing loader, gc);
``tree`` is the manifest tree for many ranks (a sans-IO state machine plus a
small file driver); ``cli`` offers ``ckpt inspect`` / ``verify`` / ``gc``.

The engine (``Pipeline.checkpoint()``/``restore()``) produces and consumes the plain
state dicts; this package never imports the engine.

Importing the package imports none of its modules: the names below resolve on
first use (PEP 562), so ``import zephon_ref.checkpoint.codec`` (the coordination
protocol does) or ``...storage`` (the directory backend does) never drags in the
store, and no module that the store imports can form a cycle through here.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover - for type checkers only
    from zephon_ref.checkpoint.codec import decode, encode
    from zephon_ref.checkpoint.schema import Capture, Manifest, ShardEntry
    from zephon_ref.checkpoint.store import (
        CheckpointReader,
        GcReport,
        LoadedCheckpoint,
        gc,
        latest_complete_generation,
        list_generations,
        load,
        load_checkpoint,
        publish_bytes,
        read_manifest,
        save,
        verify_generation,
    )

_WHERE: dict[str, str] = {
    "decode": "codec",
    "encode": "codec",
    "Capture": "schema",
    "Manifest": "schema",
    "ShardEntry": "schema",
    **{
        name: "store"
        for name in (
            "CheckpointReader",
            "GcReport",
            "LoadedCheckpoint",
            "gc",
            "latest_complete_generation",
            "list_generations",
            "load",
            "load_checkpoint",
            "publish_bytes",
            "read_manifest",
            "save",
            "verify_generation",
        )
    },
}

__all__ = [
    "Capture",
    "CheckpointReader",
    "GcReport",
    "LoadedCheckpoint",
    "Manifest",
    "ShardEntry",
    "decode",
    "encode",
    "gc",
    "latest_complete_generation",
    "list_generations",
    "load",
    "load_checkpoint",
    "publish_bytes",
    "read_manifest",
    "save",
    "verify_generation",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'zephon_ref.checkpoint' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"zephon_ref.checkpoint.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))

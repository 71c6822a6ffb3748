"""Durable, validated checkpoints of engine state.

Theory of operation
-------------------
``codec`` turns a value tree into deterministic msgpack + zstd bytes; ``schema``
says what a stored checkpoint is (lane/universal split, capture, manifest);
``store`` owns the files of one directory (durable publish, generations, the
refusing loader); ``tree`` is the manifest tree for many ranks (a sans-IO state
machine plus a small file driver); ``cli`` offers ``ckpt inspect`` / ``ckpt verify``.

The engine (``Pipeline.checkpoint()``/``restore()``) produces and consumes the plain
state dicts; this package never imports the engine.
"""

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

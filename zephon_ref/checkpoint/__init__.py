"""Durable, validated checkpoints of engine state.

Theory of operation
-------------------
``codec`` turns a value tree into deterministic msgpack + zstd bytes; ``schema``
says what a stored checkpoint is (lane/universal split, capture, manifest);
``store`` owns the files of one directory (durable publish, generations, the refusing
loader, gc) over a :class:`zephon_ref.storage.Storage`; ``tree`` is the manifest tree for
many ranks (a sans-IO state machine), ``tree_files`` its file driver; ``cli`` offers
``ckpt inspect`` / ``verify`` / ``gc``.

The engine (``Pipeline.checkpoint()``/``restore()``) produces and consumes the plain
state dicts; this package never imports the engine.

The package re-exports the codec's ``encode``/``decode``, the schema's records and every
public name of the store (its ``__all__``); the Storage interface and its implementations
are :mod:`zephon_ref.storage` (``checkpoint.storage``, ``.fs`` and ``.s3`` re-export them).
"""

from zephon_ref.checkpoint import store as _store
from zephon_ref.checkpoint.schema import Capture, Manifest, ShardEntry
from zephon_ref.checkpoint.store import *  # noqa: F403 - exactly the store's __all__
from zephon_ref.codec import decode, encode

__all__ = ["Capture", "Manifest", "ShardEntry", "decode", "encode"]
__all__ += _store.__all__

"""The one storage layer: the Storage interface, its publish routine, POSIX and S3.

Theory of operation
-------------------
Everything zephon_ref writes durably goes through a :class:`Storage`
(:mod:`zephon_ref.storage.base`: the primitives, the one publish routine and the
typed errors): the checkpoint store, the manifest tree's file driver and the
directory and object-store aggregation backends.  :class:`PosixStorage`
(:mod:`zephon_ref.storage.posix`) is the local one; :mod:`zephon_ref.storage.s3`
serves ``s3://bucket/prefix`` URLs (it needs boto3, so it is imported on use).
Nothing else in zephon_ref does file I/O; fault injection is the simulator's
(``sim/storage.py``).
"""

from zephon_ref.storage.base import (
    AFTER_LINK_OPS,
    PUBLISH_OPS,
    TEMP_PREFIX,
    Storage,
    Writer,
    ensure_dir,
    list_names,
    publish,
    read_bytes,
    remove_file,
    storage_error,
    sync_dir,
    temp_target,
)
from zephon_ref.storage.posix import PosixStorage, PosixWriter

__all__ = [
    "AFTER_LINK_OPS",
    "PUBLISH_OPS",
    "TEMP_PREFIX",
    "PosixStorage",
    "PosixWriter",
    "Storage",
    "Writer",
    "ensure_dir",
    "list_names",
    "publish",
    "read_bytes",
    "remove_file",
    "storage_error",
    "sync_dir",
    "temp_target",
]

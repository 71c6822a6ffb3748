"""Files and storage settings: zephon's ``zephon.io``.

The semantics (``zephon_ref.work.dataset``) know a dataset as shard ids, counts and rows by
index; everything that touches a file system is here, so the semantics import no I/O (house rule
10, ``tests/surface/test_import_direction.py``).  As in zephon 0.2.0 the package has three
modules, and one per format read from a directory's index or by its own library:

* :mod:`~zephon_ref.io.dataset`: the file-backed :class:`Dataset`, JSONL shards (plain or
  gzip/zstd/bz2/xz-compressed) and Parquet shards, the writers;
* :mod:`~zephon_ref.io.mds`, :mod:`~zephon_ref.io.litdata`, :mod:`~zephon_ref.io.lance`,
  :mod:`~zephon_ref.io.vortex`: MDS, LitData, Lance and Vortex shards (``fmt=`` of
  :meth:`Dataset.from_path`; each library imported only when its format is read);
* :mod:`~zephon_ref.io.memory`: :class:`InMemoryShard`;
* :mod:`~zephon_ref.io.options`: the storage option objects, execution settings that never
  change a stream.

The top-level ``zephon_ref.Dataset`` is this package's, as ``zephon.Dataset`` is
``zephon.io.Dataset``.
"""

from __future__ import annotations

from zephon_ref.io.dataset import (
    Dataset,
    DatasetNotFound,
    JsonlShard,
    ParquetShard,
    write_jsonl,
    write_parquet,
)
from zephon_ref.io.memory import InMemoryShard
from zephon_ref.io.options import (
    ArrowOptions,
    CacheOptions,
    LanceOptions,
    ParquetOptions,
    ParquetRGCacheOptions,
    StoreOptions,
    VortexOptions,
    parse_size_bytes,
)

__all__ = ["ArrowOptions", "CacheOptions", "Dataset", "DatasetNotFound", "InMemoryShard", "JsonlShard",
           "LanceOptions", "ParquetOptions", "ParquetRGCacheOptions", "ParquetShard", "StoreOptions",
           "VortexOptions", "parse_size_bytes", "write_jsonl", "write_parquet"]

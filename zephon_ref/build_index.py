"""zephon's ``zephon.build_index``: write the ``index.json`` of a JSONL or Parquet dataset directory.

Theory of operation
-------------------
zephon's JSONL / Parquet discovery reads ``index.json`` (one entry per shard file: its basename,
size in bytes, row count, and per format extras) to skip counting rows.  :func:`build_index` writes
the same file for the shards zephon_ref's ``Dataset.from_path`` reads (the same file names, the same
row definition), so a directory indexed here is read alike by zephon; zephon_ref's ``from_path``
counts rows itself and never reads the index (an execution shortcut, not data).

Per shard: ``bytes`` is the file's size; ``extra`` is ``{}`` for plain JSONL, ``{"raw_bytes": n}``
(decompressed size) for compressed JSONL, and the row groups (``num_row_groups``, each group's
``num_rows`` and ``total_byte_size``) for Parquet.  Local directories only (zephon also takes
remote roots, which zephon_ref does not read, docs/divergences.md D-49); ``max_workers`` is an
execution setting (validated, then shards are read one after another).

What may not live here: reading the index back (nothing in zephon_ref needs it).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from zephon_ref.errors import ConfigError, ConfigTypeError, expected
from zephon_ref.io.dataset import FORMATS, JsonlShard, ParquetShard, _jsonl_bytes, _pyarrow, _shard_files

__all__ = ["build_index"]

#: the ``format_version`` zephon 0.2.0 writes
FORMAT_VERSION = 1


def _entry(kind: str, path: Path) -> dict[str, Any]:
    extra: dict[str, Any] = {}
    if kind == "jsonl":
        rows = len(JsonlShard(path))
        if not path.name.endswith(".jsonl"):
            extra["raw_bytes"] = len(_jsonl_bytes(path))
    else:
        rows = len(ParquetShard(path))
        meta = _pyarrow().ParquetFile(path).metadata
        groups = [meta.row_group(i) for i in range(meta.num_row_groups)]
        extra = {"num_row_groups": meta.num_row_groups,
                 "row_groups": [{"num_rows": g.num_rows, "total_byte_size": g.total_byte_size}
                                for g in groups]}
    return {"basename": path.name, "bytes": path.stat().st_size, "num_rows": rows, "hashes": {},
            "extra": extra}


def build_index(format_name: str, dataset_dir: str | os.PathLike[str], *,
                output_path: str | os.PathLike[str] | None = None, progress: bool = True,
                max_workers: int = 8) -> str:
    """Write ``dataset_dir/index.json`` (or ``output_path``) for the ``format_name`` ("jsonl" or
    "parquet") shards of ``dataset_dir``; returns the path written, as a str."""
    if not isinstance(format_name, str) or format_name not in FORMATS:
        raise ConfigError(expected("build_index format_name", f"one of {sorted(FORMATS)}", format_name))
    if not isinstance(dataset_dir, (str, os.PathLike)):
        raise ConfigTypeError(expected("build_index dataset_dir", "a str or os.PathLike", dataset_dir))
    if output_path is not None and not isinstance(output_path, (str, os.PathLike)):
        raise ConfigTypeError(expected("build_index output_path", "None, a str or os.PathLike", output_path))
    if isinstance(max_workers, bool) or not isinstance(max_workers, int):
        raise ConfigTypeError(expected("build_index max_workers", "an int >= 1", max_workers))
    if max_workers < 1:
        raise ConfigError(expected("build_index max_workers", "an int >= 1", max_workers))
    root = Path(dataset_dir)
    names = ", ".join(f"*{s}" for s in FORMATS[format_name])
    files = _shard_files(sorted(root.iterdir()), format_name) if root.is_dir() else []
    if not files:
        raise ConfigError(expected("build_index dataset_dir", f"a directory holding {names} files",
                                   str(root)))
    if progress:
        print(f"Found {len(files)} {names} files, reading metadata...")
    shards = [_entry(format_name, f) for f in files]
    out = Path(output_path) if output_path is not None else root / "index.json"
    text = json.dumps({"format_version": FORMAT_VERSION, "shards": shards}, indent=2)
    out.write_text(text, encoding="utf-8")
    if progress:
        total = sum(s["bytes"] for s in shards)
        print(f"Created {out}\n  {len(shards)} shards, {sum(s['num_rows'] for s in shards)} total rows, "
              f"{total / 2**20:.1f} MB", file=sys.stdout)
    return str(out)

"""Vortex files, read locally as zephon 0.2.0 reads them (``fmt="vortex"``; the ``vortex`` extra).

One shard per ``.vortex`` file of the directory (or the one file given), in sorted file-name
order, as JSONL and Parquet; with ``fmt=None`` a directory is Vortex when it holds a ``.vortex``
file and no JSONL file (zephon detects JSONL, then Vortex, then Parquet).  A shard's count is the
file's row count, its ``raw_bytes`` the file's size, its rows dicts of the columns with Parquet's
cell values (:func:`zephon_ref.io.cells.parquet_value`); learned by writing files with
``vortex.io.write`` and reading them with zephon 0.2.0 (tests/conformance/test_vortex_rows.py).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from zephon_ref.errors import ConfigError, ContractError, expected
from zephon_ref.io.cells import LazyShard, arrow_rows

__all__ = ["VortexShard"]


def _vortex() -> Any:
    try:
        import vortex
    except ImportError as exc:
        raise ConfigError(expected("fmt='vortex'", "vortex-data installed (pip install zephon_ref[vortex])",
                                   f"ImportError: {exc}")) from exc
    return vortex


class VortexShard(LazyShard):
    """One Vortex file: its row count read at construction, its rows decoded on first use."""

    __slots__ = ("_path",)

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._path = Path(path)
        if not self._path.is_file():
            raise ConfigError(expected("Vortex shard", "an existing regular file (or a link to one)",
                                       str(path)))
        try:
            self._count = len(_vortex().open(str(self._path)))
        except (OSError, ValueError, RuntimeError) as exc:  # vortex raises RuntimeError on a bad file
            raise ConfigError(expected("Vortex shard", "a readable Vortex file", f"{path}: {exc}")) from exc
        self._rows: list[Any] | None = None

    @property
    def raw_bytes(self) -> int:
        """The file's size in bytes (what token estimation costs rows by)."""
        return self._path.stat().st_size

    def _read(self) -> list[Any]:
        try:
            table = _vortex().open(str(self._path)).to_arrow().read_all()
        except (OSError, ValueError, RuntimeError) as exc:
            raise ContractError(expected(f"Vortex shard {self._path}", "the file counted at from_path, "
                                         "still readable", str(exc))) from exc
        return arrow_rows(table, count=self._count, what=f"Vortex shard {self._path}")

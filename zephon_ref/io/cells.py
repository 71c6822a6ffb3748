"""What every file format shares: the lazy shard, Arrow and framed rows, Arrow cells, zstd.

The format modules (:mod:`~zephon_ref.io.dataset`, :mod:`~zephon_ref.io.mds`,
:mod:`~zephon_ref.io.litdata`, :mod:`~zephon_ref.io.lance`, :mod:`~zephon_ref.io.vortex`) import
these from here, so that no format module imports another's reader back.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from zephon_ref.errors import ConfigError, ContractError, expected

__all__ = ["LazyShard", "arrow_rows", "framed_rows", "parquet_value", "zstd_decompress"]


def zstd_decompress(data: bytes) -> bytes:
    """``data`` zstd-decompressed (Python 3.14's ``compression.zstd`` or ``backports.zstd``)."""
    try:
        from compression import zstd  # type: ignore[import-not-found,unused-ignore]  # Python 3.14
    except ImportError:
        try:
            from backports import zstd  # type: ignore[import-not-found,no-redef,unused-ignore]
        except ImportError as exc:
            raise ConfigError(expected("a zstd-compressed shard", "a zstd module (Python 3.14, or pip "
                                       "install backports.zstd)", "none installed")) from exc
    out: bytes = zstd.decompress(data)
    return out


def _numeric(t: Any) -> bool:
    import pyarrow.types as pat

    return bool(pat.is_integer(t) or pat.is_floating(t) or pat.is_boolean(t))


def parquet_value(scalar: Any) -> Any:
    """One cell as zephon 0.2.0 delivers it (found by running it; tests/conformance/test_parquet_rows.py).

    null -> None; an integer or float column -> a numpy scalar of the column's type; a bool
    column -> a Python bool; a list of integers, floats or bools with no null element -> a numpy
    array of the element type; anything else (strings, bytes, structs, nested or null-holding
    lists) -> the Python value (``as_py()``).
    """
    import pyarrow.types as pat

    if not scalar.is_valid:
        return None
    t = scalar.type
    if pat.is_boolean(t):
        return bool(scalar.as_py())
    if pat.is_integer(t) or pat.is_floating(t):
        return np.array(scalar.as_py(), dtype=t.to_pandas_dtype())[()]
    if (pat.is_list(t) or pat.is_large_list(t)) and _numeric(t.value_type):
        values = scalar.values
        if values.null_count == 0:
            return values.to_numpy(zero_copy_only=False).astype(t.value_type.to_pandas_dtype(), copy=True)
    return scalar.as_py()


class LazyShard:
    """A file-backed shard whose row count is known at ``from_path`` and whose rows are read once,
    on first use.  A subclass sets ``_count``, ``_rows = None`` and ``_raw_bytes`` (or overrides
    :attr:`raw_bytes`) and defines :meth:`_read`."""

    __slots__ = ("_count", "_raw_bytes", "_rows")
    _count: int
    _raw_bytes: int
    _rows: list[Any] | None

    def __len__(self) -> int:
        return self._count

    @property
    def raw_bytes(self) -> int:
        """The size the format records for the shard (what token estimation costs rows by)."""
        return self._raw_bytes

    def _read(self) -> list[Any]:
        raise NotImplementedError

    def _load(self) -> list[Any]:
        if self._rows is None:
            self._rows = self._read()
        return self._rows

    def __getitem__(self, index: int) -> Any:
        return self._load()[index]


def arrow_rows(table: Any, *, count: int, what: str) -> list[dict[str, Any]]:
    """The rows of an Arrow table (Parquet, Vortex, Lance) as dicts ``column -> value``
    (:func:`parquet_value`); ContractError when the table no longer holds the ``count`` rows
    counted at from_path."""
    if table.num_rows != count:
        raise ContractError(expected(what, f"{count} rows (counted at from_path)",
                                     f"{table.num_rows} rows: the data changed"))
    columns = {name: table.column(name) for name in table.column_names}
    return [{name: parquet_value(col[i]) for name, col in columns.items()} for i in range(table.num_rows)]


def framed_rows(data: bytes, *, count: int, what: str, unit: str, decode: Any) -> list[Any]:
    """The items of an MDS shard or a LitData chunk: a little-endian u32 count, ``count + 1`` u32
    offsets, then the items; each item's bytes through ``decode``.  ContractError when the file holds
    another count than its index says."""
    n = int(np.frombuffer(data, "<u4", 1)[0])
    if n != count:
        raise ContractError(expected(what, f"{count} {unit} (the index's)", n))
    offsets = np.frombuffer(data, "<u4", n + 1, 4).tolist()
    return [decode(data[offsets[i]:offsets[i + 1]]) for i in range(n)]

"""Cells and bytes every file format shares: a Parquet/Arrow cell as zephon delivers it, zstd.

The format modules (:mod:`~zephon_ref.io.dataset`, :mod:`~zephon_ref.io.mds`,
:mod:`~zephon_ref.io.litdata`, :mod:`~zephon_ref.io.lance`, :mod:`~zephon_ref.io.vortex`) import
these from here, so that no format module imports another's reader back.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from zephon_ref.errors import ConfigError, expected

__all__ = ["parquet_value", "zstd_decompress"]


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

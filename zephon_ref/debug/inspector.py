"""zephon's ``DatasetInspector``: raw payloads of one dataset by shard and row.

No work source, order, metadata, prefetch or workers: ``read(shard_id, row)`` is the dataset's row.
Use it as a context manager; ``read`` after ``close()`` is a ContractError (a RuntimeError, as
zephon's).  A shard the dataset lacks is a KeyError and a row outside ``[0, count)`` an IndexError,
as zephon's (typed here; a negative row is refused where zephon reads from the end, and a
non-int row is a ValueError, # divergence D-99).
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from types import TracebackType
from typing import Any

from zephon_ref.errors import ConfigError, ConfigTypeError, ContractError, ZephonRefError, expected
from zephon_ref.io.options import StoreOptions

__all__ = ["DatasetInspector"]


class ShardNotFound(ZephonRefError, KeyError):
    """A shard id the inspected dataset does not have."""


class RowOutOfRange(ZephonRefError, IndexError):
    """A row outside ``[0, count)`` of its shard."""


def _int(name: str, value: Any) -> int:
    if isinstance(value, bool):
        raise ConfigError(expected(name, "an int", value))
    try:
        return operator.index(value)
    except TypeError:
        raise ConfigError(expected(name, "an int", value)) from None


class DatasetInspector:
    """Raw payloads of ``dataset`` (a zephon_ref Dataset) by shard and row; single-threaded."""

    def __init__(self, dataset: Any, *, io_options: StoreOptions | Mapping[str, Any] | None = None) -> None:
        layout = getattr(dataset, "layout", None)
        if not callable(layout) or not callable(getattr(dataset, "get", None)):
            raise ConfigTypeError(expected("DatasetInspector dataset", "a Dataset", type(dataset).__name__))
        self.dataset = dataset
        self.io_options = StoreOptions.from_any(io_options)
        self._counts = {int(s): int(n) for s, n in layout()}
        self._closed = False

    def read(self, shard_id: int, sample_index: int) -> Any:
        """One raw payload: row ``sample_index`` of shard ``shard_id``."""
        return self.read_many(shard_id, [sample_index])[0]

    def read_many(self, shard_id: int, sample_indices: list[int]) -> list[Any]:
        """Raw payloads of the given rows of one shard, in the given order."""
        if self._closed:
            raise ContractError("DatasetInspector: expected an open inspector, received a closed one")
        shard = _int("shard_id", shard_id)
        if shard not in self._counts:
            raise ShardNotFound(expected("shard_id", f"one of the dataset's shards {sorted(self._counts)}",
                                         shard_id))
        rows = [_int("sample_index", i) for i in sample_indices]
        n = self._counts[shard]
        for i in rows:
            if not 0 <= i < n:
                raise RowOutOfRange(expected("sample_index", f"an int in [0, {n}) (shard {shard})", i))
        return [self.dataset.get(shard, i) for i in rows]

    def close(self) -> None:
        """Close the inspector (in-memory and file-backed datasets hold nothing open here)."""
        self._closed = True

    def __enter__(self) -> DatasetInspector:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

"""Datasets: shards with known sample counts, samples addressed by index.

Theory of operation
-------------------
A :class:`Dataset` is a name plus a mapping ``shard_id -> shard``; a shard is
anything with ``len()`` and ``__getitem__(int)``.  The work source only needs
the sorted shard ids and their counts (:meth:`Dataset.ids`, :meth:`Dataset.counts`);
the fetch step reads rows with :meth:`Dataset.get`.  Shard ids are kept in
ascending order, which is the order zephon's ``discover()`` yields and which the
shard shuffle permutes.

:meth:`Dataset.from_dict` builds one over :class:`InMemoryShard` objects.  Files
are machinery: ``zephon_ref.io`` (zephon's ``zephon.io``) holds the JSONL shard
and the ``Dataset`` whose ``from_path`` reads a directory of them, a subclass of
this one.  No I/O happens here or in the work source.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from zephon_ref.errors import ConfigError, ConfigTypeError, expected

__all__ = ["Dataset", "InMemoryShard"]


class _Shard(Protocol):
    def __len__(self) -> int: ...
    def __getitem__(self, index: int) -> Any: ...


BYTE_SAMPLES = 64  # rows sampled per in-memory shard to size it


def content_bytes(obj: Any) -> int:
    """Decoded payload bytes of ``obj``: text as UTF-8, buffers by length, 8 per scalar, no keys.

    The byte basis of token estimation (work/token_estimation.py): mappings count
    their values only, sequences their items, dataclasses their fields.
    """
    if isinstance(obj, str):
        return len(obj.encode("utf-8", errors="ignore"))
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return len(obj)
    if isinstance(obj, np.ndarray):
        return int(obj.nbytes)
    if isinstance(obj, Mapping):
        return sum(content_bytes(v) for v in obj.values())
    if isinstance(obj, Sequence):
        return sum(content_bytes(v) for v in obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return sum(content_bytes(getattr(obj, f.name, None)) for f in dataclasses.fields(obj))
    if isinstance(obj, (int, float)) or obj is None:
        return 8
    return 0


class InMemoryShard:
    """A list-backed shard (same name and constructor as zephon's)."""

    __slots__ = ("_raw_bytes", "_rows")

    def __init__(self, rows: Sequence[Any]) -> None:
        if isinstance(rows, (str, bytes, bytearray)) or not isinstance(rows, (Sequence, np.ndarray)):
            # a mapping has len() and [] too, but [0] on it is a key lookup, not row 0
            raise ConfigTypeError(expected("InMemoryShard rows", "a sequence of rows (list, tuple, array)",
                                           type(rows).__name__))
        self._rows = rows
        self._raw_bytes: int | None = None

    @property
    def raw_bytes(self) -> int:
        """Estimated payload bytes: the mean of every ``len // 64``-th row, times ``len`` (cached)."""
        if self._raw_bytes is None:
            n = len(self._rows)
            if n == 0:
                self._raw_bytes = 0
            else:
                step = max(1, n // BYTE_SAMPLES)
                sizes = [content_bytes(self._rows[i]) for i in range(0, n, step)]
                self._raw_bytes = int(sum(sizes) / len(sizes) * n)
        return self._raw_bytes

    def __len__(self) -> int:
        return len(self._rows)

    def __getitem__(self, index: int) -> Any:
        return self._rows[index]

    def getsamples(self, indices: Sequence[int]) -> list[Any]:
        return [self._rows[i] for i in indices]

    def close(self) -> None:
        """Nothing to release (zephon's ``close()`` is a no-op for in-memory rows too: they stay readable)."""


class Dataset:
    """A named collection of shards with known counts."""

    __slots__ = ("_counts", "_ids", "_shards", "name", "path")

    def __init__(self, name: str, shards: Mapping[int, _Shard], *, path: str | None = None) -> None:
        if not isinstance(name, str) or not name:
            raise ConfigError(expected("Dataset name", "a non-empty str", name))
        if not isinstance(shards, Mapping):
            raise ConfigTypeError(
                expected("Dataset shards", "a mapping shard_id -> shard", type(shards).__name__)
            )
        norm: dict[int, _Shard] = {}
        for sid, shard in shards.items():
            if isinstance(sid, bool) or not isinstance(sid, (int, np.integer)) or int(sid) < 0:
                raise ConfigError(expected(f"shard id in dataset {name!r}", "an int >= 0", sid))
            if (isinstance(shard, type) or not (hasattr(shard, "__len__") and hasattr(shard, "__getitem__"))
                    or isinstance(shard, (str, bytes, bytearray, Mapping))):
                raise ConfigTypeError(
                    expected(
                        f"shard {sid} of dataset {name!r}",
                        "a shard (len() and [index], e.g. InMemoryShard)",
                        type(shard).__name__,
                    )
                )
            size = len(shard)
            if isinstance(size, bool) or not isinstance(size, int) or size < 0:
                raise ConfigError(expected(f"len() of shard {sid} of dataset {name!r}", "an int >= 0", size))
            norm[int(sid)] = shard
        self.name = name
        self.path = path
        self._shards = norm
        ids = sorted(norm)
        self._ids = np.array(ids, dtype=np.int64)
        self._counts = np.array([len(norm[i]) for i in ids], dtype=np.int64)
        self._ids.setflags(write=False)
        self._counts.setflags(write=False)

    @classmethod
    def from_dict(cls, name: str, shards: Mapping[int, _Shard]) -> Dataset:
        return cls(name, shards)

    def ids(self) -> np.ndarray:
        """Shard ids, ascending (read-only int64 array)."""
        return self._ids

    def counts(self) -> np.ndarray:
        """Per-shard sample counts aligned with :meth:`ids` (read-only int64 array)."""
        return self._counts

    def total(self) -> int:
        return int(self._counts.sum())

    def raw_bytes(self) -> np.ndarray:
        """Per-shard byte sizes aligned with :meth:`ids` (a shard without ``raw_bytes`` counts 0)."""
        return np.array(
            [int(getattr(self._shards[i], "raw_bytes", 0)) for i in self._ids.tolist()], dtype=np.int64
        )

    def max_count(self) -> int:
        return int(self._counts.max(initial=0))

    def shard_count(self) -> int:
        return int(self._ids.size)

    def __len__(self) -> int:
        return self.total()

    def get(self, shard_id: int, index: int) -> Any:
        """The row at ``index`` in shard ``shard_id``."""
        return self._shards[shard_id][index]

    def layout(self) -> tuple[tuple[int, int], ...]:
        """``((shard_id, count), ...)``: what a checkpoint's layout check compares."""
        return tuple(zip(self._ids.tolist(), self._counts.tolist(), strict=False))

    def __repr__(self) -> str:
        return f"Dataset(name={self.name!r}, shards={self.shard_count()}, total={self.total()})"

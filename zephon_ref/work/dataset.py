"""Datasets: shards with known sample counts, samples addressed by index.

Theory of operation
-------------------
A :class:`Dataset` is a name plus a mapping ``shard_id -> shard``; a shard is
anything with ``len()`` and ``__getitem__(int)``.  The work source only needs
the sorted shard ids and their counts (:meth:`Dataset.ids`, :meth:`Dataset.counts`);
the fetch step reads rows with :meth:`Dataset.get`.  Shard ids are kept in
ascending order, which is the order zephon's ``discover()`` yields and which the
shard shuffle permutes.

Two constructors: :meth:`Dataset.from_dict` over :class:`InMemoryShard` objects,
and :meth:`Dataset.from_path` over a directory of JSONL shards (one file per
shard, read lazily and cached; the shard id is the file's index in sorted name
order).  No I/O happens in the work source.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from zephon_ref.errors import ConfigError, ConfigTypeError, ContractError, expected

__all__ = ["Dataset", "InMemoryShard", "JsonlShard"]


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


def _jsonl_rows(path: Path) -> list[Any]:
    """Every row of a JSONL file, parsed; the one definition of a row.

    The file is UTF-8 (a byte-order mark at its very start is skipped), split with
    universal newlines (``\n``, ``\r\n`` or ``\r``); a line whose ``str.strip()``
    is empty (whitespace only, including NBSP, ``\x1c`` or ``\u2028``) is not a
    row, every other line is one JSON value.  Anything else is refused with a
    ConfigError naming the file and the 1-based line.
    """
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(
            expected("JSONL shard", "a readable regular file", f"{path}: {exc.strerror or exc}")
        ) from exc
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        head = data[: exc.start]
        lineno = head.count(b"\n") + head.count(b"\r") - head.count(b"\r\n") + 1  # universal newlines
        raise ConfigError(
            expected(
                f"JSONL shard {path} line {lineno}",
                "UTF-8 text",
                f"the byte {data[exc.start : exc.start + 1]!r} at offset {exc.start}",
            )
        ) from exc
    rows = []
    for i, line in enumerate(io.StringIO(text, newline=None), start=1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise ConfigError(expected(f"JSONL shard {path} line {i}", "one JSON value per line",
                                       f"{line.strip()[:60]!r} ({exc.msg})")) from exc
    return rows


class JsonlShard:
    """One JSONL file: validated and counted at construction, rows read lazily.

    Construction parses every row once (so a malformed file is refused at
    :meth:`Dataset.from_path`, naming file and line) and keeps only the count;
    the first read parses it again and caches the rows.
    """

    __slots__ = ("_count", "_path", "_rows")

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._path = Path(path)
        if not self._path.is_file():
            raise ConfigError(
                expected("JSONL shard", "an existing regular file (or a link to one)", str(path))
            )
        self._rows: list[Any] | None = None
        self._count = len(_jsonl_rows(self._path))

    def __len__(self) -> int:
        return self._count

    @property
    def raw_bytes(self) -> int:
        """The file's size in bytes (what token estimation costs rows by)."""
        return self._path.stat().st_size

    def _load(self) -> list[Any]:
        if self._rows is None:
            rows = _jsonl_rows(self._path)
            if len(rows) != self._count:
                raise ContractError(expected(f"JSONL shard {self._path}", f"{self._count} rows (counted at "
                                             "from_path)", f"{len(rows)} rows: the file changed"))
            self._rows = rows
        return self._rows

    def __getitem__(self, index: int) -> Any:
        return self._load()[index]


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

    @classmethod
    def from_path(cls, name: str, path: str | os.PathLike[str], *, fmt: str | None = None) -> Dataset:
        """A dataset over a directory of ``*.jsonl`` files (or one JSONL file)."""
        if fmt not in (None, "jsonl"):
            raise ConfigError(expected("fmt", "None or 'jsonl' (the only format zephon_ref reads)", fmt))
        if not isinstance(name, str) or not name:
            raise ConfigError(expected("Dataset name", "a non-empty str", name))
        if not isinstance(path, (str, os.PathLike)):
            raise ConfigTypeError(expected("path", "a str or os.PathLike", type(path).__name__))
        p = Path(path)
        if p.is_file():
            files = [p]
        elif p.is_dir():
            # every *.jsonl entry is a shard: a directory or a dangling link by that name is refused
            files = sorted(f for f in p.iterdir() if f.suffix == ".jsonl")
        else:
            raise ConfigError(expected("path", "an existing JSONL file or directory", str(path)))
        if not files:
            raise ConfigError(expected("path", "a directory holding at least one .jsonl file", str(path)))
        return cls(name, {i: JsonlShard(f) for i, f in enumerate(files)}, path=str(p))

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

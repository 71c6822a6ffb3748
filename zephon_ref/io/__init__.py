"""Files: JSONL shards, the ``Dataset`` that reads a directory of them, and the writer.

This is zephon's ``zephon.io`` for the formats the reference reads.  The
semantics (``zephon_ref.work.dataset``) know a dataset as shard ids, counts and
rows by index; everything that touches a file system is here, so the semantics
import no I/O (house rule 10, ``tests/surface/test_import_direction.py``).

:class:`Dataset` is the semantic dataset plus :meth:`Dataset.from_path`; the
top-level ``zephon_ref.Dataset`` is this one, as ``zephon.Dataset`` is
``zephon.io.Dataset``.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from zephon_ref.errors import ConfigError, ConfigTypeError, ContractError, expected
from zephon_ref.work import dataset as _semantic
from zephon_ref.work.dataset import InMemoryShard

__all__ = ["Dataset", "InMemoryShard", "JsonlShard", "write_jsonl"]


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


class Dataset(_semantic.Dataset):
    """A dataset; :meth:`from_path` reads JSONL files (zephon's ``zephon.io.Dataset``)."""

    __slots__ = ()

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


def write_jsonl(datasets: Iterable[_semantic.Dataset], root: str | Path) -> Path:
    """Write ``root/<dataset>/shard-<k>.jsonl`` for each dataset; :meth:`Dataset.from_path` reads it back.

    Rows are written as canonical JSON (sorted keys), one per line, shards in id order.
    """
    root = Path(root)
    for d in datasets:
        ddir = root / d.name
        ddir.mkdir(parents=True, exist_ok=True)
        for pos, sid in enumerate(d.ids().tolist()):
            with (ddir / f"shard-{pos:05d}.jsonl").open("w", encoding="utf-8") as fh:
                for i in range(int(d.counts()[pos])):
                    fh.write(json.dumps(d.get(sid, i), sort_keys=True) + "\n")
    return root

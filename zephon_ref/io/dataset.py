"""Files: JSONL and Parquet shards, the ``Dataset`` that reads a directory of them, the writers.

This is zephon's ``zephon.io.dataset`` for the formats the reference reads.  The
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
import urllib.parse
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from zephon_ref.errors import ConfigError, ConfigTypeError, ContractError, expected
from zephon_ref.io.cells import LazyShard, arrow_rows
from zephon_ref.io.cells import zstd_decompress as _zstd_decompress
from zephon_ref.work import dataset as _semantic

__all__ = ["Dataset", "DatasetNotFound", "JsonlShard", "ParquetShard", "write_jsonl", "write_parquet"]

#: The formats :meth:`Dataset.from_path` reads, by ``fmt``, and the file names that are their shards
#: (JSONL plain or compressed, as zephon 0.2.0 reads them).
FORMATS: dict[str, tuple[str, ...]] = {
    "jsonl": (".jsonl", ".jsonl.gz", ".jsonl.zst", ".jsonl.bz2", ".jsonl.xz"),
    "vortex": (".vortex",),  # before Parquet: zephon's detection order
    "parquet": (".parquet",),
}
#: The formats read from a directory with an ``index.json`` (not from files by name).
DIRECTORY_FORMATS: tuple[str, ...] = ("lance", "litdata", "mds")
#: Every ``fmt`` :meth:`Dataset.from_path` accepts.
READ_FORMATS: tuple[str, ...] = (*FORMATS, *DIRECTORY_FORMATS)


class DatasetNotFound(ConfigError, FileNotFoundError):
    """``from_path`` was given a path that does not exist (zephon raises FileNotFoundError)."""


def _decompress(path: Path, data: bytes) -> bytes:
    """The bytes of a ``.jsonl.gz`` / ``.zst`` / ``.bz2`` / ``.xz`` file decompressed (others as they are)."""
    name = path.name
    try:
        if name.endswith(".gz"):
            import gzip

            return gzip.decompress(data)
        if name.endswith(".bz2"):
            import bz2

            return bz2.decompress(data)
        if name.endswith(".xz"):
            import lzma

            return lzma.decompress(data)
        if name.endswith(".zst"):
            return _zstd_decompress(data)
    except (OSError, EOFError, ValueError) as exc:  # gzip/bz2/lzma/zstd errors
        raise ConfigError(expected(f"JSONL shard {path}", "a complete compressed file", str(exc))) from exc
    return data


def _shard_files(entries: list[Path], kind: str) -> list[Path]:
    return [f for f in entries if f.name.endswith(FORMATS[kind])]


def _jsonl_bytes(path: Path) -> bytes:
    """A JSONL file's bytes, decompressed when its name says so (``.gz``, ``.zst``, ``.bz2``, ``.xz``)."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(
            expected("JSONL shard", "a readable regular file", f"{path}: {exc.strerror or exc}")
        ) from exc
    return _decompress(path, data)


def _jsonl_rows(path: Path, data: bytes | None = None) -> list[Any]:
    """Every row of a JSONL file (whose bytes are ``data`` when given), parsed; the one definition of a row.

    The text is UTF-8 (a byte-order mark at its very start is skipped), split with
    universal newlines (``\n``, ``\r\n`` or ``\r``); a line whose ``str.strip()``
    is empty (whitespace only, including NBSP, ``\x1c`` or ``\u2028``) is not a
    row, every other line is one JSON value.  Anything else is refused with a
    ConfigError naming the file and the 1-based line.
    """
    if data is None:
        data = _jsonl_bytes(path)
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

    __slots__ = ("_count", "_path", "_raw_bytes", "_rows")

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._path = Path(path)
        if not self._path.is_file():
            raise ConfigError(
                expected("JSONL shard", "an existing regular file (or a link to one)", str(path))
            )
        self._rows: list[Any] | None = None
        data = _jsonl_bytes(self._path)
        self._raw_bytes = len(data)
        self._count = len(_jsonl_rows(self._path, data))

    def __len__(self) -> int:
        return self._count

    @property
    def raw_bytes(self) -> int:
        """The shard's bytes at ``from_path``, decompressed (what token estimation costs rows by):
        a plain file's size; for a compressed one the size of its content, as zephon counts it."""
        return self._raw_bytes

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


def _pyarrow() -> Any:
    """pyarrow, or a ConfigError saying how to get it (the ``parquet`` extra)."""
    try:
        import pyarrow.parquet as pq
    except ImportError as exc:  # pragma: no cover - exercised only without pyarrow
        raise ConfigError(expected("fmt='parquet'", "pyarrow installed (pip install zephon_ref[parquet])",
                                   f"ImportError: {exc}")) from exc
    return pq


class ParquetShard(LazyShard):
    """One Parquet file: its row count read from the footer at construction, rows read lazily.

    The first read decodes the whole file (every row group, every column) and keeps the rows;
    a row is a dict ``column -> value`` (see :func:`_parquet_value`).
    """

    __slots__ = ("_path",)

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._path = Path(path)
        if not self._path.is_file():
            raise ConfigError(
                expected("Parquet shard", "an existing regular file (or a link to one)", str(path))
            )
        pq = _pyarrow()
        try:
            self._count = int(pq.ParquetFile(self._path).metadata.num_rows)
        except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
            raise ConfigError(expected("Parquet shard", "a readable Parquet file", f"{path}: {exc}")) from exc
        self._rows: list[Any] | None = None

    @property
    def raw_bytes(self) -> int:
        """The file's size in bytes (what token estimation costs rows by)."""
        return self._path.stat().st_size

    def _read(self) -> list[Any]:
        try:
            table = _pyarrow().read_table(self._path)
        except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
            raise ContractError(expected(f"Parquet shard {self._path}", "the file counted at from_path, "
                                         "still readable", str(exc))) from exc
        return arrow_rows(table, count=self._count, what=f"Parquet shard {self._path}")


class Dataset(_semantic.Dataset):
    """A dataset; :meth:`from_path` reads JSONL or Parquet files (zephon's ``zephon.io.Dataset``)."""

    __slots__ = ()

    @classmethod
    def from_path(cls, name: str, path: str | os.PathLike[str], *, fmt: str | None = None) -> Dataset:
        """A dataset over a directory of JSONL (``.jsonl``, or compressed ``.jsonl.gz`` / ``.zst`` /
        ``.bz2`` / ``.xz``), ``.vortex`` or ``.parquet`` files, or over one such file; or over an
        MDS, LitData or Lance dataset.

        JSONL, Vortex and Parquet: one shard per file, in sorted file-name order, shard ids 0, 1,
        ...; subdirectories are not read (as in zephon).  MDS (:mod:`zephon_ref.io.mds`) and LitData
        (:mod:`zephon_ref.io.litdata`): a directory whose ``index.json`` lists the shards.  Lance
        (:mod:`zephon_ref.io.lance`): a dataset directory (its latest version) or one version's
        ``_versions/*.manifest`` file.  ``fmt`` None: a manifest file is Lance; a directory with an
        ``index.json`` is the format the index names (as zephon classifies it), else JSONL when the
        directory holds a JSONL file, else Vortex, else Parquet, else Lance when it has a
        ``_versions/`` directory.
        """
        if fmt is not None and not isinstance(fmt, str):
            raise ConfigTypeError(expected("fmt", f"None or a str, one of {sorted(READ_FORMATS)}",
                                           type(fmt).__name__))
        if fmt is not None and fmt not in READ_FORMATS:
            raise ConfigError(expected("fmt", f"None or one of {sorted(READ_FORMATS)} (the formats "
                                       "zephon_ref reads)", fmt))  # divergence D-49
        if not isinstance(name, str) or not name:
            raise ConfigError(expected("Dataset name", "a non-empty str", name))
        if not isinstance(path, (str, os.PathLike)):
            raise ConfigTypeError(expected("path", "a str or os.PathLike", type(path).__name__))
        if isinstance(path, str) and len(urllib.parse.urlparse(path).scheme) > 1:  # not a drive letter
            raise ConfigError(expected("path", "a local file or directory (zephon_ref reads no remote store)",
                                       path))  # divergence D-49
        p = Path(path)
        from zephon_ref.io.lance import is_manifest, lance_shards

        if fmt in (None, "lance") and p.is_file() and is_manifest(p) or fmt == "lance" and p.is_dir():
            pinned, fragments = lance_shards(p)
            return cls(name, dict(enumerate(fragments)), path=pinned)
        if p.is_file():
            if fmt in DIRECTORY_FORMATS:
                raise ConfigError(expected("path", f"a directory (an {fmt} dataset)", str(path)))
            kind = fmt or next((k for k in FORMATS if _shard_files([p], k)), "jsonl")
            files = [p]
        elif p.is_dir():
            entries = sorted(p.iterdir())
            if fmt is None:
                fmt = _index_format(p)
                if fmt is not None and fmt not in READ_FORMATS:
                    raise ConfigError(expected(f"the dataset at {p}", f"one of {sorted(READ_FORMATS)} (the "
                                               "formats zephon_ref reads)", f"a {fmt} index.json"))  # D-49
            if fmt == "mds":
                from zephon_ref.io.mds import mds_shards

                return cls(name, dict(enumerate(mds_shards(p))), path=str(p))
            if fmt == "litdata":
                from zephon_ref.io.litdata import litdata_shards
                from zephon_ref.io.mds import _index

                return cls(name, dict(enumerate(litdata_shards(p, _index(p, "LitData")))), path=str(p))
            if (fmt is None and not any(_shard_files(entries, k) for k in FORMATS)
                    and (p / "_versions").is_dir()):
                pinned, fragments = lance_shards(p)  # zephon probes for a Lance dataset last
                return cls(name, dict(enumerate(fragments)), path=pinned)
            kind = fmt or next((k for k in FORMATS if _shard_files(entries, k)), "jsonl")
            # every entry named like a shard is one: a directory or a dangling link by that name is refused
            files = _shard_files(entries, kind)
        elif not p.exists():  # a dangling link too
            raise DatasetNotFound(expected("path", "an existing file or directory", str(path)))
        else:
            raise ConfigError(expected("path", "a regular file or a directory", str(path)))
        if not files:
            names = " / ".join(FORMATS[kind])
            raise ConfigError(expected("path", f"a directory holding at least one {names} file", str(path)))
        if kind == "vortex":
            from zephon_ref.io.vortex import VortexShard

            return cls(name, {i: VortexShard(f) for i, f in enumerate(files)}, path=str(p))
        shard = JsonlShard if kind == "jsonl" else ParquetShard
        return cls(name, {i: shard(f) for i, f in enumerate(files)}, path=str(p))


def _index_format(root: Path) -> str | None:
    """The format ``root/index.json`` names, as zephon 0.2.0 classifies it, or None without one.

    An object with ``chunks`` and ``config`` is LitData's; one with ``shards`` is MDS unless its
    first shard names a JSONL file or carries Parquet row groups (a zephon index over those files,
    which are then read as files); anything else is MDS.  Unparsable JSON is a ConfigError (zephon
    raises JSONDecodeError, a ValueError).
    """
    f = root / "index.json"
    if not f.is_file():
        return None
    try:
        data = json.loads(f.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(expected(f"index {f}", "a JSON object", f"unreadable JSON ({exc})")) from exc
    if isinstance(data, dict) and "chunks" in data and "config" in data:
        return "litdata"
    if isinstance(data, dict) and isinstance(data.get("shards"), list) and data["shards"]:
        first = data["shards"][0]
        if isinstance(first, dict):
            extra = first.get("extra")
            if isinstance(extra, dict) and "row_groups" in extra:
                return "parquet"
            base = first.get("basename")
            if isinstance(base, str) and base.endswith(FORMATS["jsonl"]):
                return "jsonl"
    return "mds"


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


def write_parquet(rows: Iterable[Mapping[str, Any]], path: str | Path, *,
                  row_group_size: int | None = None) -> Path:
    """Write ``rows`` (dicts with the same keys) as one Parquet file; pyarrow infers the column types."""
    import pyarrow as pa

    pq = _pyarrow()
    table = pa.Table.from_pylist([dict(r) for r in rows])
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, out, row_group_size=row_group_size)
    return out

"""MosaicML Streaming's MDS format, read locally as zephon 0.2.0 reads it (``fmt="mds"``).

A dataset is a directory with an ``index.json`` whose ``shards`` list names one ``.mds`` file
per shard (``raw_data``), or its compressed form (``zip_data`` with ``compression`` ``gz``,
``bz2``, ``xz`` or ``zstd``).  Shard ``k`` of the list is shard id ``k`` with the index's
``samples`` rows, empty shards included; a shard's ``raw_bytes`` is its ``raw_data`` size.
No library is needed: the file layout (facts of the format, learned by writing datasets with
``streaming.MDSWriter`` and reading them with zephon 0.2.0; tests/conformance/test_mds_lit_rows.py):

* a shard file is ``uint32 n``, ``n + 1`` ``uint32`` offsets into the file, then the samples;
* a sample is one ``uint32`` size per variable-size column (``column_sizes`` null), in column
  order, then each column's bytes in column order;
* a column decodes by its encoding: ``bytes`` as bytes, ``str`` as UTF-8 text, ``int`` as a
  Python int (int64), ``uint8`` ... ``float64`` as a numpy scalar, ``str_int`` / ``str_float``
  / ``str_decimal`` as int / float / Decimal, ``json`` as ``json.loads``, ``pkl`` as
  ``pickle.loads`` (as zephon and Streaming do: read only datasets you trust), ``ndarray`` (with
  optional ``:dtype[:shape]``) as a read-only numpy array, ``pil`` / ``jpeg`` / ``png`` as a
  Pillow image (Pillow imported only then), ``list[pil]`` / ``list[jpeg]`` / ``list[png]`` as a
  list of them; ``jpeg_array`` is refused at ``from_path`` (D-49: zephon 0.2.0 fails to read what
  Streaming 0.13.0 writes for it).
"""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np

from zephon_ref.errors import ConfigError, ContractError, expected
from zephon_ref.io.cells import LazyShard, framed_rows

__all__ = ["MdsShard", "mds_shards"]

_SCALARS = {name: np.dtype(name) for name in ("uint8", "uint16", "uint32", "uint64", "int8", "int16",
                                              "int32", "int64", "float16", "float32", "float64")}
_TEXT = {"str_int": int, "str_float": float, "str_decimal": Decimal}
# an ndarray without a fixed dtype / shape stores them in its first bytes, by these codes
_VALUE_DTYPES = {8: "uint8", 9: "int8", 16: "uint16", 17: "int16", 18: "float16", 32: "uint32", 33: "int32",
                 34: "float32", 64: "uint64", 65: "int64", 66: "float64"}
_SHAPE_DTYPES = {0: "uint8", 1: "uint16", 2: "uint32", 3: "uint64"}
_COMPRESSIONS = ("gz", "bz2", "xz", "zstd")


def _index(root: Path, kind: str = "MDS") -> Any:
    """``root/index.json`` parsed; its absence or bad JSON is a ConfigError (zephon: ValueError)."""
    f = root / "index.json"
    if not f.is_file():
        raise ConfigError(expected(f"{kind} dataset {root}", "an index.json file", f"none (missing {kind} "
                                   "index)"))
    try:
        return json.loads(f.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(expected(f"{kind} index {f}", "a JSON object", f"unreadable JSON ({exc})")) from exc


def _ndarray_decoder(encoding: str) -> Any:
    parts = encoding.split(":")
    if len(parts) > 3 or (len(parts) > 1 and parts[1] not in _SCALARS):
        raise ConfigError(expected("MDS column encoding", "ndarray[:dtype[:shape]]", encoding))
    dtype = np.dtype(parts[1]) if len(parts) > 1 else None
    shape = tuple(int(s) for s in parts[2].split(",")) if len(parts) > 2 else None

    def decode(data: bytes) -> np.ndarray:
        pos = 0
        dt = dtype
        if dt is None:
            dt = np.dtype(_VALUE_DTYPES[data[0]])
            pos = 1
        shp = shape
        if shp is None:
            ndim, code = data[pos] >> 2, data[pos] % 4
            width = np.dtype(_SHAPE_DTYPES[code])
            pos += 1
            shp = tuple(int(s) for s in np.frombuffer(data, width, ndim, pos))
            pos += ndim * width.itemsize
        return np.frombuffer(data, dt, offset=pos).reshape(shp)

    return decode


def _image_decoder(encoding: str) -> Any:
    """``pil``: ``uint32`` width, height and mode length, the mode, the raw pixels -> a PIL Image;
    ``jpeg`` / ``png``: the image file's bytes -> the image Pillow opens (lazily decoded)."""
    try:
        from PIL import Image
    except ImportError as exc:
        raise ConfigError(expected(f"MDS column encoding {encoding!r}", "Pillow installed (pip install "
                                   "pillow)", f"ImportError: {exc}")) from exc
    if encoding != "pil":
        import io

        return lambda b: Image.open(io.BytesIO(b))

    def decode(data: bytes) -> Any:
        width, height, mode_len = np.frombuffer(data, "<u4", 3).tolist()
        mode = data[12:12 + mode_len].decode("utf-8")
        return Image.frombytes(mode, (width, height), data[12 + mode_len:])

    return decode


def _decoder(encoding: str) -> Any:
    """The function turning one column's bytes into zephon's value, or a ConfigError for an unknown one."""
    if encoding == "bytes":
        return bytes
    if encoding == "str":
        return lambda b: b.decode("utf-8")
    if encoding == "int":
        return lambda b: int(np.frombuffer(b, "<i8")[0])
    if encoding in _SCALARS:
        dt = _SCALARS[encoding]
        return lambda b: np.frombuffer(b, dt)[0]
    if encoding in _TEXT:
        conv = _TEXT[encoding]
        return lambda b: conv(b.decode("utf-8"))
    if encoding == "json":
        return lambda b: json.loads(b.decode("utf-8"))
    if encoding == "pkl":
        import pickle

        return pickle.loads
    if encoding == "ndarray" or encoding.startswith("ndarray:"):
        return _ndarray_decoder(encoding)
    if encoding in ("pil", "jpeg", "png"):
        return _image_decoder(encoding)
    if encoding in ("list[pil]", "list[jpeg]", "list[png]"):
        one = _image_decoder(encoding[5:-1])

        def decode_list(data: bytes) -> list[Any]:
            # a 4-byte placeholder, uint32 n, n uint32 sizes, then the n images' bytes
            n = int(np.frombuffer(data, "<u4", 1, 4)[0])
            pos, out = 8 + 4 * n, []
            for size in np.frombuffer(data, "<u4", n, 8).tolist():
                out.append(one(data[pos:pos + size]))
                pos += size
            return out

        return decode_list
    raise ConfigError(expected("MDS column encoding", "bytes, str, int, a numpy scalar type, str_int, "
                               "str_float, str_decimal, json, pkl, ndarray[:dtype[:shape]], pil, jpeg, "
                               "png or list[pil|jpeg|png]", encoding))  # divergence D-49


def _decompress(kind: str, data: bytes) -> bytes:
    if kind == "gz":
        import gzip

        return gzip.decompress(data)
    if kind == "bz2":
        import bz2

        return bz2.decompress(data)
    if kind == "xz":
        import lzma

        return lzma.decompress(data)
    from zephon_ref.io.cells import zstd_decompress as _zstd_decompress

    return _zstd_decompress(data)


class MdsShard(LazyShard):
    """One MDS shard: its count from the index; the first read loads (and decompresses) the file."""

    __slots__ = ("_columns", "_compression", "_file")

    def __init__(self, root: Path, entry: Any, position: int) -> None:
        where = f"MDS index {root / 'index.json'} shard {position}"
        if not isinstance(entry, dict):
            raise ConfigError(expected(where, "a JSON object", type(entry).__name__))
        try:
            names, encodings, sizes = entry["column_names"], entry["column_encodings"], entry["column_sizes"]
            count, raw = entry["samples"], entry["raw_data"]
            compression, zipped = entry.get("compression"), entry.get("zip_data")
        except KeyError as exc:
            raise ConfigError(expected(where, "column_names, column_encodings, column_sizes, samples and "
                                       "raw_data", f"no {exc}")) from exc
        if not (isinstance(names, list) and isinstance(encodings, list) and isinstance(sizes, list)
                and len(names) == len(encodings) == len(sizes)):
            raise ConfigError(expected(where, "column_names, column_encodings and column_sizes: lists of one "
                                       "length", f"{names!r}, {encodings!r}, {sizes!r}"))
        if type(count) is not int or count < 0:
            raise ConfigError(expected(f"{where} samples", "an int >= 0", count))
        self._columns = [(str(n), _decoder(str(e)), s)
                         for n, e, s in zip(names, encodings, sizes, strict=True)]
        self._count = count
        self._raw_bytes = int(raw["bytes"])
        if compression is None:
            self._compression = None
            self._file = root / raw["basename"]
        else:
            kind = str(compression).split(":")[0]
            if kind not in _COMPRESSIONS:
                raise ConfigError(expected(f"{where} compression", f"none or one of {list(_COMPRESSIONS)}",
                                           compression))
            if not isinstance(zipped, dict) or not isinstance(zipped.get("basename"), str):
                raise ConfigError(expected(f"{where} zip_data", "an object with a basename (the shard is "
                                           "compressed)", repr(zipped)[:60]))
            self._compression = kind
            self._file = root / zipped["basename"]
        self._rows: list[Any] | None = None

    def _read(self) -> list[Any]:
        # raw_bytes: the uncompressed shard file's size, as the index records it (what token estimation
        # costs by)
        try:
            data = self._file.read_bytes()
        except OSError as exc:
            raise ContractError(expected(f"MDS shard {self._file}", "a readable file (named by the "
                                         "index)", str(exc))) from exc
        if self._compression is not None:
            data = _decompress(self._compression, data)
        return framed_rows(data, count=self._count, what=f"MDS shard {self._file}", unit="samples",
                           decode=self._sample)

    def _sample(self, blob: bytes) -> dict[str, Any]:
        variable = sum(1 for _, _, s in self._columns if s is None)
        lengths = iter(np.frombuffer(blob, "<u4", variable).tolist())
        pos = 4 * variable
        row = {}
        for name, decode, size in self._columns:
            width = next(lengths) if size is None else int(size)
            row[name] = decode(blob[pos:pos + width])
            pos += width
        return row

    def __getitem__(self, index: int) -> Any:
        return self._load()[index]


def mds_shards(root: Path, index: Any | None = None) -> list[MdsShard]:
    """The shards of the MDS dataset at ``root`` in the index's order (shard id = position)."""
    if index is None:
        index = _index(root)
    shards = index.get("shards") if isinstance(index, dict) else None
    if not isinstance(shards, list):
        raise ConfigError(expected(f"MDS index {root / 'index.json'}", "an object with a 'shards' list",
                                   type(index).__name__ if shards is None else repr(shards)[:60]))
    return [MdsShard(root, e, k) for k, e in enumerate(shards)]

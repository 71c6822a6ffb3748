"""Lightning's LitData chunk format, read locally as zephon 0.2.0 reads it (``fmt="litdata"``).

A dataset is a directory with an ``index.json`` holding ``config`` and ``chunks``; chunk ``k`` of
the list is shard id ``k``, with ``chunk_size`` rows and ``chunk_bytes`` raw bytes.  Facts of the
format (learned by writing datasets with litdata's ``BinaryWriter`` and reading them with zephon
0.2.0; tests/conformance/test_litdata_rows.py):

* a chunk file (zstd-compressed as a whole when its name ends ``.bin.zst``) is
  ``uint32 n``, ``n + 1`` ``uint32`` offsets into it, then the items;
* an item is one ``uint32`` size per leaf of ``config.data_format``, then the leaves' bytes;
* each leaf is decoded by litdata's own serializer of that name (``int``, ``str``, ``bytes``,
  ``json``, ``pickle``, ``numpy``, ``no_header_numpy:<dtype>``, ``tensor`` ...: a ``tensor`` is a
  torch tensor, as zephon delivers it), so the ``litdata`` extra (litdata, which imports torch) is
  needed;
* the leaves are put back into the item's structure by ``config.data_spec`` (a pytree spec): a
  dict comes back as an ``OrderedDict`` at every level, a list as a list, a tuple as a tuple.

Only the default ``PyTreeLoader`` layout without encryption is read; other item loaders are refused.
"""

from __future__ import annotations

import copy
import json
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np

from zephon_ref.errors import ConfigError, ContractError, expected
from zephon_ref.io.cells import LazyShard, framed_rows, zstd_decompress

__all__ = ["LitDataShard", "litdata_shards"]


def _serializers() -> dict[str, Any]:
    try:
        from litdata.streaming.serializers import _SERIALIZERS
    except ImportError as exc:
        raise ConfigError(expected("fmt='litdata'", "litdata installed (bash scripts/install_peers.sh: "
                                   "--no-deps, its dependencies pull a CUDA torch)",
                                   f"ImportError: {exc}")) from exc
    return dict(_SERIALIZERS)


def _spec(text: Any, where: str) -> Any:
    try:
        version, node = json.loads(text)
    except (TypeError, ValueError) as exc:
        raise ConfigError(expected(f"{where} data_spec", "a JSON pytree spec [1, node]",
                                   repr(text)[:60])) from exc
    return node


def _leaves(node: Any) -> int:
    if node["type"] is None:
        return 1
    return sum(_leaves(c) for c in node["children_spec"])


def _unflatten(node: Any, leaves: Any) -> Any:
    kind = node["type"]
    if kind is None:
        return next(leaves)
    children = [_unflatten(c, leaves) for c in node["children_spec"]]
    if kind in ("builtins.dict", "collections.OrderedDict"):
        return OrderedDict(zip(json.loads(node["context"]), children, strict=True))
    if kind == "builtins.list":
        return children
    if kind == "builtins.tuple":
        return tuple(children)
    raise ConfigError(expected("LitData data_spec node", "a dict, list or tuple", kind))


def _check_node(node: Any, where: str) -> None:
    kind = node.get("type") if isinstance(node, dict) else "?"
    if kind not in (None, "builtins.dict", "collections.OrderedDict", "builtins.list", "builtins.tuple"):
        raise ConfigError(expected(f"{where} data_spec node", "a leaf, dict, list or tuple", kind))
    for c in node.get("children_spec", []):
        _check_node(c, where)


class LitDataShard(LazyShard):
    """One LitData chunk: its count from the index; the first read loads and decodes the file."""

    __slots__ = ("_compressed", "_decoders", "_file", "_spec")

    def __init__(self, root: Path, chunk: Any, position: int, config: dict[str, Any], spec: Any,
                 decoders: list[Any]) -> None:
        where = f"LitData index {root / 'index.json'} chunk {position}"
        if not isinstance(chunk, dict) or not isinstance(chunk.get("filename"), str):
            raise ConfigError(expected(where, "an object with a filename", repr(chunk)[:60]))
        count = chunk.get("chunk_size")
        if type(count) is not int or count < 0:
            raise ConfigError(expected(f"{where} chunk_size", "an int >= 0", count))
        self._count = count
        self._raw_bytes = int(chunk.get("chunk_bytes", 0))
        self._file = root / chunk["filename"]
        # zstd-compressed as a whole when the file is named so (litdata's BinaryWriter with
        # compression="zstd" writes plain .bin chunks, and zephon reads them plainly)
        self._compressed = self._file.name.endswith(".zst")
        if not self._compressed and self._framed():
            # litdata 0.2.76's optimize(compression=...) writes framed ".bin" chunks ("LDFZ" magic),
            # which zephon 0.2.0 fails to read (ValueError at the first read): refused at from_path
            raise ConfigError(expected(f"{where} {chunk['filename']}", "a plain or whole-chunk zstd "
                                       "(.bin.zst) chunk", "a framed compressed chunk (LDFZ)"))  # D-49
        self._spec = spec
        self._decoders = decoders
        self._rows: list[Any] | None = None

    def _framed(self) -> bool:
        try:
            with self._file.open("rb") as fh:
                head: bytes = fh.read(4)
            return head == b"LDFZ"
        except OSError:
            return False  # a missing chunk fails at its first read, as in zephon

    def _read(self) -> list[Any]:
        # raw_bytes: the chunk's ``chunk_bytes`` as the index records it (what token estimation costs by)
        try:
            data = self._file.read_bytes()
        except OSError as exc:
            raise ContractError(expected(f"LitData chunk {self._file}", "a readable file (named by the "
                                         "index)", str(exc))) from exc
        if self._compressed:
            data = zstd_decompress(data)
        return framed_rows(data, count=self._count, what=f"LitData chunk {self._file}", unit="items",
                           decode=self._item)

    def _item(self, blob: bytes) -> Any:
        k = len(self._decoders)
        sizes = np.frombuffer(blob, "<u4", k).tolist()
        pos = 4 * k
        leaves = []
        for decode, size in zip(self._decoders, sizes, strict=True):
            leaves.append(decode(blob[pos:pos + size]))
            pos += size
        return _unflatten(self._spec, iter(leaves))

    def __getitem__(self, index: int) -> Any:
        return self._load()[index]


def litdata_shards(root: Path, index: Any) -> list[LitDataShard]:
    """The chunks of the LitData dataset at ``root`` in the index's order (shard id = position)."""
    where = f"LitData index {root / 'index.json'}"
    if not (isinstance(index, dict) and isinstance(index.get("config"), dict)
            and isinstance(index.get("chunks"), list)):
        raise ConfigError(expected(where, "an object with 'config' and 'chunks'", type(index).__name__))
    config = index["config"]
    if config.get("item_loader", "PyTreeLoader") != "PyTreeLoader":
        raise ConfigError(expected(f"{where} item_loader", "PyTreeLoader", config.get("item_loader")))
    if config.get("encryption") is not None:
        raise ConfigError(expected(f"{where} encryption", "none", config.get("encryption")))
    spec = _spec(config.get("data_spec"), where)
    _check_node(spec, where)
    formats = config.get("data_format")
    if not isinstance(formats, list) or len(formats) != _leaves(spec):
        raise ConfigError(expected(f"{where} data_format", f"a list of {_leaves(spec)} serializer names",
                                   repr(formats)[:60]))
    known = _serializers()
    decoders = []
    for name in formats:
        base = str(name).split(":")[0]
        if base not in known:
            raise ConfigError(expected(f"{where} data_format", f"litdata serializers {sorted(known)}", name))
        ser = copy.deepcopy(known[base])
        if ":" in str(name):
            ser.setup(name)
        decoders.append(ser.deserialize)
    return [LitDataShard(root, c, k, config, spec, decoders) for k, c in enumerate(index["chunks"])]

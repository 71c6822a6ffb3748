"""Deterministic msgpack + zstd encoding of checkpoint state.

Theory of operation
-------------------
This module owns the byte encoding of one *value tree* (a state dict or any part
of it).  It knows nothing about lanes, manifests, files or generations.

Accepted values: ``None``, ``bool``, ``int`` (any size), finite ``float``,
``str``, ``bytes``, ``list``, ``tuple`` and ``dict`` whose keys are hashable
values of those kinds.  Everything else is refused with
:class:`~zephon_ref.errors.StateFormatError` naming the path of the bad value.

Invariants:

* **Exact round trip.**  ``decode(encode(x)) == x`` and the container types come
  back as they went in: tuples (for example inside ``SampleCursorKey`` replay
  cursors) are carried in msgpack ExtType ``1`` and decode as ``tuple``; int map
  keys stay ints.  ``NamedTuple`` instances (``SampleId``) come back as plain
  tuples, which compare equal; ``int``/``float`` subclasses come back as the
  builtin.  Maps come back with their keys in the canonical order below.
* **Big ints.**  Ints outside ``[-2**63, 2**64 - 1]`` (numpy PCG64 128-bit states)
  are carried in ExtType ``0`` as signed big-endian two's-complement bytes of
  minimal length.  An ExtType ``0`` holding an int that fits natively is
  non-canonical and refused on decode.
* **Deterministic bytes.**  The same value gives the same bytes, whatever the
  insertion order of its dicts: map keys are sorted by ``(kind rank, value)``
  with ranks ``None < bool < int < float < str < bytes < tuple``; float and
  tuple keys sort by their own encoding.  zstd runs at a fixed level with the
  content size in the frame header and no dictionary.
* **No non-finite floats.**  NaN and +-inf are refused on encode *and* on decode
  (a checkpoint with repaired checksums must still be refused).
* **Packing composes.**  The msgpack bytes of a map are its header followed by each
  packed key and packed value in canonical key order, so a value packed once
  (:func:`pack`) can be spliced into a str-keyed map by :func:`pack_map_with` and give
  the bytes :func:`pack` would give for the whole map.  That lets a caller that sends the
  same large value inside several small envelopes (an aggregation participant's state)
  canonicalise and validate it once; the bytes do not change.

What may not live here: file I/O, digests, schema knowledge, clocks.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import msgpack
import zstandard

from zephon_ref.errors import StateFormatError, expected

__all__ = [
    "EXT_BIGINT",
    "EXT_TUPLE",
    "MAX_DECODED_BYTES",
    "ZSTD_LEVEL",
    "compress",
    "decode",
    "decompress",
    "encode",
    "encode_map_with",
    "pack",
    "pack_map_with",
    "unpack",
]

EXT_BIGINT = 0
EXT_TUPLE = 1
ZSTD_LEVEL = 3
# A decompression bomb guard: no single shard may expand beyond this.
MAX_DECODED_BYTES = 1 << 32

_INT_MIN = -(1 << 63)
_INT_MAX = (1 << 64) - 1

_KEY_RANK: dict[type, int] = {type(None): 0, bool: 1, int: 2, float: 3, str: 4, bytes: 5, tuple: 6}


def _bigint_bytes(v: int) -> bytes:
    # Minimal signed length: bit_length of v (or of ~v for negatives) plus a sign bit.
    n = (max(v.bit_length(), (~v).bit_length()) + 8) // 8
    return v.to_bytes(n, "big", signed=True)


def _key_sort(key: Any) -> tuple[int, Any]:
    rank = _KEY_RANK[type(key)]
    if rank in (3, 6):
        return (rank, pack(key))
    if rank == 0:
        return (0, 0)
    return (rank, key)


# A value's path is built lazily: "$" or (parent path, key), rendered only for an error message
# ("$['a'][0]"), so the hot path of encode allocates no strings per value.
_Path = Any


def _where(path: _Path) -> str:
    keys: list[Any] = []
    while isinstance(path, tuple):
        path, key = path
        keys.append(key)
    return str(path) + "".join(f"[{k!r}]" for k in reversed(keys))


def _canon(value: Any, path: _Path) -> Any:
    """Convert ``value`` into a tree msgpack packs deterministically; validate on the way."""
    t = type(value)
    if value is None or t is bool or t is str or t is bytes:
        return value
    if t is int and _INT_MIN <= value <= _INT_MAX:
        return value
    if t is dict:
        if not value:
            return {}
        # Fast path: keys all str, or all native-range ints, sort by value alone (one kind rank),
        # which is the order _key_sort gives; values are canonicalised in insertion order as below.
        # A plain leaf value is its own canonical form (the first two tests above), so it is
        # kept without a call.
        kinds = set(map(type, value))
        if kinds == _STR_KEYS or (kinds == _INT_KEYS and min(value) >= _INT_MIN and max(value) <= _INT_MAX):
            fast = [
                (k, v if type(v) in _PLAIN or (type(v) is int and _INT_MIN <= v <= _INT_MAX)
                 else _canon(v, (path, k)))
                for k, v in value.items()
            ]
            fast.sort(key=_first)
            return dict(fast)
    elif t is list:
        return [
            v if type(v) in _PLAIN or (type(v) is int and _INT_MIN <= v <= _INT_MAX) else _canon(v, (path, i))
            for i, v in enumerate(value)
        ]
    if isinstance(value, bool):  # bool subclasses are not a thing, but be exact
        return bool(value)
    if isinstance(value, int):
        v = int(value)
        if _INT_MIN <= v <= _INT_MAX:
            return v
        return msgpack.ExtType(EXT_BIGINT, _bigint_bytes(v))
    if isinstance(value, float):
        f = float(value)
        if not math.isfinite(f):
            raise StateFormatError(expected(f"value at {_where(path)}", "a finite float", f))
        return f
    if isinstance(value, dict):
        items: list[tuple[Any, Any]] = []
        for k, v in value.items():
            ck = _canon_key(k, path)
            items.append((ck, _canon(v, (path, k))))
        try:
            items.sort(key=lambda kv: _key_sort(kv[0]))
        except TypeError as exc:  # pragma: no cover - ranks make keys comparable
            raise StateFormatError(expected(f"keys at {_where(path)}", "sortable keys", list(value))) from exc
        return {(_key_to_ext(k) if _needs_ext_key(k) else k): v for k, v in items}
    if isinstance(value, tuple):
        inner = [_canon(v, (path, i)) for i, v in enumerate(value)]
        return msgpack.ExtType(EXT_TUPLE, _packb(inner))
    if isinstance(value, list):
        return [_canon(v, (path, i)) for i, v in enumerate(value)]
    if isinstance(value, str):
        return str(value)
    if isinstance(value, bytes):
        return bytes(value)
    raise StateFormatError(
        expected(
            f"value at {_where(path)}",
            "None, bool, int, finite float, str, bytes, list, tuple or dict",
            type(value).__name__,
        )
    )


_STR_KEYS = {str}
_INT_KEYS = {int}
_PLAIN = frozenset({str, bytes, bool, type(None)})  # leaf types _canon returns as they are


def _first(kv: tuple[Any, Any]) -> Any:
    return kv[0]


def _canon_key(key: Any, path: _Path) -> Any:
    # Keys are normalised to their builtin type so the sort rank is defined.
    if key is None or type(key) in (bool, int, str, bytes):
        return key
    if isinstance(key, bool):  # pragma: no cover
        return bool(key)
    if isinstance(key, int):
        return int(key)
    if isinstance(key, float):
        if not math.isfinite(key):
            raise StateFormatError(expected(f"map key at {_where(path)}", "a finite float", key))
        return float(key)
    if isinstance(key, str):
        return str(key)
    if isinstance(key, bytes):
        return bytes(key)
    if isinstance(key, tuple):
        return tuple(_canon_key(k, path) for k in key)
    raise StateFormatError(
        expected(
            f"map key at {_where(path)}", "None, bool, int, float, str, bytes or tuple", type(key).__name__
        )
    )


def _packb(tree: Any) -> bytes:
    """``msgpack.packb(tree, use_bin_type=True)`` (binary and str kept apart)."""
    out = msgpack.packb(tree, use_bin_type=True)
    assert isinstance(out, bytes)
    return out


def pack(value: Any, *, root: str = "$") -> bytes:
    """Deterministic msgpack bytes of ``value`` (no compression).

    ``root`` names ``value`` in a refusal's path (``$['a'][1]``): a caller that packs a
    part of a larger value on its own passes the part's path, so the message is the one
    packing the whole would give.
    """
    return _packb(_canon(value, root))


def pack_map_with(fields: Mapping[str, Any], packed: Mapping[str, bytes]) -> bytes:
    """``pack({**fields, **{k: unpack(b) for k, b in packed.items()}})`` without re-packing.

    Every value in ``packed`` must be the output of :func:`pack` (it is spliced in as
    is: the caller vouches for it, having packed it itself); the values in ``fields`` are
    packed here.  Keys must be ``str`` and the two key sets disjoint.  Because msgpack
    encodes a map as a header and then each key and value in order, the result is
    byte-identical to packing the whole map (keys sorted as :func:`_canon` sorts an
    all-str map).
    """
    canon = _checked_parts(fields, packed)
    keys = sorted([*canon, *packed])
    return _map_header(len(keys)) + _map_items(keys, canon, packed)


def _checked_parts(fields: Mapping[str, Any], packed: Mapping[str, bytes]) -> dict[str, Any]:
    """pack_map_with's checks; the canonical form of ``fields``."""
    if not (set(map(type, fields)) <= _STR_KEYS and set(map(type, packed)) <= _STR_KEYS):
        raise StateFormatError(expected("pack_map_with keys", "str", sorted(map(repr, [*fields, *packed]))))
    both = fields.keys() & packed.keys()
    if both:
        raise StateFormatError(
            expected("pack_map_with keys", "in fields or in packed, not both", sorted(both))
        )
    for k, b in packed.items():
        if type(b) is not bytes or not b:
            raise StateFormatError(expected(f"pre-packed value of {k!r}", "the non-empty bytes of pack()", b))
    # Fields are canonicalised (and refused) in their insertion order, before any byte is
    # produced; a plain leaf is its own canonical form (as in _canon's dict path).
    return {
        k: v if type(v) in _PLAIN or (type(v) is int and _INT_MIN <= v <= _INT_MAX) else _canon(v, ("$", k))
        for k, v in fields.items()
    }


def _map_items(keys: list[str], canon: Mapping[str, Any], packed: Mapping[str, bytes]) -> bytes:
    """The packed items (no header) of ``keys``, in that order: a key of ``canon`` with its
    canonical value packed here, a key of ``packed`` with its bytes as they are.  Runs of
    consecutive fields are packed as one map each, whose header is then cut off (one packb
    call per run instead of two per field)."""
    out: list[bytes] = []
    run: dict[str, Any] = {}
    for k in keys:
        if k in canon:
            run[k] = canon[k]
            continue
        if run:
            out.append(_map_body(run))
            run = {}
        out.append(_str_key(k))
        out.append(packed[k])
    if run:
        out.append(_map_body(run))
    return b"".join(out)


def _str_key(k: str) -> bytes:
    """The packed bytes of a str map key (pack_map_with)."""
    return _packb(k)


def _map_header(n: int) -> bytes:
    out = msgpack.Packer(use_bin_type=True).pack_map_header(n)
    assert isinstance(out, bytes)
    return out


def _map_body(canon: dict[str, Any]) -> bytes:
    """The packed items of a map of canonical values, in its (sorted) insertion order."""
    whole = _packb(canon)
    header = _map_header(len(canon))
    assert whole.startswith(header)
    return whole[len(header):]


def encode_map_with(fields: Mapping[str, Any], packed: Mapping[str, bytes]) -> bytes:
    """:func:`encode` of the map :func:`pack_map_with` describes (the same bytes)."""
    return compress(pack_map_with(fields, packed))


def _needs_ext_key(k: Any) -> bool:
    return isinstance(k, tuple) or (type(k) is int and not _INT_MIN <= k <= _INT_MAX)


def _key_to_ext(k: Any) -> Any:
    if isinstance(k, tuple):
        return msgpack.ExtType(EXT_TUPLE, _packb([_key_to_ext(x) for x in k]))
    if type(k) is int and not _INT_MIN <= k <= _INT_MAX:
        return msgpack.ExtType(EXT_BIGINT, _bigint_bytes(k))
    return k


def _ext_hook(code: int, data: bytes) -> Any:
    if code == EXT_BIGINT:
        if not data:
            raise StateFormatError(expected("big-int ext", "at least one byte", data))
        v = int.from_bytes(data, "big", signed=True)
        if _INT_MIN <= v <= _INT_MAX or data != _bigint_bytes(v):
            raise StateFormatError(expected("big-int ext", "a canonical int outside the native range", v))
        return v
    if code == EXT_TUPLE:
        inner = unpack(data)
        if not isinstance(inner, list):
            raise StateFormatError(expected("tuple ext", "an array", type(inner).__name__))
        return tuple(inner)
    raise StateFormatError(expected("msgpack ext code", f"{EXT_BIGINT} or {EXT_TUPLE}", code))


def _check_finite(value: Any) -> None:
    # Iterative walk: decoded trees can be deep; no recursion limit surprises.
    stack: list[Any] = [value]
    while stack:
        v = stack.pop()
        if type(v) is float:
            if not math.isfinite(v):
                raise StateFormatError(expected("decoded float", "a finite value", v))
        elif type(v) is dict:
            stack.extend(v.keys())
            stack.extend(v.values())
        elif type(v) in (list, tuple):
            stack.extend(v)


def unpack(data: bytes) -> Any:
    """Inverse of :func:`pack`; refuses malformed input with StateFormatError."""
    try:
        out = msgpack.unpackb(
            data, raw=False, strict_map_key=False, ext_hook=_ext_hook, use_list=True
        )
    except StateFormatError:
        raise
    except (ValueError, TypeError, msgpack.UnpackException, RecursionError) as exc:
        raise StateFormatError(expected("msgpack payload", "a well-formed value", str(exc))) from exc
    return out


def _compressor() -> zstandard.ZstdCompressor:
    """A fresh compressor: zstd at :data:`ZSTD_LEVEL`, content size in the frame header, no
    checksum, no dictionary, no worker threads (so the bytes depend on the data alone)."""
    return zstandard.ZstdCompressor(level=ZSTD_LEVEL, write_content_size=True, write_checksum=False,
                                    threads=0)


def _decompressor() -> zstandard.ZstdDecompressor:
    return zstandard.ZstdDecompressor()


def compress(data: bytes) -> bytes:
    """zstd frame of ``data`` at :data:`ZSTD_LEVEL` (deterministic)."""
    return _compressor().compress(data)


def decompress(data: bytes) -> bytes:
    """Inverse of :func:`compress`; refuses malformed or oversized frames."""
    try:
        params = zstandard.get_frame_parameters(data)
        size = params.content_size
        if size == zstandard.CONTENTSIZE_UNKNOWN or size > MAX_DECODED_BYTES:
            raise StateFormatError(expected("zstd frame content size", f"<= {MAX_DECODED_BYTES}", size))
        out = _decompressor().decompress(data, max_output_size=max(size, 1))
    except StateFormatError:
        raise
    except zstandard.ZstdError as exc:
        raise StateFormatError(expected("zstd frame", "a well-formed frame", str(exc))) from exc
    if len(out) != size:
        raise StateFormatError(expected("zstd frame length", str(size), len(out)))
    return out


def encode(value: Any) -> bytes:
    """msgpack + zstd bytes of ``value``; the same value always gives the same bytes."""
    return compress(pack(value))


def decode(data: bytes) -> Any:
    """Inverse of :func:`encode`; refuses non-finite floats and malformed input."""
    raw = decompress(data)
    out = unpack(raw)
    # A float is packed behind marker byte 0xca or 0xcb (nested ext payloads are in ``raw``
    # too): when neither byte occurs anywhere, no float can be in the tree.
    if b"\xca" in raw or b"\xcb" in raw:
        _check_finite(out)
    return out

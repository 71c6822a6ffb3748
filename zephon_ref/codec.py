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

Plain definition only.  :func:`_canon` recurses uniformly, one branch per kind of value, each
stating that kind's canonical form, and :func:`decode` walks every decoded value for non-finite
floats; nothing here skips a step for speed.  The faster codec, which keeps plain leaves without
a call, sorts str- or int-keyed maps by key alone and skips the walk when no float marker byte
occurs, is
:class:`zephon_ref.fast.codec.FastCodec`: it gives these bytes and these refusals (the property
``properties.fast_codec`` checks it) and enters where a caller takes a codec (``codec=`` of the
aggregation round's machines and of the checkpoint store's ``save``).

Why "pack a map some of whose values are already packed" is not here: no byte format defines
it.  The aggregation round's shard envelope is, by the protocol's own definition, the encoding of
the envelope dict (``encode({..., "state": state})``); that its bytes can also be assembled from
the state packed once (msgpack writes a map as a header, then each key and value in order) is a
way to compute the same bytes faster, so it lives with the faster encoder
(:meth:`zephon_ref.fast.codec.FastCodec.pack_map_with`) and the plain protocol packs the whole map.

What may not live here: file I/O, digests, schema knowledge, clocks.
"""

from __future__ import annotations

import math
from typing import Any, Protocol

import msgpack
import zstandard

from zephon_ref.errors import StateFormatError, expected

__all__ = [
    "EXT_BIGINT",
    "Codec",
    "EXT_TUPLE",
    "MAX_DECODED_BYTES",
    "ZSTD_LEVEL",
    "compress",
    "decode",
    "decompress",
    "encode",
    "pack",
    "unpack",
]

EXT_BIGINT = 0
EXT_TUPLE = 1
ZSTD_LEVEL = 3
# A decompression bomb guard: no single shard may expand beyond this.
MAX_DECODED_BYTES = 1 << 32



class Codec(Protocol):
    """What a caller taking ``codec=`` uses (the aggregation round's machines, the checkpoint
    store's ``save``): this module itself, the default, or an object whose ``pack``, ``encode``
    and ``decode`` return exactly what this module's return and refuse exactly what they refuse
    (:class:`zephon_ref.fast.codec.FastCodec`).  A decoded value may be shared: nobody mutates it."""

    def pack(self, value: Any, *, root: str = "$") -> bytes: ...

    def encode(self, value: Any) -> bytes: ...

    def decode(self, data: bytes) -> Any: ...


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
    """The canonical tree of ``value``: what msgpack packs to its canonical bytes.  Validates on
    the way, refusing (with the path of the bad value) what the module docstring does not accept.

    Each kind of value has one branch, tried in this order (a bool is an int, a NamedTuple a
    tuple); a subclass of a builtin becomes that builtin."""
    if value is None:
        return None
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        # native msgpack ints where they fit, else the big-int ext
        v = int(value)
        return v if _INT_MIN <= v <= _INT_MAX else msgpack.ExtType(EXT_BIGINT, _bigint_bytes(v))
    if isinstance(value, float):
        f = float(value)
        if not math.isfinite(f):
            raise StateFormatError(expected(f"value at {_where(path)}", "a finite float", f))
        return f
    if isinstance(value, dict):
        # keys canonicalised and values canonicalised in insertion order (so the first bad one is
        # refused whatever the key order), then the items sorted by _key_sort
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
        # the tuple ext: the packed array of its canonical items
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
    _check_finite(out)
    return out

"""FastCodec: the codec's bytes, computed faster, entering where a caller takes a codec.

Theory of operation
-------------------
:mod:`zephon_ref.codec` is the plain definition of the checkpoint bytes: ``_canon`` recurses
uniformly into every value.  A :class:`FastCodec` has the same ``pack`` / ``encode`` / ``decode``
(the structural protocol :class:`zephon_ref.codec.Codec`, which the plain module
itself satisfies) and is handed in explicitly: ``codec=`` of the aggregation round's
``Leader`` / ``Follower`` / ``machine_for`` / ``aggregate_round`` and of the checkpoint store's
``save``.  Each faster step states the plain step it replaces and when it defers to it:

* ``pack``: a ``dict`` whose keys are all ``str``, or all native-range ``int`` (one kind rank),
  is sorted by key alone, which is the order the plain ``_key_sort`` gives such keys; its values
  are canonicalised in insertion order, as the plain dict branch does, so the first bad value is
  the plain one's.  A ``list`` is one comprehension.  In both, a plain leaf (exact ``str``,
  ``bytes``, ``bool``, ``None``, native-range ``int``: the values the plain ``_canon`` returns
  as they are) is kept without a call.  Every other value (empty or mixed-key dicts, tuples,
  floats, big ints, subclasses, anything refused) goes to the plain ``_canon`` with the same
  path, so every refusal is raised by the plain code: same type, same message.
* ``decode``: the plain decode walks the decoded tree for non-finite floats; a float is packed
  behind marker byte ``0xca`` or ``0xcb`` (nested ext payloads are in the raw bytes too), so
  when neither byte occurs anywhere no float can be in the tree and the walk is skipped.
* :meth:`FastCodec.pack_map_with` / :meth:`FastCodec.encode_map_with`: a str-keyed map some of
  whose values were packed already (by ``pack``), without packing them again.  msgpack writes a
  map as a header, then each key and value in order, so header + sorted (packed key, packed
  value) pairs are the bytes of packing the whole map.  A caller that sends one large value
  inside several small envelopes (sim.scale's shared-work codec) packs it once.

Invariant (the reason it may exist): for every value, ``FastCodec().pack(v) == codec.pack(v)``
and ``encode`` likewise, or both refuse with the same error type and message; ``decode`` returns
what ``codec.decode`` returns or refuses what it refuses; ``pack_map_with(fields, {k: pack(v)})``
is ``pack({**fields, k: v})``.  ``properties.fast_codec`` checks it on drawn values and on real
64-lane states; tests/properties/test_fast_codec.py and the conformance CLI's ``fast codec`` row
run it (and planted differences).

* :class:`SharingLeaderCodec` (memory, not time): an aggregation round's leader decodes every
  participant's envelope, and each holds the same lane mapping (200,000 shards of a 16-group
  mapping hold about 0.4 GB of equal copies).  Its ``decode`` hands out one object for every
  decoded ``["state"]["world"]["mapping"]`` equal to the first one it decoded (a ``dict`` with the
  same keys in the same order and equal lane lists); the decoded value is otherwise the plain
  one.  The leader only reads what it decoded, so which object holds the equal values is not
  observable by the protocol.

Who uses it: the benchmarks that measure with it say so in their rows (bench_aggregation,
bench_checkpoint_store, bench_sim_scale) and sim.scale's star; nothing in the semantics imports
this module, and the facade does not plug it in by itself.

What may not live here: a byte format or refusal of its own (those are the plain codec's),
process-global caches.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgpack

from zephon_ref import codec as plain
from zephon_ref.errors import StateFormatError, expected

__all__ = ["FastCodec", "SharingLeaderCodec"]

_LO, _HI = plain._INT_MIN, plain._INT_MAX
_LEAVES = frozenset({str, bytes, bool, type(None)})  # kept as they are by the plain _canon too


def _fast_canon(value: Any, path: Any) -> Any:
    """``plain._canon(value, path)``, the same tree; see the module docstring for the shortcuts."""
    t = type(value)
    if t in _LEAVES or (t is int and _LO <= value <= _HI):
        return value
    if t is dict:
        kinds = set(map(type, value))
        if kinds == {str} or (kinds == {int} and min(value) >= _LO and max(value) <= _HI):
            items = [(k, v if type(v) in _LEAVES or (type(v) is int and _LO <= v <= _HI)
                      else _fast_canon(v, (path, k)))
                     for k, v in value.items()]
            items.sort(key=_key)
            return dict(items)
    elif t is list:
        return [v if type(v) in _LEAVES or (type(v) is int and _LO <= v <= _HI) else _fast_canon(v, (path, i))
                for i, v in enumerate(value)]
    return plain._canon(value, path)  # every other shape: the plain definition


def _key(kv: tuple[Any, Any]) -> Any:
    return kv[0]


def _map_header(n: int) -> bytes:
    out: bytes = msgpack.Packer(use_bin_type=True).pack_map_header(n)
    return out


def _items(canon: dict[str, Any]) -> bytes:
    """The packed items of a map of canonical values in its (sorted) insertion order: its packed
    bytes without the map header."""
    whole, header = plain._packb(canon), _map_header(len(canon))
    assert whole.startswith(header)
    return whole[len(header):]


class FastCodec:
    """The plain codec's ``pack`` / ``encode`` / ``decode`` (and ``unpack``), faster; see the
    module docstring.  Holds no state: one instance may be shared by any number of callers."""

    __slots__ = ()

    def pack(self, value: Any, *, root: str = "$") -> bytes:
        """``codec.pack(value, root=root)``."""
        return plain._packb(_fast_canon(value, root))

    def encode(self, value: Any) -> bytes:
        """``codec.encode(value)``."""
        return plain.compress(self.pack(value))

    def unpack(self, data: bytes) -> Any:
        """``codec.unpack(data)`` (it is that function)."""
        return plain.unpack(data)

    def decode(self, data: bytes) -> Any:
        """``codec.decode(data)``; the finiteness walk only where a float marker byte occurs."""
        raw = plain.decompress(data)
        out = plain.unpack(raw)
        if b"\xca" in raw or b"\xcb" in raw:
            plain._check_finite(out)
        return out

    def pack_map_with(self, fields: Mapping[str, Any], packed: Mapping[str, bytes]) -> bytes:
        """``codec.pack({**fields, **{k: codec.unpack(b) for k, b in packed.items()}})`` without
        packing ``packed``'s values again.

        Every value in ``packed`` must be the output of ``pack`` (it is spliced in as is: the
        caller vouches for it, having packed it itself); the values in ``fields`` are packed
        here, in their insertion order, before any byte is produced (a refusal names
        ``$[key]...``).  Keys must be ``str`` and the two key sets disjoint.
        """
        if not (set(map(type, fields)) <= {str} and set(map(type, packed)) <= {str}):
            raise StateFormatError(
                expected("pack_map_with keys", "str", sorted(map(repr, [*fields, *packed])))
            )
        both = fields.keys() & packed.keys()
        if both:
            raise StateFormatError(
                expected("pack_map_with keys", "in fields or in packed, not both", sorted(both))
            )
        for k, b in packed.items():
            if type(b) is not bytes or not b:
                raise StateFormatError(
                    expected(f"pre-packed value of {k!r}", "the non-empty bytes of pack()", b)
                )
        canon = {k: _fast_canon(v, ("$", k)) for k, v in fields.items()}
        keys = sorted([*canon, *packed])  # the order the plain codec gives an all-str map
        # each run of consecutive fields is packed as one map whose header is cut off (one packb
        # per run, not two per field); a pre-packed value follows its packed key as it is
        out = [_map_header(len(keys))]
        run: dict[str, Any] = {}
        for k in keys:
            if k in canon:
                run[k] = canon[k]
                continue
            if run:
                out.append(_items(run))
                run = {}
            out.append(plain._packb(k))
            out.append(packed[k])
        if run:
            out.append(_items(run))
        return b"".join(out)

    def encode_map_with(self, fields: Mapping[str, Any], packed: Mapping[str, bytes]) -> bytes:
        """``encode`` of the map :meth:`pack_map_with` describes (the same bytes)."""
        return plain.compress(self.pack_map_with(fields, packed))


class SharingLeaderCodec(FastCodec):
    """:class:`FastCodec` whose ``decode`` shares one decoded lane mapping across the envelopes
    it decodes (see the module docstring); the leader of one round holds one instance.  Its
    values equal ``codec.decode``'s; only the object identity of equal mappings differs."""

    __slots__ = ("_mapping",)

    def __init__(self) -> None:
        self._mapping: Any = None  # the first decoded envelope's world mapping

    def decode(self, data: bytes) -> Any:
        """``codec.decode(data)``, an envelope's world mapping swapped for the shared equal one."""
        out = super().decode(data)
        state = out.get("state") if type(out) is dict else None
        world = state.get("world") if type(state) is dict else None
        raw = world.get("mapping") if type(world) is dict else None
        if type(raw) is not dict:
            return out
        mine = self._mapping
        if mine is None:
            self._mapping = raw
        elif raw is not mine and raw == mine and list(raw) == list(mine):
            world["mapping"] = mine
        return out

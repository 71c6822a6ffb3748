"""The fast codec against the plain one (house rule 8): the same bytes, values and refusals.

Theory of operation
-------------------
:class:`zephon_ref.fast.codec.FastCodec` computes :mod:`zephon_ref.codec`'s bytes faster and is
plugged in where a caller takes ``codec=`` (the aggregation round's machines, the checkpoint
store's ``save``, sim.scale, the benchmarks).  Its invariant is that the swap changes no byte.
:func:`fast_codec_problems` checks that on one drawn value:

* ``pack`` and ``encode``: equal bytes, or both refuse with the same error type and message (a
  set or an object leaf, a non-finite float value or key: the path of the bad value is in it);
* ``decode`` of those bytes, and of a loose encoding of the value (msgpack's own packing, no
  sorting, non-finite floats let through, tuples as arrays): equal values, or the same refusal;
* ``pack_map_with`` (a str-keyed map with one value packed beforehand): ``pack`` of the whole map;
* an engine state in a round envelope, decoded twice by one ``SharingLeaderCodec``: the plain value.

The drawn values (:func:`codec_values`) are nested dicts, lists and tuples with keys and leaves of
every accepted kind (str, int with big ints beyond msgpack's range, bytes, bool, None, floats,
tuple keys), sometimes a non-finite float or an unencodable leaf, and real 64-lane engine states
(``sim.cluster.topology_states(seed, canonical_replicas=64, world_size=8)``: one participant's, or
their merge) with a drawn edit, each also with every dict rebuilt in reverse insertion order.
``tests/properties/test_fast_codec.py`` runs it (and planted differences); the conformance CLI
runs it as its ``fast codec`` row (:func:`fast_codec_check`).
"""

from __future__ import annotations

import functools
import warnings
from typing import Any

from hypothesis import strategies as st

__all__ = ["codec_values", "fast_codec_check", "fast_codec_problems", "real_states"]


def _outcome(fn: Any, *args: Any, **kwargs: Any) -> tuple[str, Any]:
    """("ok", result) or ("refused", (error type, message))."""
    try:
        return ("ok", fn(*args, **kwargs))
    except Exception as exc:  # noqa: BLE001 - the refusal itself is what is compared
        return ("refused", (type(exc).__name__, str(exc)))


def _same(a: tuple[str, Any], b: tuple[str, Any]) -> bool:
    """Equal outcomes; decoded values compare by repr too, so 1 and True, or a list and a tuple,
    are told apart."""
    return a == b and (a[0] != "ok" or repr(a[1]) == repr(b[1]))


def _loose(value: Any) -> bytes | None:
    """The value packed by msgpack itself (insertion order, non-finite floats kept, tuples as
    arrays), zstd-framed as the codec frames it; None where msgpack refuses it."""
    import msgpack

    from zephon_ref import codec

    try:
        raw = msgpack.packb(value, use_bin_type=True, strict_types=False)
    except (TypeError, ValueError, OverflowError):
        return None
    return codec.compress(raw)


def fast_codec_problems(value: Any, fast: Any = None) -> list[str]:
    """Differences between the plain codec and ``fast`` (a FastCodec unless given) on ``value``."""
    from zephon_ref import codec
    from zephon_ref.fast.codec import FastCodec, SharingLeaderCodec

    f = fast if fast is not None else FastCodec()
    out: list[str] = []
    for name, root in (("pack", "$"), ("pack", "$['state']"), ("encode", None)):
        kw = {"root": root} if root is not None else {}
        a = _outcome(getattr(codec, name), value, **kw)
        b = _outcome(getattr(f, name), value, **kw)
        if not _same(a, b):
            out.append(f"{name}{kw or ''}: plain {a[0]} {a[1]!r:.200}, fast {b[0]} {b[1]!r:.200}")
    blobs = [_loose(value)]
    enc = _outcome(codec.encode, value)
    if enc[0] == "ok":
        blobs.insert(0, enc[1])
    for i, blob in enumerate(blobs):
        if blob is None:
            continue
        a, b = _outcome(codec.decode, blob), _outcome(f.decode, blob)
        if not _same(a, b):
            what = "its encoding" if i == 0 and enc[0] == "ok" else "a loose encoding"
            out.append(f"decode of {what}: plain {a[0]} {a[1]!r:.200}, fast {b[0]} {b[1]!r:.200}")
    if enc[0] == "ok" and type(value) is dict and type(value.get("world")) is dict:
        # an engine state inside a round envelope, decoded twice by one SharingLeaderCodec: the
        # second decode may share the first's lane mapping, never change a value
        env = codec.encode({"protocol": 1, "state": value})
        sharing, plain_env = SharingLeaderCodec(), _outcome(codec.decode, env)
        for n in (1, 2):
            got = _outcome(sharing.decode, env)
            if not _same(plain_env, got):
                out.append(f"SharingLeaderCodec decode {n} of the envelope: {got[1]!r:.200}")
    whole = _outcome(codec.pack, value)
    if whole[0] == "ok" and type(value) is dict and value and all(type(k) is str for k in value):
        for key in sorted(value)[:: max(1, len(value) - 1)]:  # the first and the last key
            fields = {k: v for k, v in value.items() if k != key}
            spliced = _outcome(f.pack_map_with, fields, {key: f.pack(value[key])})
            if spliced != whole:
                out.append(f"pack_map_with(.., {{{key!r}: pack(..)}}): {spliced[1]!r:.200} != pack of the "
                           f"whole map {whole[1]!r:.200}")
    return out


def fast_codec_check(adapter: Any, value: Any) -> list[str]:
    """The ``fast codec`` row of the conformance CLI: :func:`fast_codec_problems` (the adapter
    declares the ``fast_codec`` feature; the codecs are zephon_ref's own, whatever the runner)."""
    return fast_codec_problems(value)


# -- drawn values ------------------------------------------------------------------------------------

_BIG = st.one_of(st.integers(-(2**70), -(2**63) - 1), st.integers(2**64, 2**70),
                 st.sampled_from([-(2**63), -(2**63) - 1, 2**64 - 1, 2**64, 2**128 + 5]))
_INTS = st.one_of(st.integers(-(2**10), 2**10), st.integers(-(2**63), 2**64 - 1), _BIG)
_FLOATS = st.floats(allow_nan=False, allow_infinity=False)
_NON_FINITE = st.sampled_from([float("nan"), float("inf"), float("-inf")])


class _Odd:
    """An unencodable leaf (its type name is in the refusal)."""

    def __repr__(self) -> str:
        return "_Odd()"


def _leaves(*, bad: bool) -> st.SearchStrategy[Any]:
    plain = st.one_of(st.none(), st.booleans(), _INTS, _FLOATS, st.text(max_size=5), st.binary(max_size=5))
    if not bad:
        return plain
    return st.one_of(plain, plain, plain, _NON_FINITE, st.builds(_Odd), st.just(frozenset({1})))


def _keys(*, bad: bool) -> st.SearchStrategy[Any]:
    simple = st.one_of(st.text(max_size=4), st.integers(-5, 40), _BIG, st.binary(max_size=3), st.booleans(),
                       st.none(), _FLOATS)
    keys = st.one_of(simple, st.tuples(simple, simple))
    return st.one_of(keys, _NON_FINITE) if bad else keys


def _tree(*, bad: bool) -> st.SearchStrategy[Any]:
    def branches(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        return st.one_of(
            st.lists(inner, max_size=5),
            st.lists(inner, max_size=3).map(tuple),
            # the fast path's shapes: all-str or all-int keys, plain leaves
            st.dictionaries(st.text(max_size=4), inner, max_size=5),
            st.dictionaries(st.integers(-5, 2**64 - 1), inner, max_size=4),
            st.dictionaries(_keys(bad=bad), inner, max_size=4),  # mixed keys: the plain path
        )

    return st.recursive(_leaves(bad=bad), branches, max_leaves=24)


@functools.lru_cache(maxsize=4)
def real_states(seed: int) -> tuple[Any, ...]:
    """The 8 participants' states of ``topology_states(seed, canonical_replicas=64, world_size=8)``
    and their merge (the 64-lane states the speed was measured on)."""
    from sim.cluster import topology_states
    from zephon_ref.coordination.merge import merge

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a mid-window cut: the states are what is wanted here
        states = [s for _, s in sorted(topology_states(seed, canonical_replicas=64, world_size=8).items())]
        merged = merge(states, warn_mid_window=False)
    return (*states, merged)


def _reversed(value: Any) -> Any:
    """``value`` with every dict rebuilt in reverse insertion order (same value, other order)."""
    if type(value) is dict:
        return {k: _reversed(value[k]) for k in reversed(list(value))}
    if type(value) is list:
        return [_reversed(v) for v in value]
    return value


@st.composite
def _real(draw: st.DrawFn) -> Any:
    states = real_states(draw(st.sampled_from([3, 4])))
    state = dict(draw(st.sampled_from(states)))
    edit = draw(st.sampled_from(["none", "none", "field", "bad"]))
    if edit == "field":
        state[draw(st.sampled_from(sorted(state)))] = draw(_tree(bad=False))
    elif edit == "bad":
        key = draw(st.sampled_from(sorted(state)))
        state[key] = [state[key], draw(st.sampled_from([float("nan"), _Odd(), {1, 2}]))]
    return state


def codec_values() -> st.SearchStrategy[Any]:
    """Drawn values for :func:`fast_codec_problems` (see the module docstring)."""
    value = st.one_of(_tree(bad=False), _tree(bad=False), _tree(bad=True), _real())
    return st.one_of(value, value.map(_reversed))

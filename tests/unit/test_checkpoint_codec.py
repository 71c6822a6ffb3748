"""Codec: exact round trip, deterministic bytes, big ints, refusals."""

from __future__ import annotations

import math

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zephon_ref import codec
from zephon_ref.errors import StateFormatError

_scalars = (
    st.none()
    | st.booleans()
    | st.integers()  # unbounded: exercises the big-int ext type
    | st.integers(min_value=-(2**200), max_value=2**200)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
    | st.binary(max_size=8)
)
_keys = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.text(max_size=6)
    | st.tuples(st.integers(), st.text(max_size=3))
)
values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=4)
    | st.lists(inner, max_size=4).map(tuple)
    | st.dictionaries(_keys, inner, max_size=4),
    max_leaves=25,
)


def _same_types(a: object, b: object) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        assert isinstance(b, dict)
        return a.keys() == b.keys() and all(
            any(type(k) is type(kb) and k == kb for kb in b) and _same_types(a[k], b[k]) for k in a
        )
    if isinstance(a, (list, tuple)):
        assert isinstance(b, (list, tuple))
        return len(a) == len(b) and all(_same_types(x, y) for x, y in zip(a, b, strict=True))
    return a == b or (isinstance(a, float) and math.copysign(1, a) == math.copysign(1, b))  # type: ignore[arg-type]


@settings(max_examples=200, deadline=None)
@given(values)
def test_round_trip_is_exact_including_types(v: object) -> None:
    out = codec.decode(codec.encode(v))
    assert out == v
    assert _same_types(v, out)


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(_keys, values, max_size=6), st.randoms(use_true_random=False))
def test_same_dict_any_insertion_order_same_bytes(d: dict[object, object], rnd: object) -> None:
    items = list(d.items())
    rnd.shuffle(items)  # type: ignore[attr-defined]
    assert codec.encode(dict(items)) == codec.encode(d)


def test_big_ints_use_ext_type_zero_as_signed_big_endian() -> None:
    v = 2**127 + 5
    packed = codec.pack(v)
    obj = msgpack.unpackb(packed, ext_hook=lambda c, b: (c, b))
    assert obj == (0, v.to_bytes(17, "big", signed=True))
    assert codec.unpack(codec.pack(-(2**64))) == -(2**64)
    # Native range edges stay native.
    for edge in (-(2**63), 2**64 - 1):
        assert not isinstance(msgpack.unpackb(codec.pack(edge), ext_hook=lambda c, b: ("ext", c)), tuple)


def test_non_canonical_big_int_ext_is_refused() -> None:
    bad = msgpack.packb(msgpack.ExtType(0, (5).to_bytes(8, "big", signed=True)))
    with pytest.raises(StateFormatError, match="canonical int"):
        codec.unpack(bad)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_floats_refused_on_encode_and_decode(bad: float) -> None:
    with pytest.raises(StateFormatError, match="finite"):
        codec.encode({"x": [1, bad]})
    repaired = codec.compress(msgpack.packb({"x": bad}))
    with pytest.raises(StateFormatError, match="finite"):
        codec.decode(repaired)


def test_unsupported_type_refused_with_path() -> None:
    with pytest.raises(StateFormatError, match=r"\$\['a'\]\[1\].*set"):
        codec.encode({"a": [1, {2}]})


def test_garbage_is_refused_typed() -> None:
    for junk in (b"", b"\x00" * 10, codec.encode({"a": 1})[:-3]):
        with pytest.raises(StateFormatError):
            codec.decode(junk)

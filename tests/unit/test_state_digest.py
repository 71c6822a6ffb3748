"""content_digest's fast paths give the digest of the plain definition; owned_copy is a deep copy.

The definition (zephon_ref/state.py, module docstring): sha256 of the JSON of the state's
canonical content, keys as strings, sorted, tuples as lists, bytes as {"$bytes": hex},
integrity excluded.  The reference below is that definition written the simple way.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from zephon_ref.state import content_digest, owned_copy


def _plain(obj: Any) -> Any:
    if isinstance(obj, Mapping):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return {"$bytes": bytes(obj).hex()}
    return obj


def _reference_digest(state: Mapping[str, Any]) -> str:
    body = _plain({k: v for k, v in state.items() if k != "integrity"})
    blob = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=True)
    return hashlib.sha256(blob.encode("ascii")).hexdigest()


def _value(r: random.Random, depth: int) -> Any:
    kind = r.randrange(10 if depth < 4 else 6)
    if kind == 0:
        return r.randrange(-5, 10**12)
    if kind == 1:
        return r.random()
    if kind == 2:
        return f"s{r.randrange(9)}"
    if kind == 3:
        return None if r.randrange(2) else bool(r.randrange(2))
    if kind == 4:
        return bytes(r.randrange(256) for _ in range(r.randrange(4)))
    if kind == 5:
        return [r.randrange(100) for _ in range(r.randrange(5))]  # a list of leaves (the fast path)
    if kind == 6:
        return [_value(r, depth + 1) for _ in range(r.randrange(4))]
    if kind == 7:
        return tuple(_value(r, depth + 1) for _ in range(r.randrange(4)))
    if kind == 8:  # int keys sort as strings ("10" < "2"): the digest must see them as strings
        return {
            r.choice([r.randrange(20), f"k{r.randrange(20)}"]): _value(r, depth + 1)
            for _ in range(r.randrange(4))
        }
    return OrderedDict((str(r.randrange(30)), _value(r, depth + 1)) for _ in range(r.randrange(3)))


def test_digest_equals_the_plain_definition() -> None:
    r = random.Random(7)
    checked = 0
    for _ in range(2000):
        state = {
            "a": _value(r, 0),
            "b": _value(r, 0),
            "lanes": {i: _value(r, 1) for i in range(r.randrange(12))},
            "integrity": "ignored",
        }
        try:
            want = _reference_digest(state)
        except TypeError:  # mixed key types that collide as strings: not a state either side accepts
            continue
        assert content_digest(state) == want, state
        checked += 1
    assert checked > 1500


def test_owned_copy_is_equal_and_shares_nothing_mutable() -> None:
    r = random.Random(3)
    for _ in range(200):
        state = {"x": _value(r, 0), "lanes": {i: [_value(r, 1), {"k": [1, 2]}] for i in range(3)}}
        got = owned_copy(state)
        assert got == state  # (no NaN is drawn)
        got["lanes"][0][1]["k"].append(99)
        assert state["lanes"][0][1]["k"] == [1, 2]


def test_owned_copy_falls_back_to_deepcopy_for_what_pickle_refuses() -> None:
    class Local:  # defined in a function: pickle cannot find it by name, deepcopy can copy it
        def __init__(self) -> None:
            self.v = [1]

    obj = {"o": Local()}
    got = owned_copy(obj)
    assert got["o"] is not obj["o"] and got["o"].v == [1] and got["o"].v is not obj["o"].v

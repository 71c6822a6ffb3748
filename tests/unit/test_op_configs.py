"""Each operator keeps its knobs in its one frozen config, and the fingerprint digests them as before.

The digest of an operator is the document ``_op_identity`` builds; a checkpoint carries the
pipeline's digest and a restore refuses another, so that document must not change when an
operator's attributes do.  The expected documents below are what the tree before the configs
became the operators' only copy digested (map_transform and stateful_transform kept copies
under other names, ``fn`` and ``flush_fn``: the FINGERPRINT_ALIASES keep them).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from zephon_ref.fingerprint import _op_identity
from zephon_ref.ops import Batch, EnsureMixture, MapTransform, Tokenize
from zephon_ref.ops.stateful import StatefulTransform


def fn(x: Any) -> Any:
    return x


def init() -> int:
    return 0


def push(s: Any, r: Any) -> Any:
    return s, r


def fl(s: Any) -> list[Any]:
    return []


def test_map_and_stateful_digests_keep_their_old_knob_names() -> None:
    here = f"callable:{__name__}"
    assert _op_identity("m", MapTransform(fn, drop_none=False, max_batch=3))["knobs"] == {
        "drop_none": False, "fn": f"{here}.fn", "max_batch": 3, "transform_fn": f"{here}.fn"}
    got = _op_identity("s", StatefulTransform("s", init_state=init, push=push, flush=fl))["knobs"]
    assert got == {"flush": f"{here}.fl", "flush_fn": f"{here}.fl", "indexable": False,
                   "init_state": f"{here}.init", "name": "s", "preserves_cursor_order": True,
                   "push": f"{here}.push", "should_flush": None, "transform": None}


OPS = [
    lambda: Batch(4, drop_last=False),
    lambda: MapTransform(fn),
    lambda: StatefulTransform("s", init_state=init, push=push),
    lambda: EnsureMixture(max_buffer_size=None, mixture={"a": 1}),
    lambda: Tokenize(field="text", max_length=8, truncation=True),
]


@pytest.mark.parametrize("make", OPS, ids=["batch", "map", "stateful", "ensure_mixture", "tokenize"])
def test_an_operator_stores_no_copy_of_a_knob(make: Any) -> None:
    op = make()
    fields = {f.name for f in dataclasses.fields(op.config)}
    copies = sorted(n for n in vars(op) if n in fields)
    assert not copies, f"{type(op).__name__} keeps copies of {copies} beside op.config"
    with pytest.raises(dataclasses.FrozenInstanceError):
        op.config.__setattr__(next(iter(fields)), None)


def test_ensure_mixtures_config_owns_its_mixture() -> None:
    weights = {"a": 1.0}
    op = EnsureMixture(mixture=weights)
    weights["b"] = 2.0  # the caller's mapping changes after the call: the operator's does not
    assert op.config.mixture == {"a": 1.0}

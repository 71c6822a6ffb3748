"""Regression (found by the conformance suite's tamper row): a zephon_ref checkpoint dict with its
``schema`` key removed passed for a zephon 0.2.0 state, whose translation seals it afresh, so every
other field could then be changed and the restore still accepted it (no integrity check)."""

from __future__ import annotations

import copy

import pytest

from properties.machines import MACHINE_CONFIGS
from properties.pipelines import build_pipeline
from zephon_ref.compat import is_zephon_state
from zephon_ref.errors import ZephonRefError


@pytest.mark.parametrize("also", [None, "rr_next_idx", "lane_next_cid"])
def test_a_state_without_its_schema_is_refused(also: str | None) -> None:
    cfg = MACHINE_CONFIGS[0]
    p = build_pipeline("zephon_ref", cfg)
    it = iter(p)
    for _ in range(3):
        next(it)
    state = p.checkpoint()
    it.close()
    tampered = copy.deepcopy(state)
    del tampered["schema"]
    if also is not None:  # and a change the integrity digest would have caught
        table = tampered[also]
        key = sorted(table)[0]
        table[key] = table[key] + 1
    assert not is_zephon_state(tampered)
    before = copy.deepcopy(tampered)
    with pytest.raises(ZephonRefError, match="schema"):
        build_pipeline("zephon_ref", cfg).restore(tampered)
    assert tampered == before

"""Each invariant holds on the real engine and fails on a hand-built bad input (none can pass vacuously)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from properties import invariants as inv
from properties.pipelines import PipelineConfig

REF = [("a", 0), ("a", 1), ("b", 0), ("a", 2), ("b", 1)]

CFG = PipelineConfig(
    [
        ("pack_sequences", {"max_length": 48, "num_bins": 2}),
        ("shuffle", {"buffer_size": 4, "seed": 2}),
        ("batch", {"microbatch_size": 2}),
    ],
    layout={"web": (14, 9), "code": (8,), "books": (5,)},
    source_kwargs={"chunk_size": 4, "seed": 3},
    options={"runner": "inline", "canonical_replicas": 2, "flush_every_k_chunks": 2},
)


# -- resume equivalence --------------------------------------------------------------------------
def test_resume_holds_on_the_exact_rest() -> None:
    assert inv.resume_problems(REF, REF[2:], cut=2) == []


@pytest.mark.parametrize(("resumed", "word"), [
    (REF[3:], "skipped"),                       # a skipped item
    (REF[1:], "repeat"),                        # a duplicated item
    (REF[2:4], "ends after"),                   # a short stream
    (REF[2:] + [("c", 9)], "extra"),            # an extra item
    ([REF[3], REF[2], REF[4]], "differs"),      # swapped
])
def test_resume_fails_on_bad_streams(resumed: list[tuple[str, int]], word: str) -> None:
    problems = inv.resume_problems(REF, resumed, cut=2)
    assert problems and word in problems[0]


# -- per-lane streams and global steps (shared with the simulator) -------------------------------------
def test_a_swapped_lane_is_caught() -> None:
    ref = {0: ["x0", "x1"], 1: ["y0", "y1"]}
    assert inv.lane_stream_problems(ref, ref, exact=True) == []
    assert inv.lane_stream_problems({0: ref[1], 1: ref[0]}, ref)
    steps = [((0, "x0"), (1, "y0"))]
    assert inv.global_step_problems(steps, steps) == []
    assert inv.global_step_problems([((0, "x0"), (1, "y1"))], steps)


# -- execution-settings invariance -------------------------------------------------------------------
def test_settings_invariance_fails_when_one_setting_changes_data() -> None:
    assert inv.settings_invariance_problems({"inline": REF, "threads": list(REF)}) == []
    problems = inv.settings_invariance_problems({"inline": REF, "threads": REF[:2] + REF[3:]})
    assert problems and problems[0].startswith("threads: item 2")


def test_settings_never_change_data_on_the_real_engine() -> None:
    assert inv.check_settings_invariance(CFG, {
        "inline": {"runner": "inline"},
        "threads w1 q1": {"runner": "threads", "max_workers": 1, "op_queue_capacity": 1},
        "threads w3 q5": {"runner": "threads", "max_workers": 3, "op_queue_capacity": 5},
    }) == []


# -- bounded inflight --------------------------------------------------------------------------------
def test_inflight_bound_formula() -> None:
    # demand feeding: K + ceil(W / c) (non-monotone), 1 + ceil((F + W) / c) (monotone, F = 64)
    assert inv.inflight_bound(k=2, monotone=False, depth_samples=8, min_chunk=4) == 2 + 2
    assert inv.inflight_bound(k=2, monotone=False, depth_samples=0, min_chunk=32) == 2
    assert inv.inflight_bound(k=0, monotone=True, depth_samples=8, min_chunk=3) == 1 + 24
    with pytest.raises(ValueError, match="min_chunk"):
        inv.inflight_bound(k=1, monotone=False, depth_samples=64, min_chunk=0)


def test_bounded_inflight_fails_on_a_growing_lane() -> None:
    assert inv.bounded_inflight_problems([{0: 3, 1: 4}] * 3, bound=4) == []
    problems = inv.bounded_inflight_problems([{0: 3, 1: 4}, {0: 3, 1: 5}], bound=4)
    assert problems == ["checkpoint 1: lane 1 holds 5 inflight chunks, more than the bound 4"]


@pytest.mark.parametrize("runner", ["inline", "threads"])
def test_inflight_stays_bounded_on_the_real_engine(runner: str) -> None:
    assert inv.check_bounded_inflight(CFG, runner=runner, queue_size=2) == []


# -- eviction safety ----------------------------------------------------------------------------------
def test_eviction_safety_fails_when_a_later_item_needs_an_evicted_chunk() -> None:
    needs = [{(0, 0)}, {(0, 1)}, {(0, 1), (0, 0)}]  # item 2 still needs chunk 0 (a wrapped record)
    ok_cuts = [(0, {0: (set(), 0)}), (1, {0: ({0, 1}, 2)}), (3, {0: (set(), 2)})]
    assert inv.eviction_safety_problems(ok_cuts, needs) == []
    bad = [(2, {0: ({1}, 2)})]  # after 2 items chunk 0 was evicted, but item 2 needs it
    problems = inv.eviction_safety_problems(bad, needs)
    assert problems and "item 2 needs chunk 0 of lane 0" in problems[0]
    pinned = inv.eviction_safety_problems([(3, {0: ({1}, 2)})], needs, pinned=[{(0, 0)}])
    assert pinned and "replay cursor" in pinned[0]
    # a lane that holds no inflight chunk replays nothing: its cursor's chunk may be gone
    assert inv.eviction_safety_problems([(3, {0: (set(), 2)})], needs, pinned=[{(0, 0)}]) == []


_PAIR = st.tuples(st.integers(0, 2), st.integers(0, 6))
_CUT = st.dictionaries(st.integers(0, 2), st.tuples(st.frozensets(st.integers(0, 6), max_size=3),
                                                    st.integers(0, 7)), max_size=3)


@settings(max_examples=300)
@given(needs=st.lists(st.frozensets(_PAIR, max_size=3), max_size=12),
       cuts=st.lists(st.tuples(st.integers(0, 12), _CUT), max_size=6),
       pinned=st.lists(st.frozensets(_PAIR, max_size=2), max_size=6))
def test_eviction_safety_gives_the_plain_scans_problems(needs: list, cuts: list, pinned: list) -> None:
    """The fast check (each chunk's last needing item) says what the plain scan of every cut says."""
    from sim.invariants import _cut_problem

    plain = [p for j, (pos, lanes) in enumerate(cuts)
             for p in _cut_problem(pos, lanes, needs, sorted(pinned[j]) if j < len(pinned) else [])]
    assert inv.eviction_safety_problems(cuts, needs, pinned=pinned) == plain


def test_eviction_is_safe_on_the_real_engine() -> None:
    assert inv.check_eviction_safety(CFG) == []


# -- checkpoint bytes -------------------------------------------------------------------------------
def test_checkpoint_bytes_fail_when_they_differ() -> None:
    assert inv.checkpoint_bytes_problems({"a": b"xyz", "b": b"xyz"}) == []
    problems = inv.checkpoint_bytes_problems({"a": b"xyz", "b": b"xzz"})
    assert problems == ["b: 3 bytes differ from a's 3 at byte 1"]


def test_checkpoint_bytes_are_deterministic_on_the_real_engine() -> None:
    assert inv.check_checkpoint_bytes(CFG) == []


def test_resume_holds_on_the_real_engine() -> None:
    assert inv.check_resume(CFG) == []


def _drop_a_third(payload: dict[str, list[int]]) -> dict[str, list[int]] | None:
    return None if len(payload["input_ids"]) % 3 == 0 else payload


DROPPING = PipelineConfig(
    [("map_transform", {"transform_fn": _drop_a_third}), ("shuffle", {"buffer_size": 3, "seed": 1})],
    layout={"web": (90, 70), "code": (60,), "books": (30,)},
    source_kwargs={"chunk_size": 2, "seed": 1},
    options={"runner": "inline", "canonical_replicas": 1, "flush_every_k_chunks": 1},
)


def test_the_inflight_bound_catches_an_engine_that_stops_evicting(monkeypatch: pytest.MonkeyPatch) -> None:
    from zephon_ref.engine import core

    assert inv.check_bounded_inflight(DROPPING) == []
    monkeypatch.setattr(core.Engine, "_complete", lambda self, t: None)  # dropped records never close
    problems = inv.check_bounded_inflight(DROPPING)
    assert problems and "more than the bound" in problems[0]

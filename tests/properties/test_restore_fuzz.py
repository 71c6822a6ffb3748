"""Restore fuzzer: mutations of real checkpoints are refused (typed) or change nothing.

Checkpoints are taken after every delivered item of small real pipelines (the demo
pipeline and properties.pipelines configurations; 1 and 3 lanes; packing, shuffles with
block-shuffled sources, mixture correction).  Each is mutated: a key dropped, a value
retyped or re-ranged (-1, huge, off by one), a field swapped with another checkpoint's,
a lane entry swapped with another lane's, a mapping emptied, a sample id pointed at
local_idx -1 or a shard that does not exist, cursor_block_sizes set to -1, a lane's
seed / weights / stop_after_passes / max_repeats changed, a knob turned into a string
that bool() would coerce.  ``restore`` must either

* raise a typed ZephonRefError naming what it expected, after which the pipeline still
  delivers exactly what it delivered before (a refused restore changes nothing), or
* accept, and the pipeline then deliver exactly the uninterrupted run's remainder.

An accepted mutation that changes the output, an untyped exception, and a hang (every
iteration is bounded by count and time) all fail.  ``python -m properties.fuzz --report``
counts outcomes per mutation kind.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from properties.fuzz import (
    RESTORE_CONFIGS,
    RESTORE_IDENTICAL,
    RESTORE_REFUSED,
    Mutation,
    fuzz_settings,
    mutations,
    real_run,
    restore_outcome,
)

FAST = sorted(n for n in RESTORE_CONFIGS if not n.startswith("demo"))
KINDS = ("drop", "retype", "rerange", "empty", "knob-string", "swap-other", "swap-lanes", "semantic",
         "sample-id", "lane-source")


def _check(name: str, cut: int, m: Mutation, preload: int | None = None) -> None:
    _, cks = real_run(name)
    out = restore_outcome(name, cut, m.apply(cks[cut]), preload=preload)
    where = "" if preload is None else f", into a pipeline holding the restore after {preload} items"
    assert not out.failed, (f"[{name}, checkpoint after {cut} items{where}] {m.describe()}: "
                            f"{out.kind}: {out.detail}")


@st.composite
def mutation_cases(draw: Any, configs: list[str]) -> tuple[str, int, Mutation, int | None]:
    name = draw(st.sampled_from(configs), label="config")
    _, cks = real_run(name)
    cut = draw(st.integers(0, len(cks) - 1), label="cut")
    # another checkpoint to swap fields with: the same pipeline elsewhere, or another pipeline
    other_name = draw(st.sampled_from([name, *configs]), label="other config")
    _, ocks = real_run(other_name)
    other = ocks[draw(st.integers(0, len(ocks) - 1), label="other cut")]
    ms = mutations(cks[cut], other)
    kinds = sorted({m.kind for m in ms})
    kind = draw(st.sampled_from(kinds), label="kind")
    m = draw(st.sampled_from([m for m in ms if m.kind == kind]), label="mutation")
    # a refusal must also leave an earlier, pending restore in force (rule 6)
    preload = draw(st.one_of(st.none(), st.integers(0, len(cks) - 1)), label="pending restore")
    return name, cut, m, preload


@fuzz_settings(150)
@given(case=mutation_cases(FAST))
def test_mutated_checkpoint_is_refused_or_resumes_identically(case: tuple[Any, ...]) -> None:
    _check(*case)


@fuzz_settings(15)
@given(case=mutation_cases(["demo/3"]))
def test_mutated_demo_checkpoint_is_refused_or_resumes_identically(case: tuple[Any, ...]) -> None:
    _check(*case)


@pytest.mark.parametrize("name", sorted(RESTORE_CONFIGS))
def test_unmutated_checkpoints_resume_identically(name: str) -> None:
    """The oracle can pass: every real checkpoint, restored as is, gives the remainder."""
    _, cks = real_run(name)
    for cut in sorted({0, 1, len(cks) // 2, len(cks) - 1}):
        assert restore_outcome(name, cut, copy.deepcopy(cks[cut])).kind == RESTORE_IDENTICAL, (name, cut)


# -- the defects the issue names, as named regressions --------------------------------------------
def _lane0(ck: dict[str, Any], table: str) -> Any:
    return sorted(ck[table])[0]


def _first_sid_path(ck: dict[str, Any]) -> tuple[Any, ...]:
    lane = next(la for la, chunks in sorted(ck["inflight"].items()) if chunks)
    cid = sorted(ck["inflight"][lane])[0]
    return ("inflight", lane, cid, "components", 0, 1, 0)


def _ws(ck: dict[str, Any], *rest: Any) -> tuple[Any, ...]:
    return ("lane_ws_state", _lane0(ck, "lane_ws_state"), *rest)


KNOWN: dict[str, Any] = {
    "rr_next_idx=5": lambda ck: Mutation("semantic", ("rr_next_idx",), 5),
    "checkpoint_reload_count=None": lambda ck: Mutation("semantic", ("checkpoint_reload_count",), None),
    "epoch_boundaries=7": lambda ck: Mutation("semantic", ("epoch_boundaries",), 7),
    "replay_cursors={}": lambda ck: Mutation("semantic", ("replay_cursors",), {}),
    "local_idx=-1": lambda ck: Mutation(
        "sample-id", _first_sid_path(ck), [*list(_get(ck, _first_sid_path(ck)))[:2], -1]
    ),
    "shard id 99": lambda ck: Mutation(
        "sample-id",
        _first_sid_path(ck),
        [_get(ck, _first_sid_path(ck))[0], 99, _get(ck, _first_sid_path(ck))[2]],
    ),
    "lane seed+1": lambda ck: Mutation("lane-source", _ws(ck, "seed"), _get(ck, _ws(ck, "seed")) + 1),
    "lane weights swapped": lambda ck: Mutation(
        "lane-source", _ws(ck, "weights"), _swapped(_get(ck, _ws(ck, "weights")))
    ),
    "cursor_block_sizes=-1": lambda ck: Mutation("lane-source", _ws(ck, "cursor_block_sizes", "web"), -1),
    "stop_after_passes=5": lambda ck: Mutation("lane-source", _ws(ck, "stop_after_passes"), 5),
    "max_repeats=0": lambda ck: Mutation(
        "lane-source", _ws(ck, "max_repeats"), dict.fromkeys(_get(ck, _ws(ck, "component_order")), 0)
    ),
    # strings bool() coerces: '' reads as False where the checkpoint said True
    "knob shuffle_within_shard=''": lambda ck: Mutation(
        "knob-string", _ws(ck, "knobs", "shuffle_within_shard"), ""
    ),
    "knob shuffle_shards=0": lambda ck: Mutation("knob-string", _ws(ck, "knobs", "shuffle_shards"), 0),
    "reshuffle_on_repeat=''": lambda ck: Mutation(
        "knob-string", _ws(ck, "reshuffle_on_repeat"), dict.fromkeys(_get(ck, _ws(ck, "component_order")), "")
    ),
    "lane_next_cid-1": lambda ck: Mutation(
        "rerange",
        ("lane_next_cid", _lane0(ck, "lane_next_cid")),
        ck["lane_next_cid"][_lane0(ck, "lane_next_cid")] - 1,
    ),
}


def _get(ck: dict[str, Any], path: tuple[Any, ...]) -> Any:
    for k in path:
        ck = ck[k]
    return ck


def _swapped(w: dict[str, float]) -> dict[str, float]:
    names = list(w)
    out = dict(w)
    out[names[0]], out[names[1]] = w[names[1]], w[names[0]]
    return out


@pytest.mark.parametrize("config", ["shuffle-blocks/3", "full/3"])
@pytest.mark.parametrize("known", sorted(KNOWN))
def test_known_mutation(known: str, config: str) -> None:
    _, cks = real_run(config)
    cut = len(cks) // 2
    _check(config, cut, KNOWN[known](cks[cut]))


# -- the check can fail ----------------------------------------------------------------------------
class _Fake:
    """A toy pipeline: output is range(pos, 10); restore believes whatever it is given."""

    def __init__(self, strict: bool) -> None:
        self.pos, self.strict = 0, strict

    def restore(self, state: Any) -> _Fake:
        if self.strict:
            self.pos = state["pos"]  # KeyError on a dropped key: untyped
        else:
            self.pos = int(state.get("pos", 0)) if isinstance(state, dict) else 0
        return self

    def __iter__(self) -> Any:
        from zephon_ref.types import SampleId, SampleMeta, SampleRecord

        for i in range(self.pos, 10):
            yield SampleRecord(SampleMeta(SampleId(0, 0, i), 0, 0, i, {0: 1}), {"input_ids": [i]})


def test_the_restore_oracle_flags_accepted_changes_and_untyped_errors(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import properties.fuzz as fuzz

    monkeypatch.setattr(fuzz, "real_run", lambda name: ([_view(i) for i in range(10)],
                                                        [{"pos": i} for i in range(11)]))
    for strict in (False, True):
        monkeypatch.setitem(fuzz.RESTORE_CONFIGS, "fake", lambda strict=strict: _Fake(strict))
        assert restore_outcome("fake", 3, {"pos": 3}).kind == RESTORE_IDENTICAL
        assert restore_outcome("fake", 3, {"pos": 4}).kind == "ACCEPTED, OUTPUT DIFFERS"
        if strict:
            assert restore_outcome("fake", 3, {}).kind == "UNTYPED at restore"
    assert RESTORE_REFUSED != RESTORE_IDENTICAL


def _view(i: int) -> Any:
    from properties.pipelines import item_view
    from zephon_ref.types import SampleId, SampleMeta, SampleRecord

    return item_view(SampleRecord(SampleMeta(SampleId(0, 0, i), 0, 0, i, {0: 1}), {"input_ids": [i]}))

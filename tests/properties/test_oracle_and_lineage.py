"""The oracle, lineage and tamper rows: each catches the kind of bug it was built for, and the
strategies draw every knob.  Bugs are planted through adapters and monkeypatches, never by
editing zephon_ref."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings

from properties import conformance
from properties.adapters import ADAPTERS, IteratorRun, PipelineAdapter, load_adapter
from properties.lineage import expected_lanes, final_state_problems, lineage_problems, owner
from properties.normal_form import Contributor, CursorKey, Record, as_record, item_view
from properties.pipelines import PipelineConfig
from properties.strategies import allocation_modes, pipeline_configs

# a small, long-enough configuration: 2 lanes, wrap packing, batch(drop_last=False)
WRAP = PipelineConfig(
    chain=[
        ("pack_sequences", {"max_length": 32, "algorithm": "wrap"}),
        ("shuffle", {"buffer_size": 3, "seed": 1}),
        ("batch", {"microbatch_size": 2, "drop_last": False}),
    ],
    layout={"web": (20, 10), "code": (12,)},
    weights={"web": 2.0, "code": 1.0},
    source_kwargs={"chunk_size": 4, "seed": 3},
    options={"runner": "inline", "canonical_replicas": 2, "flush_every_k_chunks": 2},
)


def _run(cfg: PipelineConfig) -> tuple[list[Any], Any]:
    run = ADAPTERS["inline"].build(cfg)
    items = run.deliver(1_000_000)
    state = run.checkpoint()
    run.close()
    return items, state


def test_the_normal_form_equals_the_plain_tuples() -> None:
    items, _ = _run(WRAP)
    rec = items[0][0]
    assert isinstance(rec, Record) and isinstance(rec.cursor, CursorKey)
    assert isinstance(rec.contributors[0], Contributor)
    plain = (rec.lane, tuple(rec.cursor), tuple((tuple(c.cursor), c.is_last_child) for c in rec.contributors),
             rec.payload)
    assert rec == plain and as_record(plain) == rec and hash(as_record(plain)) == hash(plain)


def test_a_clean_stream_has_no_lineage_problem() -> None:
    items, state = _run(WRAP)
    assert len(items) > 20
    assert lineage_problems(WRAP, items) == [] and final_state_problems(state) == []


def test_the_lineage_checks_name_a_witness_for_each_kind_of_damage() -> None:
    items, _ = _run(WRAP)
    lost = lineage_problems(WRAP, items[:5] + items[6:])
    assert any("never closed" in p or "tokens" in p for p in lost), lost
    dup = lineage_problems(WRAP, items + items[3:4])
    assert any("closed 2 times" in p for p in dup) and any("delivered twice" in p for p in dup), dup
    r = items[2][0]
    changed = [[r._replace(payload=tuple(tuple(t + 1 for t in seg) for seg in r.payload))], *items[3:]]
    assert any("not the sample's tokens" in p for p in lineage_problems(WRAP, items[:2] + changed)), changed[
        0
    ]
    c0 = r.contributors[0]
    other = c0._replace(cursor=c0.cursor._replace(sample_id=(9, 9, 9)))
    moved = [[r._replace(contributors=(other, *r.contributors[1:]))]]
    assert any("carries sample (9, 9, 9)" in p for p in lineage_problems(WRAP, items[:2] + moved + items[3:]))
    stray = [[r._replace(lane=r.lane, contributors=(c0._replace(cursor=c0.cursor._replace(chunk_id=999)),
                                                         *r.contributors[1:]))]]
    assert any("admits no such offset" in p for p in lineage_problems(WRAP, items[:2] + stray + items[3:]))
    assert final_state_problems({"inflight": {1: {4: {}}}}) != []


def test_children_sharing_a_cursor_fail() -> None:
    items, _ = _run(WRAP)
    # a planted pack bug: every piece of a split record keeps the record's first cursor
    flat = [r._replace(cursor=r.cursor._replace(lineage=(0,))) for item in items for r in item]
    problems = lineage_problems(WRAP, [[r] for r in flat])
    assert any("delivered twice" in p for p in problems), problems


def test_the_owner_is_the_spec() -> None:
    assert [owner(g, 3, seed=0, assignment="modulo") for g in range(6)] == [0, 1, 2, 0, 1, 2]
    for block in range(4):  # permute: each block of C chunks gives every lane exactly one
        assert sorted(owner(block * 4 + s, 4, seed=5, assignment="permute") for s in range(4)) == [0, 1, 2, 3]
    exp = expected_lanes(WRAP)
    assert exp.problems == () and sum(len(v) for v in exp.lanes.values()) == exp.global_chunks


@dataclass(frozen=True)
class _LosesAChunk(PipelineAdapter):
    """A planted, consistent bug: lane 1 never delivers its chunk 1 (every run, restored or not,
    agrees with itself, so the resume rows pass)."""

    features: frozenset[str] = field(default_factory=frozenset)

    def build(self, cfg: PipelineConfig, *, state: Any = None, **execution: Any) -> IteratorRun:
        run = super().build(cfg, state=state, **execution)

        def view(x: Any) -> Any:
            return [r for r in item_view(x) if not (r.lane == 1 and r.cursor.chunk_id == 1)]
        return _Filtered(run.pipeline, view)


class _Filtered(IteratorRun):
    """Items whose records were all filtered out are not delivered."""

    def deliver(self, n: int) -> list[Any]:
        out: list[Any] = []
        while len(out) < n:
            got = super().deliver(1)
            if not got:
                break
            if got[0]:
                out.append(got[0])
        return out


def test_a_consistent_bug_passes_resume_but_not_the_oracle_or_lineage_rows() -> None:
    bug = _LosesAChunk("loses-a-chunk", "zephon_ref", {"runner": "inline"})
    rows = {
        r.prop: r
        for r in conformance.run_suite(
            bug, examples=15, only=["oracle", "lineage", "resume at cuts"], shrink_seconds=10
        )
    }
    assert rows["oracle"].failure and rows["oracle"].ours and rows["oracle"].theirs, rows["oracle"]
    assert "zephon_ref" in rows["oracle"].failure
    assert rows["lineage"].failure and "never closed" in rows["lineage"].failure, rows["lineage"]
    # resume compares with zephon_ref's stream only once the oracle row passed: here it did not, so the
    # bug (consistent with itself) passes it
    assert rows["resume at cuts"].failure is None


def test_tamper_row_catches_a_digest_that_skips_a_field(monkeypatch: pytest.MonkeyPatch) -> None:
    from zephon_ref import state as zstate

    honest = zstate.content_digest
    assert conformance.run_suite(ADAPTERS["inline"], examples=5, only=["tamper refused"])[0].failure is None

    def skips_the_round_robin_pointer(s: Any) -> str:  # the planted bug
        return honest({k: v for k, v in s.items() if k != "rr_next_idx"})

    monkeypatch.setattr(zstate, "content_digest", skips_the_round_robin_pointer)
    row = conformance.run_suite(ADAPTERS["inline"], examples=30, only=["tamper refused"], shrink_seconds=5)[0]
    assert row.failure and "rr_next_idx" in row.failure and "restored without a refusal" in row.failure, row


def test_tamper_candidates_cover_every_field() -> None:
    _, state = _run(WRAP)
    run = ADAPTERS["inline"].build(WRAP)
    run.deliver(7)
    state = run.checkpoint()
    run.close()
    names = [what for what, _ in conformance._tamper_candidates(state)]
    for key in state:
        assert f"dropped {key!r}" in names
    assert any(
        n.startswith("swapped 'inflight'") or n.startswith("swapped 'lane_next_cid'") for n in names
    ), names
    for what, edit in conformance._tamper_candidates(state):
        s = copy.deepcopy(state)
        if edit(s):
            assert s != state, what


def test_pipeline_configs_draw_every_knob() -> None:
    seen: set[str] = set()

    @settings(max_examples=400, deadline=None, database=None, derandomize=True, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(pipeline_configs())
    def draw(cfg: PipelineConfig) -> None:
        kw = cfg.source_kwargs
        seen.add(f"lanes={min(cfg.options['canonical_replicas'], 2)}")
        seen.add(f"lane_assignment={kw.get('lane_assignment')}")
        seen.add(f"policy={type(kw.get('exhausted_policy')).__name__}:{kw.get('exhausted_policy')!s:.6}")
        seen.add(f"max_repeats={'max_repeats' in kw}")
        seen.add(f"passes={'stop_after_passes' in kw}")
        seen.add(f"token_aware={kw.get('token_estimation') is not None}")
        seen.add(f"block_size={type(kw.get('shuffle_block_size')).__name__}")
        seen.add(f"allocation_mode={kw.get('allocation_mode', 'default')}")
        for m, opts in cfg.chain:
            seen.update(
                f"{m}.{k}={v}" for k, v in opts.items() if k in ("algorithm", "drop_last", "flush_strategy")
            )
            seen.update(f"{m}.{k}" for k in opts)
            if m == "ensure_mixture":
                size = opts.get("max_buffer_size", "default")
                # a small buffer (<= 4, where discards start early) rather than the value 4 itself: the
                # generator draws the knob's int range, and one value of it comes or goes with the sequence
                small = isinstance(size, int) and size <= 4
                seen.add(f"ensure_mixture.max_buffer_size={'small' if small else size}")
        seen.add(f"k={cfg.options.get('flush_every_k_chunks')}")

    draw()
    want = {
        "lanes=1",
        "lanes=2",
        "lane_assignment=modulo",
        "lane_assignment=permute",
        "policy=str:stop",
        "policy=str:redist",
        "policy=dict:{'web'",
        "max_repeats=True",
        "passes=True",
        "token_aware=True",
        "token_aware=False",
        "block_size=int",
        "block_size=str",
        "pack_sequences.algorithm=first_fit",
        "pack_sequences.algorithm=best_fit",
        "pack_sequences.algorithm=wrap",
        "pack_sequences.num_bins",
        "pack_sequences.max_sequences_per_bin",
        "pack_sequences.min_sequence_length",
        "pack_sequences.flush_strategy=fullest",
        "shuffle.algorithm=block",
        "shuffle.warmup_growth",
        "ensure_mixture.mixture",
        "ensure_mixture.max_buffer_size=None",
        "ensure_mixture.max_buffer_size=small",
        "ensure_mixture.drain_target_ratio",
        "ensure_mixture.obsolete_drain_rate",
        "batch.drop_last=False",
        "batch.drop_last=True",
        "batch.microbatch_size",
        "k=1",
        "k=3",
        # every mode the source declares a caller may name (token_aware: token_estimation selects it)
        *(f"allocation_mode={m}" for m in allocation_modes()),
    }
    assert want <= seen, sorted(want - seen)


def test_the_long_tier_puts_two_flush_epochs_after_a_mid_stream_cut() -> None:
    @settings(max_examples=15, deadline=None, database=None, derandomize=True, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(pipeline_configs(tier="long"))
    def draw(cfg: PipelineConfig) -> None:
        exp = expected_lanes(cfg)
        k = int(cfg.options.get("flush_every_k_chunks") or 1)
        # the busiest lane has at least two flush epochs after the middle of its stream
        assert max(len(chunks) for chunks in exp.lanes.values()) // 2 >= 2 * k

    draw()


@pytest.mark.conformance
def test_zephon_passes_the_oracle_row_on_what_it_supports() -> None:
    pytest.importorskip("zephon", reason="zephon 0.2.0 is the conformance extra")
    row = conformance.run_suite(load_adapter("zephon"), examples=8, only=["oracle"])[0]
    assert row.failure is None and row.examples >= 1, row


def test_after_the_oracle_row_passes_the_resume_rows_compare_with_zephon_ref(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[str] = []
    real = conformance._oracle_stream

    def spy(cfg: PipelineConfig) -> list[Any]:
        calls.append(conformance.CTX.use_oracle and "resume" or "oracle")
        return real(cfg)

    monkeypatch.setattr(conformance, "_oracle_stream", spy)
    rows = conformance.run_suite(ADAPTERS["threads"], examples=3, only=["oracle", "resume at cuts"])
    assert [r.failure for r in rows] == [None, None], rows
    assert "oracle" in calls and "resume" in calls, calls  # the resume row asked for zephon_ref's stream
    assert conformance.CTX.use_oracle is False  # reset after the suite

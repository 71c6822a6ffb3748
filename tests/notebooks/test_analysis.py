"""sim.analysis: every number the notebooks rely on for correctness is asserted here.

Sizes are small (a few hundred delivered items); the notebooks run the same code bigger.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from sim.analysis import (
    AnalysisConfig,
    Driver,
    FlushArmIllegal,
    build_pipeline,
    drift_run,
    flush_arm,
    flush_sweep,
    measure_restore,
    spearman,
    trace,
)
from zephon_ref.errors import ConfigError, ContractError

CFG = AnalysisConfig()


def _keys(cfg: AnalysisConfig, n: int) -> list[tuple[object, ...]]:
    d = Driver(build_pipeline(cfg))
    out = []
    for _ in range(n):
        x = d.next_item()
        assert x is not None
        out.append(tuple(r.meta.cursor.as_key() for r in x.records))
    return out


def test_driver_delivers_what_iteration_delivers() -> None:
    want = [tuple(r.meta.cursor.as_key() for r in b.records) for b, _ in zip(build_pipeline(CFG), range(120),
                                                                           strict=False)]
    assert _keys(CFG, 120) == want


@pytest.mark.parametrize("feeding", ["demand", "round_robin"])
def test_predicted_replay_equals_measured_replay(feeding: str) -> None:
    cfg = replace(CFG, feeding=feeding)
    steps = (1, 37, 90, 211)
    tr = trace(cfg, 220, keep_states=steps)
    assert [s for s, _ in tr.states] == list(steps)
    follow = dict(tr.followups)
    assert list(follow[37]) == _keys(cfg, 45)[37:]  # what the trace says comes next, does
    for step, state in tr.states:
        r = measure_restore(cfg, state, step, want=follow[step] if step % 2 else None)
        assert r.predicted_chunks > 0
        assert (r.replayed_chunks, r.replayed_records) == (r.predicted_chunks, r.predicted_records), r
        assert r.next_items_equal, r


@pytest.mark.parametrize(("written", "read"), [("round_robin", "demand"), ("demand", "round_robin")])
def test_a_checkpoint_of_either_policy_resumes_under_the_other(written: str, read: str) -> None:
    tr = trace(replace(CFG, feeding=written), 150, keep_states=(150,))
    (step, state), = tr.states
    r = measure_restore(replace(CFG, feeding=read), state, step, want=dict(tr.followups)[step])
    assert r.next_items_equal and r.replayed_records == r.predicted_records


def test_demand_feeding_keeps_the_stream_and_bounds_inflight() -> None:
    cfg = replace(CFG, seed=0)
    rr = replace(cfg, feeding="round_robin")
    assert _keys(cfg, 400) == _keys(rr, 400)
    plain = drift_run(rr, 3000, report_at=(3000,))[-1]
    demand = drift_run(cfg, 3000, report_at=(3000,))[-1]
    # round robin lets one lane's inflight set grow past an epoch; demand feeding holds every
    # lane to at most one open epoch plus the one being drained
    assert plain.max_inflight_so_far > 2 * cfg.k
    assert demand.max_inflight_so_far <= 2 * cfg.k
    assert plain.max_spread_so_far == 0  # round-robin admission keeps admitted chunks level


def test_admit_lane_refuses_a_lane_it_does_not_own_and_changes_nothing() -> None:
    e = build_pipeline(CFG).engine()
    before = (e.can_admit(), e.ready_stages(), e.can_deliver())
    with pytest.raises(ContractError, match="owned lane"):
        e.admit(lane=7)
    assert (e.can_admit(), e.ready_stages(), e.can_deliver()) == before
    assert all(not s.inflight for s in e.streams.values())


def test_trace_events_are_consistent_and_eviction_is_per_epoch() -> None:
    tr = trace(CFG, 400, checkpoint_every=20)
    entered = {(lane, cid): step for step, lane, cid in tr.entered}
    for step, lane, cid in tr.left:
        assert entered[(lane, cid)] <= step
    # epoch-atomic: what leaves a lane at one step is whole epochs [eK, (e+1)K)
    by: dict[tuple[int, int], list[int]] = {}
    for step, lane, cid in tr.left:
        by.setdefault((step, lane), []).append(cid)
    assert by
    for cids in by.values():
        assert len(cids) % CFG.k == 0 and min(cids) % CFG.k == 0
        assert sorted(cids) == list(range(min(cids), max(cids) + 1))
    # a checkpoint holds exactly the lanes' inflight sets at that step
    sample = {(s.step, s.lane): s for s in tr.samples}
    for cp in tr.checkpoints:
        assert cp.inflight == tuple(sample[(cp.step, lane)].inflight for lane in tr.lanes)
        assert cp.records == sum(sample[(cp.step, lane)].inflight_records for lane in tr.lanes)
        assert all(0.0 <= ph < 1.0 for ph in cp.phase)
        assert cp.nbytes > 0


def test_flush_zero_is_refused_on_a_reordering_plan() -> None:
    with pytest.raises(FlushArmIllegal, match="flush_every_k_chunks"):
        flush_arm(replace(CFG, k=0), 10)
    rows = flush_sweep(CFG, [0, 2], [32], 50)
    assert isinstance(rows[0], str) and "refused" in rows[0]
    assert not isinstance(rows[1], str) and rows[1].k == 2


def test_flush_trade_off_directions() -> None:
    lo, hi = flush_arm(replace(CFG, k=1), 300), flush_arm(replace(CFG, k=16), 300)
    assert lo.items == hi.items == 300
    assert hi.padding < lo.padding  # fewer forced flushes, fuller bins
    assert hi.displacement > lo.displacement  # a fuller shuffle window
    assert hi.peak_inflight > lo.peak_inflight  # ...paid in inflight chunks
    assert hi.replay_max > lo.replay_max  # ...and in replay
    assert hi.ckpt_bytes_max > lo.ckpt_bytes_max
    assert 0.0 <= lo.padding < 1.0 and -1.0 <= hi.spearman <= 1.0


def test_spearman() -> None:
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert spearman([1, 2, 3, 4, 5], [2, 1, 4, 3, 5]) == pytest.approx(0.8)
    with pytest.raises(ConfigError):
        spearman([1], [1])


def test_config_is_validated() -> None:
    with pytest.raises(ConfigError, match="chunk_size"):
        AnalysisConfig(chunk_size=0)
    with pytest.raises(ConfigError, match="repeat"):
        drift_run(replace(CFG, repeat=False), 10)

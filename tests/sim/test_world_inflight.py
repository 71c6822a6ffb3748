"""Every simulator seed checks each cut's inflight chunks against sim.invariants.inflight_bound
(demand-paced feeding, zephon_ref's default), DataLoader workers > 0 included; an engine that
stops evicting fails the seed."""

from __future__ import annotations

import pytest

from sim.runs import run_seed


@pytest.mark.parametrize("workers", [1, 3])
def test_a_seed_checks_the_bound_at_every_cut(workers: int) -> None:
    r = run_seed(3, workers=workers, steps=40, faults="crash,resize", mid_step=4)
    assert r.ok, r.problems
    assert r.probes.get("mid_step_checkpoint", 0) > 0  # mid-step cuts were checked too


def test_an_engine_that_stops_evicting_fails_the_seed(monkeypatch: pytest.MonkeyPatch) -> None:
    from zephon_ref.engine import completion

    monkeypatch.setattr(completion.LaneTracker, "_evict_epochs", lambda self, pinned_cid: None)
    r = run_seed(3, workers=2, steps=40, faults="none", lineage=False)
    assert any("bounded inflight" in p and "more than the bound" in p for p in r.problems), r.problems

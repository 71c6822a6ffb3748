"""Bounded recovery on a long run (seed 000): the inflight bound holds at every checkpoint.

The notebooks' pipeline (map to token ids, pack_sequences(256, num_bins=4), shuffle(64),
ensure_mixture, batch(4); chunk_size 32, flush_every_k_chunks=2, repeat policy: it never ends)
runs LONG items under the default, demand-paced feeding, with a checkpoint after every item
checked against :func:`sim.invariants.inflight_bound`: 2,000 items under the ci and dev
profiles, 100,000 under nightly.  Under round-robin feeding the same run reports how the worst
lane's inflight set grows (no bound exists to check), and an engine that stops evicting fails.
"""

from __future__ import annotations

import pytest

from properties import profiles
from sim import invariants as inv
from sim.analysis import AnalysisConfig, build_pipeline

LONG = 100_000 if profiles.active() == "nightly" else 2_000
K, CHUNK = 2, 32


def _worst_inflight(cfg: AnalysisConfig, items: int, *, runner: str = "inline", every: int = 1,
                    bound: int | None = None) -> tuple[list[tuple[int, int]], list[str]]:
    """Run ``items`` items; checkpoint every ``every`` items: (growth points, first bound problem)."""
    p = build_pipeline(cfg).options(runner=runner, op_queue_capacity=8)
    worst, points, problems = 0, [], []
    for i, _ in enumerate(p, start=1):
        if i % every == 0:
            state = p.checkpoint()
            counts = {int(lane): len(chunks) for lane, chunks in state["inflight"].items()}
            worst = max(worst, *counts.values())
            if bound is not None and not problems:
                problems = [
                    f"after {i} items: {m}" for m in inv.bounded_inflight_problems([counts], bound=bound)
                ]
                if problems:
                    break
        if i & (i - 1) == 0 or i == items:
            points.append((i, worst))
        if i >= items:
            break
    return points, problems


@pytest.mark.parametrize(("runner", "lanes", "items"), [("inline", 2, LONG), ("inline", 8, LONG // 4),
                                                        ("threads", 2, LONG // 4)])
def test_the_bound_holds_at_every_checkpoint_of_a_long_run(runner: str, lanes: int, items: int) -> None:
    window = 0 if runner == "inline" else 8
    bound = inv.inflight_bound(k=K, monotone=False, depth_samples=window, min_chunk=CHUNK)
    points, problems = _worst_inflight(
        AnalysisConfig(lanes=lanes, k=K, chunk_size=CHUNK), items, runner=runner, bound=bound
    )
    assert not problems, problems[0]
    assert points[-1][0] == items, "the run ended early"


def test_round_robin_feeding_reports_growth_instead_of_a_bound() -> None:
    points, _ = _worst_inflight(AnalysisConfig(lanes=2, k=K, chunk_size=CHUNK, feeding="round_robin"), LONG)
    summary = inv.inflight_growth(points)
    print(f"round-robin feeding, notebooks' pipeline, 2 lanes: {summary}")
    bound = inv.inflight_bound(k=K, monotone=False, depth_samples=0, min_chunk=CHUNK)
    assert points[-1][1] > 2 * bound, summary  # it grows past any fixed multiple of the demand bound


def test_an_engine_that_stops_evicting_fails_the_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    from zephon_ref.engine import completion

    monkeypatch.setattr(completion.LaneTracker, "_evict_epochs", lambda self, pinned_cid: None)
    bound = inv.inflight_bound(k=K, monotone=False, depth_samples=0, min_chunk=CHUNK)
    _, problems = _worst_inflight(AnalysisConfig(lanes=2, k=K, chunk_size=CHUNK), 400, bound=bound)
    assert problems and "more than the bound" in problems[0]

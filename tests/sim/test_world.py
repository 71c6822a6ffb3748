"""The simulated job: seeded runs with whole-job crashes and restarts on other rank counts
check clean, the same seed gives the same fingerprint, and planted bugs are caught."""

from __future__ import annotations

import functools
from typing import Any

import pytest

from properties.pipelines import PipelineConfig, build_pipeline, item_view
from sim.choices import SeededChoices
from sim.world import Event, World, WorldConfig, check_run, reference_steps
from zephon_ref.engine import core

CFG = PipelineConfig(
    chain=[("pack_sequences", {"max_length": 48, "algorithm": "first_fit", "num_bins": 4}),
           ("shuffle", {"buffer_size": 8, "seed": 3}), ("batch", {"microbatch_size": 2})],
    layout={"web": (200, 150), "code": (150,), "books": (80,)}, source_kwargs={"chunk_size": 8, "seed": 1},
    options={"runner": "inline", "canonical_replicas": 4, "flush_every_k_chunks": 2})
WORLD = WorldConfig(canonical_replicas=4, ranks=2, steps=40, checkpoint_every=3, crash=(1, 700),
                    restart_ranks=(1, 2, 4))
build = functools.partial(build_pipeline, "zephon_ref", CFG)


def view(x: Any) -> str:
    return repr(item_view(x))


def simulate(seed: int) -> World:
    w = World(WORLD, build, SeededChoices(seed), view=view)
    w.run()
    return w


@pytest.fixture(scope="module")
def reference() -> list[Any]:
    return reference_steps(build, view=view)


def test_seeded_runs_with_crashes_and_resizes_check_clean(reference: list[Any]) -> None:
    kinds: dict[str, int] = {}
    sizes = set()
    for seed in range(12):
        w = simulate(seed)
        report = check_run(w.history, reference)
        assert report.ok, (
            f"seed {seed}: {report.problems[:3]} (reproduce: python -m pytest {__file__} -k seed)"
        )
        for e in w.history:
            kinds[e.kind] = kinds.get(e.kind, 0) + 1
            if e.kind == "restore" and e.step > 0:
                kinds["restore from a checkpoint"] = kinds.get("restore from a checkpoint", 0) + 1
                sizes.add(e.detail)
    # coverage: the sweep really crashed, restored from checkpoints and changed the rank count
    assert kinds.get("restore from a checkpoint", 0) >= 5 and kinds.get("checkpoint", 0) >= 10, kinds
    assert len(sizes) >= 2, sizes


def test_the_same_seed_gives_the_same_fingerprint() -> None:
    assert simulate(5).fingerprint() == simulate(5).fingerprint()
    assert simulate(5).fingerprint() != simulate(6).fingerprint()


def test_the_checker_flags_a_skipped_and_a_repeated_step(reference: list[Any]) -> None:
    good = [Event(0, "step", i + 1, s) for i, s in enumerate(reference[:4])]
    assert check_run(good, reference).ok
    skipped = good[:1] + [Event(0, "step", 2, reference[2])]
    assert "lane" in check_run(skipped, reference).problems[0]
    repeated = [*good[:2], Event(0, "restore", 1, 2), Event(0, "step", 2, reference[0])]
    assert not check_run(repeated, reference).ok
    swapped = [good[0], Event(0, "step", 2, reference[1][:1] + reference[2][1:2] + reference[1][2:])]
    assert not check_run(swapped, reference).ok


def test_a_planted_bug_is_caught_within_the_seed_budget(monkeypatch: pytest.MonkeyPatch,
                                                        reference: list[Any]) -> None:
    """Canary: a restore that forgets the replay cursors (every lane replays its whole inflight
    prefix again) must be caught by some seed of the budget."""
    orig = core.Engine._load

    def forgetful(self: Any, state: Any) -> Any:
        targets = orig(self, state)
        return {lane: None for lane in targets}

    monkeypatch.setattr(core.Engine, "_load", forgetful)
    caught = [seed for seed in range(12) if not check_run(simulate(seed).history, reference).ok]
    assert caught, "no seed of 12 caught a restore that drops the replay targets"


def test_the_event_budget_grows_with_lanes_and_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    """Regression: run() had a fixed budget of 5,000,000 events, so a 64-rank x 512-lane x 2,000-step
    seed (about 47 events per lane and step, ~48 M in all) stopped with "expected the job to end"
    although nothing was wrong.  The default now scales with canonical_replicas x steps; a budget
    too small for the job still stops it with that error."""
    events = simulate(0).kernel.events_run
    per_lane_step = events / (WORLD.canonical_replicas * WORLD.steps)
    monkeypatch.setattr(World, "EVENTS_FLOOR", 0)
    monkeypatch.setattr(World, "EVENTS_PER_LANE_STEP", int(per_lane_step) // 2)  # half of what the job takes
    with pytest.raises(RuntimeError, match="expected the job to end within"):
        simulate(0)
    monkeypatch.setattr(World, "EVENTS_PER_LANE_STEP", int(per_lane_step) * 2)
    assert simulate(0).kernel.events_run == events  # the same run, within a budget derived from its size
    w = World(WORLD, build, SeededChoices(0), view=view)
    with pytest.raises(RuntimeError, match="within 10 events"):
        w.run(max_events=10)

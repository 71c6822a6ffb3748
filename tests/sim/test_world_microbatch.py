"""A restart or planned resize may change the per-device micro-batch size (seed 002: "The same
holds when you change the per-device microbatch size ... the round-robin still cycles the same
lanes producing the same data"), and the checker then compares records, not batches.

The size is drawn through the run's choices (``restart/microbatch``, ``nemesis/resize-microbatch``),
on in half the derived configurations (``restart_microbatch``), counted by the probes
``restore_microbatch_changed`` and ``restore_microbatch_changed_remapped``; planted bugs (a new
incarnation that keeps the old size, a restore that loses a lane's partial batch) are caught."""

from __future__ import annotations

from typing import Any

import pytest

from sim.history import Event, check_history
from sim.runs import FIXED_KNOBS, derive_config, run_seed, run_seed_world
from sim.workloads import Workload
from sim.world import WorldConfig
from zephon_ref.ops import replay_filter

# crashes and resizes with mid-step cuts and drop_last: seed 0 of these drains with 4 changed restores,
# all of them on another rank count, and 2 mid-step ones (measured; the test asserts it)
CHANGES: dict[str, Any] = {"drop_last": True, "restart_microbatch": [1, 2, 4], "faults": "crash,resize",
                           "crash": [1, 300], "max_crashes": 3, "mid_step": 6}


def _hist(*steps: tuple[tuple[int, tuple[str, ...]], ...], mb2: int = 1,
          end: str = "end-of-data") -> list[Event]:
    """Base micro-batch 2 on one rank: the first step, a checkpoint, a restore on 2 ranks with
    micro-batch ``mb2``, then ``steps`` (each participant owning one lane)."""
    ev = [Event(0, "start", 0, 1, extra={"microbatch": 2}),
          Event(1, "step", 1, ((0, ("a0", "a1")), (1, ("b0", "b1"))), extra={"order": ((0, 1),)}),
          Event(2, "checkpoint", 1, 1, extra={"generation": 1, "dp": 1, "mid_step": 0}),
          Event(3, "start", 1, 2, extra={"microbatch": mb2}),
          Event(4, "restore", 1, 2, extra={"generation": 1, "intact": True, "mid_step": 0, "cut_dp": 1,
                                           "microbatch": mb2})]
    for i, step in enumerate(steps):
        order = tuple((lane,) for lane, _ in step)
        ev.append(Event(5 + i, "step", 2 + i, step, extra={"order": order}))
    return [*ev, Event(99, "end", 1 + len(steps), end)]


REF = [((0, ("a0", "a1")), (1, ("b0", "b1"))), ((0, ("a2", "a3")), (1, ("b2", "b3")))]
RECORDS = {0: ("a0", "a1", "a2", "a3"), 1: ("b0", "b1", "b2", "b3")}


def test_the_checker_compares_records_across_a_microbatch_change() -> None:
    good = _hist(((0, ("a2",)), (1, ("b2",))), ((0, ("a3",)), (1, ("b3",))))
    assert check_history(good, REF, records=RECORDS).ok
    # the item-unit checker would have called this a changed lane: the batches differ from the reference's
    assert check_history(good, REF, records=RECORDS).steps_checked == 3

    def kinds(hist: list[Event], **kw: Any) -> list[str]:
        return [w.kind for w in check_history(hist, REF, records=RECORDS, **kw).witnesses]

    # a lost record (the lane's partial batch dropped at the restore)
    assert "lost" in kinds(_hist(((0, ("a3",)), (1, ("b2",))), ((1, ("b3",)), (0, ("a3",)))))
    # the new incarnation kept the old size: batches of 2 under micro-batch 1
    assert kinds(_hist(((0, ("a2", "a3")), (1, ("b2", "b3"))))) == ["batch-size"]
    # a lane missing from a step that comes back later (lanes out of their rounds)
    assert kinds(_hist(((0, ("a2",)), (0, ("a3",))), ((1, ("b2",)), (1, ("b3",))))) == ["global-step"]
    # drop_last: exactly m per batch, and a drained run may end short by less than the last size only
    assert kinds(_hist(((0, ("a2",)), (1, ("b2",)))), drop_last=True) == ["lost", "lost"]
    assert check_history(_hist(mb2=4), REF, records=RECORDS, drop_last=True).ok  # 2 left < 4: dropped
    assert kinds(_hist(((0, ("a2",)), (1, ("b2",))), mb2=4), drop_last=True) == ["batch-size"]
    # a changed size needs per-record views (an item's view as one string cannot be regrouped)
    with pytest.raises(ValueError, match="per-record views"):
        check_history(_hist(((0, "a2"), (1, "b2"))), REF, records=RECORDS)
    # not drained: a prefix suffices
    assert check_history(_hist(((0, ("a2",)), (1, ("b2",))), end="steps"), REF, records=RECORDS).ok


def test_the_size_change_is_drawn_by_the_seed_and_off_in_the_pinned_knobs() -> None:
    drawn = [derive_config(seed)["restart_microbatch"] for seed in range(200)]
    assert 60 < sum(bool(d) for d in drawn) < 140
    for seed, sizes in enumerate(drawn):
        if sizes:
            mb = derive_config(seed)["microbatch_size"]
            assert sizes == sorted({max(1, mb // 2), mb, 2 * mb})
    assert FIXED_KNOBS["restart_microbatch"] == []
    with pytest.raises(ValueError, match="restart_microbatch"):
        WorldConfig(canonical_replicas=4, ranks=2, steps=5, restart_microbatch=(0, 2), microbatch_size=2)
    with pytest.raises(ValueError, match="restart_microbatch"):
        WorldConfig(canonical_replicas=4, ranks=2, steps=5, restart_microbatch=(1, 2))  # no size to leave


def test_microbatch_changes_check_clean_reach_the_probes_and_replay() -> None:
    r, world = run_seed_world(0, **CHANGES)
    assert r.ok, r.problems[:2]
    assert r.lineage == "ok"  # drained under drop_last: the excused losses are the undelivered tail
    assert r.probes["restore_microbatch_changed"] >= 2
    assert r.probes["restore_microbatch_changed_remapped"] >= 1
    assert r.probes["restore_mid_step"] >= 1
    labels = {d.label for d in world.choices.record}
    assert {"restart/microbatch", "nemesis/resize-microbatch"} & labels
    sizes = {e.extra["microbatch"] for e in world.history if e.kind == "start"}
    assert len(sizes) >= 2, sizes
    assert run_seed(0, **CHANGES).fingerprint == r.fingerprint


def test_an_incarnation_that_keeps_the_old_size_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """Planted bug: the pipeline of a new incarnation ignores the micro-batch size it was given."""
    real = Workload.build

    def old_size(self: Workload, *, microbatch_size: int | None = None, **topology: Any) -> Any:
        return real(self, **topology)

    monkeypatch.setattr(Workload, "build", old_size)
    r = run_seed(0, **CHANGES)
    assert not r.ok and r.witnesses[0].kind == "batch-size", r.problems[:2]


def test_a_restore_that_loses_a_lanes_partial_batch_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """Planted bug: on replay, the records after a lane's target in the same push (the lane's
    partial micro-batch at the cut, which the restored batch operator regroups) are dropped."""
    real = replay_filter.ReplayFilterAccumulator.push_many

    def drop_partial(self: Any, elems: Any) -> Any:
        out: list[Any] = []
        released: set[int] = set()
        for rec in elems:
            lane = rec.meta.lane_id
            if lane in released and not rec.meta.tombstone:
                continue
            waiting = self.awaiting(lane) is not None
            for batch, _ in real(self, [rec]):
                out.extend(batch)
            if waiting and self.awaiting(lane) is None:
                released.add(lane)
        return [(out, 0)] if out else []

    monkeypatch.setattr(replay_filter.ReplayFilterAccumulator, "push_many", drop_partial)
    r = run_seed(0, **CHANGES)
    assert not r.ok and "lost" in {w.kind for w in r.witnesses}, r.problems[:2]

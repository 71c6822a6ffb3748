"""Canary mutants for the simulator: each plants one realistic bug in the engine or the
round protocol (by monkeypatch) and the simulator must catch it within a fixed budget of
seeds (seeds 0, 1, 2, ... in order).  A canary that survives its budget fails its test:
the simulator has gone blind to that class of bug.

* engine canaries run the simulated job (sim.world.World, seeded crashes and restarts on
  other rank counts) and its checker (check_run against an uninterrupted run); an
  exception the real engine raises on the mutant's state (its own refusal) counts as a
  catch too, and the test says which it was;
* the protocol canary runs the exhaustive explorer (sim.explore) over a two-participant
  round (its budget counts paths) and the scale driver (sim.scale, its budget counts seeds).

Budgets measured when this file was written (smallest number of seeds from 0 that caught
each canary; run with -s to see them again, BUDGET_SEEN collects them):

    (a) replay filter matches <= instead of ==            1 seed    checker: lane stream differs
    (b) epoch evicted one step early                      2 seeds   the engine refuses the state on
                                                                    restore (StateFormatError)
    (c) round-robin pointer not restored                  1 seed    checker: global step set and
                                                                    participant interleaving differ
                                                                    (needs a mid-step cut restored on
                                                                    the same rank count)
    (d) trailing boundary sentinel not re-injected        1 seed    checker: lane stream differs
    (e) checkpoint counts produced, not delivered, items  1 seed    checker: lane stream differs

(Before World could cut a checkpoint mid-step, (c) survived: at a step boundary the pointer is
at the first lane anyway, which is what the mutant restores.  The WORLD below now takes
mid-step cuts (1 in 6 deliveries) and crashes more often (1 in 400 participant events, was
700); with it a, d and e are caught by seed 1 instead of seed 2.)
    (f) follower's ack accepted for a stale round         explorer: path 1 of a bounded scope;
                                                                    scale driver: 1 seed

BUDGET is what CI allows per engine canary.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Hashable
from typing import Any

import pytest

from properties.pipelines import item_view
from properties.worlds import CANARY_WORLD, canary_build
from sim.choices import Choices, SeededChoices
from sim.cluster import Cluster, topology_states
from sim.explore import ScenarioFailed, explore
from sim.scale import ScaleConfig, star_round
from sim.world import World, check_run, reference_steps
from zephon_ref.coordination import protocol
from zephon_ref.coordination.protocol import Finish, Follower, Leader, RoundConfig
from zephon_ref.engine import completion, core, lanes
from zephon_ref.engine.stage import is_sentinel
from zephon_ref.ops import replay_filter
from zephon_ref.types import flush_sentinel

WORLD, build = CANARY_WORLD, canary_build  # properties/worlds.py

BUDGET = 6  # seeds per engine canary in CI (each is caught by seed 1 or 2)
BUDGET_SEEN: dict[str, int] = {}  # filled in by the runs below, printed with -s


def _view(x: Any) -> str:
    return repr(item_view(x))


@functools.cache
def _reference() -> tuple[Any, ...]:
    return tuple(reference_steps(build, view=_view))


def first_catch(budget: int) -> tuple[int, str] | None:
    """The first seed (counting from 0) whose run the checker flags or the engine refuses."""
    reference = list(_reference())
    for seed in range(budget):
        world = World(WORLD, build, SeededChoices(seed), view=_view)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                world.run()
        except Exception as exc:  # the engine refused the mutant's own state: caught
            return seed + 1, f"raised {type(exc).__name__}"
        report = check_run(world.history, reference)
        if not report.ok:
            return seed + 1, f"checker: {report.problems[0][:120]}"
    return None


# ---------------------------------------------------------------- engine mutants


def _mut_filter_le(monkeypatch: pytest.MonkeyPatch) -> None:
    """(a) The replay filter matches its target with <= instead of ==: the first replayed
    record of a lane ends the filter, so the rest of the delivered prefix comes again."""
    def push_many(self: Any, elems: Any) -> Any:
        out: list[Any] = []
        for rec in elems:
            target = self._pending.get(rec.meta.lane_id)
            if target is None or rec.meta.tombstone:
                out.append(rec)
                continue
            if rec.meta.cursor <= target:  # the mutant: equality intended
                del self._pending[rec.meta.lane_id]
            out.extend(replay_filter.tombstones_for_record(rec))
        return [(out, 0)] if out else []
    monkeypatch.setattr(replay_filter.ReplayFilterAccumulator, "push_many", push_many)


def _mut_evict_early(monkeypatch: pytest.MonkeyPatch) -> None:
    """(b) An epoch is evicted one step early: the eviction walk counts the boundary chunk
    itself (cid <= b) into the epoch the boundary closes, so the first chunk of the next
    epoch leaves the checkpoint one epoch before its records are all delivered."""
    def _evict_epochs(self: Any, pinned_cid: int | None) -> None:
        stream = self.stream
        inflight = sorted(stream.inflight)
        queued: list[int] = []
        for b in list(stream.boundaries):
            epoch = [cid for cid in inflight if cid < b and cid not in queued]
            if not epoch:
                continue
            if pinned_cid is not None and pinned_cid in epoch:
                break
            if any(self.done.get(cid, 0) < len(stream.inflight[cid]) for cid in epoch):
                break
            queued.extend(epoch)
            if b in stream.inflight and b not in queued:  # the mutant: the epoch is [.., b) only
                queued.append(b)
        if queued:
            for cid in queued:
                self.bits.pop(cid, None)
                self.done.pop(cid, None)
            stream.evict(queued)
    monkeypatch.setattr(completion.LaneTracker, "_evict_epochs", _evict_epochs)


def _mut_rr_not_restored(monkeypatch: pytest.MonkeyPatch) -> None:
    """(c) A restore drops the tail multiplexer's round-robin pointer (rr_next_idx) and
    restarts the interleaving at the first owned lane."""
    orig = core.Engine._load

    def _load(self: Any, state: Any) -> Any:
        out = orig(self, state)
        self.rr_next_idx = {self._rr_key: 0}
        return out
    monkeypatch.setattr(core.Engine, "_load", _load)


def _mut_no_trailing_sentinel(monkeypatch: pytest.MonkeyPatch) -> None:
    """(d) On replay, a boundary recorded after the last inflight chunk (the epoch closed
    right before the checkpoint) is not re-injected as a flush sentinel."""
    def items(self: Any) -> Any:
        announced: list[str] = []
        replay = sorted(self.inflight)
        bset = set(self.boundaries)
        for cid in replay:
            if cid in bset:
                yield flush_sentinel(self.lane, cid)
            yield from self._chunk_items(cid, self.inflight[cid], announced)
        # the mutant: the trailing boundaries (b > last replayed cid) are not yielded here
        while True:  # (LaneStream holds no lock: a runner with threads serializes through Engine.guard)
            chunk = self.source.next_chunk()
            if chunk is None:
                self.exhausted = True
                return
            cid = self.next_cid
            self.next_cid += 1
            self.inflight[cid] = chunk
            self.mixtures[cid] = self._mixture_of(chunk)
            self.chunks_in_epoch += 1
            boundary = None
            if self.k > 0 and self.chunks_in_epoch >= self.k:
                boundary = cid + 1
                self.boundaries.append(boundary)
                self.chunks_in_epoch = 0
            yield from self._chunk_items(cid, chunk, announced)
            if boundary is not None:
                yield flush_sentinel(self.lane, boundary)
    monkeypatch.setattr(lanes.LaneStream, "items", items)


def _mut_count_produced(monkeypatch: pytest.MonkeyPatch) -> None:
    """(e) Completion is tracked when the tail *produces* an item, not when it is delivered:
    a checkpoint then counts items still waiting in the multiplexer as consumed."""
    orig_run_stage, orig_notify = core.Engine.run_stage, core.Engine._notify

    def run_stage(self: Any, i: int) -> bool:
        before = len(self._outbox)
        ran = orig_run_stage(self, i)
        for x in list(self._outbox)[before:]:
            if not is_sentinel(x):
                orig_notify(self, x)
        return ran
    monkeypatch.setattr(core.Engine, "run_stage", run_stage)
    monkeypatch.setattr(core.Engine, "_notify", lambda self, x: None)


ENGINE_CANARIES: dict[str, Callable[[pytest.MonkeyPatch], None]] = {
    "a: replay filter matches <= instead of ==": _mut_filter_le,
    "b: epoch evicted one step early": _mut_evict_early,
    "c: round-robin pointer not restored": _mut_rr_not_restored,
    "d: trailing boundary sentinel not re-injected": _mut_no_trailing_sentinel,
    "e: checkpoint counts produced, not delivered, items": _mut_count_produced,
}


def test_the_unmutated_engine_checks_clean_over_the_budget() -> None:
    assert first_catch(BUDGET) is None


@pytest.mark.parametrize("name", sorted(ENGINE_CANARIES))
def test_engine_canary_is_caught_by_the_simulator(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _reference()  # the uninterrupted run is computed on the real engine, before the mutant
    ENGINE_CANARIES[name](monkeypatch)
    caught = first_catch(BUDGET)
    assert caught is not None, f"canary survived {BUDGET} seeds: {name!r}"
    BUDGET_SEEN[name] = caught[0]
    print(f"\n{name}: caught with {caught[0]} seed(s) ({caught[1]})")


def test_the_lost_pointer_is_seen_by_the_interleaving_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """(c) again: the run that catches it must also show the new, finer check (a participant's lanes
    out of the reference's round-robin order inside a step), not only a changed step set."""
    reference = list(_reference())
    _mut_rr_not_restored(monkeypatch)
    for seed in range(BUDGET):
        world = World(WORLD, build, SeededChoices(seed), view=_view)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            world.run()
        report = check_run(world.history, reference, seed=seed)
        if not report.ok:
            kinds = {p.kind for p in report.witnesses}
            assert "interleaving" in kinds, report.problems
            assert any(e.kind == "restore" and e.extra.get("mid_step") for e in world.history)
            return
    raise AssertionError(f"canary survived {BUDGET} seeds: round-robin pointer not restored")


# ---------------------------------------------------------------- the protocol mutant


def _mut_stale_ack(monkeypatch: pytest.MonkeyPatch) -> None:
    """(f) Acks are not keyed by round: a follower's ack left over from an earlier round
    (its leader crashed before cleaning up) is accepted for the current one."""
    monkeypatch.setattr(protocol, "ack_prefix", lambda ns, rid: f"{ns}/ack.")
    monkeypatch.setattr(protocol, "ack_key", lambda ns, rid, participant: f"{ns}/ack.{participant}")


NS = "job-0"


def stale_ack_round(choices: Choices) -> Hashable:
    """Leader + one follower (same participant token as a crashed earlier run, whose ack of
    round "r0" is still in storage); every step's order is a decision.  Invariant: the
    leader finishes only after the follower has decoded this round's result."""
    states = topology_states(0, canonical_replicas=2, world_size=2, last_round_id="r0")
    cluster = Cluster()
    cluster.backend.put(protocol.ack_key(NS, "r0", "r1_w0_t"), b"ok")  # the leftover
    cfgs = [RoundConfig(namespace=NS, rank=r, world_size=2, token="t", timeout=10_000, poll=10,
                        round_id="r1" if r == 0 else None) for r in range(2)]
    leader = cluster.add("leader", Leader(states[(0, 0)], cfgs[0], warn_mid_window=False))
    follower = cluster.add("follower", Follower(states[(1, 0)], cfgs[1]))
    fm = follower.machine
    assert isinstance(fm, Follower)

    def key() -> Hashable:
        return (cluster.now, leader.machine.phase.value, fm.phase.value, tuple(sorted(cluster.backend.data)))
    choices.observe(key())
    while cluster.live():
        ready = cluster.runnable()
        if not ready:
            assert cluster.advance(), "deadlock: nobody runnable and nobody sleeping"
            continue
        cluster.step(choices.choose("step", ready))
        if isinstance(leader.outcome, Finish):
            assert fm.merged is not None, "the leader finished before the follower decoded the result"
        choices.observe(key())
    return key()


def both_done(key: Any) -> bool:
    return bool(key[1] == key[2] == "done")


EXPLORE_PATHS = 400  # the scope is too large to finish in CI (over 5,000 paths): a bounded prefix


def test_the_real_protocol_passes_the_stale_ack_scenario_on_every_explored_path() -> None:
    report = explore(stale_ack_round, is_final=both_done, max_paths=EXPLORE_PATHS, strict=False)
    # no explored run ended anywhere but with both participants done, and none broke the invariant
    assert report.deadlocks == () and report.paths == EXPLORE_PATHS and report.limit == "max_paths"
    assert report.final_states >= 1 and report.distinct_states > 20


def test_protocol_canary_stale_ack_is_caught_by_the_explorer(monkeypatch: pytest.MonkeyPatch) -> None:
    _mut_stale_ack(monkeypatch)
    paths = [0]

    def counted(choices: Choices) -> Hashable:
        paths[0] += 1
        return stale_ack_round(choices)
    with pytest.raises(ScenarioFailed, match="before the follower decoded"):
        explore(counted, is_final=both_done, max_paths=EXPLORE_PATHS, strict=False)
    BUDGET_SEEN["f: stale ack accepted (explorer paths)"] = paths[0]
    print(f"\nf: stale ack accepted: caught by the explorer on path {paths[0]}")
    assert paths[0] <= 50


def test_protocol_canary_stale_ack_is_caught_by_the_scale_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    def violations(seed: int) -> tuple[str, ...]:
        stats, _ = star_round(ScaleConfig(ranks=8, dp_degree=4, seed=seed, max_latency=3,
                                          leftover_acks_of="r0"))
        return stats.violations
    assert all(violations(seed) == () for seed in range(3))
    _mut_stale_ack(monkeypatch)
    for seed in range(BUDGET):
        if violations(seed):
            BUDGET_SEEN["f: stale ack accepted (scale seeds)"] = seed + 1
            print(f"\nf: stale ack accepted: caught by the scale driver with {seed + 1} seed(s)")
            return
    raise AssertionError(f"canary survived {BUDGET} scale seeds: stale ack accepted")

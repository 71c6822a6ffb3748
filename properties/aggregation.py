"""The ``aggregation`` row: the aggregation round's promises (seed 000, "Multi-rank aggregation").

Theory of operation
-------------------
An implementation with the ``aggregation`` feature hands the suite its round machines through
``adapter.round_machine(state, config)`` (a participant's engine state and its
:class:`~zephon_ref.coordination.protocol.RoundConfig`; the machine answers ``apply(event)``
with the next command, as zephon_ref's :func:`~zephon_ref.coordination.protocol.machine_for`).
The row drives one round of a drawn topology over one in-memory store (:class:`sim.cluster.Cluster`:
one atomic storage step at a time, in a drawn order, on a virtual clock): ``world_size`` ranks of
which ``dp_degree`` are data-parallel groups (the others are TP/PP peers: ranks of one DP group own
the same lanes), each with its DataLoader workers, and one drawn fault:

* ``none``: everybody starts at tick 0;
* ``missing``: one participant (never the leader) never calls;
* ``late``: one starts late, well within the round's budget;
* ``too late``: one starts after the budget ran out;
* ``leader crash``: the leader stops (a SIGKILL) after a drawn number of its own steps;
* ``leader failure``: the leader's storage fails (its listing of the shards), so it fails.

Promises checked (the seed's words, read against the outcome of every participant and the store):

1. never a partial merge: a participant that finishes holds the merge of *every* participant's state
   (computed here with :func:`zephon_ref.coordination.merge.merge`), and one finishes only once every
   participant published (a TP/PP peer cannot stand in for a late worker or rank); every finisher
   holds the same state;
2. on time, it completes: with no fault, or a late participant within the budget, every participant
   finishes;
3. a missing (or too late) participant fails the round, and the leader's timeout names its lanes
   (and its rank, when the rank has no other participant); nothing readable as a result is left;
4. a failing leader publishes a failure notice: followers fail with LeaderFailed before the budget
   runs out (not by waiting it out), and nobody finishes; a crashed leader leaves no finisher unless
   its result was published (then promise 1 holds for it);
5. every failure is typed (a ZephonRefError).

What may not live here: the protocol (zephon_ref/coordination/protocol.py), the merge rules.
"""

from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

from sim.cluster import Cluster, Participant, topology_states
from sim.storage import FailingBackend
from zephon_ref.coordination.merge import merge
from zephon_ref.coordination.protocol import Abort, Finish, RoundConfig
from zephon_ref.errors import AggregationTimeout, LeaderFailed, ZephonRefError

__all__ = ["FAULTS", "RoundCase", "round_cases", "round_problems"]

#: the faults a round is drawn with (see the module docstring)
FAULTS = ("none", "missing", "late", "too late", "leader crash", "leader failure")
NS = "run-0"
TIMEOUT = 1000  # ticks: one budget for the whole round
POLL = 10
MAX_STEPS = 20_000


@dataclass(frozen=True)
class RoundCase:
    """One drawn round: the topology, the fault, and the order participants take their steps."""

    seed: int
    canonical_replicas: int
    dp_degree: int
    peers: int  # ranks per DP group (TP x PP): world_size = dp_degree * peers
    workers: int
    fault: str
    victim: int  # index (mod the followers) of the participant the fault hits
    when: int  # late: the start tick; leader crash: the leader's steps before it stops
    picks: tuple[int, ...]

    @property
    def world_size(self) -> int:
        return self.dp_degree * self.peers


@st.composite
def round_cases(draw: Any) -> RoundCase:
    """Small topologies with TP/PP peers, workers and one fault, in a drawn schedule."""
    c = draw(st.integers(1, 6), label="canonical_replicas")
    dp = draw(st.integers(1, c), label="dp_degree")
    peers = draw(st.integers(1, 3), label="peers per DP group")
    workers = draw(st.integers(1, 2), label="workers")
    fault = draw(st.sampled_from(FAULTS), label="fault")
    when = 0
    if fault == "late":
        when = draw(st.integers(1, TIMEOUT // 2), label="start tick")
    elif fault == "too late":
        when = draw(st.integers(TIMEOUT + 1, 2 * TIMEOUT), label="start tick")
    elif fault == "leader crash":
        when = draw(st.integers(0, 12), label="leader steps before the crash")
    victim = draw(st.integers(0, 64), label="victim")
    picks = tuple(draw(st.lists(st.integers(0, 7), min_size=1, max_size=8), label="schedule"))
    return RoundCase(seed=draw(st.integers(0, 4), label="state seed"), canonical_replicas=c, dp_degree=dp,
                     peers=peers, workers=workers, fault=fault, victim=victim, when=when, picks=picks)


def _config(rank: int, worker: int, ws: int) -> RoundConfig:
    return RoundConfig(namespace=NS, rank=rank, worker=worker, world_size=ws, token=f"t{rank}w{worker}",
                       timeout=TIMEOUT, poll=POLL, stale_grace=100,
                       round_id="rid1" if (rank, worker) == (0, 0) else None)


def _lanes(state: dict[str, Any]) -> set[int]:
    return {int(lane) for lane in state["lane_emitted"]}


def round_problems(adapter: Any, case: RoundCase) -> list[str]:
    """Drive one round of ``case`` with ``adapter``'s machines; the promises it broke."""
    ws = case.world_size
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # mid-window states are this row's input, not its subject
        states = topology_states(case.seed, canonical_replicas=case.canonical_replicas, world_size=ws,
                                 dp_degree=case.dp_degree, workers=case.workers)
    slots = sorted(states)
    followers = [s for s in slots if s != (0, 0)]
    victim = followers[case.victim % len(followers)] if followers else None
    if victim is None and case.fault in ("missing", "late", "too late"):
        case = dataclasses.replace(case, fault="none")  # the leader alone: nobody else to miss
    failing = case.fault == "leader failure"
    backend = FailingBackend(
        (lambda op, key: op == "list" and ".shard." in key) if failing else None
    )
    cl = Cluster(backend=backend)
    members: dict[tuple[int, int], Participant] = {}
    started_at: dict[tuple[int, int], int] = {}
    absent = victim if case.fault in ("missing", "late", "too late") else None

    def add(slot: tuple[int, int]) -> None:
        machine = adapter.round_machine(states[slot], _config(*slot, ws))
        members[slot] = cl.add(f"r{slot[0]}w{slot[1]}", machine)
        started_at[slot] = cl.now

    for slot in slots:
        if slot != absent:
            add(slot)
    leader_steps = 0
    joined: set[tuple[int, int]] = set()  # followers whose shard was in the store at some point
    ended_at: dict[tuple[int, int], int] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # mid-window states are this row's input, not its subject
        for i in range(MAX_STEPS):
            late_pending = case.fault in ("late", "too late") and absent is not None and absent not in members
            if late_pending and absent is not None and cl.now >= case.when:
                add(absent)
                late_pending = False
            if not cl.live() and not late_pending:
                break
            ready = cl.runnable()
            if not ready:
                waits = [p.pending.until for p in cl.live() if p.started and hasattr(p.pending, "until")]
                nxt = min(waits) if waits else None
                if late_pending and (nxt is None or nxt > case.when):
                    cl.advance(case.when - cl.now)
                elif not cl.advance():
                    break
                continue
            p = ready[case.picks[i % len(case.picks)] % len(ready)]
            if p is members.get((0, 0)) and case.fault == "leader crash":
                if leader_steps == case.when:
                    cl.crash(p)
                    continue
                leader_steps += 1
            cl.step(p)
            slot = next(s for s, m in members.items() if m is p)
            if slot != (0, 0) and f"{NS}/rid1.shard.{_config(*slot, ws).participant}" in cl.backend.data:
                joined.add(slot)
            if p.outcome is not None:
                ended_at.setdefault(slot, cl.now)
        else:
            return [f"{case}: the round did not end within {MAX_STEPS} steps"]
        want = merge([states[s] for s in slots], warn_mid_window=False)
    return _promises(case, cl, members, (started_at, ended_at, joined), want, states, victim)


def _promises(case: RoundCase, cl: Cluster, members: dict[tuple[int, int], Participant],
              times: tuple[dict[tuple[int, int], int], dict[tuple[int, int], int], set[tuple[int, int]]],
              want: dict[str, Any],
              states: dict[tuple[int, int], dict[str, Any]], victim: tuple[int, int] | None) -> list[str]:
    out: list[str] = []
    started_at, ended_at, joined = times
    where = (f"{case.world_size} ranks ({case.dp_degree} DP groups x {case.peers} peers), {case.workers} "
             f"workers, {case.canonical_replicas} lanes, fault {case.fault!r}"
             + (f" on rank {victim[0]} worker {victim[1]}" if victim and case.fault in FAULTS[1:4] else ""))
    outcomes = {s: p.outcome for s, p in members.items()}
    finished = {s: o for s, o in outcomes.items() if isinstance(o, Finish)}
    aborted = {s: o for s, o in outcomes.items() if isinstance(o, Abort)}
    results = [k for k, v in cl.backend.data.items() if k.endswith(".outcome") and v[:1] == b"R"]
    # 1. never a partial merge, and one result for everybody
    for s, o in sorted(finished.items()):
        if o.merged != want:
            lanes = sorted(int(k) for k in o.merged.get("lane_emitted", {}))
            out.append(f"{where}: rank {s[0]} worker {s[1]} finished with a merge that is not the merge of "
                       f"every participant's state (its lanes {lanes})")
    if finished and case.fault in ("missing", "too late") and victim is not None:
        out.append(f"{where}: {len(finished)} participant(s) finished although rank {victim[0]} worker "
                   f"{victim[1]} never published: the leader closed on a subset")
    # 2. on time, it completes
    if case.fault in ("none", "late"):
        missing = [s for s in sorted(members) if s not in finished]
        if missing or len(members) < len(states):
            s = missing[0] if missing else victim
            o = outcomes.get(s) if s else None
            why = (f"{type(o.error).__name__}: {str(o.error)[:200]}" if isinstance(o, Abort)
                   else "it never finished")
            out.append(f"{where}: every participant was on time, yet rank {s[0] if s else '?'} worker "
                       f"{s[1] if s else '?'} did not finish ({why})")
    # 3. a missing participant fails the round, named
    if case.fault in ("missing", "too late") and victim is not None:
        if results:
            out.append(f"{where}: a result was published without rank {victim[0]} worker {victim[1]}")
        lead = outcomes.get((0, 0))
        if not isinstance(lead, Abort) or not isinstance(lead.error, AggregationTimeout):
            out.append(f"{where}: the leader did not time out waiting (it ended with {lead!r:.200})")
        else:
            err = lead.error
            lanes = _lanes(states[victim])
            alone = not any(s[0] == victim[0] for s in states if s != victim)
            if alone and victim[0] not in err.missing_ranks:
                out.append(f"{where}: the leader's timeout names ranks {list(err.missing_ranks)}, not rank "
                           f"{victim[0]}, which never called")
            if not alone and not lanes <= set(err.missing_lanes):  # a worker of a rank that reported
                out.append(f"{where}: the leader's timeout names lanes {list(err.missing_lanes)}, not the "
                           f"missing worker's {sorted(lanes)}")
    # 4. a failing leader
    if case.fault == "leader failure":
        if finished:
            out.append(f"{where}: {len(finished)} participant(s) finished although the leader's storage "
                       "failed")
        for s in sorted(joined):  # a follower that joined the round sees the notice
            o = outcomes.get(s)
            if not isinstance(o, Abort) or not isinstance(o.error, LeaderFailed):
                got = f"{type(o.error).__name__}: {str(o.error)[:160]}" if isinstance(o, Abort) else repr(o)
                out.append(f"{where}: follower rank {s[0]} worker {s[1]} joined the round and ended with "
                           f"{got}, not the leader's failure notice (LeaderFailed)")
            elif ended_at.get(s, 0) >= started_at[s] + TIMEOUT:
                out.append(f"{where}: follower rank {s[0]} worker {s[1]} waited out the budget (tick "
                           f"{ended_at[s]}) instead of failing at once")
    if case.fault == "leader crash" and finished and not results:
        out.append(f"{where}: a participant finished although the leader crashed before publishing")
    # 5. typed failures
    for s, o in sorted(aborted.items()):
        if not isinstance(o.error, ZephonRefError):
            out.append(f"{where}: rank {s[0]} worker {s[1]} failed untyped: {type(o.error).__name__}")
    return out

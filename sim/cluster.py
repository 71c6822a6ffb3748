"""Step-by-step simulation of N aggregation-round participants over one in-memory backend.

(Moved here from ``zephon_ref.coordination.simulate``: the product package holds no
simulator; this module drives zephon_ref's coordination machines and imports only zephon_ref.)

Theory of operation
-------------------
A :class:`Cluster` holds participants (each a protocol machine and its one
outstanding command) and a virtual clock ``now`` (integer ticks).  One
:meth:`Cluster.step` executes exactly one participant's outstanding command
against the shared :class:`~zephon_ref.coordination.backends.MemoryBackend`
through the runner's own :func:`~zephon_ref.coordination.driver.perform` and
feeds the answer back: that is one atomic storage step.  A participant that
sleeps is runnable only once ``now`` reaches its deadline; when nobody is
runnable, :meth:`Cluster.advance` moves the clock to the earliest wake-up.
:meth:`Cluster.crash` removes a participant mid-round (a SIGKILL: its keys stay).
Which participant runs next is the caller's choice (a test's script, a seeded
generator, or Hypothesis), so every interleaving is reachable.

What may not live here: choice of schedule (the caller's), wall clocks.
"""

from __future__ import annotations

import copy
import functools
from dataclasses import dataclass, field
from typing import Any

from zephon_ref import state as schema
from zephon_ref.coordination.backends import MemoryBackend
from zephon_ref.coordination.driver import perform
from zephon_ref.coordination.protocol import Abort, Command, Finish, Machine, Sleep, Started, Woke
from zephon_ref.state import LANE_FIELDS

__all__ = ["Cluster", "Participant", "contiguous_mapping", "topology_states"]


def contiguous_mapping(canonical_replicas: int, dp_degree: int) -> dict[int, list[int]]:
    """Notes 3.1: DP group g gets the next ``C div D (+1 if g < C mod D)`` lanes."""
    base, rem = divmod(canonical_replicas, dp_degree)
    out: dict[int, list[int]] = {}
    start = 0
    for g in range(dp_degree):
        n = base + (1 if g < rem else 0)
        out[g] = list(range(start, start + n))
        start += n
    return out


def _worker_split(lanes: list[int], workers: int) -> list[list[int]]:
    """Notes 3.1 item 5: ``active`` = largest count <= workers dividing len(lanes)."""
    active = max(1, min(workers, len(lanes)))
    while len(lanes) % active:
        active -= 1
    return [[lane for i, lane in enumerate(lanes) if i % active == w] for w in range(active)]


@functools.lru_cache(maxsize=64)
def _real_state(seed: int, canonical_replicas: int) -> dict[str, Any]:
    """A real engine state of every lane: a small packing + shuffle + batch pipeline cut after a
    number of items that ``seed`` picks (single rank, so it covers all lanes).  The data
    settings do not depend on ``seed``, so every state of one ``canonical_replicas`` shares a
    fingerprint, as the states of one job do."""
    from zephon_ref.pipeline import Pipeline
    from zephon_ref.synthetic import synthetic_corpus
    from zephon_ref.work import StaticMixtureWorkSource

    corpus = synthetic_corpus(seed=7, layout={"web": (40, 30), "code": (30,), "books": (12,)})
    src = StaticMixtureWorkSource(list(corpus.datasets), {"web": 0.6, "code": 0.3, "books": 0.1},
                                  chunk_size=8, seed=1)
    p = (Pipeline(src).tokenize(field="text").pack_sequences(64, algorithm="first_fit", num_bins=2)
         .shuffle(8, seed=3).batch(2)
         .options(runner="inline", canonical_replicas=canonical_replicas, flush_every_k_chunks=2))
    it = iter(p)
    for _ in range(canonical_replicas * (seed % 5)):
        if next(it, None) is None:
            break
    state = p.checkpoint()
    it.close()
    return state


def topology_states(
    seed: int,
    *,
    canonical_replicas: int,
    world_size: int,
    dp_degree: int | None = None,
    workers: int = 1,
    last_round_id: str | None = None,
    reload_count: int = 0,
) -> dict[tuple[int, int], dict[str, Any]]:
    """Consistent per-participant engine states for one topology, keyed by (rank, worker).

    Every participant's lane-keyed fields are those lanes' slices of one real engine
    state (:func:`_real_state`), so ranks in a DP group (rank r is in group ``r mod
    dp_degree``) carry identical delivery state, as they would after a barrier; each
    rank's lanes are split over ``workers`` DataLoader workers as zephon does.  Idle
    workers (beyond ``active``) get no entry: they do not take part in rounds.  Each
    participant state is sealed (:func:`zephon_ref.state.seal`): this builder vouches
    for the restriction.
    """
    d = world_size if dp_degree is None else dp_degree
    mapping = contiguous_mapping(canonical_replicas, d)
    base = _real_state(seed, canonical_replicas)
    out: dict[tuple[int, int], dict[str, Any]] = {}
    for rank in range(world_size):
        g = rank % d
        split = _worker_split(mapping[g], workers)
        for w, lanes in enumerate(split):
            st = copy.deepcopy(base)
            for name in LANE_FIELDS:
                st[name] = {lane: v for lane, v in st[name].items() if lane in lanes}
            st["world"] = {
                "canonical_replicas": canonical_replicas,
                "world_size": world_size,
                "global_rank": rank,
                "dp_degree": d,
                "dp_group_id": g,
                "mapping": {k: list(v) for k, v in mapping.items()},
            }
            st["rr_next_idx"] = {f"{w}/{len(split)}:{','.join(map(str, lanes))}": 0}
            st["last_round_id"] = last_round_id
            st["checkpoint_reload_count"] = reload_count
            out[(rank, w)] = schema.seal(st)
    return out


@dataclass(slots=True)
class Participant:
    name: str
    machine: Machine
    pending: Command | None = None
    crashed: bool = False
    started: bool = False

    @property
    def outcome(self) -> Finish | Abort | None:
        return self.pending if isinstance(self.pending, (Finish, Abort)) else None


@dataclass(slots=True)
class Cluster:
    backend: MemoryBackend = field(default_factory=MemoryBackend)
    now: int = 0
    members: list[Participant] = field(default_factory=list)

    def add(self, name: str, machine: Machine, *, start: bool = False) -> Participant:
        p = Participant(name, machine)
        self.members.append(p)
        if start:
            self.start(p)
        return p

    def start(self, p: Participant) -> None:
        assert not p.started
        p.started = True
        p.pending = p.machine.apply(Started(self.now))

    def runnable(self) -> list[Participant]:
        out = []
        for p in self.members:
            if p.crashed or p.outcome is not None:
                continue
            if not p.started or not isinstance(p.pending, Sleep) or p.pending.until <= self.now:
                out.append(p)
        return out

    def step(self, p: Participant) -> None:
        """Run ``p``'s outstanding command (or start it)."""
        assert not p.crashed and p.outcome is None
        if not p.started:
            self.start(p)
            return
        cmd = p.pending
        assert cmd is not None
        if isinstance(cmd, Sleep):
            assert cmd.until <= self.now, "not runnable yet"
            p.pending = p.machine.apply(Woke(self.now))
        else:
            p.pending = p.machine.apply(perform(cmd, self.backend, now=self.now))

    def advance(self, ticks: int | None = None) -> bool:
        """Move the clock by ``ticks``, or to the earliest wake-up; False if nobody waits."""
        if ticks is not None:
            self.now += ticks
            return True
        waits = [
            p.pending.until
            for p in self.members
            if not p.crashed and p.started and isinstance(p.pending, Sleep)
        ]
        if not waits:
            return False
        self.now = max(self.now, min(waits))
        return True

    def crash(self, p: Participant) -> None:
        p.crashed = True

    def live(self) -> list[Participant]:
        return [p for p in self.members if not p.crashed and p.outcome is None]

    def run(self, *, pick: int = 0, max_steps: int = 1_000_000) -> None:
        """Run to the end, always stepping the ``pick``-th runnable participant (mod count)."""
        for _ in range(max_steps):
            if not self.live():
                return
            ready = self.runnable()
            if not ready:
                if not self.advance():
                    return
                continue
            self.step(ready[pick % len(ready)])
        raise AssertionError("simulation did not finish")  # pragma: no cover

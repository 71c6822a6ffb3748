"""A simulated data-parallel job: ranks stepping real engines on virtual time, crashes, restarts.

Theory of operation
-------------------
A :class:`World` runs one training job over the kernel (:mod:`sim.kernel`) with every
decision taken through a :class:`~sim.choices.Choices`:

* an *incarnation* of the job is ``dp`` ranks, each a real zephon_ref Pipeline built by
  the caller's ``build(**topology)`` and driven step by step through
  :meth:`~zephon_ref.pipeline.Pipeline.engine` (admit / run_stage / deliver, the step
  picked by the choices, its latency drawn from them and scaled by the rank's speed);
* a **global step** is one round over every lane: each rank delivers ``C / dp`` items
  (its lanes in the tail multiplexer's round robin), so the step's set of samples does
  not depend on the topology; the trainer takes the step when every rank has its share;
* every ``checkpoint_every`` steps the job checkpoints at the step boundary: each rank's
  ``local_state()`` goes through zephon_ref's merge and the merged state is *published*
  (a list of generations here; the storage-backed publish comes with the storage faults);
* the nemesis may crash the whole job at any event (exact ratio ``crash``); the job then
  restarts from the newest published generation on a rank count drawn from
  ``restart_ranks`` (the trainer's progress rolls back to that generation's step), or
  from the start when nothing was published.

Everything that happens is appended to :attr:`World.history` as frozen entries; the
checker (:func:`check_run`) rebuilds the stream the trainer consumed, with restores
rolling it back, and compares it with an uninterrupted single-rank run.  Nothing here
re-implements pipeline, lane-mapping or protocol logic: it only calls public methods.
"""

from __future__ import annotations

import hashlib
import json
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sim.choices import Choices
from sim.invariants import Step, global_step_problems, lane_stream_problems, per_lane
from sim.kernel import Kernel
from zephon_ref.coordination.merge import merge
from zephon_ref.ops.base import lane_of

__all__ = ["Event", "RunReport", "World", "WorldConfig", "check_run", "reference_steps"]

View = Callable[[Any], Any]


@dataclass(frozen=True, slots=True)
class WorldConfig:
    canonical_replicas: int
    ranks: int
    steps: int
    checkpoint_every: int = 2
    crash: tuple[int, int] = (0, 1)  # chance per rank event that the whole job crashes
    restart_ranks: tuple[int, ...] = ()  # rank counts a restart may pick (default: the same)
    max_latency: int = 5
    max_crashes: int = 3

    def __post_init__(self) -> None:
        for r in (self.ranks, *self.restart_ranks):
            if r < 1 or self.canonical_replicas % r:
                raise ValueError(f"ranks: expected a divisor of canonical_replicas={self.canonical_replicas}, "
                                 f"received {r}")


@dataclass(frozen=True, slots=True)
class Event:
    """One history entry: ``kind`` in step / checkpoint / crash / restore / end."""

    time: int
    kind: str
    step: int
    detail: Any = None


@dataclass(slots=True)
class _Rank:
    pipeline: Any
    engine: Any
    share: list[Any] = field(default_factory=list)


class World:
    """One simulated job; :meth:`run` drives it to ``cfg.steps`` global steps or the end of data."""

    def __init__(self, cfg: WorldConfig, build: Callable[..., Any], choices: Choices, *,
                 view: View = repr) -> None:
        self.cfg, self.build, self.choices, self.view = cfg, build, choices, view
        self.kernel = Kernel()
        self.history: list[Event] = []
        self.published: list[tuple[int, dict[str, Any]]] = []  # (global step, merged state)
        self.step = 0
        self.crashes = 0
        self.ranks: list[_Rank] = []
        self.incarnation = 0
        self.ended = False

    # -- incarnations -----------------------------------------------------------------------
    def _start(self, dp: int, state: dict[str, Any] | None) -> None:
        self.incarnation += 1
        self.ranks = []
        for rank in range(dp):
            p = self.build(world_size=dp, global_rank=rank, dp_degree=dp, aggregate_dir="/unused-by-the-sim")
            if state is not None:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", RuntimeWarning)
                    p.restore(state)
            self.ranks.append(_Rank(p, p.engine()))
        for rank in range(dp):
            self._schedule(rank, self.incarnation)

    def _schedule(self, rank: int, incarnation: int) -> None:
        delay = self.choices.integer(f"latency/{rank}", 1, self.cfg.max_latency)
        self.kernel.schedule(lambda: self._rank_event(rank, incarnation), after=delay, label=f"rank{rank}")

    # -- events -----------------------------------------------------------------------------
    def _rank_event(self, rank: int, incarnation: int) -> None:
        if incarnation != self.incarnation or self.ended:
            return  # an event of a crashed incarnation
        if self.crashes < self.cfg.max_crashes and self.choices.chance("nemesis/crash", *self.cfg.crash):
            self._crash()
            return
        r = self.ranks[rank]
        per_rank = self.cfg.canonical_replicas // len(self.ranks)
        if len(r.share) < per_rank and not r.engine.finished:
            steps = r.engine.runnable()
            step = "deliver" if "deliver" in steps and self.choices.chance(f"deliver/{rank}", 1, 2) else \
                self.choices.choose(f"step/{rank}", steps)
            if step == "admit":
                r.engine.admit()
            elif step == "deliver":
                x = r.engine.deliver()
                if x is not None:
                    r.share.append((lane_of(x), self.view(x)))
            else:
                r.engine.run_stage(int(step.split(":")[1]))
        self._maybe_take_step()
        if not self.ended:
            self._schedule(rank, incarnation)

    def _maybe_take_step(self) -> None:
        per_rank = self.cfg.canonical_replicas // len(self.ranks)
        if not all(len(r.share) == per_rank or r.engine.finished for r in self.ranks):
            return
        items = [v for r in self.ranks for v in r.share]
        for r in self.ranks:
            r.share = []
        if not items:  # every rank finished: the data ran out
            self._end()
            return
        self.step += 1
        self.history.append(Event(self.kernel.now, "step", self.step, tuple(items)))
        if self.step % self.cfg.checkpoint_every == 0:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                merged = merge([r.pipeline.local_state() for r in self.ranks], warn_mid_window=False)
            self.published.append((self.step, merged))
            self.history.append(Event(self.kernel.now, "checkpoint", self.step, len(self.published)))
        if self.step >= self.cfg.steps:
            self._end()

    def _crash(self) -> None:
        self.crashes += 1
        self.history.append(Event(self.kernel.now, "crash", self.step, len(self.ranks)))
        dp = self.choices.choose("restart/ranks", self.cfg.restart_ranks or (len(self.ranks),))
        if self.published:
            self.step, state = self.published[-1]
            self._start(dp, state)
        else:
            self.step = 0
            self._start(dp, None)
        self.history.append(Event(self.kernel.now, "restore", self.step, dp))

    def _end(self) -> None:
        self.ended = True
        self.history.append(Event(self.kernel.now, "end", self.step))

    def run(self, *, max_events: int = 1_000_000) -> list[Event]:
        self._start(self.cfg.ranks, None)
        self.kernel.run(stop=lambda: self.ended, max_events=max_events)
        if not self.ended:
            raise RuntimeError(f"sim: expected the job to end within {max_events} events, it did not")
        return self.history

    def fingerprint(self) -> str:
        """sha256 of the kernel trace, the decisions and the history: the same seed gives the same one."""
        blob = json.dumps([self.kernel.fingerprint(), [[d.label, d.n, d.index] for d in self.choices.record],
                           [[e.time, e.kind, e.step, repr(e.detail)] for e in self.history]],
                          separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class RunReport:
    """What the checker found: empty ``problems`` means the run is correct."""

    steps_checked: int
    restores: int
    problems: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.problems


def reference_steps(build: Callable[..., Any], *, view: View = repr) -> list[Step]:
    """An uninterrupted single-rank run cut into global steps of one round over every lane."""
    engine = build().engine()
    n = len(engine.lanes)
    out: list[Step] = []
    items: list[tuple[int, Any]] = []
    while not engine.finished:
        x = engine.deliver()
        if x is not None:
            items.append((lane_of(x), view(x)))
            if len(items) == n:
                out.append(tuple(items))
                items = []
            continue
        engine.admit()
        for i in range(len(engine.stages)):
            while engine.run_stage(i):
                pass
    if items:
        out.append(tuple(items))
    return out


def check_run(history: Sequence[Event], reference: Sequence[Step]) -> RunReport:
    """Rebuild the consumed global steps (a restore rolls them back to its step) and compare:

    * every lane's consumed stream equals the uninterrupted run's stream of that lane, in
      order, up to where the run stopped (nothing lost, repeated or reordered);
    * every global step that is a full round in the reference (one item of each lane) holds
      the same set of samples (identical global batches on any topology).  Near the end of
      data lanes run dry at different steps and the tail multiplexer drains the others, so
      those last steps are checked per lane only.
    """
    consumed: list[Step] = []
    restores = 0
    for e in history:
        if e.kind == "step":
            if e.step != len(consumed) + 1:
                return RunReport(len(consumed), restores, (f"step {e.step} taken after {len(consumed)} steps",))
            consumed.append(tuple(e.detail))
        elif e.kind == "restore":
            restores += 1
            del consumed[e.step:]
    problems = lane_stream_problems(per_lane(consumed), per_lane(reference))
    problems += global_step_problems(consumed, reference)
    return RunReport(len(consumed), restores, tuple(problems))

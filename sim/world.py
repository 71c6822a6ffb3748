"""A simulated data-parallel job: ranks and DataLoader workers stepping real engines on virtual time,
a checkpoint schedule whose aggregation rounds run the real protocol, and a nemesis.

Theory of operation
-------------------
A :class:`World` runs one training job over the kernel (:mod:`sim.kernel`) with every
decision taken through a :class:`~sim.choices.Choices` (labels name the decision, so a
seeded run draws each kind from its own substream):

* an *incarnation* of the job is ``dp`` ranks of ``workers`` DataLoader workers each;
  every (rank, worker) *participant* is a real zephon_ref Pipeline built by the caller's
  ``build(**topology)`` and split with :meth:`~zephon_ref.pipeline.Pipeline.for_worker`
  (:func:`sim.lockstep.participants` builds them: one implementation);
  the engine (not the world) decides which lanes a participant owns.  A participant
  with lanes is driven step by step (admit / run_stage / deliver, the step picked by
  the choices, its latency drawn from them and multiplied by its rank's speed factor:
  slow ranks);
* a **global step** is one round over every lane: each participant delivers one item
  per lane it owns (its lanes in the tail multiplexer's round robin), so the step's set
  of samples does not depend on the topology, even or uneven; the trainer takes the
  step when every participant has its share (or has run dry);
* every ``checkpoint_every`` steps (and before a planned resize) the job checkpoints at
  the step boundary; with ``mid_step_checkpoint`` it also cuts a checkpoint right after a
  delivery that did not complete the step (a *mid-step* cut, drawn per delivery), where a
  participant's round-robin pointer is not at its first lane.  A cut (:class:`_Cut`) keeps
  what the trainer held besides the engines' state: the items it had taken of the
  unfinished step; a restore of that generation gives each of them back to the
  participant now owning its lane, so the step resumes where it was cut (on another rank
  count the lanes then sit at different frontiers: seed 002 promises no exact interleaving
  there, and the checker exempts that timeline's steps from its order and set checks).
  Without ``aggregation`` the participants' ``local_state()`` go
  through zephon_ref's merge at once; with it, every participant runs the real
  coordination state machine (:mod:`zephon_ref.coordination.protocol`) in
  :class:`sim.cluster.Cluster` over an in-memory backend, **one protocol step per
  kernel event**, and training waits for the round.  The merged state is *published*:
  appended to :attr:`World.published`, or with ``storage`` saved by the real durable
  store (:func:`zephon_ref.checkpoint.store.save`) into a :class:`~sim.storage.FaultyStorage`
  over a :class:`~sim.storage.MemStorage` (durable and pending layers);
* the **nemesis** (each an exact ratio of the config, drawn per event): a crash of the
  whole job, or of one rank (its participants stop; the job notices ``detect_after``
  ticks later); crashes on any storage operation of a save (e.g. between the shard
  writes and the manifest) or of a restore, and on any protocol step of a round; a
  planned resize at a step boundary; storage faults (I/O errors, torn writes, read
  corruption, stale listings, latency spikes, lost unflushed writes on a crash, bit rot
  of a published file that always keeps one intact generation unless ``unrecoverable``).
  A latency spike delays training only where it waits for the checkpoint (after an
  aggregation round); without ``aggregation`` the save is instantaneous in virtual time;
* a restart picks a rank count from ``restart_ranks`` (N->1, 1->N, uneven when
  ``allow_uneven``) and restores the newest generation that verifies (older ones when
  newer are refused), rolling the trainer back to that generation's step; with none
  published it starts from the beginning.  In ``unrecoverable`` mode every generation
  is damaged at the first crash after one was published, and the world checks only
  that restore refuses (the run then ends).
* with ``restart_microbatch`` a restart and a planned resize also draw the next
  incarnation's micro-batch size (label ``<why>/microbatch``; ``build`` then takes a
  ``microbatch_size`` keyword; seed 002: the lanes' record streams do not change with it):
  ``start`` and ``restore`` entries carry it in ``extra["microbatch"]`` and the checker
  compares records across a change (:mod:`sim.history`).

Everything that happens is appended to :attr:`World.history` as frozen
:class:`~sim.history.Event` entries (invoke / ok / fail / info); a ``step`` entry's
``extra["order"]`` lists each participant's lanes in delivery order, a ``checkpoint``
entry's ``extra`` the cut's rank count and how many items of the unfinished step it held.
With ``keep_items`` the world also keeps the raw items consumed and, through the engine's
public ``on_tombstone`` observer, the tombstones of the trainer's timeline
(:attr:`World.tombstones`, rolled back with restores) for the lineage check.  :func:`check_run`
(:func:`sim.history.check_history`) rebuilds the consumed stream and compares it with an
uninterrupted single-rank run.  :attr:`World.probes` counts the named coverage probes.
At every cut the world checks each participant's inflight chunks against
:func:`sim.invariants.inflight_bound` (the engines feed on demand, zephon_ref's default;
:attr:`World.inflight_problems`).  Nothing here re-implements pipeline, lane-mapping or
protocol logic: it calls public methods of zephon_ref and drives its machines (an admit step
admits what the engine's feeding policy admits).
"""

from __future__ import annotations

import errno
import functools
import hashlib
import json
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sim.checker import records_of
from sim.choices import BaseChoices, Choices
from sim.cluster import Cluster, Participant
from sim.history import Event, Problem, RunReport, check_history
from sim.invariants import Step, bounded_inflight_problems, inflight_bound
from sim.kernel import Kernel
from sim.lockstep import participants
from sim.restore_shared import SharedRestore
from sim.steps import runnable, take
from sim.storage import Fault, FaultyStorage, MemStorage
from zephon_ref.checkpoint import store
from zephon_ref.coordination.merge import merge
from zephon_ref.coordination.protocol import Finish, RoundConfig, machine_for
from zephon_ref.errors import ZephonRefError
from zephon_ref.fast.walk import ChunkWalk
from zephon_ref.ops.base import lane_of
from zephon_ref.storage import TEMP_PREFIX, temp_target
from zephon_ref.storage.errors import StorageError

__all__ = ["PROBES", "Event", "Problem", "RunReport", "World", "WorldConfig", "check_run", "reference_steps"]

View = Callable[[Any], Any]
Ratio = tuple[int, int]
NEVER: Ratio = (0, 1)
CKPT_DIR = Path("/sim/ckpt")

#: The named coverage probes a sweep counts (issue 10 item 6), then the other things worth counting.
PROBES: tuple[str, ...] = (
    "crash_between_shards_and_manifest",
    "crash_during_restore",
    "crash_during_aggregation",
    "resize_while_rank_slow",
    "two_crashes_in_one_interval",
    "remap_n_to_1",
    "remap_1_to_n",
    "job_crash",
    "rank_crash",
    "planned_resize",
    "uneven_restart",
    "slow_rank",
    "workers_split",
    "restore_from_checkpoint",
    "restore_fell_back",
    "restore_refused_all",
    "fault_io_error",
    "fault_torn_write",
    "fault_read_corruption",
    "fault_stale_listing",
    "fault_latency_spike",
    "fault_lost_unflushed",
    "fault_bit_rot",
    "aggregation_round",
    "checkpoint_failed",
    "end_of_data",
    "mid_step_checkpoint",
    "restore_mid_step",
    "restore_mid_step_remapped",
    "restore_microbatch_changed",
    "restore_microbatch_changed_remapped",
)


@dataclass(frozen=True, slots=True)
class WorldConfig:
    """The job's shape and the nemesis's ratios (exact ``(numerator, denominator)``; ``(0, 1)`` = never)."""

    canonical_replicas: int
    ranks: int
    steps: int
    checkpoint_every: int = 2
    crash: Ratio = NEVER  # per participant event: the whole job crashes
    restart_ranks: tuple[int, ...] = ()  # rank counts a restart or resize may pick (default: the same)
    max_latency: int = 5
    max_crashes: int = 3
    workers: int = 1
    rank_crash: Ratio = NEVER  # per participant event: its rank crashes
    detect_after: int = 20  # ticks until the job notices a dead rank
    resize: Ratio = NEVER  # per global step: a planned resize at the step boundary
    max_resizes: int = 2
    slow: Ratio = NEVER  # per rank and incarnation: the rank is slow
    max_slowdown: int = 4
    allow_uneven: bool = False  # rank counts that do not divide canonical_replicas
    aggregation: bool = False  # checkpoints run the protocol's round, one step per event
    round_crash: Ratio = NEVER  # per protocol step: the job crashes
    storage: bool = False  # checkpoints go through the durable store into FaultyStorage
    storage_crash: Ratio = NEVER  # per storage operation of a save or restore: the job crashes
    io_error: Ratio = NEVER  # per storage operation: an injected I/O error (a torn write for writes)
    read_corruption: Ratio = NEVER  # per read: damaged bytes come back
    stale_listing: Ratio = NEVER  # per listing that changed: the previous one comes back
    latency_spike: Ratio = NEVER  # per storage operation: 50-500 extra ticks
    lose_unflushed: Ratio = (1, 2)  # per pending directory entry at a crash: it is lost
    bit_rot: Ratio = NEVER  # per crash: a file of a published generation is damaged
    unrecoverable: bool = False  # damage every generation at a crash; restore must refuse
    mid_step_checkpoint: Ratio = NEVER  # per delivery inside a global step: a checkpoint cut right after it
    microbatch_size: int | None = None  # the workload's micro-batch size at the start (None: build's own)
    # micro-batch sizes a restart or planned resize may pick (empty: never changed; build must then
    # take a ``microbatch_size`` keyword)
    restart_microbatch: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        c = self.canonical_replicas
        for r in (self.ranks, *self.restart_ranks):
            if type(r) is not int or r < 1 or r > c or (not self.allow_uneven and c % r):
                what = f"an int in [1, {c}]" if self.allow_uneven else f"a divisor of canonical_replicas={c}"
                raise ValueError(f"ranks: expected {what}, received {r!r}")
        for name in ("steps", "checkpoint_every", "max_latency", "workers", "max_slowdown", "detect_after"):
            v = getattr(self, name)
            if type(v) is not int or v < 1:
                raise ValueError(f"{name}: expected an int >= 1, received {v!r}")
        for m in (*self.restart_microbatch, *((self.microbatch_size,) if self.restart_microbatch else ())):
            if type(m) is not int or m < 1:
                raise ValueError(f"restart_microbatch: expected micro-batch sizes (ints >= 1) and an int "
                                 f"microbatch_size >= 1 to change from, received {m!r}")
        if self.unrecoverable and not self.storage:
            raise ValueError("unrecoverable: expected storage=True (it damages stored generations), received "
                             "storage=False")


@dataclass(frozen=True, slots=True)
class _Cut:
    """What the trainer holds at a checkpoint cut besides the engines' state: the items it had
    already taken of the current (unfinished) global step, in the order the participants
    delivered them (``(lane, view, raw item or None)``), and, for the lineage check, the
    tombstones observed so far whose chunk the checkpoint no longer holds inflight (those a
    restore does not replay)."""

    partial: tuple[tuple[int, Any, Any], ...] = ()
    settled: tuple[tuple[Any, ...], ...] = ()
    dp: int = 0
    microbatch: int | None = None  # the micro-batch size the participants ran with


class _Crash(Exception):
    """Internal: the nemesis crashed the job inside a storage operation or a protocol step."""


@dataclass(slots=True)
class _Part:
    rank: int
    worker: int
    pipeline: Any
    engine: Any
    lanes: tuple[int, ...]
    share: list[Any] = field(default_factory=list)
    raw: list[Any] = field(default_factory=list)
    alive: bool = True
    done: bool = False  # has its share of the current step (or ran dry); World._n_done counts these


    @property
    def name(self) -> str:
        return f"r{self.rank}w{self.worker}"


class _Nemesis:
    """The storage decisions (sim.storage.StorageNemesis), drawn from the world's choices."""

    def __init__(self, world: World) -> None:
        self.w = world
        self.armed = False
        self.during = ""  # "save" / "restore"

    def _on(self, ratio: Ratio) -> bool:
        return self.armed and ratio[0] > 0

    def fault(self, op: str, path: Path) -> Fault | None:
        cfg = self.w.cfg
        if op in ("read", "list") or not self._on(cfg.io_error):
            return None
        if not self.w.choices.chance(f"storage/io-error/{op}", *cfg.io_error):
            return None
        torn = op == "write"
        self.w._probe("fault_torn_write" if torn else "fault_io_error")
        self.w._log(
            "fault", "info", "nemesis", ("torn-write" if torn else "io-error", op, _stable(path.name))
        )
        return Fault(op, errno.ENOSPC if torn else errno.EIO, torn=torn)

    def corrupt(self, path: Path, data: bytes) -> bytes | None:
        cfg = self.w.cfg
        if not self._on(cfg.read_corruption) or len(data) < 2:
            return None
        if not self.w.choices.chance("storage/read-corruption", *cfg.read_corruption):
            return None
        self.w._probe("fault_read_corruption")
        self.w._log("fault", "info", "nemesis", ("read-corruption", _stable(path.name)))
        i = len(data) // 2
        return data[:i] + bytes([data[i] ^ 0xA5]) + data[i + 1:]

    def stale(self, path: Path) -> bool:
        cfg = self.w.cfg
        if not self._on(cfg.stale_listing) or not self.w.choices.chance(
            "storage/stale-listing", *cfg.stale_listing
        ):
            return False
        self.w._probe("fault_stale_listing")
        self.w._log("fault", "info", "nemesis", ("stale-listing", str(path)))
        return True

    def latency(self, op: str, path: Path) -> int:
        cfg = self.w.cfg
        if not self._on(cfg.latency_spike) or not self.w.choices.chance(
            "storage/latency-spike", *cfg.latency_spike
        ):
            return 0
        self.w._probe("fault_latency_spike")
        return self.w.choices.integer("storage/latency-ticks", 50, 500)

    def after(self, op: str, path: Path) -> None:
        """Called after every storage operation that succeeded: the nemesis may crash the job here."""
        w = self.w
        if (
            not self._on(w.cfg.storage_crash)
            or w.crashes >= w.cfg.max_crashes
            or not w.choices.chance(f"nemesis/storage-crash/{self.during}", *w.cfg.storage_crash)
        ):
            return
        if self.during == "save" and w._shards_linked and not w._manifest_linked:
            w._probe("crash_between_shards_and_manifest")
        if self.during == "restore":
            w._probe("crash_during_restore")
        w._log("fault", "info", "nemesis", (f"crash-during-{self.during}", op, _stable(path.name)))
        raise _Crash(f"crash after {op} {path.name}")


def _stable(name: str) -> str:
    """A file name for the history: a temp file's random token (the durable store's, for
    uniqueness only) replaced by ``<token>``, so the same seed logs the same names (the
    fingerprint hashes them)."""
    target = temp_target(name)
    return name if target is None else f"{TEMP_PREFIX}{target}.<token>"


class World:
    """One simulated job; :meth:`run` drives it to ``cfg.steps`` global steps or the end of data."""

    def __init__(self, cfg: WorldConfig, build: Callable[..., Any], choices: Choices, *,
                 view: View = repr, keep_items: bool = False, record_deliveries: bool = True,
                 keep_trace: bool = True, check_engines: bool = True) -> None:
        self.cfg, self.build, self.choices, self.view = cfg, build, choices, view
        # check_engines: Engine.check() after every step (the default; off only where a benchmark
        # measures the simulator's own speed and says so)
        self.check_engines = check_engines
        self.keep_items, self.record_deliveries = keep_items, record_deliveries
        # keep_trace=False: the fingerprint reads the kernel's running digest either way; a kept trace
        # (a tuple per event) grows a 64-rank 512-lane run by about 4.6 MB per global step (run_seed
        # turns it off: 9 GB over 2,000 steps)
        self.kernel = Kernel(keep_trace=keep_trace)
        # one walk of the global chunk order for every rank's lanes (the world is one thread): a lane
        # skips other ranks' chunks in O(log) instead of walking them (zephon_ref.fast.walk)
        self.walk = ChunkWalk()
        self.history: list[Event] = []
        # (global step, merged state); a restore reads only the newest, so older states are released
        # (None) when a newer one is published: a 2,000-step 512-lane run would otherwise hold 2,000
        self.published: list[tuple[int, dict[str, Any] | None]] = []
        self.step = 0
        self.crashes = 0
        self.resizes = 0
        self.parts: list[_Part] = []
        self._live: list[_Part] = []  # the participants that own lanes
        self._n_done = 0  # how many of them are done with the current step (O(1) per event, not O(ranks))
        self._rank_dead = False  # a rank of this incarnation crashed (the job has not noticed yet)
        self.dp = 0
        self.microbatch = cfg.microbatch_size  # the micro-batch size the current incarnation runs with
        self.speed: list[int] = []
        self.incarnation = 0
        self.ended = False
        self.refused = False  # unrecoverable mode: restore refused every generation
        self.expect_refusal = False  # unrecoverable mode: every generation was damaged at a crash
        self.probes: dict[str, int] = {}
        #: cuts whose inflight chunks exceeded :func:`sim.invariants.inflight_bound` (the first five)
        self.inflight_problems: list[str] = []
        self.consumed_raw: list[list[Any]] = []  # per consumed step, the raw items (keep_items only)
        self._raw_at: dict[Any, list[list[Any]]] = {}  # generation -> consumed_raw when it was saved
        # The tombstones of the trainer's timeline (keep_items only; see :attr:`tombstones`): settled
        # ones (their chunk left the inflight set at some cut) in one tuple per cut, and recent ones.
        self._settled: list[tuple[Any, ...]] = []
        self._recent: list[Any] = []
        self._excuse: set[tuple[int, int, int]] = set()  # offsets the replay filter re-closes after a restore
        self._cut = _Cut()
        self._cut_at: dict[Any, _Cut] = {}  # generation -> what the trainer held at that cut
        self._paused = False
        self._round: Cluster | None = None
        self._rounds = 0
        self._crashes_since_checkpoint = 0
        self._ever_published = False
        # durable storage
        self.nemesis = _Nemesis(self)
        self.disk = MemStorage()
        self.fs = FaultyStorage(self.disk, nemesis=self.nemesis, after=self.nemesis.after)
        self.saved: dict[int, tuple[int, dict[str, Any]]] = {}  # generation -> (step, state asked to save)
        self.damaged: set[int] = set()  # generations the nemesis damaged for good
        self._shards_linked = False
        self._manifest_linked = False

    @property
    def ranks(self) -> list[_Part]:
        """The current incarnation's participants (the name World had before workers: one per rank then)."""
        return self.parts

    # -- bookkeeping --------------------------------------------------------------------------
    def _log(self, kind: str, type_: str = "ok", process: str = "job", detail: Any = None, *,
             extra: Any = None) -> None:
        if kind == "checkpoint" and isinstance(extra, dict) and "generation" in extra:
            # what the trainer held at the cut this generation saves (a restore of it resumes from there)
            gen = extra["generation"]
            self._cut_at[gen] = self._cut
            extra = {**extra, "dp": self._cut.dp, "mid_step": len(self._cut.partial)}
            if self.keep_items:
                self._raw_at[gen] = list(self.consumed_raw)
        self.history.append(Event(self.kernel.now, kind, self.step, detail, type_, process, extra))

    @property
    def tombstones(self) -> list[Any]:
        """The tombstones of the trainer's timeline (``keep_items`` only), each once: those the
        engines observed (:meth:`zephon_ref.pipeline.Pipeline.engine`'s ``on_tombstone``), rolled
        back with the consumed stream on a restore.  A tombstone observed before a cut whose chunk
        the cut still holds inflight is dropped at a restore of that cut (the replay observes it
        again); the replay filter's tombstones for records consumed before the cut are not kept
        (they re-close what those records closed), each offset excused once only."""
        return [t for chunk in self._settled for t in chunk] + list(self._recent)

    def _probe(self, name: str) -> None:
        self.probes[name] = self.probes.get(name, 0) + 1

    # -- incarnations -------------------------------------------------------------------------
    def _start(self, dp: int, state: dict[str, Any] | None) -> None:
        self.incarnation += 1
        self.dp = dp
        self.parts = []
        self._paused = False
        self._round = None
        cfg = self.cfg
        self.speed = []
        for rank in range(dp):
            slow = cfg.slow[0] > 0 and self.choices.chance("nemesis/slow", *cfg.slow)
            factor = self.choices.integer("nemesis/slowdown", 2, max(2, cfg.max_slowdown)) if slow else 1
            self.speed.append(factor)
            if slow:
                self._probe("slow_rank")
                self._log("fault", "info", "nemesis", ("slow", rank, factor))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            # sim.lockstep builds the (rank, worker) pipelines, in that order; each engine owns its lanes
            inc = self.incarnation
            # validate and digest the merged state once; each pipeline restores only its own lanes
            shared = SharedRestore(state) if state is not None else None
            build = self.build
            if cfg.restart_microbatch:  # the size this incarnation runs with (a restart may change it)
                build = functools.partial(self.build, microbatch_size=self.microbatch)
            pipes = participants(build, dp, cfg.workers)
            if shared is not None:
                for p in pipes:
                    p.restore(shared.for_lanes(p.world().owned_lanes))
            for k, p in enumerate(pipes):
                eng = p.engine(on_tombstone=self._tombstone_observer(inc) if self.keep_items else None,
                               walk=self.walk)
                self.parts.append(_Part(k // cfg.workers, k % cfg.workers, p, eng, tuple(eng.lanes)))
        self._live = [p for p in self.parts if p.lanes]
        self._rank_dead = False
        self._recount()
        if cfg.workers > 1:
            self._probe("workers_split")
        self._log(
            "start", "ok", "job", dp, extra={"incarnation": self.incarnation, "speed": list(self.speed),
                                             "microbatch": self.microbatch}
        )
        for i, part in enumerate(self.parts):
            if part.lanes:
                self._schedule(i, self.incarnation)

    def _refresh(self, part: _Part) -> None:
        """Keep ``part.done`` and the count of done participants in step with its share and engine."""
        d = len(part.share) >= len(part.lanes) or part.engine.finished
        if d != part.done:
            part.done = d
            self._n_done += 1 if d else -1

    def _recount(self) -> None:
        for p in self._live:
            p.done = len(p.share) >= len(p.lanes) or p.engine.finished
        self._n_done = sum(p.done for p in self._live)

    def _tombstone_observer(self, incarnation: int) -> Callable[[Any], None]:
        """The engines' ``on_tombstone`` observer: a tombstone joins the timeline (see
        :attr:`tombstones`) unless it is the replay filter re-closing offsets that records
        consumed before the restored cut closed (each such offset is excused once)."""
        def observe(t: Any) -> None:
            if incarnation != self.incarnation:
                return  # pragma: no cover - a crashed incarnation's engines are never stepped again
            keys = _closing_keys(t)
            if keys and self._excuse.issuperset(keys):
                self._excuse.difference_update(keys)
                return
            self._recent.append(t)
        return observe

    def _take_cut(self, states: Sequence[dict[str, Any]]) -> _Cut:
        """What the trainer holds now, for a checkpoint whose participants' states are ``states``."""
        partial = tuple((lane, v, p.raw[j] if self.keep_items else None)
                        for p in self.parts for j, (lane, v) in enumerate(p.share))
        if self.keep_items:
            inflight = _inflight_chunks(states)
            keep: list[Any] = []
            settled: list[Any] = []
            for t in self._recent:
                (keep if any((k[0], k[1]) in inflight for k in _closing_keys(t)) else settled).append(t)
            if settled:
                self._settled.append(tuple(settled))
            self._recent = keep
        return _Cut(partial, tuple(self._settled), self.dp, self.microbatch)

    def _schedule(self, i: int, incarnation: int) -> None:
        part = self.parts[i]
        delay = self.choices.integer(f"latency/{part.rank}", 1, self.cfg.max_latency) * self.speed[part.rank]
        self.kernel.schedule(lambda: self._part_event(i, incarnation), after=delay, label=f"rank{part.rank}")

    # -- participant events -------------------------------------------------------------------
    def _part_event(self, i: int, incarnation: int) -> None:
        if incarnation != self.incarnation or self.ended:
            return  # an event of a crashed incarnation
        part = self.parts[i]
        if not part.alive or self._paused:
            return  # a dead rank does nothing; a paused one is rescheduled when the round ends
        cfg = self.cfg
        if self.crashes < cfg.max_crashes:
            if cfg.crash[0] and self.choices.chance("nemesis/crash", *cfg.crash):
                self._probe("job_crash")
                self._log("fault", "info", "nemesis", ("crash-job",))
                self._crash()
                return
            if cfg.rank_crash[0] and self.choices.chance("nemesis/rank-crash", *cfg.rank_crash):
                self._crash_rank(part.rank)
                return
        if len(part.share) < len(part.lanes) and not part.engine.finished:
            steps = runnable(part.engine)
            step = (
                "deliver"
                if "deliver" in steps and self.choices.chance(f"deliver/{part.rank}", 1, 2)
                else self.choices.choose(f"step/{part.rank}", steps)
            )
            if step == "deliver":
                x = take(part.engine, step)
                self._stepped(part)
                if x is not None:
                    v = (lane_of(x), self.view(x))
                    part.share.append(v)
                    if self.keep_items:
                        part.raw.append(x)
                    if self.record_deliveries:
                        self._log("deliver", "ok", part.name, v)
                    self._refresh(part)
                    # a dead rank (not noticed yet) cannot take part in a checkpoint: no cut then
                    if (
                        not self._maybe_take_step()
                        and cfg.mid_step_checkpoint[0]
                        and not self._rank_dead
                        and self.choices.chance("checkpoint/mid-step", *cfg.mid_step_checkpoint)
                    ):
                        # a cut between two deliveries of this global step (mid-window)
                        self._probe("mid_step_checkpoint")
                        self._checkpoint(None, mid_step=True)
                    if not self.ended and incarnation == self.incarnation and not self._paused:
                        self._schedule(i, incarnation)
                    return
            else:
                take(part.engine, step)
                self._stepped(part)
            self._refresh(part)
        self._maybe_take_step()
        if not self.ended and incarnation == self.incarnation and not self._paused:
            self._schedule(i, incarnation)

    def _stepped(self, part: Any) -> None:
        """After every engine step: the engine's invariants (Engine.check) hold."""
        if self.check_engines and part.engine is not None:
            part.engine.check()

    def _maybe_take_step(self) -> bool:
        """Take the global step if every participant has its share; True when it did (or the data ended)."""
        live = self._live
        # done: a share of one item per owned lane, or ran dry.  A share can exceed the lane count only
        # after a mid-step cut restored on another topology (the pre-cut items of two old
        # participants may land on one new participant)
        if self._n_done < len(live) or not all(p.alive for p in live):
            return False
        assert all(p.done == (len(p.share) >= len(p.lanes) or p.engine.finished) for p in live)
        items = [v for p in live for v in p.share]
        raw = [x for p in live for x in p.raw]
        order = tuple(tuple(lane for lane, _ in p.share) for p in live)
        for p in live:
            p.share, p.raw = [], []
        self._recount()
        if not items:  # every participant finished: the data ran out
            self._probe("end_of_data")
            self._end("end-of-data")
            return True
        self.step += 1
        # extra: each participant's lanes in its delivery order (the checker compares it with the reference)
        self._log("step", "ok", "job", tuple(items), extra={"order": order})
        if self.keep_items:
            del self.consumed_raw[self.step - 1:]
            self.consumed_raw.append(raw)
        if self.step >= self.cfg.steps:
            self._end()
            return True
        cfg = self.cfg
        resize_to = None
        options = [r for r in (cfg.restart_ranks or (self.dp,)) if r != self.dp]
        if options and self.resizes < cfg.max_resizes and cfg.resize[0] and \
                self.choices.chance("nemesis/resize", *cfg.resize):
            resize_to = self.choices.choose("nemesis/resize-to", options)
        if resize_to is not None or self.step % cfg.checkpoint_every == 0:
            self._checkpoint(resize_to)
        return True

    # -- checkpoints --------------------------------------------------------------------------
    def _checkpoint(self, resize_to: int | None, *, mid_step: bool = False) -> None:
        self._log("checkpoint", "invoke", "job", self.step, extra={"resize_to": resize_to})
        owners = [p for p in self.parts if p.lanes]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            states = [p.pipeline.local_state() for p in owners]
        self._check_inflight(owners, states, mid_step=mid_step)
        self._cut = self._take_cut(states)
        if not self.cfg.aggregation:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                # fresh: the participants' local_state() just sealed them (not digested a second time)
                merged = merge(states, warn_mid_window=False)
            self._publish(merged, resize_to)
            return
        # The real round: every participant's machine over one in-memory backend, one step per event.
        self._paused = True
        self._rounds += 1
        self._probe("aggregation_round")
        cluster = Cluster(now=self.kernel.now)
        ns = f"simrun-{self.incarnation}"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            for p, local in zip(owners, states, strict=True):
                cfg = RoundConfig(namespace=ns, rank=p.rank, world_size=self.dp, worker=p.worker,
                                  token=f"i{self.incarnation}", timeout=1_000_000, poll=5,
                                  round_id=f"g{self.incarnation}s{self.step}n{self._rounds}")
                cluster.add(p.name, machine_for(local, cfg, warn_mid_window=False))
        self._round = cluster
        self._schedule_round(self.incarnation, resize_to)

    def _check_inflight(self, owners: Sequence[_Part], states: Sequence[Any], *, mid_step: bool) -> None:
        """Bounded inflight state at this cut: every participant's lanes within
        :func:`sim.invariants.inflight_bound` for its engine (its K, plan, admission window and the
        smallest inflight chunk).  A mid-step cut may catch another participant's lane part-way
        through being fed, holding its pinned epoch too: K more.  Not checked in the end-of-data
        phase (an engine with a lane out of input) or under round-robin feeding (no bound; see the
        docstring of inflight_bound).  Problems go to :attr:`inflight_problems`."""
        for part, state in zip(owners, states, strict=True):
            eng = part.engine
            if eng.feeding != "demand" or any(s.exhausted for s in eng.streams.values()):
                continue
            counts = {int(lane): len(chunks) for lane, chunks in state["inflight"].items()}
            sizes = [
                int(c["total_samples"]) for chunks in state["inflight"].values() for c in chunks.values()
            ]
            if not sizes:
                continue
            bound = inflight_bound(
                k=eng.k, monotone=eng.monotone, depth_samples=eng.window, min_chunk=min(sizes)
            )
            if mid_step and not eng.monotone:
                bound += eng.k
            problems = bounded_inflight_problems([counts], bound=bound)
            if problems and len(self.inflight_problems) < 5:
                where = "mid-step cut" if mid_step else "cut"
                self.inflight_problems.append(f"{where} at step {self.step}, participant {part.name}: "
                                              + problems[0].replace("checkpoint 0: ", ""))

    def _schedule_round(self, incarnation: int, resize_to: int | None, after: int = 1) -> None:
        self.kernel.schedule(lambda: self._round_event(incarnation, resize_to), after=after, label="round")

    def _round_event(self, incarnation: int, resize_to: int | None) -> None:
        cluster = self._round
        if incarnation != self.incarnation or self.ended or cluster is None:
            return
        cfg = self.cfg
        if self.crashes < cfg.max_crashes and cfg.round_crash[0] and \
                self.choices.chance("nemesis/round-crash", *cfg.round_crash):
            self._probe("crash_during_aggregation")
            self._log("fault", "info", "nemesis", ("crash-during-aggregation",))
            self._crash()
            return
        cluster.now = self.kernel.now
        alive_ranks = {p.rank for p in self.parts if p.alive}
        ready = [m for m in cluster.runnable() if int(m.name[1:].split("w")[0]) in alive_ranks]
        if ready:
            member: Participant = self.choices.choose("round/step", ready)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                cluster.step(member)
        elif not any(m.outcome is None for m in cluster.members):
            leader = cluster.members[0]
            outcome = leader.outcome
            self._round = None
            if isinstance(outcome, Finish):
                self._publish(outcome.merged, resize_to, paused=True)
            else:
                self._log("checkpoint", "fail", "job", self.step, extra={"why": repr(outcome)})
                self._probe("checkpoint_failed")
                self._resume()
            return
        else:
            waits = [m.pending.until for m in cluster.members  # type: ignore[union-attr]
                     if m.outcome is None and m.started and hasattr(m.pending, "until")
                     and int(m.name[1:].split("w")[0]) in alive_ranks]
            if not waits:
                return  # only dead ranks' machines left: the job notices the crash and restarts
            self._schedule_round(incarnation, resize_to, after=max(1, min(waits) - self.kernel.now))
            return
        self._schedule_round(incarnation, resize_to)

    def _publish(self, merged: dict[str, Any], resize_to: int | None, *, paused: bool = False) -> None:
        latency = 0
        if not self.cfg.storage:
            if self.published:
                self.published[-1] = (self.published[-1][0], None)
            self.published.append((self.step, merged))
            ok: bool = True
            self._log(
                "checkpoint", "ok", "job", len(self.published), extra={"generation": len(self.published)}
            )
        else:
            before = set(store.list_generations(CKPT_DIR, storage=self.disk))
            self.nemesis.armed, self.nemesis.during = True, "save"
            self._shards_linked = self._manifest_linked = False
            self.fs.latency = 0
            self.fs.after = self._save_observer
            try:
                gen: int | None = store.save(merged, CKPT_DIR, storage=self.fs)
                ok = True
            except _Crash:
                self._note_new_generations(before, merged, failed=True)
                self.nemesis.armed = False
                self._crash()
                return
            except ZephonRefError as exc:
                gen, ok = None, False
                self._probe("checkpoint_failed")
                self._log(
                    "checkpoint",
                    "fail",
                    "job",
                    self.step,
                    extra={"why": f"{type(exc).__name__}: {exc}"[:200]},
                )
            finally:
                self.nemesis.armed = False
                self.fs.after = self.nemesis.after
                latency = self.fs.latency
            self._note_new_generations(before, merged, failed=not ok)
            if ok:
                assert gen is not None
                self._log("checkpoint", "ok", "job", gen, extra={"generation": gen})
        if ok:
            self._crashes_since_checkpoint = 0
            self._ever_published = True
        if resize_to is not None:
            self.resizes += 1
            self._probe("planned_resize")
            if any(s > 1 for s in self.speed):
                self._probe("resize_while_rank_slow")
            self._log("resize", "info", "nemesis", (self.dp, resize_to))
            self._restart(resize_to, why="nemesis/resize")
            return
        if paused or self._paused:
            self._resume(after=latency)

    def _save_observer(self, op: str, path: Path) -> None:
        name = path.name
        if op == "link" and name.endswith(".shard"):
            self._shards_linked = True
        if op == "link" and name.startswith("manifest-"):
            self._manifest_linked = True
        self.nemesis.after(op, path)

    def _note_new_generations(self, before: set[int], merged: dict[str, Any], *, failed: bool) -> None:
        """Remember the state asked for under each generation the save created (a failed save may
        still have linked its manifest: that generation is visible, and logged as ``info``)."""
        for gen in store.list_generations(CKPT_DIR, storage=self.disk):
            if gen not in before and gen not in self.saved:
                self.saved[gen] = (self.step, merged)
                if failed:
                    self._log("checkpoint", "info", "job", gen, extra={"generation": gen})

    def _resume(self, *, after: int = 0) -> None:
        self._paused = False
        inc = self.incarnation
        for i, part in enumerate(self.parts):
            if part.lanes and part.alive:
                if after:
                    self.kernel.schedule(self._waker(i, inc), after=after, label="resume")
                else:
                    self._schedule(i, inc)

    def _waker(self, i: int, incarnation: int) -> Callable[[], None]:
        return lambda: self._part_event(i, incarnation)

    # -- crashes and restarts -----------------------------------------------------------------
    def _crash_rank(self, rank: int) -> None:
        self._probe("rank_crash")
        self._log("fault", "info", "nemesis", ("crash-rank", rank))
        for p in self.parts:
            if p.rank == rank:
                p.alive = False
        self._rank_dead = True
        inc = self.incarnation
        if self._round is not None:
            self._probe("crash_during_aggregation")

        def detect() -> None:
            if inc == self.incarnation and not self.ended:
                self._crash()
        self.kernel.schedule(detect, after=self.cfg.detect_after, label="detect")

    def _crash(self) -> None:
        self.crashes += 1
        if self._crashes_since_checkpoint >= 1:
            self._probe("two_crashes_in_one_interval")
        self._crashes_since_checkpoint += 1
        self._log("crash", "info", "job", self.dp)
        self.incarnation += 1  # every event of the crashed incarnation is now stale
        self._round = None
        if self.cfg.storage:
            lost = self.disk.crash(lambda d, n: not self.choices.chance("storage/lose-unflushed",
                                                                         *self.cfg.lose_unflushed))
            if lost:
                self._probe("fault_lost_unflushed")
                self._log("fault", "info", "nemesis", ("lost-unflushed", tuple(_stable(n) for _, n in lost)))
            self._maybe_rot()
        options = self.cfg.restart_ranks or (self.dp,)
        dp = self.choices.choose("restart/ranks", options)
        self._restart(dp, why="restart")

    def _maybe_rot(self) -> None:
        gens = store.list_generations(CKPT_DIR, storage=self.disk)
        intact = [g for g in gens if g not in self.damaged]
        if self.cfg.unrecoverable:
            targets = intact
        elif (
            len(intact) >= 2
            and self.cfg.bit_rot[0]
            and self.choices.chance("nemesis/bit-rot", *self.cfg.bit_rot)
        ):
            targets = [self.choices.choose("nemesis/bit-rot-generation", intact)]
        else:
            return
        for gen in targets:
            m = store.read_manifest(CKPT_DIR, gen, storage=self.disk)
            files = [m.universal.file_name(gen), *(e.file_name(gen) for e in m.lanes)]
            name = self.choices.choose("nemesis/bit-rot-file", files)
            if self.disk.rot(CKPT_DIR / name):
                self.damaged.add(gen)
                self.expect_refusal = self.expect_refusal or self.cfg.unrecoverable
                self._probe("fault_bit_rot")
                self._log("fault", "info", "nemesis", ("bit-rot", gen, name))

    def _restart(self, dp: int, *, why: str) -> None:
        """Restart on ``dp`` ranks from the newest generation that verifies; with
        ``restart_microbatch`` the new incarnation's micro-batch size is drawn too (label
        ``<why>/microbatch``; seed 002: the lanes' record streams do not change with it)."""
        prev = self.dp
        if self.cfg.restart_microbatch:
            self.microbatch = self.choices.choose(f"{why}/microbatch", self.cfg.restart_microbatch)
        for attempt in range(8):
            try:
                found = self._recover(attempt)
            except _Crash:
                self.crashes += 1
                self._log("restore", "info", "job", self.step, extra={"why": "crashed during restore"})
                self.disk.crash(lambda d, n: True)
                continue
            if found is None and self.refused:
                self._end("refused")
                return
            step, state = found if found is not None else (0, None)
            self.step = step
            if state is not None:
                self._probe("restore_from_checkpoint")
                if prev > 1 and dp == 1:
                    self._probe("remap_n_to_1")
                if prev == 1 and dp > 1:
                    self._probe("remap_1_to_n")
                if self.cfg.canonical_replicas % dp:
                    self._probe("uneven_restart")
            self._start(dp, state)
            gen = self._restored.get("generation")
            cut = self._cut_at.get(gen, _Cut()) if state is not None else _Cut()
            if self.keep_items:
                self.consumed_raw = (
                    list(self._raw_at.get(gen, self.consumed_raw[:step])) if state is not None else []
                )
                self._settled, self._recent = list(cut.settled), []
                self._excuse = _replayed_offsets(self.consumed_raw, cut.partial, state)
            if cut.partial:
                # resume mid-step: the trainer keeps what it took of the step before the cut, each
                # item with the participant now owning its lane, in the order it was delivered
                owner = {lane: part for part in self.parts for lane in part.lanes}
                for lane, v, raw in cut.partial:
                    part = owner[lane]
                    part.share.append((lane, v))
                    if self.keep_items:
                        part.raw.append(raw)
                self._recount()
                self._probe("restore_mid_step")
                if dp != cut.dp:
                    self._probe("restore_mid_step_remapped")
            if state is not None and cut.microbatch is not None and cut.microbatch != self.microbatch:
                self._probe("restore_microbatch_changed")
                if dp != cut.dp:
                    self._probe("restore_microbatch_changed_remapped")
            self._restored["mid_step"] = len(cut.partial)
            self._restored["cut_dp"] = cut.dp
            self._restored["microbatch"] = self.microbatch
            self._log("restore", "ok", "job", dp, extra=self._restored)
            return
        raise RuntimeError("sim: expected a restore to get through within 8 attempts, it did not")

    def _recover(self, attempt: int) -> tuple[int, dict[str, Any]] | None:
        """The newest generation that verifies, as (its step, its state); None when there is none."""
        self._restored: dict[str, Any] = {"generation": None}
        if not self.cfg.storage:
            if not self.published:
                return None
            step, last = self.published[-1]
            assert last is not None  # only older states are released
            state = last
            self._restored = {"generation": len(self.published), "intact": True}
            return step, state
        self.nemesis.armed, self.nemesis.during = attempt < 3, "restore"  # later attempts see a calm disk
        try:
            try:
                gens = store.list_generations(CKPT_DIR, storage=self.fs)
            except StorageError as exc:
                self._log("restore", "fail", "job", self.step, extra={"why": str(exc)[:200]})
                raise _Crash("listing failed") from exc
            newest = max(gens) if gens else None
            for gen in sorted(gens, reverse=True):
                try:
                    loaded = store.load_checkpoint(CKPT_DIR, gen, storage=self.fs,
                                                   expected_canonical_replicas=self.cfg.canonical_replicas)
                except ZephonRefError as exc:
                    self._log("restore", "fail", "job", self.step,
                              extra={"generation": gen, "why": f"{type(exc).__name__}: {exc}"[:200]})
                    continue
                saved = self.saved.get(gen)
                intact = saved is not None and saved[1] == loaded.state
                self._restored = {"generation": gen, "intact": intact,
                                  "why": "unknown generation" if saved is None else "state differs"}
                if gen != newest:
                    self._probe("restore_fell_back")
                return (saved[0] if saved is not None else 0), loaded.state
        finally:
            self.nemesis.armed = False
        if self._ever_published and not gens:
            pass  # every published generation was lost before it was durable: start over
        if self.cfg.unrecoverable and gens:
            self.refused = True
            self._probe("restore_refused_all")
            self._log("restore", "fail", "job", self.step, extra={"why": "every generation refused"})
            return None
        if gens and attempt < 3:
            raise _Crash("every generation refused (transient faults); the job retries")
        return None

    def _end(self, why: str = "steps") -> None:
        self.ended = True
        self._log("end", "ok", "job", why)

    #: the event budget of :meth:`run` (a guard against a job that never ends): a floor, plus this
    #: many events per lane and global step (a 64-rank x 512-lane run takes about 47)
    EVENTS_PER_LANE_STEP = 500
    EVENTS_FLOOR = 5_000_000

    def run(self, *, max_events: int | None = None) -> list[Event]:
        """Run the job to its end; ``max_events`` (default: :attr:`EVENTS_FLOOR` plus
        :attr:`EVENTS_PER_LANE_STEP` per lane and step, so a long run is not cut) bounds it."""
        if max_events is None:
            max_events = (
                self.EVENTS_FLOOR + self.EVENTS_PER_LANE_STEP * self.cfg.canonical_replicas * self.cfg.steps
            )
        self._start(self.cfg.ranks, None)
        self.kernel.run(stop=lambda: self.ended, max_events=max_events)
        if not self.ended:
            raise RuntimeError(f"sim: expected the job to end within {max_events} events, it did not")
        return self.history

    def fingerprint(self) -> str:
        """sha256 of the kernel trace, the decisions and the history: the same seed gives the same one."""
        h = hashlib.sha256()
        h.update(self.kernel.fingerprint().encode())
        if isinstance(self.choices, BaseChoices):  # the same bytes, streamed (a packed record stays packed)
            for piece in self.choices.record_json():
                h.update(piece)
        else:
            h.update(json.dumps([[d.label, d.n, d.index] for d in self.choices.record],
                                separators=(",", ":")).encode())
        for e in self.history:
            h.update(repr((e.time, e.kind, e.step, e.type, e.process, e.detail)).encode())
        return h.hexdigest()


def _closing_keys(r: Any) -> list[tuple[int, int, int]]:
    """``(lane, chunk id, offset)`` of every base offset ``r`` closes."""
    lane = int(r.meta.lane_id)
    out = []
    for ref in r.meta.contribution_refs():
        if ref.is_last_child:
            cid, off = ref.cursor.base_offset
            out.append((lane, int(cid), int(off)))
    return out


def _inflight_chunks(states: Sequence[Any]) -> set[tuple[int, int]]:
    """``(lane, chunk id)`` of every chunk the states hold inflight (lane and chunk keys as ints)."""
    return {(int(lane), int(cid)) for st in states for lane, chunks in (st.get("inflight") or {}).items()
            for cid in chunks}


def _replayed_offsets(consumed: Sequence[Sequence[Any]], partial: Sequence[tuple[int, Any, Any]],
                      state: Any) -> set[tuple[int, int, int]]:
    """The offsets that records consumed before a cut closed in chunks the cut holds inflight:
    a restore replays those chunks and its replay filter turns those records into tombstones."""
    if state is None:
        return set()
    inflight = _inflight_chunks([state])
    out: set[tuple[int, int, int]] = set()
    items = [x for step in consumed for x in step] + [raw for _, _, raw in partial]
    for r in records_of(items):
        if not r.meta.tombstone and not r.meta.is_sentinel:
            out.update(k for k in _closing_keys(r) if (k[0], k[1]) in inflight)
    return out


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
        engine.step()
    if items:
        out.append(tuple(items))
    return out


def check_run(history: Sequence[Event], reference: Sequence[Step], *, seed: int | None = None) -> RunReport:
    """Rebuild the consumed global steps (a restore rolls them back to its step) and compare
    (see :func:`sim.history.check_history`): per lane lost / duplicated / non-monotonic /
    unexpected items (and whether after a remap), global steps whose set changed, restores
    that accepted a bad checkpoint."""
    return check_history(history, reference, seed=seed)

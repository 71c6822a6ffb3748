"""The engine: lane streams -> operator chain -> tail multiplexer -> delivery, one step at a time.

Theory of operation
-------------------
One :class:`Engine` serves one participant (a rank, or a DataLoader worker of a
rank).  For every lane it owns it keeps a :class:`~zephon_ref.engine.lanes.LaneStream`
(input side) and a :class:`~zephon_ref.engine.completion.LaneTracker` (delivery
side).  It is a state machine driven by three kinds of step:

* :meth:`Engine.admit` pulls the next source item under the *feeding policy*
  (below) into the first stage's inbox; once the source is done it queues the
  close marker instead;
* :meth:`Engine.run_stage` runs one queued micro-batch through stage ``i``
  (:class:`~zephon_ref.engine.stage.OpStage`: the flush / end-of-data rules) and
  queues its output for stage ``i + 1``, or for the tail;
* :meth:`Engine.deliver` moves tail output into the
  :class:`~zephon_ref.engine.mux.TailMux` until the current lane has an item,
  notifies it (monotone watermark, or contributor bitmaps and per-epoch
  eviction) and returns it; tombstones are notified and not delivered, flush
  and end-of-data sentinels are neither.  The round-robin pointer is written on
  delivery only, so running ahead is harmless.

Feeding policy (``feeding=``, an execution setting: it never enters the fingerprint)
-----------------------------------------------------------------------------------
* ``"demand"`` (the default): admit only for the lane the tail multiplexer waits on
  (its round-robin turn, its buffer empty, nothing in the tail's outbox), and only
  while fewer than ``window`` (the queue size) admitted items are on their way: the
  inline runner runs every stage dry after each admission (one item at a time); the
  threads runner counts its queues' messages (every pump answers each message with
  one); a caller stepping the engine may queue up to ``window`` items for stage 0 while
  no later stage holds input (:meth:`_queued`).
  A lane is fed exactly when the data delivery asks for next needs it, so no lane's
  inflight set grows with the age of the run (the bound and its derivation:
  :func:`sim.invariants.inflight_bound`).  When the waiting lane's source is
  exhausted its remaining records sit in operator buffers until the close flush, which
  needs every lane exhausted: admission then falls back to round robin over the lanes
  that still have input.
* ``"round_robin"`` (zephon 0.2.0's behaviour): one sample from each owned lane in
  turn, skipping finished lanes, whatever delivery waits on.  Lanes that pack densely
  run ahead of the tail and their inflight sets grow (about sqrt(items), notebooks/).

Both deliver the same stream: every operator keeps its state per lane and sees each
lane's elements in the same micro-batches under any interleaving of lanes (``fetch``
batches per lane; :class:`~zephon_ref.engine.stage.OpStage` pushes a lane's elements
at that lane's own sentinels only), and the tail multiplexer orders the output by lane
in strict round robin.  Only which chunks are inflight at a given delivery differs, so
a checkpoint of either policy restores under the other.
``admit(lane=L)`` feeds one named lane whatever the policy (a caller's override).

Observing tombstones (``on_tombstone=``, off by default): a callable the engine
calls with every tombstone that reaches the tail, once, in tail order, right after
it set the tombstone's completion bits and on the consumer's thread.  It is how a
lineage checker sees the offsets a dropped record closed (tombstones are never
delivered).  It is an observer only: it must not touch the engine, and what it
does never reaches the data path (an exception from it propagates out of
:meth:`Engine.deliver` like any other).  After a restore the replay filter turns
the already-consumed prefix of each inflight chunk into tombstones, and those are
observed too: they re-close offsets that records delivered before the checkpoint
closed.

Any order of steps gives the same delivered stream (each stage's accumulator is
serial and sees its micro-batches in order; nothing an operator reads depends on
delivery); :meth:`state_dict` is valid between any two steps.  The inline runner
drives the steps lazily on the caller's thread; the threads runner drives the
stages on pump threads and hands their output to :meth:`offer`; the simulator
picks steps itself.

The engine is sans-IO and needs no lock: it holds no thread, and every call that reads or
changes it (admission, delivery, eviction, ``state_dict()``) comes from the one thread that
drives it.  Operators never call back into it: what they need travels forward with the
data (chunk mixtures in chunk announcements, exhaustion in end-of-data sentinels).  The
threads runner keeps that rule: its pumps run only the operators' accumulators and
``process_many``.  ``state_dict()`` is consistent at any point between two delivered items;
with the inline runner it is the same bytes in every run that delivered the same items.

Restore (``state=`` at construction) rebuilds every owned lane from a state that
:func:`zephon_ref.state.validate` accepted: inflight chunks, boundaries and
work-source state; the replay filter's target for a lane is its saved cursor if
that cursor's chunk is still inflight (otherwise the lane holds no inflight
chunk, and everything passes).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from zephon_ref import state as schema
from zephon_ref.engine.completion import LanePtr, LaneTracker
from zephon_ref.engine.lanes import LaneStream
from zephon_ref.engine.mux import TailMux
from zephon_ref.engine.plan import FETCH_BATCH, FetchOp, build_chain
from zephon_ref.engine.stage import Kind, OpStage, Where, apply, apply_entries, is_sentinel, kind_of
from zephon_ref.errors import (
    ConfigError,
    ContractError,
    DropLedger,
    StateFormatError,
    StateMismatchError,
    expected,
)
from zephon_ref.ops.base import BaseOp, FasterOps, lane_of
from zephon_ref.ops.replay_filter import ReplayFilterAccumulator
from zephon_ref.types import TAG_BOUNDARY_CID, SampleBatch, SampleCursor, SampleRecord
from zephon_ref.work.base import SharedWalk, WorkSource, check_source_state

__all__ = ["ENGINE_SCHEMA", "ENGINE_VERSION", "FEEDING", "FETCH_BATCH", "Engine", "FetchOp"]

ENGINE_SCHEMA = schema.SCHEMA
ENGINE_VERSION = schema.VERSION

#: The feeding policies (an execution setting); the first is the default.
FEEDING = ("demand", "round_robin")

_NOTHING = -1  # _wanted(): the policy admits nothing now
_ANY = -2  # _wanted(): admit round robin (round-robin policy, or the waiting lane has no input left)


class Engine:
    """Runs one participant's lanes through the operator chain, step by step."""

    def __init__(
        self,
        *,
        source: WorkSource,
        ops: Sequence[tuple[str, BaseOp]],
        world: Any,
        k: int,
        monotone: bool,
        fingerprint: str,
        state: Mapping[str, Any] | None = None,
    ) -> None:
        # execution settings: set by start(), never part of the state
        self.feeding = FEEDING[0]
        #: admitted micro-batches that may be on their way through the stages at once (demand feeding)
        self.window = 8
        self._deterministic = True
        self.world = world
        self._tombstone_observer: Callable[[SampleRecord], None] | None = None
        self.k = k
        self.monotone = monotone
        self.fingerprint = fingerprint
        self.lanes = world.owned_lanes
        C = world.canonical_replicas
        self._fresh_source = source
        clones = source.clone_lanes(self.lanes, C)
        #: this run's dropped-data counts (diagnostics, never state): every lane clone of the source
        #: and every operator's accumulator counts into it; :meth:`_finish` emits its totals
        self.drops = DropLedger()
        for clone in clones.values():
            if isinstance(getattr(clone, "drops", None), DropLedger):
                clone.drops = self.drops  # type: ignore[attr-defined]
        self.streams = {lane: LaneStream(lane, clones[lane], k=k) for lane in self.lanes}
        self.trackers = {lane: LaneTracker(s, monotone=monotone) for lane, s in self.streams.items()}
        self.reload_count = 0
        self.last_round_id: Any = None
        self.rr_next_idx: dict[str, int] = {}
        self._rr_key = world.rr_key()
        self._ids = dict(source.component_ids())
        self._datasets = getattr(source, "datasets_by_id", {})
        targets: dict[int, SampleCursor | None] = {}
        if state is not None:
            targets = self._load(state)
        self._ops = list(ops)
        self._targets = targets
        self._started = False
        self.finished = False
        self.stages: list[OpStage] = []
        self._inbox: list[deque[tuple[bool, list[Any]]]] = []
        self._outbox: deque[Any] = deque()
        self._src: Iterator[Any] = iter(())
        self._lane_gens: dict[int, Iterator[Any]] = {}
        self._lanes_done: set[int] = set()
        self._source_done = False
        self._upstream_done = False
        self._mux: TailMux | None = None
        self._replay_filter: ReplayFilterAccumulator | None = None
        self._index = {lane: i for i, lane in enumerate(self.lanes)}

    # -- invariants ---------------------------------------------------------------------------
    def check(self) -> None:
        """Assert every engine and lane invariant (the comments beside the fields).

        Valid between any two steps; the simulator runs it after every step and the stepping
        tests after each of theirs.  It reads only: a check changes nothing.
        """
        lanes = self.lanes
        assert list(self.streams) == list(lanes) == list(self.trackers), (lanes, list(self.streams))
        assert self._index == {lane: i for i, lane in enumerate(lanes)}, self._index
        assert self._lanes_done <= set(lanes), (sorted(self._lanes_done), lanes)
        for lane in lanes:
            self.streams[lane].check()
            self.trackers[lane].check()
        if self._started:
            # one inbox per stage
            assert len(self._inbox) == len(self.stages), (len(self._inbox), len(self.stages))
        if self.finished:
            # a finished engine holds no chunk: the close evicted every lane's inflight set
            assert not any(self.streams[lane].inflight for lane in lanes), "finished with inflight chunks"
        if self._rr_key in self.rr_next_idx and lanes:
            assert 0 <= self.rr_next_idx[self._rr_key] < len(lanes), self.rr_next_idx

    # -- plan -------------------------------------------------------------------------------
    def _stages(self, faster: FasterOps | None) -> list[OpStage]:
        ctx = {
            "get_component_id": lambda name: self._ids[name],
            "replay_targets": self._targets,
            "drops": self.drops,
        }
        chain = build_chain(self._ops, self._datasets)
        for name, op in chain:
            traits = op.traits()
            if self._deterministic and traits.requires_serial_state and traits.parallelism > 1:
                # as zephon's planner: an accumulator's serial state cannot be sharded over workers
                raise ContractError(expected(f"operator {name!r} parallelism", "1 in deterministic mode "
                                             "(requires_serial_state=True)", traits.parallelism))
        return [OpStage(name, op if faster is None else faster.operator(op),
                        deterministic=self._deterministic, ctx=ctx) for name, op in chain]

    def _lane_items(self, lane: int) -> Iterator[Any]:
        """The lane's item stream, opened on first use and shared by both admission modes."""
        g = self._lane_gens.get(lane)
        if g is None:
            g = self._lane_gens[lane] = self.streams[lane].items()
        return g

    def _source(self) -> Iterator[Any]:
        gens = [self._lane_items(lane) for lane in self.lanes]
        while gens:
            alive = []
            for g in gens:
                try:
                    item = next(g)
                except StopIteration:
                    continue
                alive.append(g)
                yield item
            gens = alive

    def _start_index(self) -> int:
        n = len(self.lanes)
        if self._rr_key in self.rr_next_idx:
            return self.rr_next_idx[self._rr_key] % n
        # topology changed (or first run): derive the start from lane progress.  In strict
        # round robin the next lane is the first (in owned order) with the fewest delivered
        # items, so a checkpoint at a global-step boundary resumes the interleaving exactly.
        # divergence D-27 (zephon 0.2.0 uses the smallest LanePtr instead)
        counts = [(self.trackers[lane].emitted, i) for i, lane in enumerate(self.lanes)]
        return min(counts)[1]

    # -- steps ------------------------------------------------------------------------------
    @property
    def started(self) -> bool:
        return self._started

    def start(self, *, queue_size: int = 8, deterministic: bool = True, feeding: str = "demand",
              walk: SharedWalk | None = None, on_tombstone: Callable[[SampleRecord], None] | None = None,
              faster: FasterOps | None = None) -> None:
        """Compile the chain and open the source; the first step of every run (once).

        The execution settings of the run, none of which reaches the state or the stream:
        ``queue_size`` (demand feeding admits while fewer than that many items are on their
        way), ``deterministic`` (handed to the operators' accumulators), ``feeding``
        (:data:`FEEDING`), ``walk`` (a :class:`~zephon_ref.work.base.SharedWalk` the lanes
        share; not thread-safe: every ``next_chunk`` call happens on the thread that admits;
        None: every lane clone walks the global chunk order itself, the plain definition),
        ``on_tombstone`` (the observer above) and ``faster`` (a :class:`~zephon_ref.ops.base.FasterOps`
        that may swap each stage's operator for one with equal output; None: the plain operators).
        """
        if self._started:
            raise StateMismatchError(
                "engine: expected a fresh engine per iteration, received one already run"
            )
        if feeding not in FEEDING:
            raise ConfigError(expected("feeding", " or ".join(repr(f) for f in FEEDING), feeding))
        self.feeding, self.window, self._deterministic = feeding, max(1, queue_size), deterministic
        self._tombstone_observer = on_tombstone
        for stream in self.streams.values():
            stream.source.share_walk(walk)
        self._started = True
        self.stages = self._stages(faster)
        accs = [st.acc for st in self.stages if isinstance(st.acc, ReplayFilterAccumulator)]
        self._replay_filter = accs[0] if accs else None
        self._inbox = [deque() for _ in self.stages]
        self._src = self._source()
        if self.lanes:
            self._mux = TailMux(self.lanes, self._start_index(), lane_of=lane_of, is_sentinel=is_sentinel)

    def admit(self, *, lane: int | None = None) -> bool:
        """Queue the next source item for the first stage (or, once, the close marker).

        ``lane=None``: as the feeding policy decides (:meth:`feed`); False when it admits
        nothing now.  ``lane=L``: admit L's next item whatever the policy (once L is
        exhausted it falls back to the policy).  Every operator keeps per-lane state, so the
        delivered stream is the same either way and only the inflight sets differ.
        """
        if self._source_done:
            return False
        if lane is not None and lane not in self._lanes_done:
            if lane not in self.streams:
                raise ContractError(expected("admit(lane=...)", f"an owned lane {list(self.lanes)}", lane))
            item = self._next_of(lane)
            if item is not None:
                self._inbox[0].append((False, [item]))
                return True
        msg = self.feed(in_flight=self._queued())
        if msg is None:
            return False
        self._inbox[0].append(msg)
        return True

    def feed(self, *, in_flight: int = 0) -> tuple[bool, list[Any]] | None:
        """The next first-stage micro-batch under the feeding policy, admitted now: ``(False,
        [item])``, or ``(True, [])`` once the source is done (the close marker, once); None
        when the policy admits nothing now.  ``in_flight``: admitted micro-batches the caller
        still has on their way through the stages (demand feeding admits below ``window``).
        The caller queues the result for stage 0 (:meth:`admit` does; the threads runner puts
        it on its first queue)."""
        want = self._wanted(in_flight)
        if want == _NOTHING:
            return None
        if want != _ANY:
            item = self._next_of(want)
            if item is not None:
                return (False, [item])
        try:
            item = next(self._src)
        except StopIteration:
            self._source_done = True
            return (True, [])
        return (False, [item])

    def _wanted(self, in_flight: int) -> int:
        """The lane the policy feeds now, or _ANY (round robin) or _NOTHING."""
        if self._source_done:
            return _NOTHING
        mux = self._mux
        if self.feeding == "round_robin" or mux is None:
            return _ANY
        # demand: only the lane delivery is stuck on, and only when delivery is really stuck
        if self._outbox or self._upstream_done or mux.ready() or in_flight >= self.window:
            return _NOTHING
        lane = mux.lanes[mux.p]
        return _ANY if lane in self._lanes_done else lane

    def _next_of(self, lane: int) -> Any | None:
        """Lane ``lane``'s next source item, or None once it has none (it is then done)."""
        try:
            return next(self._lane_items(lane))
        except StopIteration:
            self._lanes_done.add(lane)
            return None

    def _queued(self) -> int:
        """Admitted work still on its way, as demand feeding counts it for a caller stepping the
        engine: the micro-batches waiting for stage 0, or the whole window while a later stage has
        input (that input may be the waiting lane's next item; stage 0 may absorb many items into
        its accumulator, so counting micro-batches there would not bound what is admitted)."""
        if any(self._inbox[1:]):
            return self.window
        return len(self._inbox[0]) if self._inbox else 0

    def run_stage(self, i: int) -> bool:
        """Run stage ``i`` on its oldest queued micro-batch; False when it has none."""
        inbox = self._inbox[i]
        if not inbox:
            return False
        final, batch = inbox.popleft()
        st = self.stages[i]
        entries = st.enqueue(batch)
        if final:
            entries += st.close()
        out = apply_entries(st, entries)
        if i + 1 < len(self.stages):
            if out or final:
                self._inbox[i + 1].append((final, out))
        else:
            self._outbox.extend(out)
            self._upstream_done = final
        return True

    def step(self) -> bool:
        """Admit one source item as the feeding policy decides and run every stage dry (the inline
        runner's unit of work); False when nothing was admitted.  A caller that steps the engine
        itself loops ``deliver()`` until it returns None, then ``step()``, until ``finished``."""
        admitted = self.admit()
        for i in range(len(self.stages)):
            while self.run_stage(i):
                pass
        return admitted

    def waiting_lane(self) -> int | None:
        """The lane whose round-robin turn delivery is waiting on (None: nothing is waiting)."""
        mux = self._mux
        if mux is None or mux.ready() or self._upstream_done:
            return None
        return mux.lanes[mux.p]

    # -- what can run now (a driver picks among these; sim/steps.py names them) ------------------
    def can_admit(self) -> bool:
        """The feeding policy admits an item now."""
        return self._wanted(self._queued()) != _NOTHING

    def ready_stages(self) -> list[int]:
        """The stages with queued input, in chain order."""
        return [i for i, q in enumerate(self._inbox) if q]

    def can_deliver(self) -> bool:
        """:meth:`deliver` can make progress (an item, a notification or the end of the run)."""
        return not self.finished and bool(self._outbox or self._upstream_done
                                          or (self._mux and self._mux.ready()))

    def offer(self, items: Sequence[Any], *, final: bool = False) -> None:
        """Hand tail output produced elsewhere (the threads runner) to the multiplexer's queue."""
        self._outbox.extend(items)
        if final:
            self._upstream_done = True

    def deliver(self) -> Any | None:
        """The next delivered item, notified; None when more input is needed or the run is over."""
        while not self.finished:
            x = self._next_tail()
            if x is None:
                return None
            apply(self, x, Where.TAIL)  # the lifecycle's tail steps (engine/stage.py LIFECYCLE)
            if kind_of(x) is Kind.DATA:
                return x
        return None

    def _next_tail(self) -> Any | None:
        mux, outbox = self._mux, self._outbox
        if mux is None:  # owns no lane
            if self._upstream_done and not outbox:
                self._finish()
            return None
        while not mux.ready():
            if outbox:
                mux.push(outbox.popleft())
            elif not self._upstream_done:
                return None
            else:
                x = mux.pop_draining()
                if x is None:
                    self._finish()
                return x
        return mux.pop()

    # -- the tail's lifecycle steps (engine/stage.py LIFECYCLE, Where.TAIL) ------------------------
    def _deliver_one(self, x: Any) -> None:
        self._notify(x)

    def _complete(self, t: SampleRecord) -> None:
        """Tombstones only set completion bits (non-monotone plans); never delivered, never evict."""
        if not self.monotone:
            self.trackers[t.meta.lane_id].complete(t.meta.contribution_refs())

    def _observe(self, t: SampleRecord) -> None:
        if self._tombstone_observer is not None:
            self._tombstone_observer(t)

    def _check_target(self, s: SampleRecord) -> None:
        self._check_replay_target(s.meta.lane_id, int(s.meta.tags[TAG_BOUNDARY_CID]))

    def _check_replay_target(self, lane: int, below: int | None) -> None:
        """A replay target must reappear within its epoch: once the flush sentinel of a later
        boundary (or the end of the stream) reaches the tail, every record of the target's epoch
        has passed the filter.  A target still awaited then was never produced by this pipeline:
        refuse rather than drop the lane's stream."""
        flt = self._replay_filter
        target = None if flt is None else flt.awaiting(lane)
        if target is not None and (below is None or target.chunk_id < below):
            raise StateMismatchError(
                expected(
                    f"lane {lane} replay target {target.as_key()}",
                    "a record this pipeline produces again on replay",
                    "a cursor that never reappeared (the checkpoint belongs to another run or was altered)",
                )
            )

    def _notify(self, x: Any) -> None:
        lane = lane_of(x)
        tr = self.trackers[lane]
        if self.monotone:
            prev = tr.cursor
            for r in x.records if isinstance(x, SampleBatch) else (x,):
                cur = r.meta.cursor
                if prev is not None and cur < prev:
                    # an operator declared preserves_cursor_order=True and reordered: the
                    # watermark would evict chunks still needed, so refuse instead
                    raise ContractError(
                        f"lane {lane}: delivered cursor {cur.as_key()} after {prev.as_key()} in a plan "
                        "whose operators all declare preserves_cursor_order=True; expected non-decreasing "
                        "cursors (an operator reorders: declare preserves_cursor_order=False)")
                prev = cur
            if isinstance(x, SampleBatch):
                top = max(x.chunk_ids)
                tr.notify_monotone(top, x.chunk_ids.count(top), max(r.meta.cursor for r in x.records))
            else:
                tr.notify_monotone(x.meta.chunk_id, 1, x.meta.cursor)
        else:
            recs = x.records if isinstance(x, SampleBatch) else (x,)
            refs = [ref for r in recs for ref in r.meta.contribution_refs()]
            tr.notify(refs, recs[-1].meta.cursor)
        tr.emitted += 1
        self.rr_next_idx[self._rr_key] = (self._index[lane] + 1) % len(self.lanes)

    def _finish(self) -> None:
        for lane in self.lanes:
            self._check_replay_target(lane, None)
        for lane in self.lanes:
            if not self.monotone:
                self.trackers[lane].notify([], None)
            self.trackers[lane].close()
        self.finished = True
        self.drops.close()

    # -- checkpoint -----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        w = self.world
        lane_states = {lane: self.streams[lane].state() for lane in self.lanes}
        slices: dict[int, dict[str, Any]] = {}
        for lane in self.lanes:
            trk = self.trackers[lane].state()
            ls = lane_states[lane]
            slices[lane] = {
                "inflight": ls["inflight"], "progress": trk["progress"], "lane_next_cid": ls["lane_next_cid"],
                "lane_ws_state": ls["lane_ws_state"], "replay_cursors": trk["replay_cursor"],
                "epoch_boundaries": ls["epoch_boundaries"], "lane_emitted": trk["lane_emitted"],
            }
        # a checkpoint taken mid-window warns once per checkpoint() over the whole state: the
        # builder's on one participant, the aggregation round's merge on several (as zephon's
        # leader does), never here (a participant's own lanes are not the window)
        return schema.new_state(
            fingerprint=self.fingerprint,
            world={"canonical_replicas": w.canonical_replicas, "world_size": w.world_size,
                   "global_rank": w.global_rank, "dp_degree": w.dp_degree, "dp_group_id": w.dp_group_id,
                   "mapping": w.mapping()},
            lanes=slices, last_round_id=self.last_round_id, checkpoint_reload_count=self.reload_count,
            rr_next_idx=self.rr_next_idx,
        )

    def _load(self, state: Mapping[str, Any]) -> dict[int, SampleCursor | None]:
        """Apply a state that :func:`zephon_ref.state.validate` accepted to the freshly built
        lanes; check what needs the pipeline; return the replay targets."""
        targets: dict[int, SampleCursor | None] = {}
        c = self.world.canonical_replicas

        def table(field: str) -> dict[int, Any]:
            return {
                schema.lane_key(k, f"lane key of {field!r}", c): v
                for k, v in (state.get(field) or {}).items()
            }

        tables = {field: table(field) for field in schema.LANE_FIELDS}
        for lane in self.lanes:
            for field in schema.REQUIRED_LANE_FIELDS:
                if lane not in tables[field]:
                    raise StateMismatchError(
                        expected(
                            f"checkpoint {field}",
                            f"an entry for owned lane {lane}",
                            f"lanes {sorted(tables[field])}",
                        )
                    )
            stream, tr = self.streams[lane], self.trackers[lane]
            ws_state = tables["lane_ws_state"][lane]
            self._check_source_config(lane, ws_state)
            stream.load(inflight=tables["inflight"][lane], next_cid=tables["lane_next_cid"][lane],
                        ws_state=ws_state, boundaries=tables["epoch_boundaries"].get(lane) or [])
            for cid, chunk in stream.inflight.items():
                self._check_chunk(lane, cid, chunk)
            prog = tables["progress"][lane]
            tr.ptr = LanePtr(prog["chunk_id"], prog["offset"])
            raw = tables["replay_cursors"][lane]
            tr.cursor = None if raw is None else SampleCursor.from_key(raw)
            tr.emitted = tables["lane_emitted"].get(lane, 0)
            cur = tr.cursor
            if cur is not None and cur.chunk_id in stream.inflight:
                order = stream.inflight[cur.chunk_id].ordered()
                if not (0 <= cur.chunk_offset < len(order)) or tuple(order[cur.chunk_offset][0]) != tuple(
                        cur.sample_id):
                    raise StateMismatchError(
                        expected(
                            f"lane {lane} replay cursor",
                            f"a sample of its inflight chunk {cur.chunk_id}",
                            cur.as_key(),
                        )
                    )
                targets[lane] = cur
            else:
                targets[lane] = None
        self.reload_count = state.get("checkpoint_reload_count", 0) + 1
        self.last_round_id = state.get("last_round_id")
        rr = state.get("rr_next_idx") or {}
        n = len(self.lanes)
        self.rr_next_idx = {k: v for k, v in rr.items() if k == self._rr_key}
        if self._rr_key in self.rr_next_idx and not 0 <= self.rr_next_idx[self._rr_key] < max(n, 1):
            raise StateFormatError(expected(f"rr_next_idx[{self._rr_key!r}]", f"an index in [0, {n})",
                                            self.rr_next_idx[self._rr_key]))
        return targets

    def _check_source_config(self, lane: int, ws_state: Any) -> None:
        """A lane's source state must carry this pipeline's source configuration
        (:func:`zephon_ref.work.base.check_source_state`)."""
        check_source_state(self._fresh_source.clone_for_lane(lane, self.world.canonical_replicas), lane,
                           ws_state)

    def _check_chunk(self, lane: int, cid: int, chunk: Any) -> None:
        """Every sample pointer of an inflight chunk names an existing row of a known component."""
        for name, sids in chunk.components.items():
            if name not in self._ids:
                raise StateMismatchError(
                    expected(f"lane {lane} chunk {cid} component", f"one of {sorted(self._ids)}", name)
                )
            dset = self._datasets.get(self._ids[name])
            if dset is None:
                continue
            shards = dict(dset.layout())
            for sid in sids:
                if sid[0] != self._ids[name] or sid[1] not in shards or not 0 <= sid[2] < shards[sid[1]]:
                    raise StateMismatchError(expected(f"lane {lane} chunk {cid} sample of {name!r}",
                                                      f"a row of dataset {self._ids[name]} (shards {shards})",
                                                      tuple(sid)))

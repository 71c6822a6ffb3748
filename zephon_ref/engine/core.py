"""The engine: lane streams -> operator chain -> tail multiplexer -> delivery.

Theory of operation
-------------------
One :class:`Engine` serves one participant (a rank, or a DataLoader worker of a
rank).  For every lane it owns it keeps a :class:`~zephon_ref.engine.lanes.LaneStream`
(input side) and a :class:`~zephon_ref.engine.completion.LaneTracker` (delivery
side).  Iteration:

1. the source round-robins the owned lanes **per sample** (a finished lane
   drops out);
2. the runner drives the implicit ``fetch`` op (pointer -> record, 64 per lane
   per micro-batch), the user's operators and the replay filter (inserted
   before ``batch``, or at the tail);
3. the **tail multiplexer** keeps a buffer per lane and delivers in strict
   round robin over the owned lanes; sentinels never take a turn;
4. each delivered item is *notified* (monotone watermark, or contributor
   bitmaps and per-epoch eviction) before the consumer sees it; tombstones are
   notified and not delivered; flush and EOD sentinels are neither.  The
   round-robin pointer is written on delivery only, so running ahead is harmless.

``state_dict()`` reads the input side under the engine lock (admission happens
under it too) and the delivery side on the consumer's thread, so it is
consistent at any point between two delivered items.  With the inline runner
it is the same bytes in every run that delivered the same items.

Restore (``load_state``) rebuilds every owned lane from the state: inflight
chunks, boundaries and work-source state; the replay filter's target for a lane
is its saved cursor if that cursor's chunk is still inflight (otherwise nothing
of the lane was delivered from inflight data, and everything passes).
"""

from __future__ import annotations

import threading
import warnings
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from zephon_ref.engine.completion import LanePtr, LaneTracker
from zephon_ref.engine.lanes import LaneStream
from zephon_ref.engine.runner import OpStage, is_sentinel, make_runner
from zephon_ref.engine.world import World
from zephon_ref.errors import ContractError, StateFormatError, StateMismatchError, expected
from zephon_ref.ops.base import BaseOp, CountingAccumulator, OpTraits, lane_of
from zephon_ref.ops.batch import Batch
from zephon_ref.ops.replay_filter import ReplayFilter
from zephon_ref.types import TAG_BOUNDARY_CID, SampleBatch, SampleCursor, SampleMeta, SampleRecord
from zephon_ref.work.base import WorkSource

__all__ = ["ENGINE_SCHEMA", "Engine", "FetchOp"]

ENGINE_SCHEMA = "zephon_ref.engine/1"
ENGINE_VERSION = 2
FETCH_BATCH = 64
_MUX_WARN = 10_000


class FetchOp(BaseOp):
    """The implicit first operator: ``(sample_id, lane, cid, offset, comp)`` -> SampleRecord."""

    def __init__(self, datasets_by_id: Mapping[int, Any], *, max_batch: int = FETCH_BATCH) -> None:
        super().__init__()
        self.datasets_by_id = dict(datasets_by_id)
        self.max_batch = max_batch

    def traits(self) -> OpTraits:
        return OpTraits(preserves_cursor_order=True)

    def accumulator(self, *, deterministic: bool, ctx: dict[str, Any]) -> CountingAccumulator[Any]:
        return CountingAccumulator(self.max_batch)

    def process_many(self, elems: list[Any]) -> list[Any]:
        out = []
        dsets = self.datasets_by_id
        for sid, lane, cid, off, comp in elems:
            payload = dsets[sid[0]].get(sid[1], sid[2])
            out.append(SampleRecord(SampleMeta(sid, lane, cid, off, {comp: 1}), payload))
        return out


def _cursor_of(item: SampleRecord) -> SampleCursor:
    return item.meta.cursor


class Engine:
    """Runs one participant's lanes through the operator chain."""

    def __init__(
        self,
        *,
        source: WorkSource,
        ops: Sequence[tuple[str, BaseOp]],
        world: World,
        k: int,
        monotone: bool,
        fingerprint: str,
        runner: str = "inline",
        workers: int = 4,
        queue_size: int = 8,
        deterministic: bool = True,
        state: Mapping[str, Any] | None = None,
    ) -> None:
        self.world = world
        self.k = k
        self.monotone = monotone
        self.fingerprint = fingerprint
        self.lock = threading.RLock()
        self.lanes = world.owned_lanes
        C = world.canonical_replicas
        self.streams = {lane: LaneStream(lane, source.clone_for_lane(lane, C), k=k, lock=self.lock)
                        for lane in self.lanes}
        self.trackers = {lane: LaneTracker(s, monotone=monotone) for lane, s in self.streams.items()}
        self.reload_count = 0
        self.last_round_id: Any = None
        self.rr_next_idx: dict[str, int] = {}
        self._rr_key = world.rr_key()
        self._ids = dict(source.component_ids())
        targets: dict[int, SampleCursor | None] = {}
        if state is not None:
            targets = self._load(state)
        self._ops = list(ops)
        self._datasets = getattr(source, "datasets_by_id", {})
        self._targets = targets
        self._runner_kind, self._workers, self._queue = runner, workers, queue_size
        self._deterministic = deterministic
        self._started = False
        self.finished = False

    # -- plan -------------------------------------------------------------------------------
    def _chunk_mixture(self, lane: int, cid: int) -> dict[int, float] | None:
        stream = self.streams.get(lane)
        mix = None if stream is None else stream.mixture(cid)
        return None if mix is None else {self._ids[name]: w for name, w in mix.items()}

    def _stages(self) -> list[OpStage]:
        ctx = {
            "get_chunk_mixture": self._chunk_mixture,
            "get_component_id": lambda name: self._ids[name],
            "replay_targets": self._targets,
        }
        chain: list[tuple[str, BaseOp]] = [("fetch", FetchOp(self._datasets))]
        user = list(self._ops)
        batch_at = next((i for i, (_, op) in enumerate(user) if isinstance(op, Batch)), None)
        if batch_at is None:
            tail = user[-1][0] if user else "fetch"
            user.append((f"{tail}_replay_filter", ReplayFilter()))
        else:
            user.insert(batch_at, (f"{user[batch_at][0]}_replay_filter", ReplayFilter()))
        chain += user
        return [OpStage(name, op, deterministic=self._deterministic, ctx=ctx) for name, op in chain]

    # -- iteration --------------------------------------------------------------------------
    def _source(self) -> Iterator[Any]:
        gens = [self.streams[lane].items() for lane in self.lanes]
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
        # (zephon 0.2.0 uses the smallest LanePtr instead; see docs/divergences.md.)
        counts = [(self.trackers[lane].emitted, i) for i, lane in enumerate(self.lanes)]
        return min(counts)[1]

    def _multiplex(self, upstream: Iterator[Any]) -> Iterator[Any]:
        lanes = self.lanes
        n = len(lanes)
        if n <= 1:
            yield from upstream
            return
        bufs: dict[int, deque[Any]] = {lane: deque() for lane in lanes}
        warn_at = _MUX_WARN
        p = self._start_index()
        exhausted = False
        while not exhausted:
            lane = lanes[p]
            while not bufs[lane]:
                try:
                    x = next(upstream)
                except StopIteration:
                    exhausted = True
                    break
                buf = bufs[lane_of(x)]
                buf.append(x)
                if len(buf) >= warn_at:
                    warnings.warn(f"tail multiplexer: lane {lane_of(x)} buffers {len(buf)} items waiting for its "
                                  "round-robin turn", RuntimeWarning, stacklevel=2)
                    warn_at *= 2
            if exhausted:
                break
            x = bufs[lane].popleft()
            yield x
            if not is_sentinel(x):
                p = (p + 1) % n
        while any(bufs.values()):
            lane = lanes[p]
            if bufs[lane]:
                x = bufs[lane].popleft()
                yield x
                if not is_sentinel(x):
                    p = (p + 1) % n
            else:
                p = (p + 1) % n

    def run(self) -> Iterator[Any]:
        """Delivered items, each notified before it is yielded."""
        if self._started:
            raise StateMismatchError("engine: expected a fresh engine per iteration, received one already run")
        self._started = True
        runner = make_runner(self._runner_kind, self._stages(), workers=self._workers, queue_size=self._queue,
                             deterministic=self._deterministic)
        n = len(self.lanes)
        index = {lane: i for i, lane in enumerate(self.lanes)}
        for x in self._multiplex(iter(runner.run(self._source()))):
            if is_sentinel(x):
                meta = x.meta
                if meta.tombstone:
                    self._on_tombstone(x)
                elif meta.is_flush_sentinel:
                    self.streams[meta.lane_id].prune_mixtures(int(meta.tags[TAG_BOUNDARY_CID]))
                continue
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
                    tr.notify_monotone(top, x.chunk_ids.count(top), max(_cursor_of(r) for r in x.records))
                else:
                    tr.notify_monotone(x.meta.chunk_id, 1, x.meta.cursor)
                self.streams[lane].prune_mixtures(tr.ptr.chunk_id)
            else:
                recs = x.records if isinstance(x, SampleBatch) else (x,)
                refs = [ref for r in recs for ref in r.meta.contribution_refs()]
                tr.notify(refs, recs[-1].meta.cursor)
            tr.emitted += 1
            self.rr_next_idx[self._rr_key] = (index[lane] + 1) % n
            yield x
        with self.lock:
            for lane in self.lanes:
                if not self.monotone:
                    self.trackers[lane].notify([], None)
                self.streams[lane].evict(sorted(self.streams[lane].inflight))
                self.streams[lane].prune_mixtures(self.streams[lane].next_cid)
        self.finished = True

    def _on_tombstone(self, t: SampleRecord) -> None:
        """Tombstones only set completion bits (non-monotone plans); never delivered, never evict."""
        if not self.monotone:
            self.trackers[t.meta.lane_id].complete(t.meta.contribution_refs())

    # -- checkpoint -----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        w = self.world
        with self.lock:
            lane_states = {lane: self.streams[lane].state() for lane in self.lanes}
        trk = {lane: self.trackers[lane].state() for lane in self.lanes}
        bounds = {lane: lane_states[lane]["epoch_boundaries"] for lane in self.lanes
                  if lane_states[lane]["epoch_boundaries"]}
        mid_window = len({t["lane_emitted"] for t in trk.values()}) > 1
        if mid_window and w.dp_degree * w.num_workers > 1:
            warnings.warn("checkpoint taken mid-window: per-lane delivered counts differ; resuming on another "
                          "topology permutes the rest of the current window (nothing is lost or repeated)",
                          RuntimeWarning, stacklevel=3)
        return {
            "schema": ENGINE_SCHEMA,
            "version": ENGINE_VERSION,
            "fingerprint": self.fingerprint,
            "world": {
                "canonical_replicas": w.canonical_replicas, "world_size": w.world_size,
                "global_rank": w.global_rank, "dp_degree": w.dp_degree, "dp_group_id": w.dp_group_id,
                "mapping": w.mapping(),
            },
            "inflight": {lane: lane_states[lane]["inflight"] for lane in self.lanes},
            "progress": {lane: trk[lane]["progress"] for lane in self.lanes},
            "lane_next_cid": {lane: lane_states[lane]["lane_next_cid"] for lane in self.lanes},
            "lane_ws_state": {lane: lane_states[lane]["lane_ws_state"] for lane in self.lanes},
            "work_source": None,
            "work_config": None,
            "last_round_id": self.last_round_id,
            "checkpoint_reload_count": self.reload_count,
            "rr_next_idx": dict(sorted(self.rr_next_idx.items())),
            "replay_cursors": {lane: trk[lane]["replay_cursor"] for lane in self.lanes},
            "epoch_boundaries": bounds,
            "lane_emitted": {lane: trk[lane]["lane_emitted"] for lane in self.lanes},
        }

    def _load(self, state: Mapping[str, Any]) -> dict[int, SampleCursor | None]:
        """Apply a validated state to the freshly built lanes; returns the replay targets."""
        targets: dict[int, SampleCursor | None] = {}

        def lane_entry(field: str, lane: int, *, required: bool = True) -> Any:
            table = state.get(field) or {}
            for key in (lane, str(lane)):
                if key in table:
                    return table[key]
            if required:
                raise StateMismatchError(expected(f"checkpoint {field}", f"an entry for owned lane {lane}",
                                                  f"lanes {sorted(table)}"))
            return None

        for lane in self.lanes:
            stream, tr = self.streams[lane], self.trackers[lane]
            stream.load(inflight=lane_entry("inflight", lane), next_cid=lane_entry("lane_next_cid", lane),
                        ws_state=lane_entry("lane_ws_state", lane),
                        boundaries=lane_entry("epoch_boundaries", lane, required=False) or [])
            prog = lane_entry("progress", lane)
            try:
                tr.ptr = LanePtr(int(prog["chunk_id"]), int(prog["offset"]))
                raw = lane_entry("replay_cursors", lane, required=False)
                tr.cursor = None if raw is None else SampleCursor.from_key(raw)
                tr.emitted = int(lane_entry("lane_emitted", lane, required=False) or 0)
            except (KeyError, TypeError, ValueError) as exc:
                raise StateFormatError(f"lane {lane}: malformed progress/cursor state: {exc}") from exc
            cur = tr.cursor
            targets[lane] = cur if (cur is not None and cur.chunk_id in stream.inflight) else None
        self.reload_count = int(state.get("checkpoint_reload_count", 0)) + 1
        self.last_round_id = state.get("last_round_id")
        rr = state.get("rr_next_idx") or {}
        self.rr_next_idx = {str(k): int(v) for k, v in rr.items() if str(k) == self._rr_key}
        return targets

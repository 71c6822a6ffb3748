"""Delivery notification, completion tracking and eviction.

Theory of operation
-------------------
What reaches the consumer decides which inflight chunks a checkpoint must keep.
Two paths, fixed when the plan is compiled:

* **monotone** (every operator preserves cursor order): delivering a record of
  chunk ``c`` proves every chunk below ``c`` fully delivered, so chunks ``< c``
  are evicted; the replay cursor is the largest cursor delivered.
* **non-monotone** (packing, shuffles, mixture correction reorder): each
  delivered record's *closing* contributors set one bit per base offset in a
  per-chunk bitmap (tombstones set bits too, but never evict or move the
  cursor).  Eviction is per epoch and atomic: walking the lane's boundaries in
  ascending order, the epoch below boundary ``b`` is evicted only when every
  chunk in it has all offsets closed **and** it does not hold the chunk of the
  last delivered record (cursor pinning: the replay filter needs that chunk to
  find its target).  No boundary recorded means nothing is evicted.  The replay
  cursor is the last delivered record's cursor.

``LanePtr`` (chunk_id, offset) is diagnostic progress and the seed of the
round-robin fallback.  Everything here is called on the consumer's thread;
chunk removal goes through the lane stream (under the engine's guard, a no-op unless a runner with
threads installed a lock).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from zephon_ref.engine.lanes import LaneStream
from zephon_ref.types import ContributorRef, SampleCursor

__all__ = ["LanePtr", "LaneTracker"]


@dataclass(frozen=True, slots=True)
class LanePtr:
    chunk_id: int = -1
    offset: int = 0

    def as_dict(self) -> dict[str, int]:
        return {"chunk_id": self.chunk_id, "offset": self.offset}


class LaneTracker:
    """Per-lane completion bitmaps, progress and replay cursor."""

    def __init__(self, stream: LaneStream, *, monotone: bool) -> None:
        self.stream = stream
        self.monotone = monotone
        #: per inflight chunk with a closed offset: one byte per offset, 1 = closed (non-monotone
        #: plans only; keys a subset of stream.inflight, each as long as its chunk)
        self.bits: dict[int, bytearray] = {}
        #: closed offsets per chunk: done[cid] == sum(bits[cid]), same keys as bits
        self.done: dict[int, int] = {}
        #: the progress pointer a checkpoint writes (zephon's ``progress``)
        self.ptr = LanePtr()
        #: the cursor of the last delivered record (the replay filter's target on restore)
        self.cursor: SampleCursor | None = None
        #: records delivered from this lane, >= 0
        self.emitted = 0

    def check(self) -> None:
        """Assert the invariants written beside the fields."""
        inflight = self.stream.inflight
        lane = self.stream.lane
        assert self.bits.keys() == self.done.keys(), (lane, sorted(self.bits), sorted(self.done))
        assert not (self.monotone and self.bits), (lane, "a monotone plan keeps no bitmaps")
        for cid, bm in self.bits.items():
            assert cid in inflight, (lane, cid, "bitmap of an evicted chunk")
            assert len(bm) == len(inflight[cid]), (lane, cid, len(bm), len(inflight[cid]))
            assert self.done[cid] == sum(bm), (lane, cid, self.done[cid], sum(bm))
        assert type(self.emitted) is int and self.emitted >= 0, (lane, self.emitted)

    # -- monotone ---------------------------------------------------------------------------
    def notify_monotone(self, max_cid: int, add_k: int, max_cursor: SampleCursor) -> None:
        stale = [cid for cid in self.stream.inflight if cid < max_cid]
        self.stream.evict(stale)
        self.ptr = (LanePtr(max_cid, self.ptr.offset + add_k) if self.ptr.chunk_id == max_cid
                    else LanePtr(max_cid, add_k))
        if self.cursor is None or max_cursor > self.cursor:
            self.cursor = max_cursor

    # -- non-monotone -------------------------------------------------------------------------
    def complete(self, refs: tuple[ContributorRef, ...] | list[ContributorRef]) -> None:
        inflight = self.stream.inflight
        for ref in refs:
            if not ref.is_last_child:
                continue
            cid, off = ref.cursor.chunk_id, ref.cursor.chunk_offset
            chunk = inflight.get(cid)
            if chunk is None:
                continue  # already evicted (or never ours): nothing to track
            bm = self.bits.get(cid)
            if bm is None:
                bm = self.bits[cid] = bytearray(len(chunk))
                self.done[cid] = 0
            if 0 <= off < len(bm) and not bm[off]:
                bm[off] = 1
                self.done[cid] += 1

    def notify(self, refs: list[ContributorRef], record_cursor: SampleCursor | None) -> None:
        self.complete(refs)
        self._evict_epochs(None if record_cursor is None else record_cursor.chunk_id)
        inflight = self.stream.inflight
        if inflight:
            low = min(inflight)
            self.ptr = LanePtr(low, self.done.get(low, 0))
        if record_cursor is not None:
            self.cursor = record_cursor

    def _evict_epochs(self, pinned_cid: int | None) -> None:
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
        if queued:
            for cid in queued:
                self.bits.pop(cid, None)
                self.done.pop(cid, None)
            stream.evict(queued)

    def close(self) -> None:
        """End of the run: every inflight chunk is evicted, with its bitmap."""
        self.bits.clear()
        self.done.clear()
        self.stream.evict(sorted(self.stream.inflight))

    # -- checkpoint ---------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        return {
            "progress": self.ptr.as_dict(),
            "replay_cursor": None if self.cursor is None else self.cursor.as_key(),
            "lane_emitted": self.emitted,
        }

"""Lane streams: chunk admission, chunk ids, flush sentinels, end-of-data sentinels, replay.

Theory of operation
-------------------
A :class:`LaneStream` owns one lane's work-source clone and everything the
checkpoint needs about that lane's *input* side: the next chunk id, the
inflight chunks (admitted, not yet evicted), the epoch boundaries and the
announced end-of-data components.  :meth:`LaneStream.items` yields the lane's
source items in order:

* **Phase 1 (replay)**: the restored inflight chunks in ascending chunk id, a
  flush sentinel before every chunk whose id is a stored boundary, then one for
  every stored boundary beyond the last inflight chunk (the trailing boundary);
* **Phase 2 (new chunks)**: admit ``next_chunk()`` as chunk ``next_cid``; every
  ``K`` admitted chunks append boundary ``cid + 1``; yield the chunk's samples,
  then that boundary's flush sentinel.

Admission and boundary recording happen together in one step of the generator, so
a checkpoint never sees a chunk without its boundary, and the work-source state it
captures matches the admitted chunks exactly.  Nothing here locks: every call happens on
the thread that drives the engine (admission, delivery and checkpoints alike).

A sample is the raw tuple ``(sample_id, lane, cid, offset, component_id)``;
sentinels are records (:func:`~zephon_ref.types.flush_sentinel`,
:func:`~zephon_ref.types.eod_sentinel`, and before each chunk's samples the
:func:`~zephon_ref.types.chunk_sentinel` announcing its mixture, so operators that need
it never ask the engine).  Eviction is not decided here (see
``completion.py``); it only removes chunks through :meth:`LaneStream.evict`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from zephon_ref.errors import ContractError, StateFormatError, ZephonRefError, expected
from zephon_ref.types import SampleRecord, chunk_sentinel, eod_sentinel, flush_sentinel
from zephon_ref.work.base import WorkChunk, WorkSource

__all__ = ["LaneStream", "SourceItem"]

#: ``(sample_id, lane_id, chunk_id, chunk_offset, component_id)`` or a sentinel record
SourceItem = tuple[Any, int, int, int, int] | SampleRecord


class LaneStream:
    """One lane's input side: admission, replay, sentinels."""

    def __init__(self, lane: int, source: WorkSource, *, k: int) -> None:
        self.lane = lane
        self.source = source
        self.k = k  # flush_every_k_chunks (0: never); fixed
        #: the id the next admitted chunk takes; every inflight id is below it, and the newest
        #: inflight chunk is the last admitted one (next_cid == max(inflight) + 1 when any)
        self.next_cid = 0
        #: admitted chunks not yet evicted, by id: the only chunks a restore replays
        self.inflight: dict[int, WorkChunk] = {}
        #: flush boundaries (chunk ids that start an epoch) not yet evicted: strictly ascending,
        #: each in 1..next_cid
        self.boundaries: list[int] = []
        #: chunks admitted since the last boundary: 0 <= chunks_in_epoch < k (k > 0)
        self.chunks_in_epoch = 0
        self._ids = dict(source.component_ids())
        self._continuing = frozenset(source.continues_after_exhaustion())
        #: the source returned no chunk; nothing is admitted after
        self.exhausted = False

    def check(self) -> None:
        """Assert the invariants written beside the fields (tests and the simulator, after every step)."""
        lane = self.lane
        assert type(self.next_cid) is int and self.next_cid >= 0, (lane, self.next_cid)
        if self.inflight:
            assert self.next_cid == max(self.inflight) + 1, (lane, self.next_cid, sorted(self.inflight))
            assert min(self.inflight) >= 0, (lane, sorted(self.inflight))
        b = self.boundaries
        assert all(x < y for x, y in zip(b, b[1:], strict=False)), (lane, b)
        assert all(1 <= x <= self.next_cid for x in b), (lane, b, self.next_cid)
        if self.k > 0:
            assert 0 <= self.chunks_in_epoch < self.k, (lane, self.chunks_in_epoch, self.k)

    # -- checkpoint ---------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        """This lane's input-side state."""
        # invariant: next_cid == max(inflight) + 1 whenever inflight is non-empty
        assert not self.inflight or self.next_cid == max(self.inflight) + 1, (
            self.next_cid,
            sorted(self.inflight),
        )
        return {
            "inflight": {cid: self.inflight[cid].state_dict() for cid in sorted(self.inflight)},
            "lane_next_cid": self.next_cid,
            "lane_ws_state": self.source.state_dict(),
            "epoch_boundaries": list(self.boundaries),
        }

    def load(self, *, inflight: Mapping[Any, Any], next_cid: Any, ws_state: Any, boundaries: Any) -> None:
        """Restore (validated by the caller's schema check; a bad value raises StateFormatError)."""
        try:
            chunks = {int(cid): WorkChunk.from_state(st) for cid, st in inflight.items()}
            nxt = int(next_cid)
            bounds = sorted(int(b) for b in (boundaries or ()))
        except (TypeError, ValueError, AttributeError) as exc:
            raise StateFormatError(f"lane {self.lane}: malformed inflight/boundary state: {exc}") from exc
        if chunks and nxt != max(chunks) + 1:
            raise StateFormatError(expected(f"lane {self.lane} lane_next_cid", f"{max(chunks) + 1}", nxt))
        try:
            self.source.load_state_dict(ws_state)
        except ZephonRefError:
            raise
        except (TypeError, ValueError, OverflowError, KeyError, IndexError, AttributeError) as exc:
            # the source's own decoding (e.g. numpy refusing an RNG snapshot) reached a raw error
            raise StateFormatError(
                expected(
                    f"lane {self.lane} work-source state",
                    "a state this source can load",
                    f"{type(exc).__name__}: {exc}",
                )
            ) from exc
        self.inflight = chunks
        self.next_cid = nxt
        self.boundaries = bounds
        # boundaries lie on the K grid (every k-th chunk id); with none left (a lane whose source
        # ended evicts them all) the grid still says where the epoch began
        self.chunks_in_epoch = nxt - bounds[-1] if bounds else (nxt % self.k if self.k > 0 else nxt)

    # -- eviction -------------------------------------------------------------------------
    def evict(self, cids: list[int]) -> None:
        for cid in cids:
            self.inflight.pop(cid, None)
        if cids:
            top = max(cids)
            self.boundaries = [b for b in self.boundaries if b > top]

    # -- the item stream ----------------------------------------------------------------------
    def items(self) -> Iterator[SourceItem]:
        announced: list[str] = []
        replay = sorted(self.inflight)
        bset = set(self.boundaries)
        for cid in replay:
            if cid in bset:
                yield flush_sentinel(self.lane, cid)
            yield from self._chunk_items(cid, self.inflight[cid], announced)
        last = replay[-1] if replay else -1
        for b in self.boundaries:
            if b > last:
                yield flush_sentinel(self.lane, b)
        while True:
            chunk = self.source.next_chunk()
            if chunk is None:
                self.exhausted = True
                return
            cid = self.next_cid
            self.next_cid += 1
            self.inflight[cid] = chunk
            self.chunks_in_epoch += 1
            boundary = None
            if self.k > 0 and self.chunks_in_epoch >= self.k:
                boundary = cid + 1
                self.boundaries.append(boundary)
                self.chunks_in_epoch = 0
            yield from self._chunk_items(cid, chunk, announced)
            if boundary is not None:
                yield flush_sentinel(self.lane, boundary)

    def _eod(self, name: str, announced: list[str]) -> SampleRecord:
        announced.append(name)
        final = len(announced) == len(self._ids)
        return eod_sentinel(self.lane, self._ids[name], continues=name in self._continuing, final=final)

    def _chunk_items(self, cid: int, chunk: WorkChunk, announced: list[str]) -> Iterator[SourceItem]:
        lane = self.lane
        ids = self._ids
        # the chunk's mixture travels ahead of its samples (types.chunk_sentinel)
        mix = chunk.target_mixture if chunk.target_mixture is not None else chunk.mixture
        yield chunk_sentinel(lane, cid, {ids[name]: w for name, w in mix.items() if name in ids})
        gone = [n for n in announced if n not in chunk.source_exhausted]
        if gone:
            raise ContractError(expected(f"lane {lane} chunk {cid} source_exhausted",
                                         f"a superset of the announced {announced}", chunk.source_exhausted))
        fresh = [n for n in chunk.source_exhausted if n not in announced]
        for n in fresh:
            if n not in ids:
                raise ContractError(expected("exhausted component", f"one of {sorted(ids)}", n))
        # components newly exhausted with no samples here are announced before the chunk
        with_samples = {n for n in fresh if chunk.components.get(n)}
        for n in fresh:
            if n not in with_samples:
                yield self._eod(n, announced)
        last_at = {}
        order = chunk.ordered()
        for off, (_, comp) in enumerate(order):
            last_at[comp] = off
        for comp in chunk.components:
            if comp in announced and chunk.components[comp]:
                raise ContractError(f"lane {lane} chunk {cid}: component {comp!r} was announced exhausted "
                                    "but produced samples again")
            if comp not in ids:
                raise ContractError(expected("chunk component", f"one of {sorted(ids)}", comp))
        closing = {last_at[n]: n for n in with_samples}
        for off, (sid, comp) in enumerate(order):
            yield (sid, lane, cid, off, ids[comp])
            if off in closing:
                yield self._eod(closing[off], announced)

"""Every lane's chunks, as documents, from one pass over the global chunk sequence.

Theory of operation
-------------------
The contents of global chunk ``g`` do not depend on who owns it, so
:class:`ChunkDispatcher` produces the global sequence once and hands chunk ``g``
to its owner's queue.  The sequence comes from the source's public lane API (a
clone of one lane out of one, which owns every chunk, and ``lane_for_chunk(g)`` of
a clone of the real topology): the one seam where this implementation enters the
reference.  It does not recompute the work-source order itself (an earlier own
computation copied the reference's quota loop; planning chunks is a small part of
the cost, see bench/bench_tensor.py).

A lane chunk arrives as ``(documents, mixture by component id)``: the documents
in the chunk's offset order (:mod:`.order`), each with its payload read from the
dataset.  The dispatcher produces whole *windows* of global chunks (about
:data:`WINDOW_SAMPLES` samples) at a time; when the plan's first record stage is
``tokenize``, every text of the window is tokenized in one call (a pure function
of each document: the stage's grouping is kept by the lane, which only splits
long documents), and such a document carries :data:`PRETOK` as its payload.  A
window whose texts cannot all be read (a missing field) is left untokenized, and
the lane's tokenize stage then raises the reference's error at the reference's
point.

Lazy: nothing is produced beyond the window holding the chunk a lane needs.
What may not live here: per-lane operators, ordering across lanes.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping, Sequence
from itertools import repeat
from operator import itemgetter
from typing import Any

from zephon_ref.fast.tensor.order import chunk_pattern
from zephon_ref.fast.tensor.tokens import WordIds

__all__ = ["PRETOK", "WINDOW_SAMPLES", "ChunkDispatcher", "LaneChunk", "lane_feeds"]

#: samples per production window
WINDOW_SAMPLES = 2048


class _Pretokenized:
    __slots__ = ()

    def __repr__(self) -> str:
        return "PRETOK"


#: the payload of a document whose ``ids`` are the tokenizer's output (not yet split)
PRETOK: Any = _Pretokenized()

#: (documents, the chunk's mixture by component id)
LaneChunk = tuple[list[Any], dict[int, float]]


class _SourceChunks:
    """Global chunks read through the source's public lane API."""

    __slots__ = ("_global", "_owner", "g")

    def __init__(self, source: Any, lanes: int) -> None:
        self._global = source.clone_for_lane(0, 1)
        self._owner = source.clone_for_lane(0, lanes)
        self.g = 0

    def next(self) -> tuple[int, dict[str, Any], dict[str, float]] | None:
        chunk = self._global.next_chunk()
        if chunk is None:
            return None
        owner = self._owner.lane_for_chunk(self.g)
        self.g += 1
        mix = chunk.target_mixture if chunk.target_mixture is not None else chunk.mixture
        return owner, chunk.components, mix


class ChunkDispatcher:
    __slots__ = (
        "_cids",
        "_datasets",
        "_done",
        "_gen",
        "_gets",
        "_ids",
        "_plans",
        "_queues",
        "_starts",
        "_tok",
    )

    def __init__(self, source: Any, lanes: int, *, datasets: Mapping[int, Any], ids: Mapping[str, int],
                 pretokenize: tuple[str, WordIds] | None = None, starts: Sequence[int] | None = None) -> None:
        self._gen = _SourceChunks(source, lanes)
        self._queues: list[deque[LaneChunk]] = [deque() for _ in range(lanes)]
        self._cids = [0] * lanes  # chunks produced per lane (skipped ones included)
        self._starts = list(starts) if starts is not None else [0] * lanes  # per lane: chunks to skip
        self._datasets, self._ids, self._tok = datasets, ids, pretokenize
        self._gets = {did: d.get for did, d in datasets.items()}  # dataset id -> its row reader
        self._plans: dict[
            tuple[tuple[str, int], ...], tuple[Callable[[list[Any]], Any], tuple[int, ...]]
        ] = {}
        self._done = False

    def _plan(self, comps: Mapping[str, Sequence[Any]]) -> tuple[Callable[[list[Any]], Any], tuple[int, ...]]:
        """For a chunk with these component sizes: a getter taking the chunk's samples in offset
        order out of its components' lists laid end to end (dataset order), and the component
        id of every offset (memoised per ``((name, count), ...)``: the order depends on nothing
        else)."""
        key = tuple((name, len(v)) for name, v in comps.items() if len(v) > 0)
        got = self._plans.get(key)
        if got is None:
            start, at = {}, 0
            for name, count in key:
                start[name] = at
                at += count
            pattern = chunk_pattern(comps)
            where = [start[name] + i for name, i in pattern]
            getter: Callable[[list[Any]], Any]
            if len(where) == 1:  # itemgetter of one index returns the item itself, not a 1-tuple
                only = where[0]

                def getter(xs: list[Any]) -> tuple[Any, ...]:
                    return (xs[only],)
            else:
                getter = itemgetter(*where)
            got = self._plans[key] = (getter, tuple(self._ids[name] for name, _ in pattern))
        return got

    def _window(self) -> None:
        chunks: list[tuple[int, int, tuple[Any, ...], tuple[int, ...], dict[int, float]]] = []
        payloads: list[Any] = []
        n = 0
        gets, ids, cids = self._gets, self._ids, self._cids
        while n < WINDOW_SAMPLES:
            chunk = self._gen.next()
            if chunk is None:
                self._done = True
                break
            owner, comps, mix = chunk
            cid = cids[owner]
            cids[owner] = cid + 1
            if cid < self._starts[owner]:
                continue  # before the lane's resume point: its documents are never read
            getter, comp_ids = self._plan(comps)
            # the chunk's sample pointers in offset order (tuples of ints, as the reference keeps them)
            sids = getter([s for v in comps.values() for s in v])
            payloads.extend([gets[s[0]](s[1], s[2]) for s in sids])
            n += len(sids)
            chunks.append((owner, cid, sids, comp_ids, {ids[name]: w for name, w in mix.items()}))
        tokens = self._pretokenize(payloads) if self._tok is not None and payloads else None
        # documents (sample_id, chunk_id, offset, component_id, lineage, closing, ids, payload), built by
        # zip: pretokenized ones carry their ids and PRETOK, the others [] and the payload
        at = 0
        queues = self._queues
        for owner, cid, sids, comp_ids, mixture in chunks:
            k = len(sids)
            if tokens is None:
                docs = list(zip(sids, repeat(cid, k), range(k), comp_ids, repeat((), k), repeat(None, k),
                                [[] for _ in range(k)], payloads[at:at + k], strict=True))
            else:
                docs = list(zip(sids, repeat(cid, k), range(k), comp_ids, repeat((), k), repeat(None, k),
                                tokens[at:at + k], repeat(PRETOK, k), strict=True))
            at += k
            queues[owner].append((docs, mixture))

    def _pretokenize(self, payloads: list[Any]) -> list[Any] | None:
        """Every payload's tokens, or None when some payload has no text field (the lane's
        tokenize stage then raises the reference's error in place)."""
        assert self._tok is not None
        field, words = self._tok
        try:
            texts = [p[field] for p in payloads]
        except (KeyError, TypeError, IndexError):
            return None
        if not all(type(t) is str for t in texts):
            return None
        return words.encode_many(texts)

    def next_for(self, lane: int) -> LaneChunk | None:
        q = self._queues[lane]
        while not q and not self._done:
            self._window()
        return q.popleft() if q else None


class _Feed:
    __slots__ = ("_d", "_lane")

    def __init__(self, d: ChunkDispatcher, lane: int) -> None:
        self._d, self._lane = d, lane

    def next_chunk(self) -> LaneChunk | None:
        return self._d.next_for(self._lane)

    @property
    def position(self) -> int:
        """Chunks of this lane produced so far, skipped ones included."""
        return self._d._cids[self._lane]


def lane_feeds(
    source: Any,
    lanes: int,
    *,
    datasets: Mapping[int, Any],
    ids: Mapping[str, int],
    pretokenize: tuple[str, WordIds] | None = None,
    starts: Sequence[int] | None = None,
) -> list[_Feed]:
    """One chunk feed per lane (``next_chunk() -> (documents, mixture) | None``), in lane order;
    lane ``i`` starts at its chunk ``starts[i]`` (the earlier ones are produced, not read)."""
    d = ChunkDispatcher(source, lanes, datasets=datasets, ids=ids, pretokenize=pretokenize, starts=starts)
    return [_Feed(d, lane) for lane in range(lanes)]

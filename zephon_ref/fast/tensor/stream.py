"""One lane's output stream, as a cascade of per-lane stages.

Theory of operation
-------------------
Every operator the tensor implementation supports keeps state per lane only, so
a lane's output is a function of that lane's chunk sequence.  :func:`lane_items`
feeds the lane's fetched documents one at a time through a cascade of stages,
each with ``push(units, out)`` and ``flush(out)``:

* counting stages (the fetch of :data:`FETCH_GROUP` samples, formed here, and
  ``map_transform`` and ``tokenize`` with their ``max_batch``) regroup the stream and
  apply their pure function to each full group (a boundary or the end emits the partial
  group): the groups decide what a later ``ensure_mixture`` sees per push, so they are
  kept exactly;
* the packer, the shuffles and the mixture (packing.py, shuffle.py, mixture.py).

What one stage outputs for one input micro-batch (its pushes, then on a
boundary its flush) is the next stage's single micro-batch; a tombstone marker
``TOMB`` in a micro-batch splits it into separate pushes.  At a boundary every
stage flushes and resets in order; at the end every stage flushes.

Batching: groups of ``microbatch_size`` units (``drop_last=True``: groups run
across boundaries, as the reference's stalled flush sentinel lets them, and a
partial last group is dropped; ``drop_last=False``: a boundary or the end emits
the partial group).

Resume: :func:`lane_items` can start at flush epoch ``e`` and drop that epoch's
first ``u`` units (every stage is empty at an epoch's start), and reports after
every item the ``(e, u)`` right after it.

An item is ``(lane, units)``; the interleaving of lanes is the pipeline's
(:mod:`.pipeline`: strict round robin, as the reference's tail multiplexer, which
waits for a lane's output until upstream is done and then skips empty lanes).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Any

from zephon_ref.errors import StateMismatchError, expected
from zephon_ref.fast.tensor.config import (
    MapSpec,
    MixtureSpec,
    PackSpec,
    ShuffleSpec,
    TensorPlan,
    TokenizeSpec,
)
from zephon_ref.fast.tensor.lanes import TOMB, map_docs, tokenize_docs
from zephon_ref.fast.tensor.mixture import MixtureLane
from zephon_ref.fast.tensor.packing import LanePacker
from zephon_ref.fast.tensor.shuffle import BlockLane, StreamingLane
from zephon_ref.fast.tensor.tokens import WordIds

__all__ = ["FETCH_GROUP", "Item", "lane_items", "word_tables"]

Item = tuple[int, tuple[Any, ...]]

#: samples fetched per group (the reference's implicit first operator)
FETCH_GROUP = 64


class Counting:
    """Groups of ``size`` (per lane), each mapped by ``fn`` when complete or flushed."""

    __slots__ = ("buf", "fn", "size")

    def __init__(self, size: int, fn: Callable[[list[Any]], list[Any]]) -> None:
        self.size, self.fn = size, fn
        self.buf: list[Any] = []

    def push(self, units: list[Any], out: list[Any]) -> None:
        buf, size = self.buf, self.size
        buf.extend(units)
        start = 0
        # every full group, in order, as the per-element count would emit them
        while len(buf) - start >= size:
            out.extend(self.fn(buf[start:start + size]))
            start += size
        if start:
            self.buf = buf[start:]

    def flush(self, out: list[Any]) -> None:
        if self.buf:
            out.extend(self.fn(self.buf))
            self.buf = []


class AsUnits:
    """Documents -> one-document units (no packing): the flag of a 1:1 document is its own."""

    __slots__ = ()

    def push(self, units: list[Any], out: list[Any]) -> None:
        out.extend(((d,), (True if d[5] is None else d[5],)) for d in units)

    def flush(self, out: list[Any]) -> None:
        return None


def word_tables(plan: TensorPlan) -> dict[int, WordIds]:
    """One word-id memo per tokenize stage, shared by all lanes of a run (a pure function's cache)."""
    return {i: WordIds(s.tokenizer) for i, s in enumerate(plan.stages) if isinstance(s, TokenizeSpec)}


def _stages(plan: TensorPlan, lane: int, mixture: dict[int, float] | None,
            chunk_mixtures: dict[int, Any], words: dict[int, WordIds], components: int) -> list[Any]:
    packed = any(isinstance(s, PackSpec) for s in plan.stages)
    out: list[Any] = []  # the fetch groups are formed by lane_items itself
    units = False
    for i, s in enumerate(plan.stages):
        if isinstance(s, MapSpec):
            out.append(Counting(s.max_batch, functools.partial(map_docs, s)))
        elif isinstance(s, TokenizeSpec):
            out.append(Counting(s.max_batch, functools.partial(tokenize_docs, s, words[i])))
        else:
            if not units:
                units = True
                if not packed:
                    out.append(AsUnits())
            if isinstance(s, PackSpec):
                out.append(LanePacker(s))
            elif isinstance(s, ShuffleSpec):
                if s.algorithm == "streaming":
                    out.append(StreamingLane(lane, s.buffer_size, s.seed, packed))
                else:
                    out.append(BlockLane(s.buffer_size, s.seed, packed,
                                         s.growth if s.algorithm == "block_warmup" else None))
            elif isinstance(s, MixtureSpec):
                out.append(MixtureLane(s, mixture, chunk_mixtures, packed, components=components))
    if not units and not packed:
        out.append(AsUnits())
    return out


def _tombstone_sources(stages: list[Any]) -> list[bool]:
    """Per stage: whether it may emit a tombstone of its own (map_transform with drop_none, the
    packer's oversized drop); a tombstone also passes through every later stage."""
    return [isinstance(st, LanePacker) or (isinstance(st, Counting) and isinstance(st.fn, functools.partial)
                                           and st.fn.func is map_docs) for st in stages]


def _cascade(stages: list[Any], batch: list[Any], flush: bool, sources: list[bool]) -> list[Any]:
    tombs = False  # whether ``batch`` may hold a tombstone (the fetched documents never do)
    for st, source in zip(stages, sources, strict=True):
        out: list[Any] = []
        held = tombs and TOMB in batch
        if batch:
            if held:
                seg: list[Any] = []
                for x in batch:
                    if x is TOMB:
                        if seg:
                            st.push(seg, out)
                            seg = []
                        out.append(TOMB)
                    else:
                        seg.append(x)
                if seg:
                    st.push(seg, out)
            else:
                st.push(batch, out)
        if flush:
            st.flush(out)
        batch = out
        tombs = held or source
    return [x for x in batch if x is not TOMB] if tombs and TOMB in batch else batch


def lane_items(
    plan: TensorPlan,
    lane: int,
    feed: Any,
    components: int,
    mixture: dict[int, float] | None = None,
    words: dict[int, WordIds] | None = None,
    *,
    start: tuple[int, int] = (0, 0),
    where: list[int] | None = None,
) -> Iterator[Item]:
    """One lane's items; ``feed.next_chunk()`` gives the lane's chunks as ``(documents, mixture)``.

    ``start = (e, u)``: begin at flush epoch ``e`` (the feed is positioned at the lane's chunk
    ``e * k``) and drop the epoch's first ``u`` units.  Every stage is empty at an epoch's start
    and a delivered item ends on a batch boundary, so this continues exactly where a stream
    that delivered up to that unit stopped.  Before each item is yielded, ``where`` is set to the
    position right after it (the ``start`` to resume from)."""
    chunk_mixtures: dict[int, Any] = {}
    stages = _stages(
        plan, lane, mixture, chunk_mixtures, word_tables(plan) if words is None else words, components
    )
    sources = _tombstone_sources(stages)
    batch = plan.batch
    size = batch.microbatch_size if batch is not None else 1
    drop_last = batch.drop_last if batch is not None else True
    k = plan.k
    epoch, skip = start
    if k == 0 and epoch:
        raise StateMismatchError(expected(f"lane {lane} resume epoch", "0 (this plan never flushes)", epoch))
    where = [0, 0] if where is None else where
    group: list[Any] = []
    pending: list[Any] = []  # fetched documents not yet pushed (fewer than FETCH_GROUP)
    cid = epoch * k
    units = 0  # units produced in the current epoch (skipped ones included)

    def collect(xs: list[Any]) -> list[tuple[tuple[Any, ...], int]]:
        """Full groups from ``xs``, each with the epoch's unit count right after it."""
        nonlocal group, units, skip
        ready = []
        for x in xs:
            units += 1
            if skip:
                skip -= 1
                continue
            group.append(x)
            if len(group) == size:
                ready.append((tuple(group), units))
                group = []
        return ready

    while True:
        got = feed.next_chunk()
        if got is None:
            break
        docs, mix = got
        chunk_mixtures[cid] = mix
        cid += 1
        pending.extend(docs)
        boundary = k > 0 and cid % k == 0
        at = 0
        # every full fetch group, then (boundary) the partial one followed by every stage's flush
        while len(pending) - at >= FETCH_GROUP:
            for g, u in collect(_cascade(stages, pending[at:at + FETCH_GROUP], False, sources)):
                where[0], where[1] = epoch, u
                yield lane, g
            at += FETCH_GROUP
        pending = pending[at:] if at else pending
        if boundary:
            for g, u in collect(_cascade(stages, pending, True, sources)):
                where[0], where[1] = epoch, u
                yield lane, g
            pending = []
            if skip:
                raise StateMismatchError(
                    expected(
                        f"lane {lane} resume position",
                        f"{units + skip} units in flush epoch {epoch}",
                        f"an epoch of {units} units",
                    )
                )
            if not drop_last and group:
                where[0], where[1] = epoch, units
                yield lane, tuple(group)
                group = []
            for c in [c for c in chunk_mixtures if c < cid - 1]:
                del chunk_mixtures[c]
            epoch, units = epoch + 1, 0
    seen = getattr(feed, "position", cid)  # the lane's chunks, skipped ones included
    if k and seen < start[0] * k:
        raise StateMismatchError(
            expected(
                f"lane {lane} resume epoch", f"at most {seen // k} (the lane has {seen} chunks)", start[0]
            )
        )
    for g, u in collect(_cascade(stages, pending, True, sources)):
        where[0], where[1] = epoch, u
        yield lane, g
    if skip:
        raise StateMismatchError(
            expected(
                f"lane {lane} resume position",
                f"{units + skip} units in flush epoch {epoch}",
                f"an epoch of {units} units",
            )
        )
    if group and not drop_last:
        where[0], where[1] = epoch, units
        yield lane, tuple(group)

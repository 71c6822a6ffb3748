"""The lifecycle of every element through a stage and the tail, as one table; micro-batches.

Theory of operation
-------------------
Five kinds of element travel the chain (:class:`Kind`): **data** records and four control
records — **tombstones** (a dropped record's closing fragments), **chunk** announcements
(the mixture of a chunk, ahead of its samples), **end-of-data** announcements (a component
produced its last sample) and **flush** sentinels (the end of a lane's epoch at boundary
``b``).  What happens to one depends only on its kind and where it is (:class:`Where`): an
operator stage, a stage *holding* a flush sentinel of the element's lane, or the tail.
:data:`LIFECYCLE` is that table; :func:`apply` runs an element's steps on the stage or the
engine's tail.  Nothing else decides what a sentinel does.

At a stage, data is *collected*; a control record of lane L first pushes L's collected
records through the accumulator (they precede it in L's stream; the other lanes' keep
collecting; :data:`PUSHES_LANE_FIRST`) — except a chunk announcement, which never splits a
push — and whatever is left is pushed at the end of the micro-batch as one call, in arrival
order.  A push may release held sentinels, so where the element is gets decided after it.
The steps:

* ``announce`` — hand a chunk's mixture to the accumulator (``on_chunk``);
* ``exhaust`` — the first announcement per lane and component updates the stage's
  exhaustion table and calls ``on_source_exhausted``, then passes; a repeat is dropped;
* ``flush_or_hold`` — ``flush(reset=True, lane_id=L)``, emit the result, then the sentinel;
  a lane still pending afterwards is a contract violation (ContractError naming operator
  and lane).  The one allowed stall: ``batch(drop_last=True)`` with data pending for L holds
  the sentinel instead (the stage is then *holding* for L); every later push asks
  ``try_epoch_reset(b, L)`` and releases held sentinels once no buffered record of L
  predates b;
* ``hold_behind`` — a flush of a lane already held waits behind the held ones;
* ``forward`` — pass the element on.

At the tail (:mod:`zephon_ref.engine.core`): data is delivered and notified; a tombstone
sets completion bits and is observed; a flush sentinel checks that the lane's replay
target has reappeared; end-of-data and chunk announcements have done their work.

At upstream close (:meth:`OpStage.close`) every lane is flushed and held sentinels are
released.  The output of one input micro-batch, concatenated over the ready batches, is
the next operator's input micro-batch: that grouping is part of the semantics, and every
runner produces exactly the same groups.

This module owns those rules and nothing else: no threads, queues or clocks.
:func:`apply_entries` runs ``process_many`` serially; the threads runner fans the same
entries out to a pool and releases them in sequence order.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import Enum
from typing import Any

from zephon_ref.errors import ContractError
from zephon_ref.ops.base import Accumulator, BaseOp, SourceExhaustion, lane_of
from zephon_ref.ops.batch import Batch
from zephon_ref.types import (
    EOD_CONTINUES_TAG,
    EOD_FINAL_TAG,
    TAG_BOUNDARY_CID,
    TAG_CHUNK_MIXTURE,
    TAG_FLUSH_SENTINEL,
    TAG_SOURCE_EXHAUSTED,
    TAG_TOMBSTONE,
    SampleRecord,
)

__all__ = ["LIFECYCLE", "PUSHES_LANE_FIRST", "Entries", "Kind", "OpStage", "Step", "Where", "apply",
           "apply_entries", "is_sentinel", "kind_of"]

#: ``(is_control, elements)`` pairs: control entries bypass ``process_many``.
Entries = list[tuple[bool, list[Any]]]


class Kind(Enum):
    DATA = "data"
    TOMBSTONE = "tombstone"
    CHUNK = "chunk announcement"
    EOD = "end-of-data announcement"
    FLUSH = "flush sentinel"


class Where(Enum):
    STAGE = "an operator stage"
    HELD = "a stage holding a flush sentinel of the element's lane"
    TAIL = "the tail"


class Step(Enum):
    """A step of the lifecycle; the value names the method of the actor that runs it."""

    COLLECT = "_collect"
    ANNOUNCE = "_announce"
    EXHAUST = "_exhaust"
    FLUSH_OR_HOLD = "_flush_or_hold"
    HOLD_BEHIND = "_hold_behind"
    FORWARD = "_forward"
    DELIVER = "_deliver_one"  # the tail's (zephon_ref.engine.core.Engine)
    COMPLETE = "_complete"
    OBSERVE = "_observe"
    CHECK_TARGET = "_check_target"


_S, _H, _T = Where.STAGE, Where.HELD, Where.TAIL

#: The kinds whose arrival at a stage first pushes the lane's collected records (they precede it
#: in the lane's stream); a chunk announcement never splits a push.  The push can release held
#: flush sentinels, so a stage decides where the element is (STAGE or HELD) after it.
PUSHES_LANE_FIRST = frozenset({Kind.TOMBSTONE, Kind.EOD, Kind.FLUSH})

#: (kind, where) -> the steps, in order.  The one table of the element lifecycle.
LIFECYCLE: dict[tuple[Kind, Where], tuple[Step, ...]] = {
    (Kind.DATA, _S): (Step.COLLECT,),
    (Kind.DATA, _H): (Step.COLLECT,),
    (Kind.DATA, _T): (Step.DELIVER,),
    (Kind.TOMBSTONE, _S): (Step.FORWARD,),
    (Kind.TOMBSTONE, _H): (Step.FORWARD,),
    (Kind.TOMBSTONE, _T): (Step.COMPLETE, Step.OBSERVE),
    (Kind.CHUNK, _S): (Step.ANNOUNCE, Step.FORWARD),
    (Kind.CHUNK, _H): (Step.ANNOUNCE, Step.FORWARD),
    (Kind.CHUNK, _T): (),
    (Kind.EOD, _S): (Step.EXHAUST,),
    (Kind.EOD, _H): (Step.EXHAUST,),
    (Kind.EOD, _T): (),
    (Kind.FLUSH, _S): (Step.FLUSH_OR_HOLD,),
    (Kind.FLUSH, _H): (Step.HOLD_BEHIND,),
    (Kind.FLUSH, _T): (Step.CHECK_TARGET,),
}


def kind_of(elem: Any) -> Kind:
    """The lifecycle kind of an element (anything but a control record is data)."""
    if not isinstance(elem, SampleRecord):
        return Kind.DATA
    tags = elem.meta.tags
    if not tags:
        return Kind.DATA
    if tags.get(TAG_TOMBSTONE):
        return Kind.TOMBSTONE
    if tags.get(TAG_FLUSH_SENTINEL):
        return Kind.FLUSH
    if TAG_SOURCE_EXHAUSTED in tags:
        return Kind.EOD
    if TAG_CHUNK_MIXTURE in tags:
        return Kind.CHUNK
    return Kind.DATA


def is_sentinel(elem: Any) -> bool:
    return kind_of(elem) is not Kind.DATA


def apply(actor: Any, elem: Any, where: Where) -> None:
    """Run ``elem``'s lifecycle steps at ``where`` on ``actor`` (an :class:`OpStage`, or the engine
    for the tail): the one apply function of :data:`LIFECYCLE`."""
    for step in LIFECYCLE[(kind_of(elem), where)]:
        getattr(actor, step.value)(elem)


class OpStage:
    """One operator with its accumulator and the lifecycle rules around it."""

    def __init__(self, name: str, op: BaseOp, *, deterministic: bool, ctx: dict[str, Any]) -> None:
        self.name = name
        self.op = op
        #: per lane: the components announced exhausted (what ``on_source_exhausted`` reads)
        self._exhaustion: dict[int, SourceExhaustion] = {}
        ctx = dict(ctx)
        ctx.setdefault("get_source_exhaustion", self._get_exhaustion)
        self.acc: Accumulator[Any] = op.accumulator(deterministic=deterministic, ctx=ctx)
        self.can_stall = isinstance(op, Batch) and op.config.drop_last
        #: per lane: held flush sentinels, oldest first (only ever non-empty when can_stall)
        self._stalled: dict[int, list[SampleRecord]] = {}
        #: (lane, component) pairs whose end of data this stage has passed on
        self._seen_eod: set[tuple[int, int]] = set()
        # the micro-batch in progress: collected data and the output entries (enqueue only)
        self._regular: list[Any] = []
        self._out: Entries = []

    def _get_exhaustion(self, lane: int) -> SourceExhaustion:
        return self._exhaustion.get(lane, SourceExhaustion())

    def enqueue(self, elems: Iterable[Any]) -> Entries:
        """Apply the lifecycle to one micro-batch; return its output entries.

        zephon 0.2.0 pushes every collected element at any lane's sentinel, so where a
        micro-batch mixes lanes (the end-of-stream flush, a scarce corpus) an operator whose
        output depends on how its input is grouped into calls (``ensure_mixture``) sees a lane's
        records split by *other* lanes' sentinels, and a lane's stream depends on which lanes
        share its rank (divergence D-26).  Here ``push_lane`` pushes only the sentinel's own
        lane; on lane-pure micro-batches both rules are the same.
        """
        self._regular, self._out = [], []
        for e in elems:
            if kind_of(e) in PUSHES_LANE_FIRST:
                self._push_lane(e)
            lane = lane_of(e) if isinstance(e, SampleRecord) else None
            apply(self, e, Where.HELD if lane in self._stalled else Where.STAGE)
        if self._regular:
            self._push(self._regular)
        out, self._regular, self._out = self._out, [], []
        return out

    def close(self) -> Entries:
        out: Entries = [(False, b) for b, _ in self.acc.flush()]
        for lane in sorted(self._stalled):
            out.extend((True, [s]) for s in self._stalled.pop(lane))
        return out

    # -- the steps ----------------------------------------------------------------------------
    def _collect(self, e: Any) -> None:
        self._regular.append(e)

    def _push_lane(self, s: SampleRecord) -> None:
        lane = s.meta.lane_id
        mine = [r for r in self._regular if lane_of(r) == lane]
        if mine:
            self._regular = [r for r in self._regular if lane_of(r) != lane]
            self._push(mine)

    def _announce(self, s: SampleRecord) -> None:
        on_chunk = getattr(self.acc, "on_chunk", None)  # an accumulator from elsewhere may lack it
        if on_chunk is not None:
            on_chunk(s.meta.lane_id, s.meta.chunk_id, s.meta.tags[TAG_CHUNK_MIXTURE])

    def _exhaust(self, s: SampleRecord) -> None:
        meta = s.meta
        lane, comp = meta.lane_id, int(meta.tags[TAG_SOURCE_EXHAUSTED])
        if (lane, comp) in self._seen_eod:
            return  # a repeat: dropped
        self._seen_eod.add((lane, comp))
        ex = self._exhaustion.get(lane, SourceExhaustion())
        cont = bool(meta.tags.get(EOD_CONTINUES_TAG))
        self._exhaustion[lane] = SourceExhaustion(
            exhausted=ex.exhausted | {comp},
            continuing=ex.continuing | ({comp} if cont else set()),
            final_component=comp if meta.tags.get(EOD_FINAL_TAG) else ex.final_component,
        )
        self._out.extend((False, b) for b, _ in self.acc.on_source_exhausted(lane, comp))
        self._forward(s)

    def _flush_or_hold(self, s: SampleRecord) -> None:
        lane = s.meta.lane_id
        if self.can_stall and self.acc.has_pending_data(lane):
            self._stalled[lane] = [s]  # the one allowed stall
            return
        self._out.extend((False, b) for b, _ in self.acc.flush(reset=True, lane_id=lane))
        if self.acc.has_pending_data(lane):
            raise ContractError(
                f"operator {self.name!r}: flush(reset=True, lane_id={lane}) left pending data; "
                "expected the lane to be drained and reset (the only allowed stall is batch(drop_last=True))"
            )
        self._forward(s)

    def _hold_behind(self, s: SampleRecord) -> None:
        self._stalled[s.meta.lane_id].append(s)

    def _forward(self, s: SampleRecord) -> None:
        self._out.append((True, [s]))

    def _push(self, regular: list[Any]) -> None:
        """``push_many`` one call's records, then release held sentinels whose epoch is clear."""
        self._out.extend((False, b) for b, _ in self.acc.push_many(regular))
        for lane in sorted(self._stalled):
            pending = self._stalled[lane]
            while pending and self.acc.try_epoch_reset(pending[0].meta.tags[TAG_BOUNDARY_CID], lane):
                self._out.append((True, [pending.pop(0)]))
            if not pending:
                del self._stalled[lane]


def apply_entries(stage: OpStage, entries: Entries) -> list[Any]:
    """Run the regular entries through ``process_many`` in order; control entries pass."""
    result: list[Any] = []
    for control, elems in entries:
        result.extend(elems if control else stage.op.process_many(list(elems)))
    return result

"""The runner contract of one operator: micro-batches, sentinels, flush, stall.

Theory of operation
-------------------
:class:`OpStage` applies the runner contract of one operator to a micro-batch:
regular elements are collected and pushed through the accumulator
(``push_many``); each ready batch goes through ``process_many``; sentinels never
do.  At a sentinel the collected elements are pushed first, then:

* a **tombstone** passes through;
* an **end-of-data** announcement (first time per lane and component) calls
  ``on_source_exhausted`` and passes through;
* a **flush sentinel** for lane L at boundary b calls ``flush(reset=True,
  lane_id=L)``, emits the result, then the sentinel.  A lane still pending
  afterwards is a contract violation (ContractError naming operator and lane).
  The one allowed stall: ``Batch(drop_last=True)`` with data pending for L holds
  the sentinel back; every later push asks ``try_epoch_reset(b, L)`` and
  releases it once no buffered record of L predates b.

At upstream close (:meth:`OpStage.close`) every lane is flushed and stalled
sentinels are released.  The output of one input micro-batch, concatenated over
the ready batches, is the next operator's input micro-batch: that grouping is
part of the semantics, and every runner produces exactly the same groups.

This module owns those rules and nothing else: no threads, queues or clocks.
:func:`apply_entries` runs ``process_many`` serially; the threads runner fans the
same entries out to a pool and releases them in sequence order.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from zephon_ref.errors import ContractError
from zephon_ref.ops.base import Accumulator, BaseOp, SourceExhaustion, lane_of
from zephon_ref.ops.batch import Batch
from zephon_ref.types import (
    EOD_CONTINUES_TAG,
    EOD_FINAL_TAG,
    TAG_BOUNDARY_CID,
    TAG_SOURCE_EXHAUSTED,
    SampleRecord,
)

__all__ = ["Entries", "OpStage", "apply_entries", "is_sentinel"]

#: ``(is_control, elements)`` pairs: control entries bypass ``process_many``.
Entries = list[tuple[bool, list[Any]]]


def is_sentinel(elem: Any) -> bool:
    return isinstance(elem, SampleRecord) and elem.meta.is_sentinel


class OpStage:
    """One operator with its accumulator and the runner contract around it."""

    def __init__(self, name: str, op: BaseOp, *, deterministic: bool, ctx: dict[str, Any]) -> None:
        self.name = name
        self.op = op
        self._exhaustion: dict[int, SourceExhaustion] = {}
        ctx = dict(ctx)
        ctx.setdefault("get_source_exhaustion", self._get_exhaustion)
        self.acc: Accumulator[Any] = op.accumulator(deterministic=deterministic, ctx=ctx)
        self.can_stall = isinstance(op, Batch) and op.drop_last
        self._stalled: dict[int, list[SampleRecord]] = {}
        self._seen_eod: set[tuple[int, int]] = set()

    def _get_exhaustion(self, lane: int) -> SourceExhaustion:
        return self._exhaustion.get(lane, SourceExhaustion())

    # Each returned entry is (is_control, elements): control entries bypass process_many.
    def enqueue(self, elems: Iterable[Any]) -> list[tuple[bool, list[Any]]]:
        """Push the regular elements and apply the sentinels of one micro-batch.

        A sentinel of lane L first pushes the regular elements of **L** collected so far (they
        precede it in L's stream); the other lanes' elements keep collecting, and everything
        left is pushed at the end as one call, in arrival order.  zephon 0.2.0 pushes every
        collected element at any lane's sentinel, so where a micro-batch mixes lanes (the
        end-of-stream flush, a scarce corpus) an operator whose output depends on how its input
        is grouped into calls (``ensure_mixture``) sees a lane's records split by *other* lanes'
        sentinels, and a lane's stream depends on which lanes share its rank
        (docs/divergences.md).  On lane-pure micro-batches both rules are the same.
        """
        out: list[tuple[bool, list[Any]]] = []
        regular: list[Any] = []
        for e in elems:
            if is_sentinel(e):
                lane = e.meta.lane_id
                if any(lane_of(r) == lane for r in regular):
                    self._push([r for r in regular if lane_of(r) == lane], out)
                    regular = [r for r in regular if lane_of(r) != lane]
                self._sentinel(e, out)
            else:
                regular.append(e)
        if regular:
            self._push(regular, out)
        return out

    def close(self) -> list[tuple[bool, list[Any]]]:
        out = [(False, b) for b, _ in self.acc.flush()]
        for lane in sorted(self._stalled):
            out.extend((True, [s]) for s in self._stalled.pop(lane))
        return out

    def _push(self, regular: list[Any], out: list[tuple[bool, list[Any]]]) -> None:
        out.extend((False, b) for b, _ in self.acc.push_many(regular))
        for lane in sorted(self._stalled):
            pending = self._stalled[lane]
            while pending and self.acc.try_epoch_reset(pending[0].meta.tags[TAG_BOUNDARY_CID], lane):
                out.append((True, [pending.pop(0)]))
            if not pending:
                del self._stalled[lane]

    def _sentinel(self, s: SampleRecord, out: list[tuple[bool, list[Any]]]) -> None:
        meta = s.meta
        lane = meta.lane_id
        if meta.tombstone:
            out.append((True, [s]))
            return
        if meta.is_eod_sentinel:
            comp = int(meta.tags[TAG_SOURCE_EXHAUSTED])
            if (lane, comp) in self._seen_eod:
                return
            self._seen_eod.add((lane, comp))
            ex = self._exhaustion.get(lane, SourceExhaustion())
            cont = bool(meta.tags.get(EOD_CONTINUES_TAG))
            self._exhaustion[lane] = SourceExhaustion(
                exhausted=ex.exhausted | {comp},
                continuing=ex.continuing | ({comp} if cont else set()),
                final_component=comp if meta.tags.get(EOD_FINAL_TAG) else ex.final_component,
            )
            out.extend((False, b) for b, _ in self.acc.on_source_exhausted(lane, comp))
            out.append((True, [s]))
            return
        # flush sentinel
        if lane in self._stalled:
            self._stalled[lane].append(s)
            return
        if self.can_stall and self.acc.has_pending_data(lane):
            self._stalled[lane] = [s]
            return
        out.extend((False, b) for b, _ in self.acc.flush(reset=True, lane_id=lane))
        if self.acc.has_pending_data(lane):
            raise ContractError(
                f"operator {self.name!r}: flush(reset=True, lane_id={lane}) left pending data; "
                "expected the lane to be drained and reset (the only allowed stall is batch(drop_last=True))"
            )
        out.append((True, [s]))


def apply_entries(stage: OpStage, entries: Entries) -> list[Any]:
    """Run the regular entries through ``process_many`` in order; control entries pass."""
    result: list[Any] = []
    for control, elems in entries:
        result.extend(elems if control else stage.op.process_many(list(elems)))
    return result

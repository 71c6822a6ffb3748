"""batch: lane-pure micro-batches, and the one operator allowed to stall.

Theory of operation
-------------------
:class:`BatchAccumulator` is a per-lane :class:`CountingAccumulator` of
``microbatch_size``; ``process_many`` wraps each lane-pure ready list in a
:class:`~zephon_ref.types.SampleBatch`.  With ``drop_last=True`` a flush
discards partial batches, so a flush sentinel for lane L cannot be honoured
while L has buffered records: the runner *stalls* the sentinel and asks
:meth:`BatchAccumulator.try_epoch_reset` after each push.  It answers True (and
the sentinel is released) once no buffered record of lane L has
``chunk_id < boundary``: from then on the buffer holds only post-boundary
records, so the lane behaves as a fresh accumulator fed that suffix.

Invariants: every emitted batch is lane-pure and exactly ``microbatch_size``
long, except partial batches emitted by a ``drop_last=False`` flush.  A partial
batch a ``drop_last=True`` flush discards is counted per lane into the run's
:class:`~zephon_ref.errors.DropLedger` (the flush at end of data:
sentinels stall instead of flushing a lane with buffered records).

What may not live here: the stall bookkeeping itself (which sentinels are
held, in which order they are released) belongs to the runner.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from zephon_ref.errors import DropLedger, ledger_of
from zephon_ref.ops.base import (
    Accumulator,
    BaseOp,
    CountingAccumulator,
    OpTraits,
    ReadyBatch,
    check_int,
)
from zephon_ref.ops.knobs import Bool, Int, check_fields, knob
from zephon_ref.types import SampleBatch, SampleRecord

__all__ = ["Batch", "BatchAccumulator"]


class BatchAccumulator(CountingAccumulator[SampleRecord]):
    """Counting accumulator whose ``try_epoch_reset`` looks at buffered chunk ids."""

    def __init__(self, max_batch: int, *, drop_last: bool = True) -> None:
        super().__init__(max_batch, drop_last=drop_last)
        #: the run's dropped-data counts (the engine's, through ``ctx["drops"]``); never state
        self.drops = DropLedger()

    def flush(self, *, reset: bool = False, lane_id: int | None = None) -> list[ReadyBatch[SampleRecord]]:
        dropped = (
            {}
            if not self.drop_last
            else {
                lane: len(self._buffers[lane])
                for lane in (sorted(self._buffers) if lane_id is None else [lane_id])
                if self._buffers.get(lane)
            }
        )
        ready = super().flush(reset=reset, lane_id=lane_id)
        for lane, n in dropped.items():
            self.drops.add(
                op=f"batch({self.max_batch}, drop_last=True)",
                cause="partial_batch",
                lane=lane,
                records=n,
                detail=f"a micro-batch needs {self.max_batch}; drop_last=False emits it",
            )
        return ready

    def try_epoch_reset(self, boundary_chunk_id: int, lane_id: int | None = None) -> bool:
        lanes = sorted(self._buffers) if lane_id is None else [lane_id]
        for lane in lanes:
            for rec in self._buffers.get(lane, ()):
                if rec.meta.chunk_id < boundary_chunk_id:
                    return False
        return True


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchConfig:
    """The knobs of ``batch``, each with its declared domain (:mod:`zephon_ref.ops.knobs`)."""

    BUILDER: ClassVar[str] = "batch"

    microbatch_size: int = knob(domain=Int(1), doc="records per micro-batch")
    drop_last: bool = knob(True, Bool(), doc="drop a partial micro-batch at a flush")

    def __post_init__(self) -> None:
        check_fields(self)


class Batch(BaseOp):
    """``batch(microbatch_size, *, drop_last=True)``."""

    def __init__(self, microbatch_size: int, *, drop_last: bool = True, parallelism: int = 1) -> None:
        super().__init__()
        #: the knobs, checked against their domains; the operator keeps no copy of them
        self.config = BatchConfig(microbatch_size=microbatch_size, drop_last=drop_last)
        check_int("parallelism", parallelism, minimum=1)
        self.parallelism = parallelism

    def traits(self) -> OpTraits:
        return OpTraits(preserves_cursor_order=True, indexable=False, parallelism=self.parallelism)

    def accumulator(self, *, deterministic: bool, ctx: dict[str, Any]) -> Accumulator[Any]:
        acc = BatchAccumulator(self.config.microbatch_size, drop_last=self.config.drop_last)
        acc.drops = ledger_of(ctx)
        return acc

    def process_many(self, elems: list[Any]) -> list[Any]:
        if not elems:
            return []
        assert len({r.meta.lane_id for r in elems}) == 1, "batch must be lane-pure"
        return [SampleBatch(tuple(elems))]

"""map_batch: apply a deterministic function to each micro-batch, after ``batch()``.

Theory of operation
-------------------
Runs after :mod:`zephon_ref.ops.batch`: its input is the lane-pure
:class:`~zephon_ref.types.SampleBatch` es the batch operator emits, plus the tombstones
that pass through it (which pass here too, untouched).  ``process_many`` maps each batch
on its own: ``fn(batch)`` must return a ``SampleBatch`` (delivered in the batch's place) or
None.  None with ``drop_none`` replaces the batch by one tombstone per closing
contributor of each of its records (so their offsets still close and the chunks evict);
None without ``drop_none`` delivers the batch unchanged.  Order is preserved.

The replay filter cuts before ``batch`` (seed 000), so a resume re-batches the remainder
and ``fn`` sees the same batches again: ``fn`` must be a function of the batch alone.

The accumulator (:class:`MapBatchAccumulator`) holds nothing across pushes: every push's
batches leave at once, in calls of at most ``max_batch`` per lane, so no stage after ``batch``
holds a micro-batch (the inflight bound of demand feeding, :func:`sim.invariants.inflight_bound`,
counts on it).  divergence D-102

What may not live here: per-batch state, randomness, anything that reads a clock.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from zephon_ref.errors import PayloadTypeError, expected
from zephon_ref.lineage import tombstones_for_record
from zephon_ref.ops.base import Accumulator, BaseOp, OpTraits, ReadyBatch, check_int, lane_of
from zephon_ref.ops.knobs import Bool, Func, Int, check_execution, check_fields, knob
from zephon_ref.types import SampleBatch, SampleRecord

__all__ = ["DEFAULT_PARALLELISM", "MapBatch", "MapBatchAccumulator", "MapBatchConfig"]

#: zephon 0.2.0's worker count for map_batch(parallelism=None): an execution setting.
DEFAULT_PARALLELISM = 4


class MapBatchAccumulator(Accumulator[Any]):
    """Each push leaves at once: per lane (in order of first arrival), its elements in arrival
    order, in ready batches of at most ``max_batch``.  Nothing is buffered, so ``flush`` emits
    nothing and no lane is ever pending (the stage's flush-resets-the-lane rule holds trivially).
    """

    def __init__(self, max_batch: int) -> None:
        check_int("max_batch", max_batch, minimum=1)
        self.max_batch = max_batch

    def push_many(self, elems: Sequence[Any]) -> list[ReadyBatch[Any]]:
        by_lane: dict[int, list[Any]] = {}  # insertion order: lanes in order of first arrival
        for elem in elems:
            by_lane.setdefault(lane_of(elem), []).append(elem)
        n = self.max_batch
        return [(run[i:i + n], 0) for run in by_lane.values() for i in range(0, len(run), n)]

    def flush(self, *, reset: bool = False, lane_id: int | None = None) -> list[ReadyBatch[Any]]:
        return []


@dataclass(frozen=True, slots=True, kw_only=True)
class MapBatchConfig:
    """The data knobs of ``map_batch`` (domains in :mod:`zephon_ref.ops.knobs`)."""

    BUILDER: ClassVar[str] = "map_batch"

    transform_fn: Callable[[SampleBatch], SampleBatch | None] = knob(
        domain=Func(), doc="SampleBatch -> SampleBatch | None"
    )
    drop_none: bool = knob(True, Bool(), doc="None drops the batch (tombstones) instead of passing it")
    max_batch: int = knob(64, Int(1), doc="batches per process_many call (no effect on output)")

    def __post_init__(self) -> None:
        check_fields(self)


class MapBatch(BaseOp):
    """``map_batch(transform_fn, *, drop_none=True)``: only after ``batch()``."""

    def __init__(
        self,
        transform_fn: Callable[[SampleBatch], SampleBatch | None],
        *,
        drop_none: bool = True,
        max_batch: int = 64,
        placement: str = "auto",
        parallelism: int | None = None,
    ) -> None:
        super().__init__()
        check_execution(placement=placement, parallelism=parallelism)
        self.config = MapBatchConfig(transform_fn=transform_fn, drop_none=drop_none, max_batch=max_batch)
        self.parallelism = DEFAULT_PARALLELISM if parallelism is None else parallelism

    def traits(self) -> OpTraits:
        return OpTraits(preserves_cursor_order=True, indexable=True, parallelism=self.parallelism)

    def accumulator(self, *, deterministic: bool, ctx: dict[str, Any]) -> Accumulator[Any]:
        return MapBatchAccumulator(self.config.max_batch)  # divergence D-102

    def process_many(self, elems: list[Any]) -> list[Any]:
        c = self.config
        out: list[Any] = []
        for elem in elems:
            if isinstance(elem, SampleRecord):  # a tombstone the batch operator passed on
                out.append(elem)
                continue
            new = c.transform_fn(elem)
            if new is None:
                if c.drop_none:
                    out.extend(t for r in elem.records for t in tombstones_for_record(r))
                else:
                    out.append(elem)
                continue
            if not isinstance(new, SampleBatch):
                raise PayloadTypeError(
                    expected("map_batch transform_fn result", "a SampleBatch or None", new)
                )
            out.append(new)
        return out

"""The replay filter: drop the already-consumed prefix of each lane on resume.

Theory of operation
-------------------
Per lane the filter holds a *target* cursor (the last record delivered before
the checkpoint) or None.  A lane with target None passes everything.  A lane
with a target drops records until one has ``meta.cursor == target`` (equality,
not ``<=``: the tail of a reordering pipeline is not in cursor order), drops
that one too, and passes everything afterwards.  Every dropped record is
replaced, in place, by ``tombstones_for_record`` so its offsets still close.

State (targets, per-lane "seen") lives in :class:`ReplayFilterAccumulator`,
which is driven serially; ``process_many`` is the identity.  The engine
decides the targets (a cursor only counts while its chunk is inflight) and
where the filter sits in the plan; neither lives here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from zephon_ref.errors import ConfigTypeError, expected
from zephon_ref.lineage import tombstones_for_record
from zephon_ref.ops.base import Accumulator, BaseOp, OpTraits, ReadyBatch
from zephon_ref.types import SampleCursor, SampleRecord

__all__ = ["ReplayFilter", "ReplayFilterAccumulator"]


def _check_targets(targets: Mapping[int, SampleCursor | None]) -> dict[int, SampleCursor | None]:
    if not isinstance(targets, Mapping):
        raise ConfigTypeError(expected("targets", "a mapping lane_id -> SampleCursor | None", targets))
    out: dict[int, SampleCursor | None] = {}
    for lane, cur in targets.items():
        if isinstance(lane, bool) or not isinstance(lane, int):
            raise ConfigTypeError(expected("targets key", "an int lane id", lane))
        if cur is not None and not isinstance(cur, SampleCursor):
            raise ConfigTypeError(expected(f"targets[{lane}]", "a SampleCursor or None", cur))
        out[lane] = cur
    return out


class ReplayFilterAccumulator(Accumulator[SampleRecord]):
    """Per-lane drop-until-equal state machine."""

    def __init__(self, targets: Mapping[int, SampleCursor | None] | None = None) -> None:
        # lane -> target still awaited; a lane absent here passes everything
        self._pending: dict[int, SampleCursor] = {
            lane: cur for lane, cur in _check_targets(targets or {}).items() if cur is not None
        }

    @property
    def active(self) -> bool:
        return bool(self._pending)

    def awaiting(self, lane_id: int) -> SampleCursor | None:
        return self._pending.get(lane_id)

    def push_many(self, elems: Sequence[SampleRecord]) -> list[ReadyBatch[SampleRecord]]:
        if not elems:
            return []
        out: list[SampleRecord] = []
        for rec in elems:
            target = self._pending.get(rec.meta.lane_id)
            if target is None or rec.meta.tombstone:
                out.append(rec)
                continue
            # precondition: the lane has not seen its target yet, so rec is replayed prefix
            if rec.meta.cursor == target:
                del self._pending[rec.meta.lane_id]
            out.extend(tombstones_for_record(rec))
        return [(out, 0)] if out else []

    def flush(self, *, reset: bool = False, lane_id: int | None = None) -> list[ReadyBatch[SampleRecord]]:
        # Nothing is buffered; a flush never changes which prefix is dropped.
        return []


class ReplayFilter(BaseOp):
    """The filter the planner inserts before ``batch`` (or at the tail)."""

    def __init__(self, targets: Mapping[int, SampleCursor | None] | None = None) -> None:
        super().__init__()
        self.targets = _check_targets(targets or {})

    def traits(self) -> OpTraits:
        return OpTraits(preserves_cursor_order=True, indexable=True, requires_serial_state=True)

    def accumulator(self, *, deterministic: bool, ctx: dict[str, Any]) -> Accumulator[Any]:
        targets = ctx.get("replay_targets", self.targets)
        return ReplayFilterAccumulator(targets)

    def process_many(self, elems: list[Any]) -> list[Any]:
        return elems

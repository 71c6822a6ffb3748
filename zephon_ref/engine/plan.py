"""The compiled chain: the implicit fetch operator, the user's operators, the replay filter, and K.

Theory of operation
-------------------
:func:`build_chain` turns a pipeline's operator list into the stages the runners
drive: ``fetch`` first (pointer -> record, :data:`FETCH_BATCH` per micro-batch),
then the user's operators, with the replay filter inserted immediately before
``batch`` (so the consumer-visible cut falls between whole batches) or appended
at the tail when there is no batch.  The filter is named after its neighbour, as
in zephon's ``explain()``.  :func:`resolve_k` holds the ``flush_every_k_chunks`` rules.
Pure construction: nothing here runs data.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from zephon_ref.errors import ConfigError, expected
from zephon_ref.ops.base import BaseOp, CountingAccumulator, OpTraits
from zephon_ref.ops.batch import Batch
from zephon_ref.ops.replay_filter import ReplayFilter
from zephon_ref.types import SampleMeta, SampleRecord

__all__ = ["DEFAULT_K", "FETCH_BATCH", "FetchOp", "build_chain", "k_ignored", "resolve_k"]

FETCH_BATCH = 64
#: ``flush_every_k_chunks`` when it is left as None on a plan with a reordering operator
DEFAULT_K = 8


def resolve_k(requested: int | None, *, monotone: bool) -> int:
    """``flush_every_k_chunks`` as the engine runs it (seed 000, "Epoch-based eviction").

    None: :data:`DEFAULT_K` on a plan with a reordering operator, 0 on a monotone plan.
    A positive value on a monotone plan becomes 0 (sentinels buy nothing there and would
    move batch boundaries; the caller warns, :func:`k_ignored`).  0 on a plan with a
    reordering operator is refused: without sentinels nothing could ever be evicted.
    """
    if requested is None:
        return 0 if monotone else DEFAULT_K
    if monotone:
        return 0
    if requested == 0:
        raise ConfigError(expected("flush_every_k_chunks", "> 0 for a plan with a reordering operator", 0))
    return int(requested)


def k_ignored(requested: int | None, *, monotone: bool) -> bool:
    """Whether :func:`resolve_k` replaced a positive ``requested`` by 0 (a monotone plan)."""
    return monotone and requested is not None and requested > 0


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


def build_chain(
    ops: Sequence[tuple[str, BaseOp]], datasets_by_id: Mapping[int, Any]
) -> list[tuple[str, BaseOp]]:
    """``[(name, op)]`` in run order: fetch, the user's operators, the replay filter in its place."""
    chain: list[tuple[str, BaseOp]] = [("fetch", FetchOp(datasets_by_id))]
    user = list(ops)
    batch_at = next((i for i, (_, op) in enumerate(user) if isinstance(op, Batch)), None)
    if batch_at is None:
        tail = user[-1][0] if user else "fetch"
        user.append((f"{tail}_replay_filter", ReplayFilter()))
    else:
        user.insert(batch_at, (f"{user[batch_at][0]}_replay_filter", ReplayFilter()))
    return chain + user

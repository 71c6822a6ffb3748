"""One lane's output stream and the round-robin interleaving of lanes.

Theory of operation
-------------------
Every operator the tensor implementation supports keeps state per lane only, so
a lane's output is a function of that lane's chunk sequence:
:func:`lane_items` runs the lane's documents through the packer (flushed at
every boundary and at the end) and groups the result into micro-batches of
``microbatch_size`` (``drop_last=True``: groups run across boundaries, as the
reference's stalled flush sentinel lets them, and a partial last group is
dropped; ``drop_last=False``: a boundary or the end emits the partial group).

:func:`round_robin` delivers strictly in turn over the lanes in order, starting
at lane index 0; a lane whose stream has ended drops out (the reference's tail
multiplexer waits for a lane's output until upstream is done, then skips empty
lanes, which yields exactly this order).

An item is ``(lane, entries)`` where entries is a tuple of packs or documents
(one entry when there is no batch).  Lazy: a lane pulls one chunk at a time.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from zephon_ref.torch.tensor.config import PackSpec, ShuffleSpec, TensorPlan
from zephon_ref.torch.tensor.lanes import lane_documents
from zephon_ref.torch.tensor.packing import LanePacker
from zephon_ref.torch.tensor.shuffle import BlockLane, StreamingLane, Unit

__all__ = ["Item", "lane_items", "round_robin"]

Item = tuple[int, tuple[Any, ...]]


def _unit_stages(plan: TensorPlan, lane: int, packed: bool) -> list[Any]:
    out: list[Any] = []
    for s in plan.stages:
        if isinstance(s, PackSpec):
            out.append(LanePacker(s))
        elif isinstance(s, ShuffleSpec):
            if s.algorithm == "streaming":
                out.append(StreamingLane(lane, s.buffer_size, s.seed, packed))
            else:
                out.append(BlockLane(s.buffer_size, s.seed, packed, s.growth if s.algorithm == "block_warmup"
                                     else None))
    return out


def lane_items(plan: TensorPlan, lane: int, source: Any, datasets: Any, ids: Any) -> Iterator[Item]:
    packed = any(isinstance(s, PackSpec) for s in plan.stages)
    stages = _unit_stages(plan, lane, packed)
    batch = plan.batch
    size = batch.microbatch_size if batch is not None else 1
    drop_last = batch.drop_last if batch is not None else True
    group: list[Unit] = []

    def run(units: list[Any], flush: bool) -> list[Unit]:
        for st in stages:
            nxt: list[Any] = []
            if units:
                st.push(units, nxt)
            if flush:
                st.flush(nxt)
            units = nxt
        return units

    for _cid, docs, boundary in lane_documents(plan, source, datasets, ids):
        first: list[Any] = docs if packed else [((d,), (True if d[5] is None else d[5],)) for d in docs]
        for x in run(first, boundary):
            group.append(x)
            if len(group) == size:
                yield lane, tuple(group)
                group = []
        if boundary and not drop_last and group:
            yield lane, tuple(group)
            group = []
    for x in run([], True):
        group.append(x)
        if len(group) == size:
            yield lane, tuple(group)
            group = []
    if group and not drop_last:
        yield lane, tuple(group)


def round_robin(streams: list[Iterator[Item]]) -> Iterator[Item]:
    live = list(streams)
    while live:
        alive = []
        for s in live:
            x = next(s, None)
            if x is None:
                continue
            alive.append(s)
            yield x
        live = alive

"""Run one pipeline as many participants (ranks x DataLoader workers) in one process.

Theory of operation
-------------------
:func:`participants` builds one :class:`~zephon_ref.pipeline.Pipeline` per
(rank, worker) from a ``build(**option_overrides)`` callable (the topology
options are the overrides); :func:`run_lockstep` delivers from them the way a
data-parallel job consumes data: each global step takes one item from every
participant in (rank, worker) order, which for each DP group equals the
DataLoader's in-order round robin over its workers.  :func:`merged_checkpoint`
merges every participant's local state with zephon_ref's own
:func:`~zephon_ref.coordination.merge` (the merge the aggregation round runs).

Items are recorded through a ``view`` callable (default :func:`cursor_view`:
``[(lane_id, cursor key), ...]`` per item); the first element of a view's first
tuple must be the lane, which :func:`lane_streams` groups by.

What may not live here: pipeline logic (it only calls public Pipeline methods and
the engine's ``state_dict()``), and anything from ``properties`` (the binding to
``PipelineConfig`` lives in ``properties.topology``).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from zephon_ref.coordination import merge

__all__ = ["cursor_view", "lane_streams", "merged_checkpoint", "participants", "run_lockstep"]

View = Callable[[Any], Sequence[tuple[Any, ...]]]


def cursor_view(item: Any) -> list[tuple[Any, ...]]:
    """Per record of a delivered item (SampleBatch or SampleRecord): ``(lane_id, cursor key)``."""
    recs = item.records if hasattr(item, "records") else (item,)
    return [(r.meta.lane_id, tuple(r.meta.as_cursor_key())) for r in recs]


def participants(build: Callable[..., Any], dp_degree: int, workers: int = 1, *, mapping: str = "contiguous",
                 state: dict[str, Any] | None = None) -> list[Any]:
    """One pipeline per (rank, worker); ``state`` (a merged checkpoint) is restored into each."""
    out = []
    for rank in range(dp_degree):
        base = build(world_size=dp_degree, global_rank=rank, dp_degree=dp_degree,
                     mapping_strategy=mapping, aggregate_dir="/nonexistent-unused")
        for w in range(workers):
            p = base.for_worker(w, workers)
            if state is not None:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", RuntimeWarning)
                    p.restore(state)
            out.append(p)
    return out


def run_lockstep(pipes: list[Any], steps: int | None = None, *,
                 view: View = cursor_view) -> tuple[list[list[Any]], list[Iterator[Any]]]:
    """Global steps: each a list of (participant index, view of its item); stops when all are done."""
    its = [iter(p) for p in pipes]
    done = [False] * len(its)
    out: list[list[Any]] = []
    while not all(done) and (steps is None or len(out) < steps):
        step = []
        for i, it in enumerate(its):
            if done[i]:
                continue
            x = next(it, None)
            if x is None:
                done[i] = True
                continue
            step.append((i, view(x)))
        if step:
            out.append(step)
    return out, its


def merged_checkpoint(pipes: list[Any]) -> dict[str, Any]:
    """Merge every participant's local state (idle workers own no lanes and are skipped)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        states = [p.local_state() for p in pipes if p._engine is not None and p._engine.lanes]
        return merge(states, warn_mid_window=False)


def lane_streams(steps: list[list[Any]]) -> dict[int, list[Any]]:
    """The steps' views grouped by lane (a view's first tuple starts with its lane), in step order."""
    lanes: dict[int, list[Any]] = {}
    for step in steps:
        for _, view in step:
            lanes.setdefault(view[0][0], []).append(view)
    return lanes

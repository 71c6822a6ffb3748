"""Run one pipeline as many participants (ranks x DataLoader workers) in one process.

``participants(cfg, dp_degree, workers)`` builds one Pipeline per (rank, worker);
``lockstep(...)`` delivers from them the way a data-parallel job consumes data:
each global step takes one item from every participant in (rank, worker) order,
which for each DP group equals the DataLoader's in-order round robin over its
workers.  ``merged_checkpoint`` merges every participant's local state (the same
merge the aggregation round runs).  Used by the elastic tests and notebooks.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any

from properties.pipelines import PipelineConfig, build_pipeline, item_view
from zephon_ref.coordination import merge

__all__ = ["lane_streams", "merged_checkpoint", "participants", "run_lockstep"]


def participants(cfg: PipelineConfig, dp_degree: int, workers: int = 1, *, mapping: str = "contiguous",
                 state: dict[str, Any] | None = None) -> list[Any]:
    """One pipeline per (rank, worker); ``state`` (a merged checkpoint) is restored into each."""
    out = []
    for rank in range(dp_degree):
        base = build_pipeline("zephon_ref", cfg, world_size=dp_degree, global_rank=rank, dp_degree=dp_degree,
                              mapping_strategy=mapping, aggregate_dir="/nonexistent-unused")
        for w in range(workers):
            p = base.for_worker(w, workers)
            if state is not None:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", RuntimeWarning)
                    p.restore(state)
            out.append(p)
    return out


def run_lockstep(pipes: list[Any], steps: int | None = None) -> tuple[list[list[Any]], list[Iterator[Any]]]:
    """Global steps: each a list of (participant index, item view); stops when all are done."""
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
            step.append((i, item_view(x)))
        if step:
            out.append(step)
    return out, its


def merged_checkpoint(pipes: list[Any]) -> dict[str, Any]:
    """Merge every participant's local state (idle workers own no lanes and are skipped)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        states = [p._engine.state_dict() for p in pipes if p._engine is not None and p._engine.lanes]
        return merge(states, warn_mid_window=False)


def lane_streams(steps: list[list[Any]]) -> dict[int, list[Any]]:
    lanes: dict[int, list[Any]] = {}
    for step in steps:
        for _, view in step:
            lanes.setdefault(view[0][0], []).append(view)
    return lanes

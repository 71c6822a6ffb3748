"""The lockstep topology helpers of :mod:`sim.lockstep`, bound to a :class:`PipelineConfig`.

``participants(cfg, dp_degree, workers)`` builds the zephon_ref pipeline of ``cfg``
once per (rank, worker); ``run_lockstep`` records each delivered item as
:func:`properties.pipelines.item_view`.  The machinery itself lives in the
simulator (sim.lockstep); this module only binds the property suite's config and
record view to it.  Used by the elastic tests, the canaries and notebooks.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

from properties.pipelines import PipelineConfig, build_pipeline, item_view
from sim import lockstep
from sim.lockstep import lane_streams, merged_checkpoint

__all__ = ["lane_streams", "merged_checkpoint", "participants", "run_lockstep"]


def participants(cfg: PipelineConfig, dp_degree: int, workers: int = 1, *, mapping: str = "contiguous",
                 state: dict[str, Any] | None = None) -> list[Any]:
    """One zephon_ref pipeline of ``cfg`` per (rank, worker); ``state`` is restored into each."""
    return lockstep.participants(functools.partial(build_pipeline, "zephon_ref", cfg), dp_degree, workers,
                                 mapping=mapping, state=state)


def run_lockstep(pipes: list[Any], steps: int | None = None) -> tuple[list[list[Any]], list[Iterator[Any]]]:
    """Global steps of ``item_view``s (see :func:`sim.lockstep.run_lockstep`)."""
    return lockstep.run_lockstep(pipes, steps, view=item_view)

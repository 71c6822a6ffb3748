"""The property suite's invariants: defined once in the simulator, bound here to pipelines.

Theory of operation
-------------------
Every invariant is a pure function over plain data in :mod:`sim.invariants` (stream
comparisons, resume equivalence, execution-settings invariance, bounded inflight
state, eviction safety, determinism of checkpoint bytes) or :mod:`sim.checker`
(no skip and no duplicate, on the lineage graph).  The simulator's checker calls the
same functions; sim never imports properties, so this module only re-exports them
and adds *observers*: small functions that run a :class:`~properties.pipelines.PipelineConfig`
with zephon_ref and turn what they see into the plain data the invariants take.
Each ``check_*`` returns the invariant's list of problems (empty: it holds).

``no_skip_no_duplicate(admitted, delivered, tombstones)`` is :func:`sim.checker.check_lineage`:
every offset a lane admitted closes exactly once (a delivered record or a tombstone
with ``is_last_child=True``), and no record names an offset its lane did not admit.
It returns a :class:`~sim.checker.LineageReport`; assert ``report.ok`` and print
``report.describe()``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from properties.pipelines import PipelineConfig, build_pipeline, checkpoints_at_every_cut, item_view
from sim.checker import LaneLineage, LineageReport, admitted_from_source, records_of
from sim.checker import check_lineage as no_skip_no_duplicate
from sim.invariants import (
    LaneCut,
    bounded_inflight_problems,
    checkpoint_bytes_problems,
    eviction_safety_problems,
    global_step_problems,
    inflight_bound,
    inflight_growth,
    lane_stream_problems,
    per_lane,
    resume_problems,
    settings_invariance_problems,
)

__all__ = [
    "LaneCut",
    "LaneLineage",
    "LineageReport",
    "admitted_from_source",
    "bounded_inflight_problems",
    "check_bounded_inflight",
    "check_checkpoint_bytes",
    "check_eviction_safety",
    "check_resume",
    "check_settings_invariance",
    "checkpoint_bytes_problems",
    "depth_samples",
    "encoding_problems",
    "adapter_feeding",
    "adapter_inflight_checker",
    "eviction_safety_problems",
    "execution_window",
    "exhausted_lanes",
    "global_step_problems",
    "inflight_bound",
    "inflight_checker",
    "inflight_growth",
    "inflight_observation",
    "lane_cut",
    "lane_stream_problems",
    "needs_of",
    "no_skip_no_duplicate",
    "per_lane",
    "records_of",
    "resume_problems",
    "reversed_dicts",
    "settings_invariance_problems",
]


def depth_samples(*, runner: str, n_stages: int = 0, queue_size: int = 8) -> int:
    """W of :func:`sim.invariants.inflight_bound` for a runner under demand-paced feeding: the
    source items it may admit for a lane past the one that produced the lane's next item (the
    inline runner runs every stage dry after each admission: 0; the threads runner keeps at most
    ``queue_size`` admitted messages in its queues, and the one that produced the lane's next item is
    one of them: ``queue_size - 1``, the tight window, so a runner admitting one message too many
    breaks the bound).  ``n_stages`` is accepted and unused (the queues between stages hold what
    those items became, not more items)."""
    return 0 if runner == "inline" else max(0, queue_size - 1)


def exhausted_lanes(cfg: PipelineConfig, state: Mapping[str, Any], *, source: Any = None) -> list[int]:
    """The lanes of a zephon_ref checkpoint of ``cfg`` whose work source has no chunk left (their
    next ``next_chunk()`` is None): from the first of them on, the run is in its end-of-data phase,
    where :func:`inflight_bound` does not apply (see its docstring).  ``source``: the work source
    of ``cfg`` if the caller has it (built otherwise)."""
    if source is None:
        source = build_pipeline("zephon_ref", cfg)._source
    c = int(state["world"]["canonical_replicas"])
    out = []
    for lane, ws in sorted((int(k), v) for k, v in (state.get("lane_ws_state") or {}).items()):
        clone = source.clone_for_lane(lane, c)
        clone.load_state_dict(copy.deepcopy(ws))
        if clone.next_chunk() is None:
            out.append(lane)
    return out


def inflight_checker(cfg: PipelineConfig, *, window: int,
                     feeding: str = "demand") -> Callable[[Mapping[str, Any]], list[str]]:
    """Bounded inflight state, one checkpoint of ``cfg`` (a zephon_ref state) at a time: every
    lane holds at most :func:`inflight_bound` chunks.  Nothing is checked under round-robin
    feeding (it has no bound: report :func:`inflight_growth` instead), in the end-of-data phase
    (:func:`exhausted_lanes`) or when no lane holds a chunk.  ``window``: :func:`depth_samples`."""
    p = build_pipeline("zephon_ref", cfg)
    k, monotone = int(p._resolve_k(warn=False)), bool(p.preserves_cursor_order)

    def check(state: Mapping[str, Any]) -> list[str]:
        counts, smallest = inflight_observation(state)
        if feeding != "demand" or smallest is None:
            return []
        bound = inflight_bound(k=k, monotone=monotone, depth_samples=window, min_chunk=smallest)
        problems = bounded_inflight_problems([counts], bound=bound)
        if problems and exhausted_lanes(cfg, state, source=p._source):
            return []  # end of data: the bound does not apply there
        return problems

    return check


def inflight_observation(state: Mapping[str, Any]) -> tuple[dict[int, int], int | None]:
    """From a checkpoint: inflight chunks per lane, and the smallest inflight chunk's size."""
    counts = {int(lane): len(chunks) for lane, chunks in state["inflight"].items()}
    sizes = [int(c["total_samples"]) for chunks in state["inflight"].values() for c in chunks.values()]
    return counts, (min(sizes) if sizes else None)


def lane_cut(state: Mapping[str, Any]) -> dict[int, tuple[frozenset[int], int]]:
    """From a checkpoint: per lane, its inflight chunk ids and next chunk id (a lane the
    checkpoint does not list has admitted nothing)."""
    nxt = state.get("lane_next_cid") or {}
    return {int(lane): (frozenset(int(c) for c in chunks), int(nxt.get(lane, 0)))
            for lane, chunks in state["inflight"].items()}


def needs_of(view: Sequence[tuple[Any, ...]]) -> frozenset[tuple[int, int]]:
    """The ``(lane, chunk id)`` pairs an item (an :func:`item_view`) was built from."""
    return frozenset((rec[0], ref[0][0]) for rec in view for ref in rec[2])


def check_resume(cfg: PipelineConfig, *, cuts: Sequence[int] | None = None, impl: str = "zephon_ref",
                 **execution: Any) -> list[str]:
    """Checkpoint before every item (or at ``cuts``), restore each into a fresh pipeline: the rest
    must be identical to the uninterrupted run."""
    items, cks = checkpoints_at_every_cut(impl, cfg)
    problems: list[str] = []
    for cut in range(len(cks)) if cuts is None else cuts:
        cut = min(cut, len(cks) - 1)
        q = build_pipeline(impl, cfg, **execution)
        q.restore(copy.deepcopy(cks[cut]))
        problems += resume_problems(items, [item_view(x) for x in q], cut=cut)
        if problems:
            break
    return problems


def check_settings_invariance(cfg: PipelineConfig, executions: Mapping[str, Mapping[str, Any]], *,
                              impl: str = "zephon_ref") -> list[str]:
    """Every execution setting (label -> pipeline options) delivers the same stream."""
    runs = {label: [item_view(x) for x in build_pipeline(impl, cfg, **dict(opts))]
            for label, opts in executions.items()}
    return settings_invariance_problems(runs)


def adapter_feeding(adapter: Any, cfg: PipelineConfig) -> str:
    """The feeding policy of the runs ``adapter`` builds for ``cfg``: the adapter's ``feeding``
    attribute if it has one; zephon 0.2.0 feeds round robin; zephon_ref as its options say
    (on demand by default)."""
    options = {**dict(cfg.options), **dict(getattr(adapter, "execution", {}) or {})}
    return str(
        getattr(adapter, "feeding", None)
        or ("round_robin" if getattr(adapter, "impl", "") == "zephon" else options.get("feeding", "demand"))
    )


def execution_window(adapter: Any, cfg: PipelineConfig, execution: Mapping[str, Any] | None = None) -> int:
    """W of :func:`inflight_bound` for a run ``adapter`` builds of ``cfg`` with ``execution`` over
    its own execution settings and the configuration's options (the runner and queue size actually
    in force: 0 for the inline runner, the drawn ``op_queue_capacity`` for the threads runner)."""
    options = {**dict(cfg.options), **dict(getattr(adapter, "execution", {}) or {}), **dict(execution or {})}
    return depth_samples(runner=str(options.get("runner") or "inline"),
                         queue_size=int(options.get("op_queue_capacity") or 8))


def adapter_inflight_checker(adapter: Any, cfg: PipelineConfig, *, window: int | None = None,
                             execution: Mapping[str, Any] | None = None
                             ) -> Callable[[Mapping[str, Any]], list[str]]:
    """:func:`inflight_checker` for the runs an adapter builds: the window of the runner and queue
    size in force (:func:`execution_window`, with ``execution`` over the adapter's settings), or
    ``window`` when given, and its feeding policy (an adapter's ``feeding`` attribute if it has one;
    zephon 0.2.0 feeds round robin, so its rows report no bound; zephon_ref feeds as the options
    say, on demand by default)."""
    feeding = adapter_feeding(adapter, cfg)
    if window is None:
        window = execution_window(adapter, cfg, execution)
    return inflight_checker(cfg, window=window, feeding=feeding)


def check_bounded_inflight(cfg: PipelineConfig, *, runner: str = "inline", queue_size: int = 8,
                           feeding: str = "demand") -> list[str]:
    """Checkpoint after every item; each lane's inflight chunks stay within :func:`inflight_bound`
    (see :func:`inflight_checker` for where it is not checked)."""
    p = build_pipeline("zephon_ref", cfg, runner=runner, op_queue_capacity=queue_size, feeding=feeding)
    check = inflight_checker(cfg, window=depth_samples(runner=runner, queue_size=queue_size), feeding=feeding)
    problems: list[str] = []
    for _ in p:
        problems = check(p.checkpoint())
        if problems:
            break
    return problems


def check_eviction_safety(cfg: PipelineConfig) -> list[str]:
    """Checkpoint before every item: no later item needs a chunk that checkpoint evicted, and each
    lane's replay cursor chunk is still there."""
    items, cks = checkpoints_at_every_cut("zephon_ref", cfg)
    cuts = [(i, lane_cut(ck)) for i, ck in enumerate(cks)]
    pinned = [frozenset((int(lane), int(cur[0])) for lane, cur in (ck.get("replay_cursors") or {}).items()
                        if cur is not None) for ck in cks]
    return eviction_safety_problems(cuts, [needs_of(v) for v in items], pinned=pinned)


def check_checkpoint_bytes(cfg: PipelineConfig, *, cuts: Sequence[int] = (0, 1, 3, 7)) -> list[str]:
    """Two independent runs to the same cut encode to the same bytes, and so does a copy of the
    state with every dict rebuilt in reverse insertion order."""
    from zephon_ref import codec

    problems: list[str] = []
    for cut in cuts:
        states = []
        for _ in range(2):
            p = build_pipeline("zephon_ref", cfg)
            it = iter(p)
            for _ in range(cut):
                if next(it, None) is None:
                    break
            states.append(p.checkpoint())
            it.close()
        problems += checkpoint_bytes_problems({
            f"run 1 after {cut} items": codec.encode(states[0]),
            f"run 2 after {cut} items": codec.encode(states[1]),
            f"run 1 after {cut} items, dicts reversed": codec.encode(reversed_dicts(states[0])),
        })
    return problems


def encoding_problems(state: Any) -> list[str]:
    """One checkpoint encodes (zephon_ref's codec) to the same bytes whatever its dicts' insertion order."""
    from zephon_ref import codec

    return checkpoint_bytes_problems({"as built": codec.encode(state),
                                      "dicts reversed": codec.encode(reversed_dicts(state))})


def reversed_dicts(value: Any) -> Any:
    """A deep copy of ``value`` with every dict rebuilt in reverse insertion order."""
    if isinstance(value, dict):
        return {k: reversed_dicts(value[k]) for k in reversed(list(value))}
    if isinstance(value, list):
        return [reversed_dicts(v) for v in value]
    if isinstance(value, tuple):
        return tuple(reversed_dicts(v) for v in value)
    return value

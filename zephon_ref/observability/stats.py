"""zephon's metric summaries and deltas: fields, defaults and the arithmetic that aggregates them.

Theory of operation
-------------------
A *delta* is what a runner would emit for one unit of work (an operator call, a shard group
read, a prefetch batch); a *summary* folds deltas in with ``apply`` and other summaries in with
``merge`` (sums of counters and durations, minima and maxima of extremes), and reports averages
and ratios derived from the sums (0.0 where the denominator is 0).  Records (``to_records`` /
``to_dict``) are flat dicts in zephon's key order, stages and shards in ascending order.

zephon_ref emits no deltas (it collects no timings: the snapshot methods return None), so these
are plain value types for code written against zephon; their behaviour is checked against zephon
0.2.0's on generated sequences of deltas (tests/conformance/test_observability_conformance.py).
Mutable by design (``apply`` / ``merge`` update in place, as zephon's): each summary has one owner.

What may not live here: clocks, sinks, engine hooks.
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Iterator, Mapping, MutableMapping
from dataclasses import dataclass, field, fields
from typing import Any

from zephon_ref.observability.config import ExecutionTrackingMode

__all__ = [
    "FetchStageSummary",
    "FetchTimingDelta",
    "FetchTimingSummary",
    "FetchTimingTotals",
    "NodeMetricsDelta",
    "NodeSummary",
    "PipelineSummary",
    "PrefetchTimingDelta",
    "PrefetchTimingSummary",
    "PrefetchTimingTotals",
    "StageSummary",
]

#: NodeSummary.min_processing_ns before any sample (reported as None)
_NO_MIN = sys.maxsize


def _ratio(num: float, den: float) -> float:
    return num / den if den else 0.0


# -- fetch ------------------------------------------------------------------------------------------


@dataclass(slots=True)
class FetchTimingDelta:
    """Incremental fetch metrics of one shard group."""

    stage_index: int
    dataset_id: int
    shard_id: int
    samples: int
    group_ns: int
    resolve_ns: int
    open_ns: int
    read_ns: int
    close_ns: int
    retries: int
    cache_hits: int
    cache_misses: int
    shard_reopens: int = 0


#: the counters a FetchTimingDelta adds to a FetchTimingTotals (``groups`` counts the deltas)
_FETCH_SUMS = ("samples", "group_ns", "resolve_ns", "open_ns", "read_ns", "close_ns", "retries", "cache_hits",
               "cache_misses", "shard_reopens")


@dataclass(slots=True)
class FetchTimingTotals:
    """Fetch totals: sums over deltas; ``groups`` is the number of deltas."""

    samples: int = 0
    groups: int = 0
    group_ns: int = 0
    resolve_ns: int = 0
    open_ns: int = 0
    read_ns: int = 0
    close_ns: int = 0
    retries: int = 0
    cache_hits: int = 0
    cache_misses: int = 0
    shard_reopens: int = 0

    def apply(self, delta: FetchTimingDelta) -> None:
        self.groups += 1
        for name in _FETCH_SUMS:
            setattr(self, name, getattr(self, name) + getattr(delta, name))

    def merge(self, other: FetchTimingTotals) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def copy(self) -> FetchTimingTotals:
        return FetchTimingTotals(**{f.name: getattr(self, f.name) for f in fields(self)})

    @property
    def avg_group_ns(self) -> float:
        """Per group (delta)."""
        return _ratio(self.group_ns, self.groups)

    @property
    def avg_resolve_ns(self) -> float:
        """Per sample (as the three below)."""
        return _ratio(self.resolve_ns, self.samples)

    @property
    def avg_open_ns(self) -> float:
        return _ratio(self.open_ns, self.samples)

    @property
    def avg_read_ns(self) -> float:
        return _ratio(self.read_ns, self.samples)

    @property
    def avg_close_ns(self) -> float:
        return _ratio(self.close_ns, self.samples)

    @property
    def cache_hit_ratio(self) -> float:
        return _ratio(self.cache_hits, self.cache_hits + self.cache_misses)


def _fetch_record(totals: FetchTimingTotals, head: dict[str, Any]) -> dict[str, Any]:
    t = totals
    return {**head, "samples": t.samples, "groups": t.groups, "group_ns": t.group_ns,
            "resolve_ns": t.resolve_ns, "open_ns": t.open_ns, "read_ns": t.read_ns, "close_ns": t.close_ns,
            "avg_group_ns": t.avg_group_ns, "avg_resolve_ns": t.avg_resolve_ns, "avg_open_ns": t.avg_open_ns,
            "avg_read_ns": t.avg_read_ns, "avg_close_ns": t.avg_close_ns, "retries": t.retries,
            "cache_hits": t.cache_hits, "cache_misses": t.cache_misses, "cache_hit_ratio": t.cache_hit_ratio,
            "shard_reopens": t.shard_reopens}


@dataclass(slots=True)
class FetchStageSummary:
    """A stage's fetch totals, overall and per ``(dataset_id, shard_id)``."""

    index: int
    totals: FetchTimingTotals = field(default_factory=FetchTimingTotals)
    shard_totals: MutableMapping[tuple[int, int], FetchTimingTotals] = field(default_factory=dict)

    def apply(self, delta: FetchTimingDelta) -> None:
        self.totals.apply(delta)
        self.shard_totals.setdefault((delta.dataset_id, delta.shard_id), FetchTimingTotals()).apply(delta)

    def merge(self, other: FetchStageSummary) -> None:
        self.totals.merge(other.totals)
        for key, totals in other.shard_totals.items():
            if key in self.shard_totals:
                self.shard_totals[key].merge(totals)
            else:
                self.shard_totals[key] = totals.copy()

    def copy(self) -> FetchStageSummary:
        return FetchStageSummary(self.index, self.totals.copy(),
                                 {k: v.copy() for k, v in self.shard_totals.items()})

    def to_records(self, *, plan_id: str | None, stage_name: str | None,
                   tracking_mode: ExecutionTrackingMode, include_shards: bool = True) -> list[dict[str, Any]]:
        """The stage's record (dataset_id and shard_id None), then one per shard, ascending."""
        head = {"plan_id": plan_id, "tracking_mode": ExecutionTrackingMode(tracking_mode).value,
                "stage": self.index, "stage_name": stage_name}
        out = [_fetch_record(self.totals, {**head, "dataset_id": None, "shard_id": None})]
        if include_shards:
            out += [_fetch_record(self.shard_totals[key], {**head, "dataset_id": key[0], "shard_id": key[1]})
                    for key in sorted(self.shard_totals)]
        return out


def _fill(mine: Any, theirs: Any) -> Any:
    """A merged header field: this summary's value, or the other's where this one has None."""
    return theirs if mine is None else mine


@dataclass
class FetchTimingSummary:
    """Fetch metrics of a whole pipeline, per stage."""

    plan_id: str | None = None
    reporting_interval_s: float | None = None
    tracking_mode: ExecutionTrackingMode = ExecutionTrackingMode.OFF
    stages: MutableMapping[int, FetchStageSummary] = field(default_factory=dict)

    def apply(self, delta: FetchTimingDelta) -> None:
        self.stages.setdefault(delta.stage_index, FetchStageSummary(delta.stage_index)).apply(delta)

    def merge(self, other: FetchTimingSummary) -> None:
        self.plan_id = _fill(self.plan_id, other.plan_id)
        self.reporting_interval_s = _fill(self.reporting_interval_s, other.reporting_interval_s)
        for index, stage in other.stages.items():
            if index in self.stages:
                self.stages[index].merge(stage)
            else:
                self.stages[index] = stage.copy()

    def clone(self) -> FetchTimingSummary:
        return copy.deepcopy(self)

    def has_samples(self) -> bool:
        return any(s.totals.samples > 0 for s in self.stages.values())

    def iter_stages(self) -> Iterator[FetchStageSummary]:
        return iter([self.stages[i] for i in sorted(self.stages)])

    def to_records(self, stage_names: Mapping[int, str] | None = None, *,
                   include_shards: bool = True) -> list[dict[str, Any]]:
        names = stage_names or {}
        return [r for s in self.iter_stages()
                for r in s.to_records(plan_id=self.plan_id, stage_name=names.get(s.index),
                                      tracking_mode=self.tracking_mode, include_shards=include_shards)]


# -- operator nodes -------------------------------------------------------------------------------------


@dataclass(slots=True)
class NodeMetricsDelta:
    """Incremental metrics of one operator node."""

    stage_index: int
    op_index: int
    stage_name: str
    name: str
    processed_ns: int = 0
    produced_elements: int = 0
    consumed_elements: int = 0
    produced_bytes: int = 0
    consumed_bytes: int = 0
    wait_ns: int = 0
    max_queue_depth: int | None = None
    min_processing_ns: int | None = None
    max_processing_ns: int | None = None

    @staticmethod
    def empty(stage_index: int, op_index: int, stage_name: str, name: str) -> NodeMetricsDelta:
        return NodeMetricsDelta(stage_index, op_index, stage_name, name)


_NODE_SUMS = ("processed_ns", "produced_elements", "consumed_elements", "produced_bytes", "consumed_bytes",
              "wait_ns")


@dataclass(slots=True)
class NodeSummary:
    """An operator node's sums and extremes; ``wait_ratio`` is set by PipelineSummary.compute_wait_ratios."""

    stage_index: int
    op_index: int
    name: str
    processed_ns: int = 0
    produced_elements: int = 0
    consumed_elements: int = 0
    produced_bytes: int = 0
    consumed_bytes: int = 0
    wait_ns: int = 0
    min_processing_ns: int = field(default_factory=lambda: _NO_MIN)
    max_processing_ns: int = 0
    max_queue_depth: int = 0
    wait_ratio: float = 0.0

    def _extremes(self, lo: int | None, hi: int | None, depth: int | None) -> None:
        if lo is not None:
            self.min_processing_ns = min(self.min_processing_ns, lo)
        if hi is not None:
            self.max_processing_ns = max(self.max_processing_ns, hi)
        if depth is not None:
            self.max_queue_depth = max(self.max_queue_depth, depth)

    def apply(self, delta: NodeMetricsDelta) -> None:
        for name in _NODE_SUMS:
            setattr(self, name, getattr(self, name) + getattr(delta, name))
        self._extremes(delta.min_processing_ns, delta.max_processing_ns, delta.max_queue_depth)

    def _merge(self, other: NodeSummary) -> None:
        for name in _NODE_SUMS:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self._extremes(other.min_processing_ns, other.max_processing_ns, other.max_queue_depth)

    def _copy(self) -> NodeSummary:
        """The sums and extremes in a fresh node (``wait_ratio`` is not copied: it is recomputed)."""
        node = NodeSummary(self.stage_index, self.op_index, self.name)
        node._merge(self)
        return node

    @property
    def avg_processing_ns(self) -> float:
        """Per produced element."""
        return _ratio(self.processed_ns, self.produced_elements)

    @property
    def has_samples(self) -> bool:
        return self.processed_ns > 0 or self.produced_elements > 0

    def to_dict(self) -> dict[str, Any]:
        return {"stage": self.stage_index, "op": self.op_index, "name": self.name,
                "processed_ns": self.processed_ns, "produced_elements": self.produced_elements,
                "consumed_elements": self.consumed_elements, "produced_bytes": self.produced_bytes,
                "consumed_bytes": self.consumed_bytes, "wait_ns": self.wait_ns,
                "min_processing_ns": None if self.min_processing_ns == _NO_MIN else self.min_processing_ns,
                "max_processing_ns": self.max_processing_ns, "avg_processing_ns": self.avg_processing_ns,
                "max_queue_depth": self.max_queue_depth, "wait_ratio": self.wait_ratio}


@dataclass(slots=True)
class StageSummary:
    """A stage's nodes by operator index."""

    index: int
    name: str
    nodes: MutableMapping[int, NodeSummary] = field(default_factory=dict)

    def apply(self, delta: NodeMetricsDelta) -> None:
        node = self.nodes.get(delta.op_index)
        if node is None:
            node = self.nodes[delta.op_index] = NodeSummary(delta.stage_index, delta.op_index, delta.name)
        node.apply(delta)

    def merge(self, other: StageSummary) -> None:
        for op, node in other.nodes.items():
            if op in self.nodes:
                self.nodes[op]._merge(node)
            else:
                self.nodes[op] = node._copy()

    def copy(self) -> StageSummary:
        return StageSummary(self.index, self.name, {k: v._copy() for k, v in self.nodes.items()})

    def iter_nodes(self) -> Iterator[NodeSummary]:
        return iter([self.nodes[i] for i in sorted(self.nodes)])

    @property
    def produced_elements(self) -> int:
        return sum(n.produced_elements for n in self.nodes.values())

    @property
    def total_processing_ns(self) -> int:
        return sum(n.processed_ns for n in self.nodes.values())

    @property
    def total_wait_ns(self) -> int:
        return sum(n.wait_ns for n in self.nodes.values())


@dataclass
class PipelineSummary:
    """Operator metrics of a whole pipeline, per stage and node."""

    plan_id: str | None = None
    reporting_interval_s: float | None = None
    tracking_mode: ExecutionTrackingMode = ExecutionTrackingMode.OFF
    stages: MutableMapping[int, StageSummary] = field(default_factory=dict)
    total_wait_ratio: float | None = None

    def apply(self, delta: NodeMetricsDelta) -> None:
        stage = self.stages.get(delta.stage_index)
        if stage is None:
            stage = self.stages[delta.stage_index] = StageSummary(delta.stage_index, delta.stage_name)
        stage.apply(delta)

    def merge(self, other: PipelineSummary) -> None:
        self.plan_id = _fill(self.plan_id, other.plan_id)
        self.reporting_interval_s = _fill(self.reporting_interval_s, other.reporting_interval_s)
        for index, stage in other.stages.items():
            if index in self.stages:
                self.stages[index].merge(stage)
            else:
                self.stages[index] = stage.copy()

    def clone(self) -> PipelineSummary:
        """A copy with the stages copied (each node's ``wait_ratio`` back to 0.0, as zephon's)."""
        return PipelineSummary(self.plan_id, self.reporting_interval_s, self.tracking_mode,
                               {i: s.copy() for i, s in self.stages.items()}, self.total_wait_ratio)

    def iter_stages(self) -> Iterator[StageSummary]:
        return iter([self.stages[i] for i in sorted(self.stages)])

    def compute_wait_ratios(self) -> None:
        """Each node's share of the pipeline's total wait; ``total_wait_ratio`` their sum (1.0, or
        0.0 when nothing waited)."""
        total = sum(s.total_wait_ns for s in self.stages.values())
        for s in self.stages.values():
            for n in s.nodes.values():
                n.wait_ratio = _ratio(n.wait_ns, total)
        self.total_wait_ratio = 1.0 if total else 0.0

    def to_records(self) -> list[dict[str, Any]]:
        mode = ExecutionTrackingMode(self.tracking_mode).value
        return [{**n.to_dict(), "stage_name": s.name, "plan_id": self.plan_id, "tracking_mode": mode}
                for s in self.iter_stages() for n in s.iter_nodes()]


# -- prefetch ---------------------------------------------------------------------------------------


@dataclass(slots=True)
class PrefetchTimingDelta:
    """Incremental prefetch metrics of one batch."""

    stage_index: int
    batch_size: int
    prefetch_requests: int
    prefetch_succeeded: int
    prefetch_failed: int


@dataclass(slots=True)
class PrefetchTimingTotals:
    """Prefetch totals: ``batches`` counts deltas, ``samples`` sums their batch sizes."""

    batches: int = 0
    samples: int = 0
    prefetch_requests: int = 0
    prefetch_succeeded: int = 0
    prefetch_failed: int = 0

    def apply(self, delta: PrefetchTimingDelta) -> None:
        self.batches += 1
        self.samples += delta.batch_size
        self.prefetch_requests += delta.prefetch_requests
        self.prefetch_succeeded += delta.prefetch_succeeded
        self.prefetch_failed += delta.prefetch_failed

    def merge(self, other: PrefetchTimingTotals) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def copy(self) -> PrefetchTimingTotals:
        return PrefetchTimingTotals(**{f.name: getattr(self, f.name) for f in fields(self)})


@dataclass
class PrefetchTimingSummary:
    """Prefetch metrics of a whole pipeline, per stage."""

    plan_id: str | None = None
    reporting_interval_s: float | None = None
    tracking_mode: ExecutionTrackingMode = ExecutionTrackingMode.OFF
    stages: MutableMapping[int, PrefetchTimingTotals] = field(default_factory=dict)

    def apply(self, delta: PrefetchTimingDelta) -> None:
        self.stages.setdefault(delta.stage_index, PrefetchTimingTotals()).apply(delta)

    def merge(self, other: PrefetchTimingSummary) -> None:
        self.plan_id = _fill(self.plan_id, other.plan_id)
        self.reporting_interval_s = _fill(self.reporting_interval_s, other.reporting_interval_s)
        for index, totals in other.stages.items():
            if index in self.stages:
                self.stages[index].merge(totals)
            else:
                self.stages[index] = totals.copy()

    def clone(self) -> PrefetchTimingSummary:
        return copy.deepcopy(self)

    def has_samples(self) -> bool:
        return any(t.samples > 0 for t in self.stages.values())

    @property
    def success_rate(self) -> float:
        """Succeeded over requested, over every stage."""
        return _ratio(sum(t.prefetch_succeeded for t in self.stages.values()),
                      sum(t.prefetch_requests for t in self.stages.values()))

"""zephon's ``zephon.observability``: its configuration objects and metric value types.

Theory of operation
-------------------
zephon 0.2.0 collects timings (per operator, fetch and prefetch) and exports them to logs or
statsd; the names here are the types it uses for that: the execution-tracking and sink modes and
the sink configuration (:mod:`.config`), the MTP queue snapshot (:mod:`.mtp_stats`) and the
summaries with their deltas (:mod:`.stats`).  zephon_ref collects no timings (its snapshot methods
return None, docs/options.md), so nothing here is ever filled by a run; the types exist so code
written for zephon imports, builds and aggregates them unchanged, with zephon's fields, defaults
and arithmetic (tests/conformance/test_observability_conformance.py).  Execution settings never
change the data (seed 002): nothing here reaches the data path.

What may not live here: clocks, sinks that send anything, engine hooks.
"""

from zephon_ref.observability.config import ExecutionTrackingMode, MetricsSinkConfig, MetricsSinkMode
from zephon_ref.observability.mtp_stats import MTPQueueStats
from zephon_ref.observability.stats import (
    FetchStageSummary,
    FetchTimingDelta,
    FetchTimingSummary,
    FetchTimingTotals,
    PipelineSummary,
    PrefetchTimingDelta,
    PrefetchTimingSummary,
    PrefetchTimingTotals,
)

__all__ = [
    "ExecutionTrackingMode",
    "FetchStageSummary",
    "FetchTimingDelta",
    "FetchTimingSummary",
    "FetchTimingTotals",
    "MTPQueueStats",
    "MetricsSinkConfig",
    "MetricsSinkMode",
    "PipelineSummary",
    "PrefetchTimingDelta",
    "PrefetchTimingSummary",
    "PrefetchTimingTotals",
]

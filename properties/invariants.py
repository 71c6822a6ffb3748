"""Invariants the property suite asserts, shared with the simulator.

``no_skip_no_duplicate(admitted, delivered, tombstones)`` is :func:`sim.checker.check_lineage`:
every offset a lane admitted closes exactly once (a delivered record or a tombstone
with ``is_last_child=True``), and no record names an offset its lane did not admit.
It returns a :class:`~sim.checker.LineageReport`; assert ``report.ok`` and print
``report.describe()``.
"""

from __future__ import annotations

from sim.checker import LaneLineage, LineageReport, admitted_from_source, records_of
from sim.checker import check_lineage as no_skip_no_duplicate

__all__ = ["LaneLineage", "LineageReport", "admitted_from_source", "no_skip_no_duplicate", "records_of"]

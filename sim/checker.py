"""The lineage checker: every admitted offset closes exactly once, and nothing else is delivered.

Theory of operation
-------------------
The invariant (notes 2.4, seeds "no skip, no duplicate"): per lane and base offset
``(chunk_id, chunk_offset)`` that the lane admitted, exactly one delivered record or
tombstone carries a *closing* contributor (``is_last_child=True``) for it; and every
delivered record names only offsets its own lane admitted.

:func:`check_lineage` builds a directed lineage multigraph (networkx): one node per
base offset ``("offset", lane, chunk_id, chunk_offset)``, one per delivered record
``("record", i)`` and one per tombstone ``("tombstone", j)``; an edge offset -> record
for every contributor ref of the record (``meta.contribution_refs()``: explicit
contributors, or the record's own cursor), carrying ``closing=is_last_child``.
Parallel edges are kept (a packed bin may hold two fragments of one offset).  Then,
per lane:

* **lost**: admitted offsets with no closing out-edge (reach nothing that closes them);
* **duplicated**: offsets with more than one closing out-edge (closed twice, by two
  records, two tombstones, or one of each); the minimal witness of each (``closers``)
  names the offset and every record or tombstone that closed it;
* **unexpected**: records or tombstones with an in-edge from an offset the lane did
  not admit (a record of another lane, a chunk never admitted, an offset past the
  chunk's end).

It is a pure function of plain data: the caller collects what each lane admitted
(:func:`admitted_from_source` derives it from a work source run to exhaustion) and
what was delivered.  Control records other than tombstones (flush and end-of-data
sentinels) carry no lineage and are ignored.

What may not live here: collecting the inputs from a running engine (the caller's),
and any pipeline logic.  sim imports zephon_ref and networkx, never properties.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import networkx as nx

from zephon_ref.types import SampleBatch, SampleRecord
from zephon_ref.work.base import WorkSource

__all__ = [
    "LaneLineage",
    "LineageReport",
    "Sink",
    "admitted_from_source",
    "check_lineage",
    "check_lineage_views",
    "lineage_report",
    "records_of",
]

Offset = tuple[int, int]  # (chunk_id, chunk_offset)
Node = tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class LaneLineage:
    """One lane's verdict; ``unexpected`` names records as ``(kind, index, cursor key)``;
    ``closers`` is the witness of each duplicated offset (in the order of ``duplicated``):
    ``(offset, ((kind, index, cursor key), ...))``, every record or tombstone closing it,
    kind ``"record"`` or ``"tombstone"``, index its position among the delivered records
    (``"d<i>"`` for a tombstone found among them) or among the tombstones."""

    lane: int
    admitted: int
    lost: tuple[Offset, ...] = ()
    duplicated: tuple[Offset, ...] = ()
    unexpected: tuple[tuple[Any, ...], ...] = ()
    closers: tuple[tuple[Offset, tuple[tuple[Any, ...], ...]], ...] = ()

    @property
    def ok(self) -> bool:
        return not (self.lost or self.duplicated or self.unexpected)


@dataclass(frozen=True, slots=True)
class LineageReport:
    """Per-lane verdicts and the lineage graph they were read from."""

    lanes: dict[int, LaneLineage]
    graph: Any = field(repr=False, compare=False)

    @property
    def ok(self) -> bool:
        return all(lane.ok for lane in self.lanes.values())

    def describe(self, limit: int = 8) -> str:
        """One line per failing lane (at most ``limit`` items of each kind), or 'ok'."""
        lines = []
        for lane in sorted(self.lanes):
            v = self.lanes[lane]
            if v.ok:
                continue
            parts = [f"{name} {len(items)}: {list(items[:limit])}{' ...' if len(items) > limit else ''}"
                     for name, items in (("lost", v.lost), ("duplicated", v.duplicated),
                                         ("unexpected", v.unexpected)) if items]
            if v.closers:
                off, who = v.closers[0]
                parts.append(f"offset {off} closed {len(who)} times, by " +
                             ", ".join(f"{kind} {idx} {key!r:.80}" for kind, idx, key in who))
            lines.append(f"lane {lane} ({v.admitted} admitted offsets): " + "; ".join(parts))
        return "\n".join(lines) if lines else "ok"


def records_of(items: Iterable[Any]) -> list[SampleRecord]:
    """Delivered items (SampleBatch or SampleRecord) as a flat list of records."""
    out: list[SampleRecord] = []
    for x in items:
        if isinstance(x, SampleBatch):
            out.extend(x.records)
        elif isinstance(x, SampleRecord):
            out.append(x)
        else:
            raise TypeError(
                f"delivered item: expected a SampleBatch or SampleRecord, received {type(x).__name__}"
            )
    return out


def admitted_from_source(source: WorkSource, lanes: Iterable[int], canonical_replicas: int
                         ) -> dict[int, dict[int, range]]:
    """``{lane: {chunk_id: offsets}}`` of every chunk each lane's clone yields until exhaustion.

    Chunk ids are the lane's admission order from 0, as the engine numbers them; only
    meaningful for a run that drained the source (an unbounded source never ends).
    """
    out: dict[int, dict[int, range]] = {}
    for lane in lanes:
        clone = source.clone_for_lane(lane, canonical_replicas)
        chunks: dict[int, range] = {}
        while (chunk := clone.next_chunk()) is not None:
            chunks[len(chunks)] = range(len(chunk))
        out[lane] = chunks
    return out


def check_lineage(
    admitted: Mapping[int, Mapping[int, Iterable[int]]],
    delivered: Iterable[Any],
    tombstones: Iterable[SampleRecord] = (),
) -> LineageReport:
    """Lost, duplicated and unexpected offsets per lane (see the module docstring).

    ``admitted``: ``{lane: {chunk_id: offsets}}``; ``delivered``: the consumer's items
    (SampleBatch / SampleRecord; tombstones among them are treated as tombstones);
    ``tombstones``: the tombstone records the engine consumed.
    """
    recs = records_of(delivered)
    sinks: list[Sink] = []
    for i, r in enumerate(recs):
        if r.meta.tombstone:
            sinks.append((("tombstone", f"d{i}"), *_sink_of(r)))
        elif not r.meta.is_sentinel:
            sinks.append((("record", i), *_sink_of(r)))
    sinks += [(("tombstone", j), *_sink_of(r)) for j, r in enumerate(tombstones)]
    return lineage_report(admitted, sinks)


def _sink_of(r: SampleRecord) -> tuple[int, Any, tuple[tuple[int, int, bool], ...]]:
    refs = tuple((int(ref.cursor.base_offset[0]), int(ref.cursor.base_offset[1]), bool(ref.is_last_child))
                 for ref in r.meta.contribution_refs())
    return int(r.meta.lane_id), r.meta.as_cursor_key(), refs


def check_lineage_views(
    admitted: Mapping[int, Mapping[int, Iterable[int]]],
    records: Iterable[Any],
) -> LineageReport:
    """:func:`check_lineage` over records in the property suite's normal form (plain tuples
    ``(lane, cursor key, ((contributor cursor, is_last_child), ...), payload)``, as
    :func:`sim.workloads.record_view` builds them): the sinks are the records, in order."""
    sinks: list[Sink] = []
    for i, (lane, key, contributors, _payload) in enumerate(records):
        refs = tuple((int(c[0]), int(c[1]), bool(last)) for c, last in contributors)
        sinks.append((("record", i), int(lane), key, refs))
    return lineage_report(admitted, sinks)


#: a record or tombstone of the lineage graph: its node, lane, cursor key and contributor refs
#: ``(chunk_id, chunk_offset, closing)``
Sink = tuple[Node, int, Any, tuple[tuple[int, int, bool], ...]]


def lineage_report(
    admitted: Mapping[int, Mapping[int, Iterable[int]]], sinks: Iterable[Sink]
) -> LineageReport:
    """The verdicts of :func:`check_lineage` from plain sinks (the shared core)."""
    g = nx.MultiDiGraph()
    for lane, chunks in admitted.items():
        for cid, offsets in chunks.items():
            for off in offsets:
                g.add_node(("offset", int(lane), int(cid), int(off)), lane=int(lane), admitted=True)
    for node, lane, key, refs in sinks:
        g.add_node(node, lane=lane, key=key)
        for cid, off, closes in refs:
            src = ("offset", lane, cid, off)
            if src not in g:
                g.add_node(src, lane=lane, admitted=False)
            g.add_edge(src, node, closing=closes)

    lanes = sorted({int(lane) for lane in admitted} | {int(d["lane"]) for _, d in g.nodes(data=True)})
    report: dict[int, LaneLineage] = {}
    for lane in lanes:
        lost: list[Offset] = []
        dup: list[tuple[Offset, tuple[tuple[Any, ...], ...]]] = []
        bad: set[tuple[Any, ...]] = set()
        n_admitted = 0
        for node, data in g.nodes(data=True):
            if node[0] != "offset" or data["lane"] != lane:
                continue
            closing = [succ for _, succ, c in g.out_edges(node, data="closing") if c]
            closers = len(closing)
            if not data["admitted"]:
                bad.update((succ[0], succ[1], g.nodes[succ]["key"]) for succ in g.successors(node))
                continue
            n_admitted += 1
            if closers == 0:
                lost.append((node[2], node[3]))
            elif closers > 1:
                dup.append(((node[2], node[3]), tuple((s[0], s[1], g.nodes[s]["key"]) for s in closing)))
        dup.sort(key=lambda d: d[0])
        report[lane] = LaneLineage(lane, n_admitted, tuple(sorted(lost)), tuple(d[0] for d in dup),
                                   tuple(sorted(bad, key=repr)), tuple(dup))
    return LineageReport(report, g)

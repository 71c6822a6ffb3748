"""Convert zephon_ref records to zephon 0.2.0 records, and normalise either for comparison.

Record-level adapters for the operator conformance tests (tests/conformance/test_ops_conformance.py):
:func:`to_zephon` feeds zephon's operators the records zephon_ref produced, and :func:`norm`
/ :func:`per_lane` give an implementation-neutral view of either library's output.  (Moved
here from tests/conformance/adapters.py so that tests never import tests.)  Importing this
module requires ``zephon`` (the ``conformance`` extra).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

from zephon import types as zt  # type: ignore[import-untyped]

from zephon_ref.types import TAG_CONTRIBUTORS, SampleBatch, SampleRecord


def _z_cursor(c: Any) -> Any:
    return zt.SampleCursor(c.chunk_id, c.chunk_offset, tuple(c.sample_id), tuple(c.lineage))


def to_zephon(rec: SampleRecord) -> Any:
    """A zephon ``SampleRecord`` with the same identity, lineage, tags and (copied) payload."""
    m = rec.meta
    tags = dict(m.tags)
    if TAG_CONTRIBUTORS in tags:
        tags[TAG_CONTRIBUTORS] = tuple(
            zt.ContributorRef(_z_cursor(r.cursor), r.is_last_child) for r in m.contributors
        )
    meta = zt.SampleMeta(
        sample_id=tuple(m.sample_id),
        lane_id=m.lane_id,
        chunk_id=m.chunk_id,
        chunk_offset=m.chunk_offset,
        component_sample_counts=dict(m.component_sample_counts),
        component_token_counts=None if m.component_token_counts is None else dict(m.component_token_counts),
        lineage=tuple(m.lineage),
        tags=tags,
    )
    return zt.SampleRecord(meta=meta, payload=copy.deepcopy(rec.payload))


def to_zephon_all(batches: Iterable[Iterable[SampleRecord]]) -> list[list[Any]]:
    return [[to_zephon(r) for r in b] for b in batches]


def _norm_payload(p: Any) -> Any:
    if isinstance(p, dict):
        return {k: _norm_payload(v) for k, v in p.items()}
    if isinstance(p, (list, tuple)):
        return [_norm_payload(v) for v in p]
    if hasattr(p, "tolist"):
        return p.tolist()
    return p


def norm_record(rec: Any) -> tuple[Any, ...]:
    """Implementation-neutral view: cursor key, contributors, tombstone, counts, payload."""
    m = rec.meta
    key = m.cursor.as_key()
    refs = tuple((r.cursor.as_key(), bool(r.is_last_child)) for r in m.contributors)
    pm = m.tags.get("_packing_metadata")
    return (
        m.lane_id,
        (key[0], key[1], tuple(key[2]), tuple(key[3])),
        refs,
        bool(m.tags.get("_tombstone", False)),
        dict(m.component_sample_counts),
        None if m.component_token_counts is None else dict(m.component_token_counts),
        None if pm is None else dict(pm),
        _norm_payload(rec.payload),
    )


def norm(items: Iterable[Any]) -> list[Any]:
    out: list[Any] = []
    for it in items:
        if isinstance(it, SampleBatch) or hasattr(it, "records"):
            out.append(("batch", [norm_record(r) for r in it.records]))
        else:
            out.append(norm_record(it))
    return out


def per_lane(items: Iterable[Any]) -> dict[int, list[Any]]:
    lanes: dict[int, list[Any]] = {}
    for n in norm(items):
        lane = n[1][0][0] if n[0] == "batch" else n[0]
        lanes.setdefault(lane, []).append(n)
    return lanes

"""Native items -> the reference's record types (SampleRecord / SampleBatch), for comparison.

Theory of operation
-------------------
The tensor implementation computes with plain tuples and token lists; this
module spells an item out as the records the reference delivers, field for
field: a document's meta (cursor, ``{component: 1}`` sample counts, the
contributor of a split window), and a pack's meta (primary cursor = first
segment's cursor extended by offset 0, one contributor per segment, summed
sample and token counts, the packing-metadata tag); a sample pointer, a plain
tuple of ints on the fast path, becomes the reference's ``SampleId``.  It is used by the
conformance tests and the property adapter, never on the fast path.
"""

from __future__ import annotations

from typing import Any

from zephon_ref.fast.tensor.lanes import Doc
from zephon_ref.types import (
    TAG_CONTRIBUTORS,
    TAG_PACKING_METADATA,
    ContributorRef,
    SampleBatch,
    SampleCursor,
    SampleId,
    SampleMeta,
    SampleRecord,
)

__all__ = ["to_reference"]


def _payload(d: Doc) -> Any:
    if d[7] is not None:
        return d[7]
    ids = d[6]
    assert ids is not None
    tokens = ids.tolist() if hasattr(ids, "tolist") else list(ids)
    return {"input_ids": tokens, "attention_mask": [1] * len(tokens)}


def _doc_record(lane: int, unit: tuple[tuple[Doc, ...], tuple[bool, ...]]) -> SampleRecord:
    d = unit[0][0]
    sid, cid, off, comp, lineage, closing, _ids, _p = d
    sid = SampleId(*sid)  # a plain tuple on the fast path
    tags: dict[str, Any] = {}
    if closing is not None:
        tags[TAG_CONTRIBUTORS] = (ContributorRef(SampleCursor(cid, off, sid, lineage), unit[1][0]),)
    return SampleRecord(SampleMeta(sid, lane, cid, off, {comp: 1}, None, lineage, tags), _payload(d))


def _pack_record(lane: int, pack: tuple[tuple[Doc, ...], tuple[bool, ...]], max_length: int) -> SampleRecord:
    docs, flags = pack
    refs = []
    samples: dict[int, int] = {}
    tokens: dict[int, int] = {}
    for d, flag in zip(docs, flags, strict=True):
        sid, cid, off, comp, lineage, _closing, ids, _p = d
        sid = SampleId(*sid)  # a plain tuple on the fast path
        refs.append(ContributorRef(SampleCursor(cid, off, sid, lineage), flag))
        samples[comp] = samples.get(comp, 0) + 1
        n = 0 if ids is None else len(ids)
        if n > 0:
            tokens[comp] = tokens.get(comp, 0) + n
    total = sum(0 if d[6] is None else len(d[6]) for d in docs)
    first = docs[0]
    tags = {TAG_PACKING_METADATA: {"num_sequences": len(docs), "total_length": total,
                                   "packing_efficiency": total / max_length, "padding_length": None},
            TAG_CONTRIBUTORS: tuple(refs)}
    meta = SampleMeta(
        SampleId(*first[0]), lane, first[1], first[2], samples, tokens or None, (*first[4], 0), tags
    )
    return SampleRecord(meta, {"packed_samples": [_payload(d) for d in docs]})


def to_reference(item: tuple[int, tuple[Any, ...]], *, pack_max_length: int | None, batched: bool) -> Any:
    """The reference's delivered object for one native item."""
    lane, entries = item
    if pack_max_length is None:
        recs = [_doc_record(lane, d) for d in entries]
    else:
        recs = [_pack_record(lane, p, pack_max_length) for p in entries]
    return SampleBatch(tuple(recs)) if batched else recs[0]

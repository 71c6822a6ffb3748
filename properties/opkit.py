"""Operator test kit: records, streams, push splits, a serial driver and lineage checks, shared by the
operator tests."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from zephon_ref.ops.base import Accumulator, BaseOp
from zephon_ref.types import SampleMeta, SampleRecord


def rec(
    lane: int,
    chunk: int,
    offset: int,
    *,
    n_tokens: int | None = None,
    comp: int = 0,
    payload: Any = None,
    sid: tuple[int, int, int] | None = None,
) -> SampleRecord:
    sample_id = sid if sid is not None else (comp, lane, chunk * 1000 + offset)
    meta = SampleMeta(sample_id, lane, chunk, offset, {comp: 1})
    if payload is None:
        n = n_tokens if n_tokens is not None else 1 + (chunk * 7 + offset * 3) % 9
        payload = {"input_ids": [100 + i for i in range(n)], "mask": [1] * n, "k": offset}
    return SampleRecord(meta, payload)


def stream(lanes: Sequence[int], chunks: int, per_chunk: int, **kw: Any) -> list[SampleRecord]:
    """Records interleaved lane by lane, chunk by chunk."""
    out: list[SampleRecord] = []
    for c in range(chunks):
        for lane in lanes:
            for o in range(per_chunk):
                out.append(rec(lane, c, o, **kw))
    return out


def split(records: Sequence[Any], cuts: Sequence[int]) -> list[list[Any]]:
    """Split ``records`` into consecutive pushes at the given (sorted, clipped) cut points."""
    pts = sorted({min(max(0, c), len(records)) for c in cuts} | {0, len(records)})
    return [list(records[a:b]) for a, b in zip(pts, pts[1:], strict=False)]


def run(op: BaseOp, pushes: Sequence[Sequence[Any]], *, acc: Accumulator[Any] | None = None,
        flush: bool = True, ctx: dict[str, Any] | None = None,
        chunk_mixture: Callable[[int, int], Mapping[int, float]] | None = None) -> list[Any]:
    """Push ``pushes`` through a fresh (or the given) accumulator and ``process_many``, then flush.

    ``chunk_mixture(lane, cid)``: each chunk's mixture, announced to a zephon_ref accumulator
    (``on_chunk``) before the first push holding a record of that chunk, as the engine's chunk
    announcements do; zephon's accumulators read it through ``ctx["get_chunk_mixture"]``.
    """
    a = acc if acc is not None else op.accumulator(deterministic=True, ctx=ctx or {})
    out: list[Any] = []
    announced: set[tuple[int, int]] = set()
    for b in pushes:
        if chunk_mixture is not None:
            for r in b:
                key = (r.meta.lane_id, r.meta.chunk_id)
                if key not in announced:
                    announced.add(key)
                    a.on_chunk(key[0], key[1], chunk_mixture(*key))
        for elems, _ in a.push_many(list(b)):
            out.extend(op.process_many(list(elems)))
    if flush:
        for elems, _ in a.flush():
            out.extend(op.process_many(list(elems)))
    return out


def closers(out: Sequence[SampleRecord]) -> dict[tuple[int, int, int], list[int]]:
    """(lane, chunk, offset) -> output positions of closing contributors."""
    res: dict[tuple[int, int, int], list[int]] = {}
    for i, r in enumerate(out):
        for ref in r.meta.contribution_refs():
            if ref.is_last_child:
                res.setdefault((r.meta.lane_id, *ref.cursor.base_offset), []).append(i)
    return res


def last_fragment(out: Sequence[SampleRecord]) -> dict[tuple[int, int, int], int]:
    res: dict[tuple[int, int, int], int] = {}
    for i, r in enumerate(out):
        for ref in r.meta.contribution_refs():
            res[(r.meta.lane_id, *ref.cursor.base_offset)] = i
    return res


def check_lineage(inputs: Sequence[SampleRecord], out: Sequence[SampleRecord]) -> None:
    """Every input base offset closes exactly once, after every other fragment."""
    want = {(r.meta.lane_id, r.meta.chunk_id, r.meta.chunk_offset) for r in inputs}
    cl = closers(out)
    assert set(cl) == want, (sorted(set(cl) ^ want))
    last = last_fragment(out)
    for key, pos in cl.items():
        assert len(pos) == 1, (key, pos)
        assert pos[0] == last[key], (key, pos, last[key])

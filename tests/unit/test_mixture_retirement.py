"""ensure_mixture's retirement groups keep their selection across a reclassification.

When an end of data removes a component from the target, its buffered records form a
*retirement group* that drains through the obsolete slot by the group's own round robin.  A
later target change re-routes every buffered record (a reclassification); a group whose
components on hand did not change must go on selecting where it left off (zephon 0.2.0 does;
zephon_ref used to restart the group's selector there, which showed as the single-lane
divergence ``REDISTRIBUTE_RETIREMENT_MINIMAL`` in tests/conformance/test_pipeline_conformance.py).
"""

from __future__ import annotations

from typing import Any

from zephon_ref.ops import EnsureMixture
from zephon_ref.ops.base import SourceExhaustion
from zephon_ref.types import SampleMeta, SampleRecord


def record(offset: int, counts: dict[int, int]) -> SampleRecord:
    """A record of lane 0, chunk 0, carrying ``counts`` samples per component (a pack when several)."""
    return SampleRecord(SampleMeta((min(counts), 0, offset), 0, 0, offset, dict(counts)), {"k": offset})


def drive(steps: list[tuple[str, Any]]) -> list[int]:
    """Run pushes and end-of-data announcements on one lane; return the emitted offsets in order."""
    continuing: set[int] = set()
    ctx = {
        "get_source_exhaustion": lambda lane: SourceExhaustion(frozenset(continuing), frozenset(continuing)),
    }
    acc = EnsureMixture(weight_by="samples", obsolete_drain_rate=1.0).accumulator(deterministic=True, ctx=ctx)
    acc.on_chunk(0, 0, {0: 0.1, 1: 0.1, 2: 0.8})  # the chunk's announcement, ahead of its records
    out: list[int] = []
    for kind, arg in steps:
        if kind == "push":
            ready = acc.push_many(arg)
        else:
            continuing.add(arg)
            ready = acc.on_source_exhausted(0, arg)
        out += [r.meta.chunk_offset for batch, _ in ready for r in batch]
    return out


P0, P1, P2 = record(0, {0: 5, 1: 1}), record(1, {0: 1, 1: 1}), record(2, {0: 3, 1: 1})
S1, S2A, S2B = record(3, {1: 1}), record(4, {2: 1}), record(5, {2: 1})


def test_a_reclassification_keeps_the_retirement_groups_selection() -> None:
    # target {0: .1, 1: .1, 2: .8}: the ideal component is 2, absent, so the packs and S1 wait
    steps: list[tuple[str, Any]] = [("push", [P0, P1, P2, S1]), ("eod", 0)]
    # component 0 retires: the three packs (positive weight of 0) form its group.  S2A goes out, then
    # the obsolete slot (rate 1.0: after every normal emission) takes the group's pick: a fresh
    # selector has deficit 1 for component 0, so the pack with the most of it, P0 (5 samples)
    steps += [("push", [S2A])]
    assert drive(steps) == [4, 0]
    # component 1 retires: S1 is buffered, so the buffer is reclassified; P1 and P2 go back to the
    # group of component 0 (its oldest retired component).  After P0 the group's emitted mass of 0
    # is 5, so its deficit is max(1, 5) - 5 = 0: every pack scores 0 and the oldest, P1, is next.
    # A selector restarted at the reclassification would score by weight again and take P2.
    steps += [("eod", 1), ("push", [S2B])]
    assert drive(steps) == [4, 0, 5, 1]


def test_without_the_second_retirement_the_group_also_takes_the_oldest() -> None:
    # the same stream with no reclassification in between: the group's choice is the same, which is
    # what "a reclassification changes nothing but the routing" means
    assert drive([("push", [P0, P1, P2, S1]), ("eod", 0), ("push", [S2A]), ("push", [S2B])]) == [4, 0, 5, 1]

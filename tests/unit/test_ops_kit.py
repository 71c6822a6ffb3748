"""The operator kit: traits, counting/passthrough accumulators, batch, replay filter, map."""

from __future__ import annotations

import dataclasses

import pytest

from properties.opkit import check_lineage, rec, run, stream
from zephon_ref.errors import ConfigError, ConfigTypeError, DataDroppedWarning
from zephon_ref.ops import (
    Batch,
    BatchAccumulator,
    CountingAccumulator,
    MapTransform,
    OpTraits,
    PassthroughAccumulator,
    ReplayFilter,
    ReplayFilterAccumulator,
)
from zephon_ref.ops.base import Accumulator, BaseOp, SourceExhaustion
from zephon_ref.types import SampleBatch


def test_optraits_requires_preserves_cursor_order_and_is_frozen() -> None:
    with pytest.raises(TypeError):
        OpTraits()  # type: ignore[call-arg]
    t = OpTraits(preserves_cursor_order=False)
    assert (t.indexable, t.parallelism, t.requires_serial_state) == (True, 1, False)
    with pytest.raises(dataclasses.FrozenInstanceError):
        t.parallelism = 2  # type: ignore[misc]
    with pytest.raises(TypeError):
        OpTraits(True)  # type: ignore[misc]  # keyword-only
    with pytest.raises(ConfigError):
        OpTraits(preserves_cursor_order=True, parallelism=0)


def test_baseop_needs_traits_and_process_many() -> None:
    class Half(BaseOp):
        def process_many(self, elems: list[object]) -> list[object]:
            return elems

    with pytest.raises(TypeError):
        Half()  # type: ignore[abstract]


def test_default_try_epoch_reset_is_not_pending() -> None:
    class One(Accumulator[object]):
        def __init__(self) -> None:
            self.items: list[object] = []

        def push_many(self, elems):  # type: ignore[no-untyped-def]
            self.items.extend(elems)
            return []

        def flush(self, *, reset=False, lane_id=None):  # type: ignore[no-untyped-def]
            return []

        def has_pending_data(self, lane_id=None):  # type: ignore[no-untyped-def]
            return bool(self.items)

    a = One()
    assert a.try_epoch_reset(3) and not a.reads_payload and a.on_source_exhausted(0, 1) == []
    a.push_many([1])
    assert not a.try_epoch_reset(3)
    assert SourceExhaustion().final_component is None


def test_passthrough_forwards_batches_as_is() -> None:
    p: PassthroughAccumulator[int] = PassthroughAccumulator()
    assert p.push_many([]) == []
    assert p.push_many([1, 2]) == [([1, 2], 0)]
    assert p.flush() == [] and not p.has_pending_data()


def test_counting_accumulator_is_per_lane_and_count_only() -> None:
    a: CountingAccumulator[object] = CountingAccumulator(2)
    r = [rec(0, 0, 0), rec(1, 0, 0), rec(0, 0, 1), rec(1, 0, 1), rec(1, 0, 2)]
    ready = a.push_many(r)
    assert [[x.meta.lane_id for x in b] for b, _ in ready] == [[0, 0], [1, 1]]
    assert a.has_pending_data(1) and not a.has_pending_data(0)
    assert a.flush(lane_id=0) == []
    assert [len(b) for b, _ in a.flush(lane_id=1)] == [1]
    assert not a.has_pending_data()


def test_counting_drop_last_discards_partials() -> None:
    a: CountingAccumulator[object] = CountingAccumulator(3, drop_last=True)
    a.push_many([rec(0, 0, 0)])
    assert a.flush() == [] and not a.has_pending_data()


def test_map_batch_accumulator_holds_nothing_across_pushes() -> None:
    """Every push leaves at once, per lane in order of first arrival, in calls of at most max_batch
    (divergence D-102: a buffer there holds micro-batches behind a stalled batch)."""
    from zephon_ref.ops.map_batch import MapBatchAccumulator

    a = MapBatchAccumulator(2)
    r = [rec(1, 0, 0), rec(0, 0, 0), rec(1, 0, 1), rec(1, 0, 2), rec(0, 0, 1)]
    ready = a.push_many(r)
    assert [[(x.meta.lane_id, x.payload["k"]) for x in b] for b, _ in ready] == [
        [(1, 0), (1, 1)], [(1, 2)], [(0, 0), (0, 1)]]
    assert not a.has_pending_data() and a.flush(reset=True, lane_id=1) == [] and a.flush() == []
    assert a.push_many([]) == []
    with pytest.raises(ConfigError, match="max_batch"):
        MapBatchAccumulator(0)


@pytest.mark.parametrize("bad", [0, -1])
def test_counting_rejects_bad_max_batch(bad: int) -> None:
    with pytest.raises(ConfigError, match="max_batch"):
        CountingAccumulator(bad)
    with pytest.raises(ConfigTypeError):
        CountingAccumulator("3")  # type: ignore[arg-type]


def test_batch_wraps_lane_pure_batches_and_drops_last() -> None:
    op = Batch(2)
    with pytest.warns(DataDroppedWarning, match="partial micro-batch") as dropped:  # each lane's third record
        out = run(op, [stream([0, 1], 1, 3)])
    assert [(w.message.lane, w.message.records) for w in dropped] == [(0, 1), (1, 1)]  # type: ignore[union-attr]
    assert all(isinstance(b, SampleBatch) and len(b) == 2 for b in out)
    assert [b.lane_ids for b in out] == [(0, 0), (1, 1)]
    out2 = run(Batch(2, drop_last=False), [stream([0], 1, 3)])
    assert [len(b) for b in out2] == [2, 1]
    with pytest.raises(ConfigError, match="microbatch_size"):
        Batch(0)
    assert op.traits().preserves_cursor_order


def test_batch_try_epoch_reset_waits_for_pre_boundary_records() -> None:
    a = BatchAccumulator(4)
    a.push_many([rec(0, 1, 0), rec(0, 2, 0), rec(1, 1, 0)])
    assert not a.try_epoch_reset(2, lane_id=0)  # chunk 1 is below the boundary
    assert a.try_epoch_reset(1, lane_id=0)
    assert not a.try_epoch_reset(2)  # all lanes
    a.push_many([rec(0, 2, 1), rec(0, 2, 2)])  # lane 0 batch [c1, c2, c2, c2] leaves
    assert a.try_epoch_reset(2, lane_id=0)
    assert not a.try_epoch_reset(2, lane_id=1)
    assert a.try_epoch_reset(2, lane_id=7)  # unknown lane: nothing buffered


def test_replay_filter_drops_until_equal_target_with_tombstones() -> None:
    recs = stream([0, 1], 2, 3)
    target = rec(0, 1, 0).meta.cursor
    acc = ReplayFilterAccumulator({0: target, 1: None})
    out = run(ReplayFilter(), [recs[:5], recs[5:]], acc=acc)
    lane0 = [r for r in out if r.meta.lane_id == 0]
    # 4 lane-0 records up to and including the target become tombstones
    assert [r.meta.tombstone for r in lane0] == [True] * 4 + [False] * 2
    assert [r.meta.cursor for r in lane0[4:]] == [rec(0, 1, 1).meta.cursor, rec(0, 1, 2).meta.cursor]
    assert all(not r.meta.tombstone for r in out if r.meta.lane_id == 1)
    assert not acc.active
    check_lineage(recs, out)


def test_replay_filter_equality_not_threshold() -> None:
    later_lower = [rec(0, 0, 2), rec(0, 0, 5), rec(0, 0, 1), rec(0, 0, 3)]
    acc = ReplayFilterAccumulator({0: rec(0, 0, 5).meta.cursor})
    out = run(ReplayFilter(), [later_lower], acc=acc)
    assert [r.meta.tombstone for r in out] == [True, True, False, False]


def test_replay_filter_never_matching_drops_everything() -> None:
    acc = ReplayFilterAccumulator({0: rec(0, 9, 9).meta.cursor})
    out = run(ReplayFilter(), [stream([0], 1, 3)], acc=acc)
    assert all(r.meta.tombstone for r in out) and acc.awaiting(0) is not None
    with pytest.raises(ConfigTypeError):
        ReplayFilterAccumulator({0: "c"})  # type: ignore[dict-item]


def test_map_transform_drops_none_with_tombstones() -> None:
    recs = stream([0], 1, 4)
    op = MapTransform(
        lambda p: None if p["input_ids"][0] == 100 and len(p["input_ids"]) % 2 else {"n": len(p["input_ids"])}
    )
    out = run(op, [recs])
    check_lineage(recs, out)
    kept = [r for r in out if not r.meta.tombstone]
    assert all(set(r.payload) == {"n"} for r in kept)
    out2 = run(MapTransform(lambda p: None, drop_none=False), [recs])
    assert [r.payload for r in out2] == [r.payload for r in recs]
    with pytest.raises(ConfigTypeError, match="fn"):
        MapTransform(3)  # type: ignore[arg-type]

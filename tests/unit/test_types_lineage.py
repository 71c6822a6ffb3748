"""Unit tests of record identity (types) and lineage helpers."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from zephon_ref import ConfigError, ZephonRefError
from zephon_ref.lineage import pack_meta, spawn_child, tombstone_meta, tombstones_for_record
from zephon_ref.types import (
    ContributorRef,
    SampleBatch,
    SampleCursor,
    SampleId,
    SampleMeta,
    SampleRecord,
    eod_sentinel,
    flush_sentinel,
)

keys = st.tuples(
    st.integers(0, 5), st.integers(0, 5), st.lists(st.integers(0, 3), max_size=3).map(tuple),
    st.tuples(st.integers(0, 2), st.integers(0, 2), st.integers(0, 9)),
)


@given(keys, keys)
def test_cursor_order_is_lexicographic_over_chunk_offset_lineage_then_sample(a, b):
    ca, cb = SampleCursor.from_key(a), SampleCursor.from_key(b)
    assert (ca < cb) == (a < b)
    assert (ca <= cb) == (a <= b)
    assert (ca > cb) == (a > b)
    assert (ca == cb) == (a == b)


@given(keys)
def test_cursor_key_round_trips_and_accepts_lists(k):
    c = SampleCursor.from_key(k)
    assert c.as_key() == k
    assert SampleCursor.from_key([k[0], k[1], list(k[2]), list(k[3])]) == c
    assert c.base_offset == (k[0], k[1])


def test_sample_id_wins_only_ties():
    lo = SampleCursor(1, 2, SampleId(9, 9, 9))
    hi = SampleCursor(1, 3, SampleId(0, 0, 0))
    assert lo < hi
    assert SampleCursor(1, 2, (0, 0, 1)) > SampleCursor(1, 2, (0, 0, 0))


def test_child_appends_and_rejects_negative_index():
    c = SampleCursor(3, 4, SampleId(1, 2, 3))
    assert c.child(2).child(0).lineage == (2, 0)
    assert c.child(1) > c  # a child sorts after its parent
    with pytest.raises(ConfigError, match="lineage index"):
        c.child(-1)


def test_from_key_rejects_malformed_key_with_typed_error():
    with pytest.raises(ZephonRefError):
        SampleCursor.from_key((1, 2, (0,)))
    with pytest.raises(ValueError):
        SampleCursor.from_key((1, 2, (), (1, 2)))


def test_meta_defaults_and_reserved_tags():
    m = SampleMeta(SampleId(0, 1, 2), lane_id=3, chunk_id=4, chunk_offset=5)
    assert m.cursor == SampleCursor(4, 5, (0, 1, 2))
    assert m.contribution_refs() == (ContributorRef(m.cursor, True),)
    assert not m.is_sentinel and not m.tombstone
    t = m.with_tombstone()
    assert t.tombstone and t.is_sentinel and not m.tombstone  # functional update
    assert flush_sentinel(1, 8).meta.is_flush_sentinel
    assert flush_sentinel(1, 8).meta.tags["_boundary_cid"] == 8
    eod = eod_sentinel(1, 2, continues=True, final=False).meta
    assert eod.is_sentinel and eod.is_eod_sentinel and not eod.is_flush_sentinel


def test_batch_computes_lane_and_chunk_ids():
    recs = [SampleRecord(SampleMeta(SampleId(0, 0, i), 2, 10 + i, i), {"x": i}) for i in range(3)]
    b = SampleBatch(recs)
    assert len(b) == 3 and b.lane_ids == (2, 2, 2) and b.chunk_ids == (10, 11, 12)
    assert b.ids == ((0, 0, 0), (0, 0, 1), (0, 0, 2)) and list(b) == recs


def _base(lane=0):
    return SampleMeta(SampleId(0, 0, 7), lane, 2, 3, {1: 1}, None, (), {"keep": 1})


def test_spawn_child_of_plain_record_closes_only_when_asked():
    p = _base()
    a = spawn_child(p, 0)
    z = spawn_child(p, 1, is_last_child=True)
    assert a.lineage == (0,) and z.lineage == (1,)
    assert a.contributors == (ContributorRef(SampleCursor(2, 3, (0, 0, 7), (0,)), False),)
    assert z.contributors == (ContributorRef(SampleCursor(2, 3, (0, 0, 7), (1,)), True),)
    assert a.tags["keep"] == 1 and a.component_sample_counts == {1: 1}


def test_spawn_child_of_contributed_record_keeps_cursors_and_moves_closers():
    refs = (
        ContributorRef(SampleCursor(1, 0, (0, 0, 0)), True),
        ContributorRef(SampleCursor(1, 1, (0, 0, 1)), False),
    )
    p = _base().with_contributors(refs)
    mid = spawn_child(p, 0)
    last = spawn_child(p, 1, is_last_child=True)
    assert [r.cursor for r in mid.contributors] == [r.cursor for r in refs]
    assert not any(r.is_last_child for r in mid.contributors)
    assert last.contributors == refs


def test_spawn_child_refuses_closing_child_of_tombstone_and_negative_index():
    with pytest.raises(ConfigError, match="tombstone"):
        spawn_child(_base().with_tombstone(), 0, is_last_child=True)
    assert spawn_child(_base().with_tombstone(), 0).tombstone is False  # non-closing child is allowed
    with pytest.raises(ConfigError):
        spawn_child(_base(), -1)


def test_pack_meta_uses_primary_cursor_and_lists_contributors():
    primary = SampleCursor(5, 6, (1, 1, 1), (0, 3))
    refs = [ContributorRef(primary, False), ContributorRef(SampleCursor(5, 7, (1, 1, 2)), True)]
    m = pack_meta(primary, refs, lane_id=4, component_sample_counts={1: 2}, tags={"_tombstone": True, "x": 1})
    assert m.cursor == primary and m.lane_id == 4 and m.contributors == tuple(refs)
    assert not m.tombstone and m.tags["x"] == 1


def test_tombstones_close_exactly_the_closing_refs():
    refs = (
        ContributorRef(SampleCursor(1, 0, (0, 0, 0)), True),
        ContributorRef(SampleCursor(1, 1, (0, 0, 1)), False),
        ContributorRef(SampleCursor(1, 2, (0, 0, 2)), True),
    )
    rec = SampleRecord(_base(lane=9).with_contributors(refs), {"p": 1})
    ts = tombstones_for_record(rec)
    assert [t.meta.contributors for t in ts] == [(refs[0],), (refs[2],)]
    assert all(t.payload is None and t.meta.tombstone and t.meta.lane_id == 9 for t in ts)
    plain = SampleRecord(_base(), 1)
    assert [t.meta.cursor for t in tombstones_for_record(plain)] == [plain.meta.cursor]
    with pytest.raises(ConfigError, match="closing"):
        tombstone_meta(refs[1], 0)

"""The world's lineage check: every admitted offset closes exactly once over the trainer's timeline.

The world observes tombstones through the engine's public ``on_tombstone`` hook and rolls them
back with the consumed stream on a restore; the replay filter's re-closing of records consumed
before the restored cut is excused once per offset.  So an offset closed by a record *and* a
tombstone (or by two tombstones) is flagged, with a witness naming the offset and its closers;
before, the run filtered out every tombstone whose offsets a consumed record also closed, and
missed exactly that.
"""

from __future__ import annotations

import functools
import warnings
from typing import Any

import pytest

from properties.pipelines import PipelineConfig, build_pipeline
from sim.checker import admitted_from_source, check_lineage, records_of
from sim.choices import SeededChoices
from sim.runs import run_seed
from sim.world import World, WorldConfig, _replayed_offsets
from zephon_ref.engine import core
from zephon_ref.lineage import tombstones_for_record
from zephon_ref.types import SampleRecord

CFG = PipelineConfig(
    [("pack_sequences", {"max_length": 96, "num_bins": 3})],
    layout={"web": (40, 25), "code": (20, 12), "books": (10,)},
    source_kwargs={"chunk_size": 12, "seed": 3},
    options={"runner": "inline", "canonical_replicas": 2},
)
build = functools.partial(build_pipeline, "zephon_ref", CFG)


@pytest.fixture(scope="module")
def clean_run() -> tuple[dict[int, dict[int, range]], list[SampleRecord], list[SampleRecord]]:
    """(admitted, delivered records, tombstones) of one uninterrupted run (tombstones via the hook)."""
    p = build()
    tombs: list[SampleRecord] = []
    engine = p.engine(on_tombstone=tombs.append)
    items = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        while not engine.finished:
            x = engine.deliver()
            if x is not None:
                items.append(x)
                continue
            engine.step()
    admitted = admitted_from_source(p._source, range(2), 2)
    recs = records_of(items)
    assert check_lineage(admitted, recs, tombs).ok and tombs
    return admitted, recs, tombs


def closing(rec: SampleRecord) -> list[tuple[int, int]]:
    return [ref.cursor.base_offset for ref in rec.meta.contribution_refs() if ref.is_last_child]


def test_a_record_and_a_tombstone_closing_one_offset_are_both_named(clean_run: Any) -> None:
    admitted, recs, tombs = clean_run
    rec = recs[2]
    extra = tombstones_for_record(rec)
    report = check_lineage(admitted, recs, [*tombs, *extra])
    lane = report.lanes[rec.meta.lane_id]
    off = min(closing(rec))
    assert not report.ok and off in lane.duplicated
    witness = dict(lane.closers)[off]
    assert sorted(kind for kind, _, _ in witness) == ["record", "tombstone"]
    assert ("record", 2, rec.meta.as_cursor_key()) in witness
    assert (
        "tombstone",
        len(tombs) + closing(rec).index(off),
        extra[closing(rec).index(off)].meta.as_cursor_key(),
    ) in witness
    assert f"offset {lane.closers[0][0]} closed 2 times" in report.describe()


def test_two_tombstones_closing_one_offset_are_both_named(clean_run: Any) -> None:
    admitted, recs, tombs = clean_run
    t = tombs[0]
    report = check_lineage(admitted, recs, [*tombs, t])
    lane = report.lanes[t.meta.lane_id]
    assert lane.duplicated == tuple(closing(t))
    assert [kind for kind, _, _ in lane.closers[0][1]] == ["tombstone", "tombstone"]
    assert {idx for _, idx, _ in lane.closers[0][1]} == {0, len(tombs)}
    assert not lane.lost and not lane.unexpected


def _double_close_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A planted bug: each engine, once, closes the first record it delivers a second time with a
    tombstone (the tombstone goes through the tail like any other)."""
    orig = core.Engine.deliver

    def deliver(self: Any) -> Any:
        x = orig(self)
        if x is not None and not getattr(self, "_planted", False):
            self._planted = True
            self._outbox.extendleft(reversed(tombstones_for_record(records_of([x])[0])))
        return x
    monkeypatch.setattr(core.Engine, "deliver", deliver)


def test_the_world_flags_an_offset_its_engines_closed_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    clean = run_seed(0)
    assert clean.ok and clean.lineage == "ok"
    _double_close_once(monkeypatch)
    bad = run_seed(0)
    assert not bad.ok
    # the history checker sees nothing (the delivered stream is right): the lineage check is what flags it
    assert all(p.kind == "lineage" for p in bad.witnesses), bad.problems
    w = bad.witnesses[0]
    assert w.seed == 0 and w.lane is not None and "duplicated" in w.message
    offset, closers = w.record
    assert sorted(kind for kind, _, _ in closers) == ["record", "tombstone"]


def test_replay_tombstones_after_a_restore_are_excused_once_per_offset(clean_run: Any) -> None:
    """Hand-built timeline: a record consumed before a cut whose chunk the cut holds inflight; after
    the restore the replay filter's tombstone for it is excused, a second one is a double close."""
    admitted, recs, tombs = clean_run
    rec = next(r for r in recs if len(closing(r)) == 1)
    cid = rec.meta.contribution_refs()[-1].cursor.chunk_id
    lane = rec.meta.lane_id
    state = {"inflight": {str(lane): {str(cid): {}}}}  # as a codec round trip gives them: str keys
    w = World(WorldConfig(canonical_replicas=2, ranks=1, steps=1), build, SeededChoices(0), keep_items=True)
    w._excuse = _replayed_offsets([[rec]], (), state)
    assert w._excuse == {(lane, *closing(rec)[0])}
    observe = w._tombstone_observer(w.incarnation)
    replayed = tombstones_for_record(rec)
    observe(replayed[0])
    assert w.tombstones == [] and not w._excuse  # the replay filter's re-closing: not a second closer
    observe(replayed[0])
    assert w.tombstones == [replayed[0]]  # the same offset closed again: kept, and the check flags it
    others = [r for r in recs if r is not rec]
    report = check_lineage(admitted, [*others, rec], [*tombs, *w.tombstones])
    assert closing(rec)[0] in report.lanes[lane].duplicated
    # a chunk the cut no longer holds inflight is not replayed: nothing is excused for it
    assert _replayed_offsets([[rec]], (), {"inflight": {str(lane): {}}}) == set()

"""The lineage checker (sim.checker, re-exported as properties.invariants.no_skip_no_duplicate).

It passes on real zephon_ref runs (packing with oversized drops, wrap, shuffle,
ensure_mixture, batch, drops by map_transform; inline and threads runners) and fails,
naming the offset, on hand-built bad streams: a skipped offset, a duplicated record,
a record of another lane, an offset never admitted, a tombstone for a delivered offset.
Tombstones are consumed by the engine, never delivered: the tests record them by
wrapping ``Engine._complete`` (the tail step that sets a tombstone's completion bits).
"""

from __future__ import annotations

import dataclasses
import warnings
import zlib
from typing import Any

import pytest

from properties.invariants import admitted_from_source, no_skip_no_duplicate, records_of
from properties.pipelines import PipelineConfig, build_pipeline
from zephon_ref.engine.core import Engine
from zephon_ref.lineage import tombstones_for_record
from zephon_ref.types import SampleRecord

LAYOUT = {"web": (40, 25), "code": (20, 12), "books": (10,)}


def drop_every_fifth(row: dict[str, Any]) -> dict[str, Any] | None:
    """Drops a fifth of the rows (by crc of their tokens): each drop becomes a tombstone."""
    return None if zlib.crc32(repr(row["input_ids"]).encode()) % 5 == 0 else row


def run(cfg: PipelineConfig, monkeypatch: pytest.MonkeyPatch) -> tuple[dict[int, dict[int, range]], list[Any],
                                                                       list[SampleRecord]]:
    """(admitted offsets per lane, delivered items, tombstones) of one full run of ``cfg``."""
    tombs: list[SampleRecord] = []
    real = Engine._complete

    def record(self: Engine, t: SampleRecord) -> None:
        tombs.append(t)
        real(self, t)

    monkeypatch.setattr(Engine, "_complete", record)
    p = build_pipeline("zephon_ref", cfg)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        items = list(p)
    c = cfg.options["canonical_replicas"]
    return admitted_from_source(p._source, range(c), c), items, tombs


CHAINS = {
    "pack_oversized_shuffle_mix_batch": [
        ("pack_sequences", {"max_length": 96, "num_bins": 3}),
        ("shuffle", {"buffer_size": 8, "seed": 1}),
        ("ensure_mixture", {}),
        ("batch", {"microbatch_size": 3, "drop_last": False}),
    ],
    "best_fit_then_block_shuffle": [
        ("pack_sequences", {"max_length": 160, "num_bins": 4, "algorithm": "best_fit"}),
        ("shuffle", {"buffer_size": 5, "seed": 4, "algorithm": "block"}),
    ],
    "wrap": [
        ("pack_sequences", {"max_length": 64, "algorithm": "wrap"}),
        ("batch", {"microbatch_size": 2, "drop_last": False}),
    ],
    "drops_then_pack": [
        ("map_transform", {"transform_fn": drop_every_fifth}),
        ("pack_sequences", {"max_length": 128, "num_bins": 2}),
    ],
    "drops_monotone": [("map_transform", {"transform_fn": drop_every_fifth})],
}


@pytest.mark.parametrize("runner", ["inline", "threads"])
@pytest.mark.parametrize("name", sorted(CHAINS))
def test_real_runs_close_every_offset_once(name: str, runner: str, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = PipelineConfig(CHAINS[name], layout=LAYOUT, source_kwargs={"chunk_size": 12, "seed": 3},
                         options={"runner": runner, "canonical_replicas": 3})
    admitted, items, tombs = run(cfg, monkeypatch)
    report = no_skip_no_duplicate(admitted, items, tombs)
    assert report.ok, report.describe()
    assert sorted(report.lanes) == [0, 1, 2]
    # every lane took part (the source reads about the whole corpus once: 107 rows, give or take its quotas)
    assert all(v.admitted > 20 for v in report.lanes.values()), report.lanes
    if name in ("pack_oversized_shuffle_mix_batch", "drops_then_pack", "drops_monotone"):
        assert tombs, "the configuration was chosen to produce tombstones"


def test_drop_last_loses_the_last_partial_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    # a real run where data is lost: batch(drop_last=True) discards each lane's partial tail
    b = 7  # lanes of 60 and 48 offsets: tails of 4 and 6
    cfg = PipelineConfig([("batch", {"microbatch_size": b})], layout=LAYOUT,
                         source_kwargs={"chunk_size": 12, "seed": 3},
                         options={"runner": "inline", "canonical_replicas": 2})
    admitted, items, tombs = run(cfg, monkeypatch)
    report = no_skip_no_duplicate(admitted, items, tombs)
    for lane, v in report.lanes.items():
        n = sum(len(r) for r in admitted[lane].values())
        assert len(v.lost) == n % b, (lane, v)
        last = (
            sorted((cid, off) for cid, offs in admitted[lane].items() for off in offs)[-(n % b) :]
            if n % b
            else []
        )
        assert list(v.lost) == last
        assert not v.duplicated and not v.unexpected
    assert any(v.lost for v in report.lanes.values())
    assert not report.ok and "lost" in report.describe()


@pytest.fixture
def good(monkeypatch: pytest.MonkeyPatch) -> tuple[dict[int, dict[int, range]], list[SampleRecord],
                                                   list[SampleRecord]]:
    cfg = PipelineConfig([("pack_sequences", {"max_length": 96, "num_bins": 3})], layout=LAYOUT,
                         source_kwargs={"chunk_size": 12, "seed": 3},
                         options={"runner": "inline", "canonical_replicas": 2})
    admitted, items, tombs = run(cfg, monkeypatch)
    recs = records_of(items)
    assert no_skip_no_duplicate(admitted, recs, tombs).ok
    return admitted, recs, tombs


def closed_by(rec: SampleRecord) -> list[tuple[int, int]]:
    return [ref.cursor.base_offset for ref in rec.meta.contribution_refs() if ref.is_last_child]


def test_a_skipped_record_is_lost(good: Any) -> None:
    admitted, recs, tombs = good
    victim = recs[5]
    report = no_skip_no_duplicate(admitted, recs[:5] + recs[6:], tombs)
    lane = victim.meta.lane_id
    assert not report.ok
    assert set(report.lanes[lane].lost) == set(closed_by(victim)) and report.lanes[lane].lost
    assert not report.lanes[lane].duplicated and not report.lanes[lane].unexpected
    assert all(v.ok for k, v in report.lanes.items() if k != lane)


def test_a_skipped_tombstone_is_lost(good: Any) -> None:
    admitted, recs, tombs = good
    assert tombs
    report = no_skip_no_duplicate(admitted, recs, tombs[1:])
    assert report.lanes[tombs[0].meta.lane_id].lost == tuple(closed_by(tombs[0]))


def test_a_duplicated_record_is_reported(good: Any) -> None:
    admitted, recs, tombs = good
    report = no_skip_no_duplicate(admitted, [*recs, recs[3]], tombs)
    lane = recs[3].meta.lane_id
    assert not report.ok and set(report.lanes[lane].duplicated) == set(closed_by(recs[3]))
    assert not report.lanes[lane].lost


def test_a_tombstone_for_a_delivered_offset_is_a_duplicate(good: Any) -> None:
    admitted, recs, tombs = good
    extra = tombstones_for_record(recs[0])
    report = no_skip_no_duplicate(admitted, recs, [*tombs, *extra])
    assert set(report.lanes[recs[0].meta.lane_id].duplicated) == set(closed_by(recs[0]))


def test_a_record_from_another_lane_is_unexpected(good: Any) -> None:
    admitted, recs, tombs = good
    only0 = {0: admitted[0]}
    lane0 = [r for r in recs if r.meta.lane_id == 0]
    lane1 = [r for r in recs if r.meta.lane_id == 1]
    tombs0 = [t for t in tombs if t.meta.lane_id == 0]
    assert no_skip_no_duplicate(only0, lane0, tombs0).ok
    report = no_skip_no_duplicate(only0, [*lane0, lane1[0]], tombs0)
    assert report.lanes[0].ok
    assert report.lanes[1].unexpected and report.lanes[1].unexpected[0][0] == "record"
    assert not report.ok and "unexpected" in report.describe()


def test_an_offset_never_admitted_is_unexpected(good: Any) -> None:
    admitted, recs, tombs = good
    r = recs[0]
    past_end = SampleRecord(dataclasses.replace(r.meta, chunk_id=10_000, tags={}), {"input_ids": [1]})
    report = no_skip_no_duplicate(admitted, [*recs, past_end], tombs)
    v = report.lanes[r.meta.lane_id]
    assert [u[2][:2] for u in v.unexpected] == [(10_000, r.meta.chunk_offset)]
    assert not v.lost and not v.duplicated


def test_the_graph_holds_the_lineage(good: Any) -> None:
    admitted, recs, tombs = good
    report = no_skip_no_duplicate(admitted, recs, tombs)
    g = report.graph
    n_offsets = sum(len(o) for chunks in admitted.values() for o in chunks.values())
    assert sum(1 for n in g if n[0] == "offset") == n_offsets
    assert sum(1 for n in g if n[0] == "record") == len(recs)
    closing = sum(1 for _, _, c in g.edges(data="closing") if c)
    assert closing == n_offsets  # exactly one closer each

"""The lineage row places a pack's later segments by their tokens (their start is not in the normal form).

best_fit_wrap may put any fragment of a record after another record's segment, and the fragment that
closes the offset is the one emitted last, not the last in tokens (measured: a record's last token
delivered first, then its first five tokens with the closing flag; zephon 0.2.0 emits the same).
"""

from __future__ import annotations

import warnings

from properties.lineage import _place_unknown, lineage_problems
from properties.normal_form import Record, item_view
from properties.pipelines import PipelineConfig, build_pipeline

CFG = PipelineConfig(
    chain=[("pack_sequences", {"max_length": 32, "candidate_pool_size": 1, "algorithm": "best_fit_wrap"})],
    layout={"web": (40, 40)}, weights={"web": 1.0}, source_kwargs={"chunk_size": 2, "seed": 0},
    options={"runner": "inline", "canonical_replicas": 1, "flush_every_k_chunks": 2})


def _items() -> list[list[Record]]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return [item_view(x) for x in build_pipeline("zephon_ref", CFG)]


def test_place_unknown_fits_fragments_and_refuses_changed_or_repeated_ones() -> None:
    want = (5, 6, 7, 8, 9)
    assert sorted(_place_unknown(want, [(None, (9,), 0), (None, (5, 6, 7, 8), 1)])) == [
        (0, (5, 6, 7, 8), 1), (4, (9,), 0)]
    assert (-1, (4,), 1) in _place_unknown(want, [(0, (5, 6, 7, 8, 9), 0), (None, (4,), 1)])  # changed
    assert (-1, (9,), 1) in _place_unknown(want, [(0, (5, 6, 7, 8, 9), 0), (None, (9,), 1)])  # repeated


def test_a_best_fit_wrap_stream_passes_and_a_changed_later_segment_fails() -> None:
    items = _items()
    assert lineage_problems(CFG, items) == []
    # plant: the later segment of sample (0, 1, 37) (its last token, delivered first) changes
    where = next((i, j, k) for i, it in enumerate(items) for j, r in enumerate(it)
                 for k, c in enumerate(r.contributors) if k > 0 and tuple(c.cursor.sample_id) == (0, 1, 37))
    i, j, k = where
    rec = items[i][j]
    payload = list(rec.payload)
    payload[k] = tuple(t + 1 for t in payload[k])
    bad = [list(it) for it in items]
    bad[i][j] = rec._replace(payload=tuple(payload))
    problems = lineage_problems(CFG, bad)
    assert any("sample (0, 1, 37)" in p and "is not the sample's tokens" in p for p in problems), problems
    # plant: the same segment delivered twice (in a copy of its item)
    twice = [list(it) for it in items] + [[rec]]
    assert any("(0, 1, 37)" in p for p in lineage_problems(CFG, twice)), lineage_problems(CFG, twice)

"""Conformance: zephon_ref restores zephon 0.2.0's checkpoints and continues exactly.

For seeded random pipelines (the pipeline-conformance generator plus source
knobs: block shuffle, within-shard shuffle, modulo lanes, exhaustion policies)
zephon checkpoints are taken at random cuts; each is restored into a fresh
zephon_ref pipeline of the same configuration, whose continuation must equal the
uninterrupted run's remainder.  Each is also restored into zephon itself; where
zephon's own resume differs, that is counted and reported, not failed on (see
docs/divergences.md, "zephon checkpoints").  ``ZEPHON_REF_ZEPHON_CKPT_CUTS``
raises the number of cuts (default 100).
"""

from __future__ import annotations

import copy
import itertools
import json
import os
import tempfile
import warnings
from typing import Any

import pytest

from properties.pipelines import MIXTURE_GROUPING_MINIMAL, PipelineConfig, build_pipeline, item_view
from properties.sources import zephon_available
from properties.zephon_checkpoints import restore_any

pytestmark = [
    pytest.mark.conformance,
    pytest.mark.skipif(
        not zephon_available(), reason="zephon 0.2.0 not installed (pip install .[conformance])"
    ),
]

CUTS = int(os.environ.get("ZEPHON_REF_ZEPHON_CKPT_CUTS", "100"))
LAYOUT = {"web": (40, 25), "code": (20, 12), "books": (10,)}
SHUFFLED = PipelineConfig(
    [("pack_sequences", {"max_length": 160, "num_bins": 2}), ("shuffle", {"buffer_size": 5, "seed": 1}),
     ("batch", {"microbatch_size": 2})],
    layout=LAYOUT, source_kwargs={"chunk_size": 8, "seed": 3},
    options={"runner": "inline", "canonical_replicas": 2, "flush_every_k_chunks": 2})
# zephon's own resume of this one goes wrong at cuts 8..11 (docs/divergences.md)
ZEPHON_RESUME_BUG = MIXTURE_GROUPING_MINIMAL


def _run(impl: str, cfg: PipelineConfig, state: Any = None, limit: int | None = None) -> list[Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p = build_pipeline(impl, cfg)
        if state is not None:
            restore_any(p, state)
        return [item_view(x) for x in itertools.islice(p, limit)]


def _zephon_state(cfg: PipelineConfig, cut: int) -> dict[str, Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p = build_pipeline("zephon", cfg)
        it = iter(p)
        for _ in range(cut):
            next(it)
        return copy.deepcopy(p.checkpoint())


def _jsonable(obj: Any) -> Any:
    """What a JSON round trip makes of zephon's dict: str keys, lists for tuples."""
    return json.loads(json.dumps(obj))


# -- the survey ------------------------------------------------------------------------------------
def test_zephon_checkpoints_at_random_cuts_restore_exactly() -> None:
    from properties.zephon_checkpoints import survey

    tally = survey(CUTS, seed=int(os.environ.get("ZEPHON_REF_ZEPHON_CKPT_SEED", "0")))
    print("\n" + tally.summary())
    for line in tally.zephon_failures[:5]:
        print("zephon resume wrong:", line)
    assert tally.cuts == CUTS
    assert not tally.ref_failures, "\n".join(tally.ref_failures[:5])
    assert tally.ref_exact == CUTS


def _zephon_lanes(cfg: PipelineConfig, dp: int) -> dict[int, list[Any]]:
    """zephon's per-lane streams over ``dp`` ranks (each rank's pipeline run to its end)."""
    out: dict[int, list[Any]] = {}
    with warnings.catch_warnings(), tempfile.TemporaryDirectory() as agg:
        warnings.simplefilter("ignore")
        for rank in range(dp):
            topo = (
                {}
                if dp == 1
                else {"world_size": dp, "global_rank": rank, "dp_degree": dp, "aggregate_dir": agg}
            )
            for x in build_pipeline("zephon", cfg, **topo):
                v = item_view(x)
                out.setdefault(v[0][0], []).append(v)
    return out


def test_a_zephon_resume_bug_is_judged_by_zephon_ref() -> None:
    """zephon's own resume differs from its uninterrupted run, and the same cause (a lane's
    records grouped into push_many calls by other lanes' sentinels) makes its lanes differ
    between 1 and 4 ranks.  zephon_ref's side (its lanes the same on every topology, its own
    resume exact at every cut) is tests/elastic/test_lane_aware_ops.py's ``*mixture_grouping*``."""
    full = _run("zephon", ZEPHON_RESUME_BUG)
    state = _zephon_state(ZEPHON_RESUME_BUG, 8)
    assert _run("zephon", ZEPHON_RESUME_BUG, copy.deepcopy(state)) != full[8:], (
        "zephon's resume is now exact: remove its row from docs/divergences.md ('zephon checkpoints')")
    alone, spread = _zephon_lanes(ZEPHON_RESUME_BUG, 1), _zephon_lanes(ZEPHON_RESUME_BUG, 4)
    assert sorted(lane for lane in alone if alone[lane] != spread.get(lane)) == [1, 2], (
        "zephon's lanes no longer depend on the rank count: update docs/divergences.md ('Engine')")


# -- translation ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("cut", [0, 3, 7, 12])
def test_a_json_round_tripped_zephon_state_restores_the_same(cut: int) -> None:
    full = _run("zephon_ref", SHUFFLED)
    state = _zephon_state(SHUFFLED, cut)
    assert _run("zephon_ref", SHUFFLED, _jsonable(state)) == full[cut:]


def test_translation_has_engine_state_dict_format_and_leaves_the_input_alone() -> None:
    from zephon_ref.compat import from_zephon_state, is_zephon_state

    state = _zephon_state(SHUFFLED, 5)
    before = copy.deepcopy(state)
    p = build_pipeline("zephon_ref", SHUFFLED)
    assert is_zephon_state(state) and not is_zephon_state(p.checkpoint())
    out = from_zephon_state(state, fingerprint=p.fingerprint(), canonical_replicas=2, work_source=p._source,
                            flush_every_k_chunks=2)
    assert state == before
    assert list(out) == list(p.checkpoint())  # the same fields, in the same order
    assert out["fingerprint"] == p.fingerprint() and out["work_source"] is None
    for lane, ws in out["lane_ws_state"].items():
        assert set(ws) == set(p.checkpoint()["lane_ws_state"][lane])
    assert all(isinstance(k, int) for k in out["inflight"])
    assert all(c is None or isinstance(c, tuple) for c in out["replay_cursors"].values())


def test_engine_v1_round_robin_keys_lose_their_rank_prefix() -> None:
    from zephon_ref.compat import from_zephon_state
    from zephon_ref.errors import StateMismatchError

    p = build_pipeline("zephon_ref", SHUFFLED)
    state = _zephon_state(SHUFFLED, 5)
    v1 = {**state, "version": 1, "rr_next_idx": {f"0:{k}": v for k, v in state["rr_next_idx"].items()}}
    out = from_zephon_state(v1, fingerprint="f", canonical_replicas=2, work_source=p._source)
    assert out["rr_next_idx"] == state["rr_next_idx"]
    (key, idx), = state["rr_next_idx"].items()
    clash = {**v1, "rr_next_idx": {f"0:{key}": idx, f"1:{key}": 1 - idx}}
    with pytest.raises(StateMismatchError):
        from_zephon_state(clash, fingerprint="f", canonical_replicas=2, work_source=p._source)


# -- refusals: typed, and nothing changes ---------------------------------------------------------------
def _mutations() -> dict[str, tuple[Any, Any]]:
    from zephon_ref.errors import StateFormatError, StateMismatchError

    def ws(s: dict[str, Any], **kw: Any) -> dict[str, Any]:
        s["lane_ws_state"][0].update(kw)
        return s

    def inflight_gap(s: dict[str, Any]) -> dict[str, Any]:
        lane = next(lane for lane, ch in s["inflight"].items() if len(ch) >= 2)
        del s["inflight"][lane][min(s["inflight"][lane]) + 1]
        return s

    def cursor_past_end(s: dict[str, Any]) -> dict[str, Any]:
        c = s["replay_cursors"][0]
        s["replay_cursors"][0] = (s["lane_next_cid"][0] + 3, *c[1:])
        return s

    def positions_disagree(s: dict[str, Any]) -> dict[str, Any]:
        s["lane_ws_state"][0]["cursor_positions"]["web"] += 1
        return s

    def chunk_total(s: dict[str, Any]) -> dict[str, Any]:
        lane = next(lane for lane, ch in s["inflight"].items() if ch)
        first = min(s["inflight"][lane])
        s["inflight"][lane][first]["total_samples"] += 1
        return s

    return {
        "other canonical_replicas": (
            lambda s: {**s, "world": {**s["world"], "canonical_replicas": 3}},
            StateMismatchError,
        ),
        "other source seed": (lambda s: ws(s, seed=4), StateMismatchError),
        "other chunk size": (lambda s: ws(s, chunk_size=9, chunk_size_hint=9), StateMismatchError),
        "token-aware source": (lambda s: ws(s, allocation_mode="token_aware"), StateFormatError),
        "boundaries off the K grid": (lambda s: {**s, "epoch_boundaries": {0: [3]}}, StateMismatchError),
        "inflight with a gap": (inflight_gap, StateMismatchError),
        "replay cursor past lane_next_cid": (cursor_past_end, StateMismatchError),
        "cursor_positions disagree": (positions_disagree, StateMismatchError),
        "chunk total_samples wrong": (chunk_total, StateMismatchError),
        "a lane missing from progress": (
            lambda s: {**s, "progress": {1: s["progress"][1]}},
            StateMismatchError,
        ),
        "rr index out of range": (lambda s: {**s, "rr_next_idx": {"0/1:0,1": 2}}, StateMismatchError),
        "bad rr key": (lambda s: {**s, "rr_next_idx": {"lanes 0 and 1": 0}}, StateFormatError),
        "work_config set": (lambda s: {**s, "work_config": {"x": 1}}, StateFormatError),
        "unknown work-chunk version": (
            lambda s: {**s, "inflight": {0: {s["lane_next_cid"][0] - 1: {"version": 9}}}},
            StateFormatError,
        ),
    }


@pytest.mark.parametrize("name", sorted(_mutations()))
def test_an_inconsistent_or_foreign_zephon_state_is_refused_and_changes_nothing(name: str) -> None:
    mutate, error = _mutations()[name]
    full = _run("zephon_ref", SHUFFLED)
    good = _zephon_state(SHUFFLED, 7)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p = build_pipeline("zephon_ref", SHUFFLED)
        restore_any(p, copy.deepcopy(good))
        with pytest.raises(error) as info:
            restore_any(p, mutate(copy.deepcopy(good)))
        assert "expected" in str(info.value)
        assert [item_view(x) for x in p] == full[7:], "the earlier accepted restore must still be pending"


def test_a_zephon_state_of_another_k_is_refused() -> None:
    from zephon_ref.errors import StateMismatchError

    other_k = PipelineConfig(SHUFFLED.chain, layout=LAYOUT, source_kwargs=SHUFFLED.source_kwargs,
                             options={**SHUFFLED.options, "flush_every_k_chunks": 3})
    state = _zephon_state(other_k, 12)
    assert state["epoch_boundaries"], "the cut must have recorded a boundary"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(StateMismatchError, match="flush_every_k_chunks"):
            restore_any(build_pipeline("zephon_ref", SHUFFLED), state)


def test_a_zephon_block_shuffle_snapshot_past_the_first_fill_is_used() -> None:
    """A cursor past 65,536 samples carries a block-RNG snapshot with block_count > 0; the source
    continues."""
    from properties.sources import SourceConfig, build_source, chunk_view
    from zephon_ref.compat import from_zephon_state

    cfg = SourceConfig(
        {"web": (100000,)}, {"web": 1.0}, 1, {"chunk_size": 8192, "seed": 5, "shuffle_block_size": 16}
    )
    z, r = build_source("zephon", cfg), build_source("zephon_ref", cfg)
    zc = z.clone_for_lane(0, 1)
    for _ in range(9):  # 73,728 samples: into the second fill of 4,096 blocks
        zc.next_chunk()
    ws = zc.state_dict()
    assert ws["cursor_states"]["web"]["block_rng_snapshot"]["block_count"] > 0
    engine = {
        "version": 2,
        "world": {"canonical_replicas": 1},
        "progress": {0: {"chunk_id": -1, "offset": 0}},
        "lane_next_cid": {0: 0},
        "lane_ws_state": {0: ws},
        "inflight": {},
    }
    rc = r.clone_for_lane(0, 1)
    rc.load_state_dict(from_zephon_state(engine, fingerprint="f", canonical_replicas=1, work_source=r)
                       ["lane_ws_state"][0])

    def view(c: Any) -> Any:
        return None if c is None else chunk_view(c)

    assert [view(zc.next_chunk()) for _ in range(3)] == [view(rc.next_chunk()) for _ in range(3)]


def test_a_legacy_fixed_zephon_state_continues_like_zephon() -> None:
    """zephon reaches legacy_fixed quotas only from an old checkpoint, which its migration gives
    stop_after_passes=None; both implementations continue such a state the same way, to the end.

    (With stop_after_passes set, zephon_ref's legacy quotas stop at the pass and zephon's do not:
    the legacy_fixed row of docs/divergences.md, reliability issue defect 6.)
    """
    cfg = PipelineConfig(SHUFFLED.chain, layout=LAYOUT, weights={"web": 0.55, "code": 0.3, "books": 0.15},
                         source_kwargs={"chunk_size": 10, "seed": 3, "stop_after_passes": None,
                                        "exhausted_policy": "repeat", "max_repeats": 2},
                         options=SHUFFLED.options)
    state = _zephon_state(cfg, 3)
    for ws in state["lane_ws_state"].values():
        ws["allocation_mode"], ws["accumulators"] = "legacy_fixed", None
    ours = _run("zephon_ref", cfg, copy.deepcopy(state), limit=2_000)
    assert 0 < len(ours) < 2_000 and ours == _run("zephon", cfg, copy.deepcopy(state), limit=2_000)
    assert ours != _run("zephon_ref", cfg)[3:], (
        "legacy quotas must change the continuation, or this tests nothing"
    )


def test_pipeline_restore_takes_its_own_states_only_and_the_translation_is_explicit() -> None:
    from zephon_ref.compat import restore_zephon_state
    from zephon_ref.errors import ZephonRefError

    state = _zephon_state(SHUFFLED, 5)
    before = copy.deepcopy(state)
    p = build_pipeline("zephon_ref", SHUFFLED)
    with pytest.raises(ZephonRefError):
        p.restore(state)  # no sniffing: a zephon state is not a zephon_ref state
    assert state == before
    assert [item_view(x) for x in p] == _run("zephon_ref", SHUFFLED)  # the refusal changed nothing
    q = build_pipeline("zephon_ref", SHUFFLED)
    restore_zephon_state(q, state)
    assert [item_view(x) for x in q] == _run("zephon_ref", SHUFFLED)[5:]

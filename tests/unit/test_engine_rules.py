"""Unit tests of the engine's and the Pipeline's rules, refusals and contracts."""

from __future__ import annotations

import warnings

import pytest

from properties.pipelines import PipelineConfig, build_pipeline, item_view
from zephon_ref.codec import encode
from zephon_ref.engine.world import World, active_workers, lanes_for_group, worker_lanes
from zephon_ref.errors import ConfigError, ContractError, StateFormatError, StateMismatchError
from zephon_ref.ops.base import Accumulator, BaseOp, OpTraits
from zephon_ref.pipeline import Pipeline
from zephon_ref.synthetic import synthetic_corpus
from zephon_ref.work import StaticMixtureWorkSource

LAYOUT = {"web": (14, 9), "code": (8,), "books": (5,)}


def cfg(chain, **opts):
    return PipelineConfig(chain, layout=LAYOUT, source_kwargs={"chunk_size": 6, "seed": 3},
                          options={"runner": "inline", "canonical_replicas": 2, **opts})


SHUFFLE = [("shuffle", {"buffer_size": 5, "seed": 1}), ("batch", {"microbatch_size": 2})]


def source():
    c = synthetic_corpus(seed=0, layout=LAYOUT)
    return StaticMixtureWorkSource(list(c.datasets), {"web": 3, "code": 2, "books": 1}, chunk_size=6, seed=3)


# -- flush_every_k_chunks -----------------------------------------------------------------------

def test_k_defaults_to_8_for_reordering_plans_and_0_for_monotone_ones():
    assert build_pipeline("zephon_ref", cfg(SHUFFLE))._resolve_k() == 8
    assert build_pipeline("zephon_ref", cfg([("batch", {"microbatch_size": 2})]))._resolve_k() == 0


def test_positive_k_on_monotone_plan_warns_once_and_becomes_0():
    p = build_pipeline("zephon_ref", cfg([], flush_every_k_chunks=3))
    with pytest.warns(UserWarning, match="no effect on a monotone plan"):
        items = list(p)
    assert items and not any(p.checkpoint()["epoch_boundaries"].values())


@pytest.mark.parametrize(
    "k,err", [(0, "reordering"), (-1, "flush_every_k_chunks"), (1.5, "flush_every_k_chunks")]
)
def test_invalid_k_is_refused(k, err):
    with pytest.raises(ConfigError, match=err):
        p = build_pipeline("zephon_ref", cfg(SHUFFLE))
        p.options(flush_every_k_chunks=k)
        iter(p)


# -- contracts ----------------------------------------------------------------------------------

class _Hoarder(Accumulator):
    """Keeps every record forever: its flush(reset=True) leaves data pending."""

    def __init__(self):
        self.kept = {}

    def push_many(self, elems):
        for e in elems:
            self.kept.setdefault(e.meta.lane_id, []).append(e)
        return []

    def flush(self, *, reset=False, lane_id=None):
        return []

    def has_pending_data(self, lane_id=None):
        return bool(self.kept) if lane_id is None else lane_id in self.kept


class HoardOp(BaseOp):
    def traits(self):
        return OpTraits(preserves_cursor_order=False)

    def accumulator(self, *, deterministic, ctx):
        return _Hoarder()

    def process_many(self, elems):
        return elems


class ReverseOp(BaseOp):
    """Reverses each micro-batch but claims to preserve cursor order."""

    def traits(self):
        return OpTraits(preserves_cursor_order=True)

    def process_many(self, elems):
        return list(reversed(elems))


def test_flush_leaving_pending_data_names_operator_and_lane():
    p = Pipeline(source()).add_op(HoardOp(), name="hoarder").options(runner="inline", canonical_replicas=2,
                                                                      flush_every_k_chunks=1)
    with pytest.raises(ContractError, match=r"'hoarder'.*lane_id=\d"):
        list(p)


def test_reordering_op_that_claims_cursor_order_is_caught():
    p = Pipeline(source()).add_op(ReverseOp(), name="liar").options(runner="inline", canonical_replicas=1)
    with pytest.raises(ContractError, match="preserves_cursor_order"):
        list(p)


def test_second_concurrent_iteration_is_refused():
    p = build_pipeline("zephon_ref", cfg(SHUFFLE))
    it = iter(p)
    next(it)
    with pytest.raises(ContractError, match="one iteration at a time"):
        iter(p)
    with pytest.raises(ContractError, match="mid-iteration"):
        p.restore(p.checkpoint())


def test_builder_refuses_bad_knobs_at_the_call():
    p = Pipeline(source())
    with pytest.raises(ConfigError):
        p.batch(0)
    with pytest.raises(ConfigError):
        p.shuffle(0)
    with pytest.raises(ConfigError):
        p.pack_sequences(0, num_bins=2)
    p.batch(2)
    with pytest.raises(ConfigError, match="before batch"):
        p.shuffle(4)
    with pytest.raises(ConfigError, match="runner"):
        p.options(runner="ray")  # "process" is accepted since issue 30 (docs/options.md); "ray" is no runner
    with pytest.raises(ConfigError, match="canonical_replicas"):
        p.options(world_size=2, canonical_replicas=1)


# -- checkpoints and refusals -------------------------------------------------------------------------

def _state_after(p, n):
    it = iter(p)
    for _ in range(n):
        next(it)
    return p.checkpoint(), it


def test_inline_checkpoint_after_n_items_is_the_same_bytes_in_every_run():
    a, _ = _state_after(build_pipeline("zephon_ref", cfg(SHUFFLE)), 7)
    b, _ = _state_after(build_pipeline("zephon_ref", cfg(SHUFFLE)), 7)
    assert encode(a) == encode(b)
    c, _ = _state_after(build_pipeline("zephon_ref", cfg(SHUFFLE)), 8)
    assert encode(a) != encode(c)


def test_refused_restores_change_nothing_and_the_pipeline_keeps_working():
    good_cfg = cfg(SHUFFLE)
    full = [item_view(x) for x in build_pipeline("zephon_ref", good_cfg)]
    donor, _ = _state_after(build_pipeline("zephon_ref", good_cfg), 5)
    foreign, _ = _state_after(build_pipeline("zephon_ref", cfg([("shuffle", {"buffer_size": 6, "seed": 1}),
                                                                ("batch", {"microbatch_size": 2})])), 5)
    other_c, _ = _state_after(build_pipeline("zephon_ref", cfg(SHUFFLE, canonical_replicas=3)), 5)
    p = build_pipeline("zephon_ref", good_cfg)
    p.restore(donor)
    before = encode(p.checkpoint())
    broken_lane = {**donor, "lane_ws_state": {0: donor["lane_ws_state"][0]}}
    bad_chunk = {**donor, "inflight": {**donor["inflight"], 0: {0: {"version": 3, "components": "x"}}}}
    for bad, err in (
        (foreign, StateMismatchError),
        (other_c, StateMismatchError),
        ({"schema": "x"}, StateFormatError),
        ([1, 2], StateFormatError),
        (broken_lane, StateMismatchError),
        (bad_chunk, StateFormatError),
        ({**donor, "progress": None}, StateFormatError),
    ):
        with pytest.raises(err):
            p.restore(bad)
        assert encode(p.checkpoint()) == before
    assert [item_view(x) for x in p] == full[5:]


def test_checkpoint_mirrors_zephon_fields_and_round_trips():
    state, _ = _state_after(build_pipeline("zephon_ref", cfg(SHUFFLE)), 3)
    for key in ("version", "world", "inflight", "progress", "lane_next_cid", "lane_ws_state", "work_source",
                "work_config", "last_round_id", "checkpoint_reload_count", "rr_next_idx", "replay_cursors",
                "epoch_boundaries", "lane_emitted", "fingerprint"):
        assert key in state
    assert state["world"]["mapping"] == {0: [0, 1]}
    assert sorted(state["lane_emitted"].values()) == [1, 2]
    for lane, chunks in state["inflight"].items():
        assert state["lane_next_cid"][lane] == max(chunks) + 1 if chunks else True


def test_drops_emit_tombstones_so_chunks_still_evict():
    def drop_odd(row):
        return None if len(row["text"]) % 2 else {"input_ids": [1, 2, 3]}

    p = (Pipeline(source()).map_transform(drop_odd).shuffle(3, seed=1)
         .options(runner="inline", canonical_replicas=1, flush_every_k_chunks=1))
    peak = 0
    for _ in p:
        peak = max(peak, len(p.checkpoint()["inflight"][0]))
    assert peak <= 3, f"chunks with dropped records must still be evicted (peak inflight {peak})"


def test_explain_layout():
    text = build_pipeline("zephon_ref", cfg(SHUFFLE)).explain()
    lines = text.splitlines()
    assert lines[0].startswith("Stage[0] place=local break='start' ops=['fetch@p4', 'map_transform@p4'")
    assert "batch_replay_filter@p1" in lines[1] and "Execution Graph:" in text
    assert "contributor-aware" in text and "==[final_prefetch=8]==> pipeline_end" in text


# -- world -------------------------------------------------------------------------------------------

def test_lane_mapping_and_worker_split():
    assert [lanes_for_group(8, 3, g) for g in range(3)] == [[0, 1, 2], [3, 4, 5], [6, 7]]
    assert [lanes_for_group(8, 3, g, "interleaved") for g in range(3)] == [[0, 3, 6], [1, 4, 7], [2, 5]]
    assert active_workers(6, 4) == 3 and active_workers(5, 4) == 1 and active_workers(2, 8) == 2
    assert worker_lanes([0, 1, 2, 3, 4, 5], 1, 4) == [1, 4] and worker_lanes([0, 1, 2], 3, 4) == []
    with pytest.raises(ConfigError, match="dp_degree"):
        World.resolve(world_size=4, dp_degree=3)
    with pytest.raises(ConfigError, match="global_rank"):
        World.resolve(world_size=2, global_rank=2)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        World.resolve(world_size=2, canonical_replicas=3)
    assert any("not divisible" in str(x.message) for x in w)

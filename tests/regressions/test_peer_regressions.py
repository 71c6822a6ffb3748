"""Regression cases mined from peer loaders' resume bugs (shared/reference/peer-loaders.md
section 11).  Each test names the peer issue it guards against."""

from __future__ import annotations

import pytest

from properties.pipelines import PipelineConfig, build_pipeline, item_view
from zephon_ref.checkpoint import store
from zephon_ref.codec import decode, encode
from zephon_ref.errors import ConfigError, ContractError, StateMismatchError
from zephon_ref.work import Dataset, InMemoryShard, StaticMixtureWorkSource

LAYOUT = {"web": (14, 9), "code": (8,), "books": (5,)}
SHUFFLE = [("shuffle", {"buffer_size": 5, "seed": 1}), ("batch", {"microbatch_size": 2})]


def cfg(chain=SHUFFLE, **src):
    return PipelineConfig(chain, layout=LAYOUT, source_kwargs={"chunk_size": 4, "seed": 3, **src},
                          options={"runner": "inline", "canonical_replicas": 2, "flush_every_k_chunks": 2})


def views(p):
    return [item_view(x) for x in p]


def test_grain_1178_end_of_stream_flag_survives_the_checkpoint():
    p = build_pipeline("zephon_ref", cfg())
    assert views(p)
    end = p.checkpoint()
    q = build_pipeline("zephon_ref", cfg())
    q.restore(decode(encode(end)))
    assert views(q) == [], "a finished stream must stay finished after restore"


def test_torchdata_1251_save_right_after_restore_before_any_lane_produced():
    full = views(build_pipeline("zephon_ref", cfg()))
    p = build_pipeline("zephon_ref", cfg())
    it = iter(p)
    for _ in range(4):
        next(it)
    state = p.checkpoint()
    q = build_pipeline("zephon_ref", cfg())
    q.restore(state)
    iter(q)  # the engine is built from the state, nothing produced yet
    again = q.checkpoint()
    assert again["checkpoint_reload_count"] == state["checkpoint_reload_count"] + 1
    r = build_pipeline("zephon_ref", cfg())
    r.restore(again)
    assert views(r) == full[4:]


def test_torchdata_1437_checkpoint_exactly_at_a_dataset_epoch_end():
    c = cfg(exhausted_policy="repeat", max_repeats=2)
    p = build_pipeline("zephon_ref", c)
    full, states = [], [p.checkpoint()]
    for x in p:
        full.append(item_view(x))
        states.append(p.checkpoint())
    epochs = [s["lane_ws_state"][0]["cursor_states"]["books"]["epoch"] for s in states]
    edges = [i for i in range(1, len(epochs)) if epochs[i] != epochs[i - 1]]
    assert edges, "the run must cross a dataset epoch"
    for i in edges:
        q = build_pipeline("zephon_ref", c)
        q.restore(states[i])
        assert views(q) == full[i:]


def test_primerl_3332_iterator_created_before_state_is_loaded_is_refused():
    p = build_pipeline("zephon_ref", cfg())
    state = p.checkpoint()
    it = iter(p)
    next(it)
    with pytest.raises(ContractError, match="mid-iteration"):
        p.restore(state)


def test_primerl_2944_no_packed_token_is_lost():
    chain = [("pack_sequences", {"max_length": 160, "num_bins": 2}), ("batch", {"microbatch_size": 1})]
    tokens_in = sum(len(x.payload["input_ids"]) for x in build_pipeline("zephon_ref", cfg([])))
    packed = [x for b in build_pipeline("zephon_ref", cfg(chain)) for x in b.records]
    tokens_out = sum(len(s["input_ids"]) for r in packed for s in r.payload["packed_samples"])
    dropped = sum(len(x.payload["input_ids"]) for x in build_pipeline("zephon_ref", cfg([]))
                  if len(x.payload["input_ids"]) > 160)
    # batch(1, drop_last) keeps every pack; oversized records are the only loss
    assert tokens_out == tokens_in - dropped
    assert all(r.meta.tags["_packing_metadata"]["total_length"] <= 160 for r in packed)


def test_megatron_5637_stale_or_partial_checkpoints_are_not_silently_used(tmp_path):
    p = build_pipeline("zephon_ref", cfg())
    it = iter(p)
    next(it)
    p.save_checkpoint(tmp_path)
    partial = dict(p.checkpoint())
    partial["inflight"] = {0: partial["inflight"][0]}  # a merged state missing lane 1
    with pytest.raises(StateMismatchError, match="lane 1"):
        build_pipeline("zephon_ref", cfg()).restore(partial)
    (tmp_path / "g000000000002.universal.deadbeef.shard.tmp").write_bytes(b"torn")  # a torn later save
    assert store.latest_complete_generation(tmp_path) == 1
    assert build_pipeline("zephon_ref", cfg()).load_checkpoint(tmp_path) == 1


def test_torchdata_1520_items_buffered_ahead_are_not_lost_on_resume():
    full = views(build_pipeline("zephon_ref", cfg()))
    p = build_pipeline("zephon_ref", cfg(), runner="threads", max_workers=2, op_queue_capacity=16)
    it = iter(p)
    head = [item_view(next(it)) for _ in range(3)]
    state = p.checkpoint()  # the threads ran ahead: chunks admitted, items buffered
    q = build_pipeline("zephon_ref", cfg())
    q.restore(state)
    assert head + views(q) == full


def test_energon_266_the_same_source_twice_is_refused():
    d = Dataset.from_dict("web", {0: InMemoryShard([{"text": "a"}] * 5)})
    with pytest.raises(ConfigError, match="unique"):
        StaticMixtureWorkSource([d, d], {"web": 1}, chunk_size=2)


def test_tensorflow_48178_reshuffle_rng_of_the_next_epoch_is_captured():
    c = cfg([("batch", {"microbatch_size": 2})], exhausted_policy="repeat", max_repeats=3,
            shuffle_within_shard=True, shuffle_block_size=3)
    p = build_pipeline("zephon_ref", c)
    full, states = [], [p.checkpoint()]
    for x in p:
        full.append(item_view(x))
        states.append(p.checkpoint())
    second = [i for i, s in enumerate(states) if s["lane_ws_state"][0]["cursor_states"]["web"]["epoch"] >= 1]
    assert second, "the run must reach a reshuffled epoch"
    for i in second[:: max(1, len(second) // 5)]:
        q = build_pipeline("zephon_ref", c)
        q.restore(decode(encode(states[i])))
        assert views(q) == full[i:]

"""Unit tests of the source layer's rules and refusals."""

from __future__ import annotations

import random
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from properties.sources import read_chunks
from zephon_ref import io
from zephon_ref.errors import (
    ConfigError,
    ContractError,
    StateFormatError,
    StateMismatchError,
    ZephonRefError,
)
from zephon_ref.io import write_jsonl
from zephon_ref.synthetic import synthetic_corpus
from zephon_ref.work import (
    Dataset,
    InMemoryShard,
    MixtureSpec,
    StaticMixtureWorkSource,
    WorkChunk,
)
from zephon_ref.work import cursor as cursor_mod
from zephon_ref.work.cursor import GOLDEN, DatasetCursor
from zephon_ref.work.mixture import swrr_order


def ds(name, *sizes):
    return Dataset.from_dict(
        name, {i: InMemoryShard([{"i": j} for j in range(n)]) for i, n in enumerate(sizes)}
    )


def two():
    return [ds("a", 10, 7, 3), ds("b", 5, 9)]


# -- the dataset order, against a materialised oracle written from the prose -----------------

def naive_order(sizes, seed, *, shards, within, block, epoch=0, reshuffle=True):
    s = seed + epoch * GOLDEN if (reshuffle and epoch > 0) else seed
    idx = list(range(len(sizes)))
    if shards and len(sizes) > 1:
        random.Random(s).shuffle(idx)
    seq = []
    for pos, sid in enumerate(idx):
        offs = np.arange(sizes[sid])
        if within and sizes[sid] > 1:
            np.random.default_rng((s << 32) ^ ((pos << 16) + sid)).shuffle(offs)
        seq += [(7, sid, int(o)) for o in offs]
    if block and len(seq) > 1:
        rng = np.random.default_rng(s ^ GOLDEN)
        out = []
        for k in range(0, len(seq), block):
            part = seq[k:k + block]
            perm = np.arange(len(part))
            rng.shuffle(perm)
            out += [part[i] for i in perm]
        seq = out
    return seq


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.integers(0, 30), min_size=1, max_size=5),
    st.integers(0, 2**40),
    st.booleans(),
    st.booleans(),
    st.one_of(st.none(), st.integers(1, 40)),
    st.lists(st.integers(1, 17), min_size=1, max_size=12),
    st.integers(0, 2),
    st.booleans(),
)
def test_cursor_matches_materialised_order_in_any_read_sizes(
    sizes, seed, shards, within, block, reads, epoch, resh
):
    total = sum(sizes)
    block = None if block is None else min(block, total) or None
    cur = DatasetCursor(7, np.array(range(len(sizes))), np.array(sizes), seed=seed, shuffle_shards=shards,
                        shuffle_within_shard=within, block_size=block)
    cur.seek(epoch, 0, reshuffle=resh)
    got = []
    for r in reads * 4:
        got += [tuple(x) for x in cur.next_many(r)]
    want = naive_order(sizes, seed, shards=shards, within=within, block=block, epoch=epoch, reshuffle=resh)
    assert got == want[:len(got)]
    assert len(got) == min(total, sum(reads) * 4)


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.integers(1, 40), min_size=1, max_size=4), st.integers(0, 999), st.integers(1, 9), st.data()
)
def test_cursor_seek_from_state_continues_identically(sizes, seed, block, data):
    mk = lambda: DatasetCursor(0, np.arange(len(sizes)), np.array(sizes), seed=seed, shuffle_shards=True,  # noqa: E731
                               shuffle_within_shard=True, block_size=min(block, sum(sizes)))
    a = mk()
    a.next_many(data.draw(st.integers(0, sum(sizes))))
    st_ = a.state()
    b = mk()
    b.seek(st_["epoch"], st_["position"], reshuffle=True, block_rng_snapshot=st_.get("block_rng_snapshot"))
    assert b.next_many(sum(sizes)) == a.next_many(sum(sizes))


def test_seek_replays_at_most_one_fill_of_blocks(monkeypatch):
    """Restore cost is bounded by the fill size, not by how far the cursor went."""
    sizes = np.array([300_000])
    cur = DatasetCursor(
        0, np.arange(1), sizes, seed=1, shuffle_shards=False, shuffle_within_shard=False, block_size=10
    )
    cur.next_many(250_003)
    snap = cur.state()
    calls = []
    real = cursor_mod.DatasetOrder.block_len
    monkeypatch.setattr(
        cursor_mod.DatasetOrder, "block_len", lambda self, k: calls.append(k) or real(self, k)
    )
    fresh = DatasetCursor(0, np.arange(1), sizes, seed=1, shuffle_shards=False, shuffle_within_shard=False,
                          block_size=10)
    fresh.seek(0, snap["position"], reshuffle=True, block_rng_snapshot=snap["block_rng_snapshot"])
    assert len(calls) <= cursor_mod.BLOCK_FILL_TARGET // 10
    assert fresh.next_many(1000) == cur.next_many(1000)


# -- quotas ------------------------------------------------------------------------------------

def chunks(src, lane=0, canon=1, n=10_000):
    return read_chunks(src.clone_for_lane(lane, canon), n)


def test_quotas_sum_to_chunk_size_and_zero_quota_components_are_left_out():
    src = StaticMixtureWorkSource([ds("a", 1000), ds("b", 1000)], {"a": 0.95, "b": 0.05}, chunk_size=10,
                                  exhausted_policy="repeat", max_repeats=0)
    out = chunks(src, n=30)
    assert all(len(c) == 10 for c in out)
    assert any("b" not in c.components for c in out)  # 0.5 samples a chunk: often none
    assert sum(len(c.components.get("b", [])) for c in out) == 15  # 30 chunks x 0.5


def test_default_stops_after_one_pass_of_the_slowest_dataset():
    src = StaticMixtureWorkSource([ds("a", 20), ds("b", 5)], {"a": 0.5, "b": 0.5}, chunk_size=2)
    out = chunks(src)
    seen_b = [s for c in out for s in c.components.get("b", [])]
    assert len(set(seen_b)) == 5 and len(seen_b) >= 5
    seen_a = [s for c in out for s in c.components.get("a", [])]
    assert len(seen_a) == len(set(seen_a))  # 'a' never needed a second pass


def test_stop_policy_ends_without_short_chunk_and_refusal_is_repeatable():
    src = StaticMixtureWorkSource([ds("a", 7)], {"a": 1}, chunk_size=3, exhausted_policy="stop")
    lane = src.clone_for_lane(0, 1)
    assert [len(lane.next_chunk()) for _ in range(2)] == [3, 3]
    assert lane.next_chunk() is None and lane.next_chunk() is None
    assert lane.state_dict()["global_chunk_index"] == 2


def test_redistribute_clamps_then_renormalises_and_marks_exhaustion_cumulatively():
    src = StaticMixtureWorkSource([ds("a", 100), ds("b", 3)], {"a": 0.5, "b": 0.5}, chunk_size=4,
                                  exhausted_policy={"a": "stop", "b": "redistribute"})
    out = chunks(src)
    assert out[0].target_mixture == {"a": 0.5, "b": 0.5}
    assert out[1].components["b"] and len(out[1]) == 3  # short chunk keeps the old target
    assert out[1].source_exhausted == ("b",)
    for prev, nxt in zip(out[1:], out[2:], strict=False):  # cumulative: never loses a name
        assert set(prev.source_exhausted) <= set(nxt.source_exhausted)
    assert out[-1].source_exhausted == ("a", "b")  # 'a' (stop) ran dry exactly at the end
    assert out[2].target_mixture == {"a": 1.0}
    assert src.continues_after_exhaustion() == frozenset({"b"})


def test_repeat_with_cap_runs_exactly_cap_plus_one_epochs():
    src = StaticMixtureWorkSource([ds("a", 6)], {"a": 1}, chunk_size=3, exhausted_policy="repeat",
                                  max_repeats=2, reshuffle_on_repeat=False)
    out = chunks(src)
    assert len(out) == 6 and [tuple(s) for s in out[0].components["a"]] == [
        tuple(s) for s in out[2].components["a"]
    ]
    assert out[-1].source_exhausted == ("a",)


def test_reshuffle_on_repeat_changes_the_next_epoch_order():
    src = StaticMixtureWorkSource([ds("a", 50)], {"a": 1}, chunk_size=50, seed=3, shuffle_within_shard=True,
                                  stop_after_passes=2)
    e0, e1 = chunks(src)
    assert sorted(e0.components["a"]) == sorted(e1.components["a"]) and e0.components != e1.components


def test_swrr_offsets_interleave_by_share_and_ties_go_first():
    order = [c for _, c in swrr_order({"x": [1, 2, 3, 4], "y": [5, 6]})]
    assert order == ["x", "y", "x", "x", "y", "x"]
    assert list(swrr_order({"x": [], "y": [1]})) == [(1, "y")]


# -- lanes ------------------------------------------------------------------------------------

@pytest.mark.parametrize("assignment", ["permute", "modulo"])
def test_each_block_of_c_chunks_gives_every_lane_one(assignment):
    src = StaticMixtureWorkSource(two(), {"a": 1, "b": 1}, chunk_size=1, lane_assignment=assignment,
                                  stop_after_passes=3)
    lane = src.clone_for_lane(0, 5)
    owners = [lane.lane_for_chunk(g) for g in range(50)]
    for k in range(0, 50, 5):
        assert sorted(owners[k:k + 5]) == [0, 1, 2, 3, 4]
    if assignment == "modulo":
        assert owners[:5] == [0, 1, 2, 3, 4]


def test_clone_rules():
    src = StaticMixtureWorkSource(two(), {"a": 1, "b": 1}, chunk_size=2)
    lane = src.clone_for_lane(1, 2)
    with pytest.raises(ContractError, match="lane clone"):
        lane.clone_for_lane(0, 2)
    with pytest.raises(ContractError, match="clone_for_lane"):
        src.next_chunk()
    with pytest.raises(ConfigError, match="lane_id"):
        src.clone_for_lane(2, 2)
    assert lane.next_chunk() is not None and src.clone_for_lane(1, 2).next_chunk() == chunks(src, 1, 2, 1)[0]


# -- refusals at construction (section 4.3) ---------------------------------------------------

@pytest.mark.parametrize("kwargs,match", [
    ({"chunk_size": 0}, "chunk_size"),
    ({"chunk_size": True}, "chunk_size"),
    ({"seed": -1}, "seed"),
    ({"lane_assignment": "random"}, "lane_assignment"),
    ({"shuffle_block_size": 0}, "shuffle_block_size"),
    ({"shuffle_block_size": "huge"}, "shuffle_block_size"),
    ({"stop_after_passes": 0}, "stop_after_passes"),
    ({"stop_after_passes": 2, "exhausted_policy": "stop"}, "stop_after_passes"),
    ({"stop_after_passes": 2, "max_repeats": 1}, "max_repeats"),
    ({"exhausted_policy": "loop"}, "exhausted_policy"),
    ({"exhausted_policy": {"zz": "stop"}}, "exhausted_policy"),
    ({"max_repeats": -1, "exhausted_policy": "repeat"}, "max_repeats"),
    ({"token_estimation": object()}, "token_estimation"),
    ({"allocation_mode": "token_aware"}, "allocation_mode"),
])
def test_invalid_arguments_raise_typed_value_errors_naming_the_argument(kwargs, match):
    with pytest.raises(ConfigError, match=match) as info:
        StaticMixtureWorkSource(two(), {"a": 1, "b": 1}, **kwargs)
    assert isinstance(info.value, ValueError) and "expected" in str(info.value)


@pytest.mark.parametrize("datasets,mixture,kwargs,match", [
    ([], {"a": 1}, {}, "datasets"),
    ([ds("a", 3), ds("a", 4)], {"a": 1}, {}, "unique"),
    ([ds("a", 3)], {"a": 1, "b": 1}, {}, "unknown"),
    ([ds("a", 3), ds("b", 3)], {"a": 1}, {}, "missing"),
    ([ds("a", 3)], {"a": 0}, {}, "weight"),
    ([ds("a", 3)], {"a": -2}, {}, "weight"),
    ([ds("a", 0), ds("b", 3)], {"a": 1, "b": 1}, {"exhausted_policy": "stop"}, "'a'"),
    ([ds("a", 0)], {"a": 1}, {"exhausted_policy": "redistribute"}, "at least one sample"),
    ([ds("a", 0)], {"a": 1}, {"shuffle_block_size": "auto", "exhausted_policy": "redistribute"}, "auto"),
    ([ds("a", 3)], {"a": 1}, {"chunk_size": 5}, "dataset 'a' size"),  # liveness of the default repeat
    ([ds("a", 3)], {"a": 1}, {"chunk_size": 5, "exhausted_policy": "stop"}, "first chunk"),
    ([ds("a", 3), ds("b", 3)], {"a": 0.99, "b": 0.01}, {"chunk_size": 2, "allocation_mode": "legacy_fixed",
                                                         "exhausted_policy": "stop"}, "legacy_fixed"),
])
def test_invalid_source_configurations_are_refused_at_construction(datasets, mixture, kwargs, match):
    with pytest.raises(ConfigError, match=match):
        StaticMixtureWorkSource(datasets, mixture, **kwargs)


def test_no_effect_settings_warn():
    with pytest.warns(RuntimeWarning, match="no effect"):
        StaticMixtureWorkSource(two(), {"a": 1, "b": 1}, chunk_size=2, exhausted_policy="stop", max_repeats=2)


def test_mixture_spec_normalises_in_insertion_order():
    assert MixtureSpec({"b": 3, "a": 1}).normalized == {"b": 0.75, "a": 0.25}
    with pytest.raises(ZephonRefError):
        MixtureSpec({})


def test_unbounded_len_is_a_type_error():
    src = StaticMixtureWorkSource(two(), {"a": 1, "b": 1}, chunk_size=4, exhausted_policy="repeat")
    assert src.total_samples == float("inf")
    with pytest.raises(TypeError):
        len(src)


# -- state ------------------------------------------------------------------------------------

def test_state_from_another_lane_canonical_or_layout_is_refused_and_changes_nothing():
    mk = lambda dsets: StaticMixtureWorkSource(dsets, {"a": 1, "b": 1}, chunk_size=3, seed=2)  # noqa: E731
    src = mk(two())
    lane0 = src.clone_for_lane(0, 2)
    lane0.next_chunk()
    good = lane0.state_dict()
    victim = src.clone_for_lane(1, 2)
    victim.next_chunk()
    before = victim.state_dict()
    with pytest.raises(StateMismatchError, match="lane_id"):
        victim.load_state_dict(good)
    with pytest.raises(StateMismatchError, match="canonical_replicas"):
        src.clone_for_lane(0, 3).load_state_dict(good)
    other = mk([ds("a", 10, 7, 4), ds("b", 5, 9)]).clone_for_lane(0, 2)
    with pytest.raises(StateMismatchError, match="layout"):
        other.load_state_dict(good)
    broken = dict(good)
    del broken["cursor_states"]
    with pytest.raises(StateFormatError):
        src.clone_for_lane(0, 2).load_state_dict(broken)
    bad_pos = {**good, "cursor_states": {**good["cursor_states"], "a": {"epoch": 0, "position": 10**9}}}
    fresh = src.clone_for_lane(0, 2)
    with pytest.raises(StateFormatError, match="cursor"):
        fresh.load_state_dict(bad_pos)
    assert victim.state_dict() == before  # refusals changed nothing
    assert fresh.state_dict() == src.clone_for_lane(0, 2).state_dict()
    assert isinstance(StateMismatchError("x"), RuntimeError)


def test_explicit_policy_contradicting_checkpoint_is_refused():
    kw = {"chunk_size": 4, "exhausted_policy": "repeat"}
    a = StaticMixtureWorkSource(two(), {"a": 1, "b": 1}, max_repeats=1, **kw).clone_for_lane(0, 1)
    b = StaticMixtureWorkSource(two(), {"a": 1, "b": 1}, max_repeats=2, **kw).clone_for_lane(0, 1)
    with pytest.raises(StateMismatchError, match="max_repeats"):
        b.load_state_dict(a.state_dict())


def test_chunk_state_round_trip_and_refusal():
    c = chunks(StaticMixtureWorkSource(two(), {"a": 1, "b": 2}, chunk_size=5), n=1)[0]
    st_ = c.state_dict()
    back = WorkChunk.from_state(st_)
    assert back == c and list(back) == list(c)
    with pytest.raises(StateFormatError):
        WorkChunk.from_state({**st_, "total_samples": 99})
    with pytest.raises(StateFormatError):
        WorkChunk.from_state({**st_, "version": 1})
    with pytest.raises(ConfigError):
        WorkChunk({"a": []}, source_exhausted=("a", "a"))


def test_synthetic_corpus_is_deterministic_and_round_trips_through_jsonl(tmp_path):
    c1, c2 = synthetic_corpus(seed=5), synthetic_corpus(seed=5)
    d1, d2 = c1.datasets[0], c2.datasets[0]
    assert [d1.get(0, i) for i in range(5)] == [d2.get(0, i) for i in range(5)]
    assert synthetic_corpus(seed=6).datasets[0].get(0, 0) != d1.get(0, 0)
    lengths = [
        len(d1.get(s, i)["text"].split()) for s in d1.ids().tolist() for i in range(int(d1.counts()[s]))
    ]
    assert max(lengths) > 8 * np.median(lengths)  # heavy tail
    write_jsonl(c1.datasets, tmp_path)
    back = io.Dataset.from_path("web", tmp_path / "web")
    assert back.layout() == d1.layout() and back.get(1, 3) == d1.get(1, 3)
    with pytest.raises(ConfigError):
        io.Dataset.from_path("x", tmp_path / "nope")


def test_no_warning_noise_by_default():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        StaticMixtureWorkSource(two(), {"a": 1, "b": 1}, chunk_size=4)


def test_len_estimates_remaining_samples():
    stop = StaticMixtureWorkSource([ds("a", 7)], {"a": 1}, chunk_size=3, exhausted_policy="stop")
    assert len(stop) == 6 == sum(len(c) for c in chunks(stop))  # the 7th sample never fits a chunk
    red = StaticMixtureWorkSource([ds("a", 5), ds("b", 4)], {"a": 1, "b": 1}, chunk_size=2,
                                  exhausted_policy="redistribute")
    assert len(red) == 9 == sum(len(c) for c in chunks(red))  # all-redistribute is exact
    passes = StaticMixtureWorkSource([ds("a", 8), ds("b", 4)], {"a": 0.5, "b": 0.5}, chunk_size=2)
    assert len(passes) == 16 == sum(len(c) for c in chunks(passes))  # a needs 8 chunks for its pass

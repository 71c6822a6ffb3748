"""merge(): every refusal, DP-peer dedupe, determinism, coverage (notes 5.2)."""

from __future__ import annotations

import copy
import json
import warnings
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.cluster import contiguous_mapping, topology_states
from zephon_ref import codec
from zephon_ref.coordination.merge import LANE_FIELDS, merge, shard_world
from zephon_ref.errors import ContractError, StateFormatError, ZephonRefError
from zephon_ref.state import verify_integrity

pytestmark = pytest.mark.filterwarnings("ignore:checkpoint taken mid-window")


def states(seed: int = 0, **kw: Any) -> list[dict[str, Any]]:
    kw.setdefault("canonical_replicas", 8)
    kw.setdefault("world_size", 4)
    return [s for _, s in sorted(topology_states(seed, **kw).items())]


def test_merge_of_disjoint_ranks_covers_every_lane_once() -> None:
    shards = states(1)
    merged = merge(shards)
    assert merged["world"] == {"canonical_replicas": 8, "world_size": 4}
    for field in (
        "progress",
        "lane_next_cid",
        "lane_ws_state",
        "inflight",
        "replay_cursors",
        "lane_emitted",
    ):
        assert list(merged[field]) == list(range(8)), field
    for s in shards:
        for lane, p in s["progress"].items():
            assert merged["progress"][lane] == p
            assert merged["lane_ws_state"][lane] == s["lane_ws_state"][lane]
    assert merged["work_source"] is None
    assert list(merged) == sorted(merged)


def test_merge_is_order_independent_and_byte_deterministic() -> None:
    shards = states(2, world_size=4, dp_degree=2, workers=2)
    a = merge(shards)
    rev = merge(list(reversed(shards)))
    assert a == rev
    assert codec.encode(a) == codec.encode(rev)


def test_merge_does_not_mutate_or_alias_inputs() -> None:
    shards = states(3)
    before = copy.deepcopy(shards)
    merged = merge(shards)
    assert shards == before
    merged["lane_ws_state"][0]["seed"] = -1
    merged["inflight"][0][next(iter(merged["inflight"][0]), 0)] = None
    assert shards == before


def test_json_round_tripped_string_keys_are_accepted() -> None:
    shards = states(4)
    as_json = [json.loads(json.dumps(s, default=list)) for s in shards]
    merged = merge(as_json)
    assert list(merged["progress"]) == list(range(8))
    assert all(type(k) is int for k in merged["inflight"])


def test_dp_peers_are_deduped_lowest_rank_represents() -> None:
    shards = states(5, world_size=4, dp_degree=2)
    merged = merge(shards)
    reps = [s for s in shards if s["world"]["global_rank"] < 2]
    assert merged == merge(reps + [s for s in shards if s["world"]["global_rank"] >= 2])
    for s in reps:
        for lane, v in s["lane_ws_state"].items():
            assert merged["lane_ws_state"][lane] == v


def test_dp_peers_may_differ_on_non_synced_fields_and_representative_wins() -> None:
    shards = states(6, world_size=2, dp_degree=1)
    peer = next(s for s in shards if s["world"]["global_rank"] == 1)
    # a field DP peers need not agree on (a valid value: merge checks each shard by state.py's rules)
    peer["lane_ws_state"] = {lane: {"peer": 1} for lane in peer["lane_ws_state"]}
    merged = merge(shards)
    assert all(v != {"peer": 1} for v in merged["lane_ws_state"].values())


@pytest.mark.parametrize("field", ["progress", "replay_cursors"])
def test_dp_peer_divergence_names_lane_and_suggests_barrier(field: str) -> None:
    shards = states(7, world_size=4, dp_degree=2)
    peer = next(s for s in shards if s["world"]["global_rank"] == 3)
    lane = min(lane for lane, cur in peer["replay_cursors"].items() if cur is not None)
    cid, offset, *rest = peer["replay_cursors"][lane]
    # a diverged but well-formed value (merge checks each shard by state.py's rules first)
    peer[field][lane] = (
        {"chunk_id": 999, "offset": 1} if field == "progress" else (cid, offset + 1, *rest)
    )
    with pytest.raises(ContractError) as ei:
        merge(shards)
    msg = str(ei.value)
    assert f"lane {lane}" in msg and field in msg and "barrier" in msg
    assert isinstance(ei.value, RuntimeError)


def test_rr_entries_are_unioned_and_conflicts_refused() -> None:
    shards = states(8, world_size=2, dp_degree=1, workers=1)
    shards[1]["rr_next_idx"] = {"0/2:0,2": 1, "1/2:1,3": 0}
    merged = merge(shards)
    assert set(merged["rr_next_idx"]) == {
        "0/1:" + ",".join(map(str, range(8))),
        "0/2:0,2",
        "1/2:1,3",
    }
    shards[0]["rr_next_idx"]["0/2:0,2"] = 0
    with pytest.raises(ContractError, match="rr_next_idx.*barrier"):
        merge(shards)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("last_round_id", "other"),
        ("checkpoint_reload_count", 7),
        ("fingerprint", "another-pipeline"),
    ],
)
def test_universal_fields_must_agree(field: str, value: Any) -> None:
    shards = states(9)
    shards[2][field] = value
    with pytest.raises(ContractError, match=f"{field}.*expected the same value"):
        merge(shards)


@pytest.mark.parametrize("field", ["canonical_replicas", "world_size", "mapping"])
def test_world_fields_must_agree(field: str) -> None:
    shards = states(10, canonical_replicas=8, world_size=2)
    if field == "canonical_replicas":
        shards[1]["world"]["canonical_replicas"] = 9
    elif field == "world_size":
        shards[1]["world"]["world_size"] = 3
    else:
        shards[1]["world"]["mapping"] = {0: [0, 1, 2, 3, 4], 1: [5, 6, 7]}
        shards[1]["world"]["dp_group_id"] = 1
    with pytest.raises(ZephonRefError):
        merge(shards)


def test_divergent_peer_universal_field_is_not_hidden_by_dedupe() -> None:
    shards = states(11, world_size=2, dp_degree=1)
    shards[1]["last_round_id"] = "x"
    with pytest.raises(ContractError, match="last_round_id"):
        merge(shards)


def test_duplicate_lane_is_refused() -> None:
    shards = states(12, world_size=2)
    dup = copy.deepcopy(shards[0])
    with pytest.raises(ContractError, match="lane 0.*reported by one shard"):
        merge(shards + [dup])


def test_missing_lane_is_refused_never_a_partial_merge() -> None:
    shards = states(13, world_size=4)
    with pytest.raises(ContractError, match=r"missing lanes \[6, 7\]"):
        merge(shards[:3])


def test_missing_worker_lanes_are_refused() -> None:
    by = topology_states(14, canonical_replicas=8, world_size=2, workers=2)
    del by[(1, 1)]
    with pytest.raises(ContractError, match="missing lanes"):
        merge(list(by.values()))


def test_empty_and_non_list_inputs_are_refused() -> None:
    with pytest.raises(ContractError, match="at least one shard"):
        merge([])
    with pytest.raises(StateFormatError):
        merge({"a": 1})  # type: ignore[arg-type]
    with pytest.raises(StateFormatError):
        merge(["nope"])  # type: ignore[list-item]


def _bad_shards() -> list[tuple[str, Any]]:
    def edit(fn: Any) -> Any:
        s = states(15, world_size=1)[0]
        fn(s)
        return s

    return [
        ("version", edit(lambda s: s.update(version=1))),
        ("no world", edit(lambda s: s.pop("world"))),
        ("no progress", edit(lambda s: s.pop("progress"))),
        (
            "merged world",
            edit(lambda s: s.update(world={"canonical_replicas": 8, "world_size": 1})),
        ),
        ("rank >= world", edit(lambda s: s["world"].update(global_rank=3))),
        ("bool rank", edit(lambda s: s["world"].update(global_rank=True))),
        ("unknown group", edit(lambda s: s["world"].update(dp_group_id=5))),
        (
            "lane twice in mapping",
            edit(lambda s: s["world"].update(mapping={0: [0, 1, 1, 2, 3, 4, 5, 6, 7]})),
        ),
        ("lane beyond C", edit(lambda s: s["progress"].update({8: {"chunk_id": 0, "offset": 0}}))),
        ("bad lane key", edit(lambda s: s["progress"].update({"x": {"chunk_id": 0, "offset": 0}}))),
        ("progress shape", edit(lambda s: s["progress"].update({0: {"chunk_id": 0}}))),
        (
            "negative offset",
            edit(lambda s: s["progress"].update({0: {"chunk_id": 0, "offset": -1}})),
        ),
        ("stray inflight lane", edit(lambda s: s["progress"].pop(7))),
        ("no ws state", edit(lambda s: s["lane_ws_state"].pop(3))),
        ("bad next cid", edit(lambda s: s["lane_next_cid"].update({0: "1"}))),
        ("bad inflight", edit(lambda s: s["inflight"].update({0: [1]}))),
        ("bad boundaries", edit(lambda s: s["epoch_boundaries"].update({0: 3}))),
        ("bad rr", edit(lambda s: s.update(rr_next_idx={1: 0}))),
        ("bad rr value", edit(lambda s: s.update(rr_next_idx={"0/1:0": -1}))),
        ("bad emitted", edit(lambda s: s["lane_emitted"].update({0: -2}))),
    ]


@pytest.mark.parametrize(("why", "shard"), _bad_shards(), ids=[w for w, _ in _bad_shards()])
def test_malformed_shards_are_refused_with_typed_errors(why: str, shard: Any) -> None:
    with pytest.raises(StateFormatError) as ei:
        merge([shard])
    assert "expected" in str(ei.value) and "received" in str(ei.value)
    assert isinstance(ei.value, ValueError)


def test_stray_group_lane_is_refused_by_shard_world() -> None:
    s = states(16, world_size=2)[0]
    s["progress"][7] = {"chunk_id": 0, "offset": 0}
    with pytest.raises(StateFormatError, match="subset of the group's lanes"):
        shard_world(s)


def test_mid_window_warning_only_when_counts_known_and_unequal() -> None:
    shards = states(17, world_size=2)
    for s in shards:
        s["lane_emitted"] = {lane: 5 for lane in s["lane_emitted"]}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        merge(shards)
    shards[0]["lane_emitted"][0] = 6
    with pytest.warns(RuntimeWarning, match="mid-window"):
        merge(shards)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        merge(shards, warn_mid_window=False)


def test_first_non_empty_work_config_in_rank_order_wins() -> None:
    shards = states(18, world_size=3)
    shards[2]["work_config"] = {"c": 2}
    shards[1]["work_config"] = {"c": 1}
    assert merge(list(reversed(shards)))["work_config"] == {"c": 1}


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**32),
    c=st.integers(1, 12),
    ws=st.sampled_from([1, 2, 3, 4, 6]),
    dp_div=st.sampled_from([1, 2, 3]),
    workers=st.integers(1, 3),
    data=st.data(),
)
def test_merge_equals_the_per_lane_union_whatever_the_topology(
    seed: int, c: int, ws: int, dp_div: int, workers: int, data: st.DataObject
) -> None:
    d = ws // dp_div if ws % dp_div == 0 else ws
    if c < d:
        c = d
    by = topology_states(seed, canonical_replicas=c, world_size=ws, dp_degree=d, workers=workers)
    shards = list(by.values())
    order = data.draw(st.permutations(shards))
    merged = merge(order)
    mapping = contiguous_mapping(c, d)
    for field in LANE_FIELDS:
        want: dict[int, Any] = {}
        for (rank, _), s in sorted(by.items()):
            if rank < d:  # the representative of group rank
                want.update(s[field])
        if field == "epoch_boundaries":
            want = {k: v for k, v in want.items() if v}
        assert merged[field] == dict(sorted(want.items())), field
    assert sorted(merged["progress"]) == sorted(lane for v in mapping.values() for lane in v)
    assert merge(shards) == merged


def test_single_rank_state_merges_to_itself_modulo_world() -> None:
    """A real single-rank state merges to itself, except the world (reduced to what a merged
    state keeps) and the integrity digest, which covers the world and is recomputed."""
    s = states(19, world_size=1)[0]
    m = merge([s])
    skip = ("world", "work_source", "integrity")
    assert {k: v for k, v in m.items() if k not in skip} == {k: v for k, v in s.items() if k not in skip}
    verify_integrity(m)  # every input verified, so the merge is sealed

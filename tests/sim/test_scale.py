"""Scale mode (sim/scale.py) at small rank counts: the round's result is what the protocol
computes directly, parking sleepers changes nothing but the event count, runs are
deterministic, and a participant lost mid-round ends the round as the protocol says."""

from __future__ import annotations

import gc
import json
from pathlib import Path
from typing import Any

import pytest

from sim.scale import ScaleConfig, main, rank_state, star_round, tree_round
from zephon_ref import codec
from zephon_ref import state as schema
from zephon_ref.checkpoint.schema import sha256_hex
from zephon_ref.checkpoint.tree import CapturePrefix, TreeShape
from zephon_ref.checkpoint.tree_files import publish_tree
from zephon_ref.coordination.merge import merge
from zephon_ref.coordination.protocol import Abort, Finish
from zephon_ref.errors import AggregationTimeout, ConfigError, LeaderFailed, StateFormatError

SMALL = ScaleConfig(ranks=12, dp_degree=3, canonical_replicas=6, max_latency=3, poll=7, seed=4)


def _states(cfg: ScaleConfig) -> list[dict[str, object]]:
    return [
        rank_state(r, ranks=cfg.ranks, dp_degree=cfg.dp, canonical_replicas=cfg.lanes)
        for r in range(cfg.ranks)
    ]


@pytest.mark.parametrize("park", [True, False])
def test_the_star_round_merges_what_merge_computes_directly(park: bool) -> None:
    cfg = ScaleConfig(**{**_fields(SMALL), "park": park})
    stats, ends = star_round(cfg)
    assert stats.outcome == "ok" and stats.participants_done == cfg.ranks
    direct = codec.decode(codec.encode(merge(_states(cfg), warn_mid_window=False)))
    assert all(isinstance(e, Finish) and e.merged == direct for e in ends)
    assert stats.merged_digest == sha256_hex(codec.encode(direct))
    assert schema.validate(direct, require_all_lanes=True) == cfg.lanes
    # the leader handles every shard and every ack: messages grow with the rank count
    assert stats.leader_messages >= 2 * (cfg.ranks - 1)
    assert (stats.storage_ops_elided > 0) == park


def _fields(cfg: ScaleConfig) -> dict[str, object]:
    return {name: getattr(cfg, name) for name in ScaleConfig.__slots__}  # type: ignore[attr-defined]


def test_parking_sleepers_changes_events_not_the_round() -> None:
    exact, _ = star_round(ScaleConfig(**{**_fields(SMALL), "park": False}))
    parked, _ = star_round(SMALL)
    assert parked.events < exact.events and parked.storage_ops < exact.storage_ops
    assert (parked.outcome, parked.merged_digest, parked.participants_done) == \
        (exact.outcome, exact.merged_digest, exact.participants_done)


def test_the_fast_codec_changes_no_byte_event_or_decision() -> None:
    """fast_codec=False gives every machine the plain codec (no shared work): the same round,
    event for event (the fingerprint covers the kernel trace, the result's digest and the ops)."""
    for topology in ("star", "tree"):
        runs = [star_round(c)[0] if topology == "star" else tree_round(c)[0]
                for c in (ScaleConfig(**{**_fields(SMALL), "topology": topology, "fast_codec": f})
                          for f in (True, False))]
        assert runs[0].outcome == "ok" and runs[0].fingerprint == runs[1].fingerprint
        assert (runs[0].merged_digest, runs[0].events, runs[0].storage_bytes_written) == \
            (runs[1].merged_digest, runs[1].events, runs[1].storage_bytes_written)
    with pytest.raises(ConfigError, match="fast_codec"):
        ScaleConfig(ranks=4, fast_codec=1)  # type: ignore[arg-type]


def test_the_same_config_gives_the_same_fingerprint() -> None:
    for topology in ("star", "tree"):
        cfg = ScaleConfig(**{**_fields(SMALL), "topology": topology})
        a, b = (star_round(cfg)[0] if topology == "star" else tree_round(cfg)[0] for _ in range(2))
        assert a.fingerprint == b.fingerprint and a.virtual_time == b.virtual_time
        other = ScaleConfig(**{**_fields(cfg), "seed": 5})
        c = star_round(other)[0] if topology == "star" else tree_round(other)[0]
        assert c.fingerprint != a.fingerprint  # the seed draws the latencies


def test_a_follower_lost_before_its_shard_fails_the_round_everywhere() -> None:
    cfg = ScaleConfig(**{**_fields(SMALL), "timeout": 600, "crash": (5, 1)})
    stats, ends = star_round(cfg)
    lead = ends[0]
    assert isinstance(lead, Abort) and isinstance(lead.error, AggregationTimeout)
    assert lead.error.waiting_for == "shards" and lead.error.missing_ranks == (5,)
    assert stats.outcome == "AggregationTimeout" and stats.participants_done == 0
    for r, e in enumerate(ends[1:], start=1):
        if r == 5:
            assert e is None  # crashed: it never ends
        else:  # one budget for all: a follower reads the leader's failure notice, or its own
            # deadline (the same tick as the leader's) passes first while it waits for the outcome
            assert isinstance(e, Abort), (r, e)
            assert isinstance(e.error, LeaderFailed) or (
                isinstance(e.error, AggregationTimeout) and e.error.waiting_for == "outcome"), (r, e)


def test_a_follower_lost_before_its_ack_keeps_the_result_published() -> None:
    clean = star_round(ScaleConfig(**{**_fields(SMALL), "timeout": 900}))
    assert clean[0].outcome == "ok"
    for k in range(1, 40):  # crash rank 7 after k storage ops: some k lands between shard and ack
        cfg = ScaleConfig(**{**_fields(SMALL), "timeout": 900, "crash": (7, k)})
        stats, ends = star_round(cfg)
        lead = ends[0]
        if (
            isinstance(lead, Abort)
            and isinstance(lead.error, AggregationTimeout)
            and lead.error.waiting_for == "acks"
        ):
            break
    else:  # pragma: no cover - the loop must find the ack window
        raise AssertionError("no crash point of rank 7 landed between its shard and its ack")
    assert lead.error.missing_participants == ("r7_w0_t",)
    # the result was published before the ack timeout: every other follower finished with it
    finished = [r for r, e in enumerate(ends) if isinstance(e, Finish)]
    assert finished == [r for r in range(1, SMALL.ranks) if r != 7]
    assert all(isinstance(e, Finish) and e.merged == ends[1].merged for e in ends[1:] if e is not None)  # type: ignore[union-attr]


def test_the_leader_lost_mid_round_times_every_follower_out() -> None:
    cfg = ScaleConfig(**{**_fields(SMALL), "timeout": 600, "crash": (0, 3)})
    stats, ends = star_round(cfg)
    assert ends[0] is None and stats.outcome == "leader-lost"
    for e in ends[1:]:
        assert isinstance(e, Abort) and isinstance(e.error, AggregationTimeout)
        assert e.error.waiting_for == "outcome"


def test_the_tree_round_publishes_the_root_the_file_driver_publishes(tmp_path: Path) -> None:
    cfg = ScaleConfig(
        ranks=23, topology="tree", fanout=3, dp_degree=4, canonical_replicas=8, seed=2, max_latency=4
    )
    stats, reported = tree_round(cfg)
    assert stats.outcome == "ok" and sorted(reported) == list(range(cfg.ranks)) and stats.violations == ()
    shards = {r: {"engine": codec.encode(s)} for r, s in enumerate(_states(cfg))}
    run = publish_tree(tmp_path, TreeShape(cfg.ranks, cfg.fanout),
                       CapturePrefix(generation=1, schema_digest="0" * 64, capture_id="scale"), shards)
    assert run.root_digest == stats.merged_digest
    # the root talks to its children only: messages bounded by the fan-out, not the rank count
    assert stats.leader_messages <= 2 * cfg.fanout + 2


def test_a_lost_tree_role_blocks_publication_and_nobody_reports() -> None:
    cfg = ScaleConfig(
        ranks=23, topology="tree", fanout=3, crash=(9, 1)
    )  # after its shard, before its manifest
    stats, reported = tree_round(cfg)
    assert stats.outcome == "incomplete" and reported == [] and stats.merged_digest is None


def test_star_versus_tree_at_a_thousand_ranks() -> None:
    star = star_round(ScaleConfig(ranks=1000))[0]
    tree = tree_round(ScaleConfig(ranks=1000, topology="tree"))[0]
    assert star.outcome == tree.outcome == "ok"
    assert star.leader_messages > 2 * 999 and tree.leader_messages < 40
    assert tree.virtual_time < star.virtual_time
    assert tree.leader_bytes_held < 4_000 < 400_000 < star.leader_bytes_held  # O(fan-out) vs O(ranks)


def test_the_cli_prints_one_json_line_per_round() -> None:
    lines: list[str] = []  # one JSON line per round
    assert main(["--ranks", "8", "--topology", "tree", "--rounds", "2"], out=lines.append) == 0
    rows = [json.loads(x) for x in lines]
    assert len(rows) == 2 and rows[0]["fingerprint"] == rows[1]["fingerprint"] and rows[0]["outcome"] == "ok"
    with pytest.raises(ConfigError):
        ScaleConfig(ranks=4, dp_degree=5)
    assert main(["--ranks", "4", "--dp-degree", "5"], out=lines.append) == 2


def test_a_latency_varied_star_round_publishes_merge_of_the_straightforward_states() -> None:
    """The driver's cached states and the machines' pack-once / validate-once path against
    the straightforward computation: rank_state built afresh per rank (no cache), merge()
    validating every shard itself, codec.encode of the whole result."""
    cfg = ScaleConfig(ranks=240, dp_degree=8, canonical_replicas=24, max_latency=4, poll=5, seed=11)
    stats, ends = star_round(cfg)
    assert stats.outcome == "ok" and stats.participants_done == cfg.ranks and stats.violations == ()
    want = codec.encode(merge(_states(cfg), warn_mid_window=False))
    assert stats.merged_digest == sha256_hex(want)
    assert all(isinstance(e, Finish) and codec.encode(e.merged) == want for e in ends)


def test_cached_rank_states_equal_fresh_ones() -> None:
    cache: dict[Any, Any] = {}
    for r in range(30):
        cached = rank_state(r, ranks=30, dp_degree=4, canonical_replicas=10, _cache=cache)
        assert cached == rank_state(r, ranks=30, dp_degree=4, canonical_replicas=10)
        assert codec.encode(cached) == codec.encode(
            rank_state(r, ranks=30, dp_degree=4, canonical_replicas=10)
        )


def test_round_figures_are_those_of_the_code_before_the_speed_work() -> None:
    """Pinned figures of one 1,000-rank round per topology.  They were NOT derived by hand:
    they are what sim.scale printed at commit 4727890 (before the pack-once / validate-once /
    kernel fast-path changes), so they hold the optimized path to the same trace, messages,
    bytes held, bytes written and published digest.  A deliberate change of the round (or of
    the synthetic states) will have to update them, and say why."""
    star = star_round(ScaleConfig(ranks=1000))[0]
    tree = tree_round(ScaleConfig(ranks=1000, topology="tree"))[0]
    assert gc.isenabled()  # the round held the collector off and gave it back
    got = [
        (
            s.fingerprint[:16],
            s.merged_digest and s.merged_digest[:16],
            s.leader_messages,
            s.leader_bytes_held,
            s.storage_ops,
            s.storage_ops_elided,
            s.storage_bytes_written,
            s.events,
            s.virtual_time,
        )
        for s in (star, tree)
    ]
    assert got == [
        ("95a8cfaa91121e7a", "4036c39755bab58f", 2007, 493986, 9999, 79920, 496639, 11000, 2107),
        ("bf88881483c6edef", "adda6ad4c3ff9acd", 34, 3257, 2000, 0, 841990, 3998, 11),
    ]


def test_the_group_packer_gives_codec_pack_bytes_and_refusals() -> None:
    """sim.scale hands followers a packer that splices parts it packed once per DP group; it
    must give codec.pack's bytes for every rank's state, and for anything that is not exactly
    such a state (a replaced, missing or extra field, a world of its own making, a bad value)
    codec.pack's bytes or codec.pack's refusal."""
    from sim.scale import _GroupPacker

    for ranks, dp, lanes in ((7, 3, 5), (40, 16, 16), (9, 9, 20)):
        cache: dict[Any, Any] = {}
        states = [rank_state(r, ranks=ranks, dp_degree=dp, canonical_replicas=lanes, _cache=cache)
                  for r in range(ranks)]
        packer = _GroupPacker(*cache[(ranks, dp, lanes)])
        assert all(packer(s) == codec.pack(s) for s in states)
    st = states[4]
    variants: list[dict[str, Any]] = [
        {**st, "progress": {**st["progress"]}},  # equal but not the shared object
        {**st, "progress": {4: {"chunk_id": 3, "offset": 1}}},
        {**st, "extra": 1},
        {k: v for k, v in st.items() if k != "lane_emitted"},
        {**st, "world": {**st["world"], "mapping": {g: list(v) for g, v in st["world"]["mapping"].items()}}},
        {**st, "world": {**st["world"], 7: "int key"}},
        {**st, "world": {**st["world"], "dp_group_id": 99}},
        {**st, "world": {**st["world"], "world_size": 2**70}},
        {**st, "world": {**st["world"], "dp_group_id": 5}},  # another group's id on this group's fields
    ]
    for v in variants:
        assert packer(v) == codec.pack(v)
    # the followers' codec: an envelope (fields and the state) has the bytes of encoding it whole
    from sim.scale import _ScaleCodec, _SharedDecode

    scale_codec = _ScaleCodec(packer, _SharedDecode())
    for v in [st, *variants, {"no": "envelope"}, [1, (2,)]]:
        env = {"protocol": 1, "round_id": "rid", "participant": "r4_w0_t", "rank": 4, "worker": 0, "state": v}
        assert scale_codec.encode(env) == codec.encode(env) and scale_codec.encode(v) == codec.encode(v)
    for bad in ({**st, "world": {**st["world"], "world_size": float("nan")}}, {**st, "oops": object()}):
        with pytest.raises(StateFormatError) as want:
            codec.pack(bad, root="$['state']")
        with pytest.raises(StateFormatError) as got:
            packer(bad, root="$['state']")
        assert str(got.value) == str(want.value)


def test_the_shared_decoder_is_codec_decode_with_one_object_per_bytes() -> None:
    from sim.scale import _SharedDecode

    dec = _SharedDecode()
    values = [{"a": i, "b": [i, (i, "x")]} for i in range(7)]
    blobs = [codec.encode(v) for v in values]
    first = dec(blobs[0])
    assert first == values[0] and dec(bytes(blobs[0])) is first  # equal bytes, the same object
    for b, v in zip(blobs, values, strict=True):  # more values than it remembers: still right
        assert dec(b) == v
    assert dec(blobs[0]) == values[0]
    for junk in (b"", b"\x28\xb5\x2f\xfd garbage", blobs[1][:-3]):
        with pytest.raises(StateFormatError):
            codec.decode(junk)
        with pytest.raises(StateFormatError):
            dec(junk)
        with pytest.raises(StateFormatError):  # a refusal is not remembered
            dec(junk)

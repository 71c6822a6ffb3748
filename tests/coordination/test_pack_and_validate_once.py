"""A shard is validated once, and the published envelope is the encoding of the envelope dict.

The machines encode the whole envelope dict with their codec (the plain codec by default; the
splice of a state packed once lives in the fast codec, zephon_ref.fast.codec, checked by
tests/properties/test_fast_codec.py, and in sim.scale's MapTemplate, checked here); an
unencodable state is refused at construction.  The leader validates a shard's ``world`` where it
decodes the shard (its trust boundary, Leader._accept) and hands that ShardWorld to
merge(worlds=...).  These tests hold the shortcuts to the straightforward computation: merge
with worlds equals merge without, a MapTemplate fills to the bytes of the whole map, and a
malformed or forged shard is still refused, at the boundary, before any merge.
"""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.cluster import Cluster, Participant, topology_states
from sim.scale import MapTemplate
from zephon_ref import codec
from zephon_ref.coordination import protocol
from zephon_ref.coordination.merge import merge, shard_world
from zephon_ref.coordination.protocol import Follower, Leader, RoundConfig, outcome_key, shard_key
from zephon_ref.errors import AggregationError, ContractError, StateFormatError
from zephon_ref.fast.codec import SharingLeaderCodec

pytestmark = pytest.mark.filterwarnings("ignore:checkpoint taken mid-window")

NS = "run-0"
T = 1000

_scalars = (
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=6) | st.binary(max_size=6)
)
_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=4) | st.lists(inner, max_size=3).map(tuple)
    | st.dictionaries(st.integers() | st.text(max_size=4), inner, max_size=4),
    max_leaves=20,
)


def _cfg(rank: int, *, ws: int = 2, rid: str | None = None) -> RoundConfig:
    return RoundConfig(namespace=NS, rank=rank, world_size=ws, token=f"t{rank}", timeout=T, poll=10,
                       stale_grace=100, round_id=rid)


def _envelope(rid: str, rank: int, state: Any) -> dict[str, Any]:
    return {"protocol": 1, "round_id": rid, "participant": f"r{rank}_w0_t{rank}", "rank": rank, "worker": 0,
            "state": state}


def test_published_envelopes_are_the_straightforward_encoding() -> None:
    sts = topology_states(3, canonical_replicas=4, world_size=3)
    lead = Leader(sts[(0, 0)], _cfg(0, ws=3, rid="rid1"), warn_mid_window=False)
    assert lead.own_bytes == codec.encode(_envelope("rid1", 0, sts[(0, 0)]))
    fol = Follower(sts[(2, 0)], _cfg(2, ws=3))
    for rid in ("rid1", "rid2"):  # a switch to a newer round re-publishes the same state
        fol.round_id = rid
        assert fol._envelope() == codec.encode(_envelope(rid, 2, sts[(2, 0)]))
    # a state replaced on the machine (as tests make a diverged peer) is what gets published
    fol.state = copy.deepcopy(sts[(2, 0)])
    fol.state["progress"][next(iter(fol.state["progress"]))] = {"chunk_id": 7, "offset": 1}
    assert fol._envelope() == codec.encode(_envelope("rid2", 2, fol.state))


def test_an_unencodable_state_is_still_refused_at_construction_with_its_path() -> None:
    sts = topology_states(3, canonical_replicas=4, world_size=2)
    bad = {**sts[(1, 0)], "work_config": {"k": {1, 2}}}
    with pytest.raises(StateFormatError, match=r"\$\['work_config'\]\['k'\].*set"):
        Follower(bad, _cfg(1))
    bad0 = {**sts[(0, 0)], "work_config": {"k": {1, 2}}}
    with pytest.raises(StateFormatError, match=r"\$\['state'\]\['work_config'\]\['k'\].*set"):
        Leader(bad0, _cfg(0, rid="rid1"))


def test_merge_with_the_leaders_worlds_equals_merge_without() -> None:
    sts = topology_states(5, canonical_replicas=8, world_size=6, dp_degree=3, workers=2)
    states = [s for _, s in sorted(sts.items())]
    worlds = [shard_world(s) for s in states]
    assert codec.encode(merge(states, worlds=worlds)) == codec.encode(merge(states))
    with pytest.raises(ContractError, match="one ShardWorld per state"):
        merge(states, worlds=worlds[:-1])
    # merge still checks everything but the world part: a malformed lane field is refused
    broken = copy.deepcopy(states)
    lane = next(iter(broken[1]["progress"]))
    broken[1]["progress"][lane] = {"chunk_id": "x", "offset": 0}
    with pytest.raises(StateFormatError, match="chunk_id"):
        merge(broken, worlds=[shard_world(s) for s in broken])


def _leader_seeing(extra: dict[str, bytes]) -> tuple[Cluster, Participant]:
    """A 2-rank round whose follower is replaced by ``extra`` shard bytes in storage."""
    sts = topology_states(8, canonical_replicas=4, world_size=2)
    cl = Cluster()
    lead = cl.add("leader", Leader(sts[(0, 0)], _cfg(0, rid="rid1"), warn_mid_window=False))
    for _ in range(3):  # start, announce, publish its own shard
        cl.step(lead)
    cl.backend.data.update(extra)
    cl.run()
    return cl, lead


def _bad_world(edit: str) -> dict[str, Any]:
    st = copy.deepcopy(topology_states(8, canonical_replicas=4, world_size=2)[(1, 0)])
    if edit == "lane-out-of-range":
        st["world"]["mapping"] = {0: [0, 1], 1: [2, 9]}
    elif edit == "stray-lane":
        st["progress"][0] = {"chunk_id": -1, "offset": 0}  # lane 0 is group 0's, not rank 1's
    elif edit == "no-world-size":
        del st["world"]["world_size"]
    else:  # pragma: no cover - only a misspelt edit name in this file reaches it, and it fails loudly
        raise AssertionError(edit)
    return st


@pytest.mark.parametrize(("edit", "match"), [
    ("lane-out-of-range", r"world\.mapping\[1\] lane"),
    ("stray-lane", "a subset of the group's lanes"),
    ("no-world-size", "world_size"),
])
def test_a_malformed_shard_world_is_refused_where_the_leader_decodes_it(
    edit: str, match: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    merged: list[int] = []
    real_merge = protocol.merge
    monkeypatch.setattr(protocol, "merge", lambda *a, **k: merged.append(1) or real_merge(*a, **k))
    name = "r1_w0_x"
    env = {**_envelope("rid1", 1, _bad_world(edit)), "participant": name}
    cl, lead = _leader_seeing({shard_key(NS, "rid1", name): codec.encode(env)})
    err = lead.machine.error  # type: ignore[attr-defined]
    assert isinstance(err, StateFormatError) and "the shard of r1_w0_x" in str(err)
    assert re.search(match, str(err))
    assert merged == []  # refused at the boundary: merge never saw it
    assert cl.now < T and cl.backend.data[outcome_key(NS, "rid1")].startswith(b"F")


def test_a_malformed_lane_field_is_still_refused_by_the_merge(monkeypatch: pytest.MonkeyPatch) -> None:
    st = copy.deepcopy(topology_states(8, canonical_replicas=4, world_size=2)[(1, 0)])
    lane = next(iter(st["lane_next_cid"]))
    st["lane_next_cid"][lane] = -3
    name = "r1_w0_x"
    env = {**_envelope("rid1", 1, st), "participant": name}
    cl, lead = _leader_seeing({shard_key(NS, "rid1", name): codec.encode(env)})
    err = lead.machine.error  # type: ignore[attr-defined]
    assert isinstance(err, StateFormatError) and "lane_next_cid" in str(err)
    assert cl.backend.data[outcome_key(NS, "rid1")].startswith(b"F")


def test_a_forged_rank_is_still_refused_at_the_boundary() -> None:
    st = copy.deepcopy(topology_states(8, canonical_replicas=4, world_size=2)[(1, 0)])
    st["world"]["global_rank"] = 0
    name = "r1_w0_x"
    env = {**_envelope("rid1", 1, st), "participant": name}
    _, lead = _leader_seeing({shard_key(NS, "rid1", name): codec.encode(env)})
    err = lead.machine.error  # type: ignore[attr-defined]
    assert isinstance(err, AggregationError) and err.reason == "rank-mismatch"



@settings(max_examples=150, deadline=None)
@given(
    st.dictionaries(st.text(max_size=6), _values, max_size=5),
    st.dictionaries(st.text(max_size=6), _values, max_size=5),
    st.text(max_size=6),
    st.lists(_values, min_size=1, max_size=3),
)
def test_a_map_template_fills_to_the_bytes_of_the_whole_map(fields: dict[str, Any], packed: dict[str, Any],
                                                             slot: str, fills: list[Any]) -> None:
    """sim.scale.MapTemplate (many maps differing in one value) gives pack() of the whole map
    for every value put in its slot, wherever the slot sorts among the other keys."""
    for k in [*fields, slot]:
        packed.pop(k, None)
    fields.pop(slot, None)
    template = MapTemplate(fields, {k: codec.pack(v) for k, v in packed.items()}, slot=slot)
    for v in fills:
        assert template.fill(codec.pack(v)) == codec.pack({**fields, **packed, slot: v})


def test_a_map_template_refuses_what_it_cannot_fill() -> None:
    with pytest.raises(StateFormatError, match="slot"):
        MapTemplate({"a": 1}, {}, slot="a")
    with pytest.raises(StateFormatError, match="slot"):
        MapTemplate({}, {"a": codec.pack(1)}, slot="a")
    with pytest.raises(StateFormatError, match="str"):
        MapTemplate({1: 1}, {}, slot="s")  # type: ignore[dict-item]
    template = MapTemplate({"a": 1}, {}, slot="s")
    for bad in (b"", "x", None):
        with pytest.raises(StateFormatError):
            template.fill(bad)  # type: ignore[arg-type]


def _leader_after_a_round(codec: Any) -> Leader:
    sts = topology_states(6, canonical_replicas=8, world_size=4, dp_degree=2)
    cl = Cluster()
    leader0 = Leader(sts[(0, 0)], _cfg(0, ws=4, rid="rid1"), warn_mid_window=False, codec=codec)
    lead = cl.add("leader", leader0, start=True)
    for r in (1, 2, 3):
        cl.add(f"f{r}", Follower(sts[(r, 0)], _cfg(r, ws=4)), start=True)
    cl.run()
    leader = lead.machine
    assert isinstance(leader, Leader) and len(leader.worlds) == 4
    return leader


@pytest.mark.parametrize("sharing", [False, True], ids=["plain codec", "SharingLeaderCodec"])
def test_the_leader_shares_its_mapping_without_changing_a_world(sharing: bool) -> None:
    """The leader's world of each shard it accepted equals shard_world of that state and holds the
    leader's own mapping tuple (plain codec or not), and followers' worlds are shard_world's.  The
    plain codec gives each shard its own decoded lane mapping; SharingLeaderCodec (a memory seam,
    zephon_ref.fast.codec) hands every shard the one decoded mapping, equal to each shard's own."""
    sts = topology_states(6, canonical_replicas=8, world_size=4, dp_degree=2)
    fols = [Follower(sts[(r, 0)], _cfg(r, ws=4)) for r in (1, 2, 3)]
    for f, r in zip(fols, (1, 2, 3), strict=True):
        assert f.world == shard_world(sts[(r, 0)])
    leader = _leader_after_a_round(SharingLeaderCodec() if sharing else codec)
    assert all(w == shard_world(leader.states[n]) and w.mapping is leader.world.mapping
               for n, w in leader.worlds.items())
    mappings = [st["world"]["mapping"] for st in leader.states.values()]
    assert all(m == sts[(0, 0)]["world"]["mapping"] and list(m) == list(sts[(0, 0)]["world"]["mapping"])
               for m in mappings)
    assert len({id(m) for m in mappings}) == (1 if sharing else len(mappings))


def test_the_sharing_codec_decodes_what_the_plain_codec_decodes() -> None:
    """SharingLeaderCodec.decode equals codec.decode on every envelope; a mapping that differs from
    the first (one lane list shorter) is not swapped."""
    sts = topology_states(6, canonical_replicas=8, world_size=4, dp_degree=2)
    env = {"protocol": 1, "state": sts[(0, 0)]}
    sc = SharingLeaderCodec()
    first = sc.decode(codec.encode(env))
    assert first == codec.decode(codec.encode(env))
    again = sc.decode(codec.encode(env))
    assert again == first and again["state"]["world"]["mapping"] is first["state"]["world"]["mapping"]
    mapping = sts[(0, 0)]["world"]["mapping"]
    changed = {k: list(v)[:-1] for k, v in mapping.items()}
    e = {"protocol": 1, "state": {**sts[(0, 0)], "world": {**sts[(0, 0)]["world"], "mapping": changed}}}
    got = sc.decode(codec.encode(e))
    assert got == codec.decode(codec.encode(e))
    assert got["state"]["world"]["mapping"] is not first["state"]["world"]["mapping"]
    # not an envelope, or a malformed one (the leader refuses it typed afterwards): the plain value
    for other in ([1, 2], {"state": 3}, {"state": {"world": [1]}}, {"state": {"world": {"mapping": 5}}}):
        assert sc.decode(codec.encode(other)) == other


def test_the_reused_packer_gives_packb_bytes_after_a_failure_and_across_threads() -> None:
    """A pack that raised midway (a value msgpack refuses, a half-written map) leaves nothing
    behind for the next one, and packs from several threads share no buffer."""
    import threading

    import msgpack

    value = {"a": [1, 2, (3, "x")], "b": b"\x00" * 40, "c": {5: None}}
    want = codec.pack(value)
    with pytest.raises(TypeError):
        codec._packb({"half": [1, 2, object()]})  # fails after writing part of the map
    assert codec.pack(value) == want
    assert codec._packb({"k": [1, "v"]}) == msgpack.packb({"k": [1, "v"]}, use_bin_type=True)
    got: list[bytes] = []

    def work() -> None:
        got.extend(codec.pack({**value, "i": i}) for i in range(200))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(got) == sorted(codec.pack({**value, "i": i}) for i in range(200) for _ in range(4))

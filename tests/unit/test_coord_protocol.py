"""The round state machines driven by hand over the in-memory backend."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from sim.cluster import Cluster, Participant, topology_states
from sim.storage import FailingBackend
from zephon_ref import codec
from zephon_ref.coordination.backends import MemoryBackend
from zephon_ref.coordination.driver import perform
from zephon_ref.coordination.merge import merge
from zephon_ref.coordination.protocol import (
    Abort,
    Created,
    Delete,
    Fetched,
    Finish,
    Follower,
    Get,
    IOFailed,
    Leader,
    Listed,
    ListKeys,
    Put,
    PutIfAbsent,
    RoundConfig,
    Sleep,
    Started,
    Stored,
    Woke,
    announce_key,
    machine_for,
    outcome_key,
    shard_key,
)
from zephon_ref.errors import (
    AggregationError,
    AggregationTimeout,
    ConfigError,
    ContractError,
    LeaderFailed,
    StateFormatError,
)

pytestmark = pytest.mark.filterwarnings("ignore:checkpoint taken mid-window")

NS = "run-0"
T = 1000  # timeout ticks


def cfg(
    rank: int, worker: int = 0, *, ws: int = 2, rid: str | None = "rid1", **kw: Any
) -> RoundConfig:
    kw.setdefault("namespace", NS)
    kw.setdefault("timeout", T)
    kw.setdefault("poll", 10)
    kw.setdefault("stale_grace", 100)
    return RoundConfig(
        rank=rank,
        worker=worker,
        world_size=ws,
        token=f"t{rank}w{worker}",
        round_id=rid if (rank, worker) == (0, 0) else None,
        **kw,
    )


def cluster(
    seed: int = 0,
    *,
    c: int = 4,
    ws: int = 2,
    dp: int | None = None,
    workers: int = 1,
    backend: MemoryBackend | None = None,
    rid: str = "rid1",
    skip: tuple[tuple[int, int], ...] = (),
    **kw: Any,
) -> tuple[Cluster, dict[tuple[int, int], dict[str, Any]]]:
    sts = topology_states(
        seed, canonical_replicas=c, world_size=ws, dp_degree=dp, workers=workers, **kw
    )
    cl = Cluster(backend=backend or MemoryBackend())
    for (r, w), s in sorted(sts.items()):
        if (r, w) not in skip:
            cl.add(f"r{r}w{w}", machine_for(s, cfg(r, w, ws=ws, rid=rid)))
    return cl, sts


def by_name(cl: Cluster, name: str) -> Participant:
    return next(p for p in cl.members if p.name == name)


# ------------------------------------------------------------------ happy path, by hand


def test_every_transition_of_a_two_participant_round() -> None:
    sts = topology_states(0, canonical_replicas=4, world_size=2)
    store = MemoryBackend()
    lead = Leader(sts[(0, 0)], cfg(0))
    fol = Follower(sts[(1, 0)], cfg(1))

    def run(m: Any, cmd: Any, now: int) -> Any:
        return m.apply(perform(cmd, store, now=now))

    c = lead.apply(Started(0))
    assert isinstance(c, Put) and c.key == announce_key(NS)
    c = run(lead, c, 1)
    assert isinstance(c, Put) and c.key == shard_key(NS, "rid1", "r0_w0_t0w0")
    c = run(lead, c, 2)
    assert c == ListKeys(f"{NS}/rid1.shard.")
    c = run(lead, c, 3)
    assert c == Sleep(13)  # nobody else yet
    c = lead.apply(Woke(13))
    assert isinstance(c, ListKeys)
    lead_list = c

    f = fol.apply(Started(5))
    assert f == Get(announce_key(NS))
    f = run(fol, f, 6)
    assert f == Get(outcome_key(NS, "rid1"))  # is the announced round still open?
    f = run(fol, f, 7)
    assert isinstance(f, Put) and f.key == shard_key(NS, "rid1", "r1_w0_t1w0")
    f = run(fol, f, 8)
    assert f == Get(outcome_key(NS, "rid1"))
    f = run(fol, f, 9)
    assert f == Get(announce_key(NS))  # recheck: still our round
    f = run(fol, f, 10)
    assert f == Sleep(20)

    c = run(lead, lead_list, 14)
    assert c == Get(shard_key(NS, "rid1", "r1_w0_t1w0"))
    c = run(lead, c, 15)
    assert c == Delete(announce_key(NS))  # coverage complete: close the round
    c = run(lead, c, 16)
    assert isinstance(c, PutIfAbsent) and c.key == outcome_key(NS, "rid1") and c.data[:1] == b"R"
    c = run(lead, c, 17)
    assert c == Delete(shard_key(NS, "rid1", "r0_w0_t0w0"))
    c = run(lead, c, 18)
    assert c == ListKeys(f"{NS}/rid1.ack.")
    c = run(lead, c, 19)
    assert c == Sleep(29)

    f = fol.apply(Woke(20))
    assert f == Get(outcome_key(NS, "rid1"))
    f = run(fol, f, 21)
    assert f == Delete(shard_key(NS, "rid1", "r1_w0_t1w0"))
    f = run(fol, f, 22)
    assert f == Put(f"{NS}/rid1.ack.r1_w0_t1w0", b"ok")
    f = run(fol, f, 23)
    assert isinstance(f, Finish) and fol.done

    c = lead.apply(Woke(29))
    c = run(lead, c, 30)
    assert c == Delete(f"{NS}/rid1.ack.r1_w0_t1w0")
    c = run(lead, c, 31)
    assert isinstance(c, Finish) and c.round_id == "rid1"
    want = merge([sts[(0, 0)], sts[(1, 0)]])
    assert c.merged == want == f.merged
    assert sorted(store.data) == [outcome_key(NS, "rid1")]  # the closed-round marker only


def test_apply_refuses_an_event_the_table_does_not_accept() -> None:
    sts = topology_states(0, canonical_replicas=2, world_size=2)
    lead = Leader(sts[(0, 0)], cfg(0))
    with pytest.raises(ContractError, match="phase 'new'"):
        lead.apply(Stored(0))
    lead.apply(Started(0))
    with pytest.raises(ContractError, match="Listed"):
        lead.apply(Listed(0, ()))


@pytest.mark.parametrize(
    ("ws", "dp", "workers", "c"),
    [(1, None, 1, 3), (2, None, 1, 4), (4, 2, 2, 8), (8, None, 1, 8), (3, 1, 3, 6)],
)
def test_simulated_rounds_agree_with_merge(ws: int, dp: int | None, workers: int, c: int) -> None:
    for pick in range(4):
        cl, sts = cluster(pick, c=c, ws=ws, dp=dp, workers=workers)
        cl.run(pick=pick)
        want = merge(list(sts.values()))
        assert all(isinstance(p.outcome, Finish) and p.outcome.merged == want for p in cl.members)
        assert sorted(cl.backend.data) == [outcome_key(NS, "rid1")]


def test_previous_rounds_result_is_deleted_after_the_next_round() -> None:
    store = MemoryBackend()
    cl, _ = cluster(1, backend=store, rid="rid1")
    cl.run()
    cl2, _ = cluster(1, backend=store, rid="rid2", last_round_id="rid1")
    cl2.run()
    assert all(isinstance(p.outcome, Finish) for p in cl2.members)
    assert sorted(store.data) == [outcome_key(NS, "rid2")]


# ------------------------------------------------------------------ timeouts


def test_rank_that_never_calls_is_named_with_its_lanes() -> None:
    cl, _ = cluster(2, c=8, ws=4, skip=((2, 0),))
    cl.run()
    lead = by_name(cl, "r0w0").outcome
    assert isinstance(lead, Abort) and isinstance(lead.error, AggregationTimeout)
    err = lead.error
    assert err.waiting_for == "shards" and err.missing_ranks == (2,) and err.missing_lanes == (4, 5)
    assert "missing ranks [2]" in str(err) and "rank 2: [4, 5]" in str(err)
    assert "expected" in str(err) and "received" in str(err)
    for name in ("r1w0", "r3w0"):
        out = by_name(cl, name).outcome
        assert isinstance(out, Abort) and isinstance(out.error, LeaderFailed)
        assert "missing ranks [2]" in str(out.error)
    assert not any(v[:1] == b"R" for v in cl.backend.data.values())
    assert announce_key(NS) not in cl.backend.data


def test_missing_worker_is_named_by_rank_and_lanes() -> None:
    cl, _ = cluster(3, c=8, ws=2, workers=2, skip=((1, 1),))
    cl.run()
    err = by_name(cl, "r0w0").machine.error  # type: ignore[attr-defined]
    assert isinstance(err, AggregationTimeout)
    assert err.missing_ranks == () and err.missing_lanes == (5, 7)
    assert "rank 1: [5, 7]" in str(err)


def test_one_budget_for_the_whole_round() -> None:
    cl, _ = cluster(4, skip=((1, 0),))
    lead = by_name(cl, "r0w0")
    cl.advance(500)
    cl.run()
    assert isinstance(lead.outcome, Abort)
    assert cl.now == 500 + T  # the deadline counts from Started, not per wait


def test_leader_killed_before_publishing_follower_times_out_naming_it() -> None:
    cl, _ = cluster(5)
    lead, fol = by_name(cl, "r0w0"), by_name(cl, "r1w0")
    cl.step(lead)
    cl.step(lead)  # announced
    cl.crash(lead)
    cl.run()
    out = fol.outcome
    assert isinstance(out, Abort) and isinstance(out.error, AggregationTimeout)
    assert out.error.waiting_for == "outcome" and "leader (rank 0, worker 0)" in str(out.error)
    assert shard_key(NS, "rid1", "r1_w0_t1w0") not in cl.backend.data  # withdrawn


def test_no_leader_at_all_follower_times_out_on_announcement() -> None:
    cl, _ = cluster(6, skip=((0, 0),))
    cl.run()
    out = cl.members[0].outcome
    assert isinstance(out, Abort) and isinstance(out.error, AggregationTimeout)
    assert out.error.waiting_for == "announcement" and "no announcement seen" in str(out.error)
    assert cl.backend.data == {}


def test_follower_killed_after_publishing_leader_times_out_on_acks() -> None:
    cl, sts = cluster(7)
    lead, fol = by_name(cl, "r0w0"), by_name(cl, "r1w0")
    cl.step(fol)
    while (
        not isinstance(fol.pending, Sleep)
        or shard_key(NS, "rid1", "r1_w0_t1w0") not in cl.backend.data
    ):
        cl.step(lead) if not isinstance(lead.pending, Sleep) else cl.step(fol)
        if cl.runnable() == []:
            cl.advance()
    cl.crash(fol)
    cl.run()
    out = lead.outcome
    assert isinstance(out, Abort) and isinstance(out.error, AggregationTimeout)
    assert out.error.waiting_for == "acks" and out.error.missing_participants == ("r1_w0_t1w0",)
    assert "result stays" in str(out.error)
    # The result is retained for late readers and equals the full merge.
    raw = cl.backend.data[outcome_key(NS, "rid1")]
    assert codec.decode(raw[1:]) == merge(list(sts.values()))


# ------------------------------------------------------------------ immediate failures


def _shard_bytes(
    state: dict[str, Any], *, rid: str, name: str, rank: int, worker: int = 0
) -> bytes:
    return codec.encode(
        {
            "protocol": 1,
            "round_id": rid,
            "participant": name,
            "rank": rank,
            "worker": worker,
            "state": state,
        }
    )


def _leader_seeing(extra: dict[str, bytes], seed: int = 8) -> tuple[Cluster, Participant]:
    cl, _ = cluster(seed, skip=((1, 0),))
    lead = cl.members[0]
    cl.step(lead)
    cl.step(lead)
    cl.step(lead)
    cl.backend.data.update(extra)
    cl.run()
    return cl, lead


def test_lane_mapping_mismatch_fails_at_once_with_notice() -> None:
    sts = topology_states(8, canonical_replicas=4, world_size=2)
    bad = copy.deepcopy(sts[(1, 0)])
    bad["world"]["mapping"] = {0: [0, 1, 2], 1: [3]}
    bad["progress"].pop(2)
    name = "r1_w0_x"
    cl, lead = _leader_seeing(
        {shard_key(NS, "rid1", name): _shard_bytes(bad, rid="rid1", name=name, rank=1)}
    )
    err = lead.machine.error  # type: ignore[attr-defined]
    assert isinstance(err, AggregationError) and err.reason == "mapping-mismatch"
    assert "differing DP groups [0, 1]" in str(err)
    assert cl.now < T  # at once, not at the timeout
    assert cl.backend.data[outcome_key(NS, "rid1")].startswith(b"F")


def test_shard_rank_must_match_publisher_name() -> None:
    sts = topology_states(8, canonical_replicas=4, world_size=2)
    name = "r1_w0_x"
    forged = copy.deepcopy(sts[(1, 0)])
    forged["world"]["global_rank"] = 0
    _, lead = _leader_seeing(
        {shard_key(NS, "rid1", name): _shard_bytes(forged, rid="rid1", name=name, rank=1)}
    )
    err = lead.machine.error  # type: ignore[attr-defined]
    assert err.reason == "rank-mismatch" and "global_rank" in str(err)


@pytest.mark.parametrize(
    ("name", "fields", "reason"),
    [
        ("bad.name", {}, None),
        ("r1_w0_x", {"round_id": "other"}, "envelope-mismatch"),
        ("r1_w0_x", {"rank": 0}, "rank-mismatch"),
        ("r1_w0_x", {"protocol": 9}, "corrupt-shard"),
    ],
)
def test_forged_envelopes_are_refused(
    name: str, fields: dict[str, Any], reason: str | None
) -> None:
    sts = topology_states(8, canonical_replicas=4, world_size=2)
    env = {
        "protocol": 1,
        "round_id": "rid1",
        "participant": name,
        "rank": 1,
        "worker": 0,
        "state": sts[(1, 0)],
    }
    env.update(fields)
    cl, lead = _leader_seeing({shard_key(NS, "rid1", name): codec.encode(env)})
    if reason is None:  # a name outside the listing grammar is not a shard: timeout
        assert isinstance(lead.machine.error, AggregationTimeout)  # type: ignore[attr-defined]
    else:
        assert lead.machine.error.reason == reason  # type: ignore[attr-defined]


def test_corrupt_shard_bytes_fail_the_round() -> None:
    _, lead = _leader_seeing({shard_key(NS, "rid1", "r1_w0_x"): b"\x00garbage"})
    assert lead.machine.error.reason == "corrupt-shard"  # type: ignore[attr-defined]


def test_two_participants_claiming_one_rank_are_refused() -> None:
    sts = topology_states(8, canonical_replicas=4, world_size=2)
    extra = {
        shard_key(NS, "rid1", n): _shard_bytes(sts[(1, 0)], rid="rid1", name=n, rank=1)
        for n in ("r1_w0_a", "r1_w0_b")
    }
    _, lead = _leader_seeing(extra)
    err = lead.machine.error  # type: ignore[attr-defined]
    assert err.reason == "duplicate-participant" and "run_id" in str(err)


def test_merge_failure_writes_notice_and_followers_fail_at_once() -> None:
    cl, sts = cluster(9, c=4, ws=2, dp=1)
    peer = cl.members[1].machine
    peer.state = copy.deepcopy(peer.state)  # a diverged DP peer
    lane = next(iter(peer.state["progress"]))
    peer.state["progress"][lane] = {"chunk_id": 12345, "offset": 0}
    cl.run()
    lead, fol = cl.members
    assert isinstance(lead.outcome, Abort) and "barrier" in str(lead.outcome.error)
    assert isinstance(fol.outcome, Abort) and isinstance(fol.outcome.error, LeaderFailed)
    assert "barrier" in str(fol.outcome.error)
    assert cl.now < T
    assert list(cl.backend.data) == [outcome_key(NS, "rid1")]
    assert cl.backend.data[outcome_key(NS, "rid1")].startswith(b"F")


def test_result_wins_over_a_later_notice_and_a_notice_over_a_later_result() -> None:
    store = MemoryBackend()
    key = outcome_key(NS, "r")
    assert store.put_if_absent(key, b"Rdata")
    assert not store.put_if_absent(key, b"Fboom")
    assert store.get(key) == b"Rdata"
    # A leader whose slot was taken by a notice never publishes over it.
    cl, _ = cluster(10)
    cl.backend.data[outcome_key(NS, "rid1")] = b"Fearlier"
    cl.run()
    lead = cl.members[0]
    assert isinstance(lead.outcome, Abort)
    assert lead.outcome.error.reason in ("publish-conflict", "timeout")  # type: ignore[union-attr]
    assert cl.backend.data[outcome_key(NS, "rid1")] == b"Fearlier"


# ------------------------------------------------------------------ stale announcements


def _ann(**over: Any) -> bytes:
    ann = {
        "protocol": 1,
        "round_id": "old",
        "namespace": NS,
        "issued_at": 0,
        "world_size": 2,
        "canonical_replicas": 4,
        "reload_count": 0,
        "prev_round_id": None,
        "leader": "r0_w0_z",
    }
    ann.update(over)
    return codec.encode(ann)


@pytest.mark.parametrize(
    ("ann", "why"),
    [
        (_ann(issued_at=-(T + 101)), "older than timeout + grace"),
        (_ann(prev_round_id="r0"), "prev_round_id"),
        (_ann(world_size=3), "world_size"),
        (_ann(reload_count=1), "reload_count"),
        (_ann(namespace="other-0"), "namespace"),
        (_ann(round_id="mine"), "already took part"),
        (_ann(round_id="a.b"), "bad round id"),
        (b"junk", "unreadable"),
        (codec.encode([1]), "another protocol"),
    ],
)
def test_stale_or_foreign_announcement_is_never_joined(ann: bytes, why: str) -> None:
    sts = topology_states(
        11, canonical_replicas=4, world_size=2, last_round_id="mine" if "took part" in why else None
    )
    store = MemoryBackend()
    store.data[announce_key(NS)] = ann
    cl = Cluster(backend=store)
    fol = cl.add("f", Follower(sts[(1, 0)], cfg(1)))
    cl.run()
    out = fol.outcome
    assert isinstance(out, Abort) and isinstance(out.error, AggregationTimeout)
    assert why in str(out.error)
    assert list(store.data) == [announce_key(NS)]  # joined nothing, wrote nothing


def test_closed_round_announcement_is_not_joined() -> None:
    sts = topology_states(12, canonical_replicas=4, world_size=2)
    store = MemoryBackend()
    store.data[announce_key(NS)] = _ann(round_id="done1")
    store.data[outcome_key(NS, "done1")] = b"Rwhatever"
    cl = Cluster(backend=store)
    fol = cl.add("f", Follower(sts[(1, 0)], cfg(1)))
    cl.run()
    assert isinstance(fol.outcome, Abort) and "already has an outcome" in str(fol.outcome.error)


def test_follower_abandons_a_dead_leaders_round_for_the_fresh_one() -> None:
    # A crashed earlier run with the same run_id left a fresh-looking announcement.
    cl, sts = cluster(13, rid="new")
    cl.backend.data[announce_key(NS)] = _ann(round_id="dead")
    lead, fol = cl.members
    for _ in range(6):
        cl.step(fol)  # joins "dead", publishes, waits
    assert shard_key(NS, "dead", "r1_w0_t1w0") in cl.backend.data
    cl.run()
    want = merge(list(sts.values()))
    assert isinstance(lead.outcome, Finish) and lead.outcome.merged == want
    assert isinstance(fol.outcome, Finish) and fol.outcome.round_id == "new"
    assert fol.machine.abandoned == ["dead"]  # type: ignore[attr-defined]
    assert shard_key(NS, "dead", "r1_w0_t1w0") not in cl.backend.data


# ------------------------------------------------------------------ runs sharing storage


def run_together(clusters: list[Cluster], *, stride: int) -> None:
    """Interleave several clusters on one shared clock (a fixed-stride schedule)."""
    step = 0
    while any(c.live() for c in clusters):
        ready = [(c, p) for c in clusters for p in c.runnable()]
        if not ready:
            waits = [
                p.pending.until for c in clusters for p in c.live() if isinstance(p.pending, Sleep)
            ]
            now = max(max(c.now for c in clusters), min(waits))
            for c in clusters:
                c.now = now
            continue
        c, p = ready[(step * stride) % len(ready)]
        c.step(p)
        step += 1


def test_two_runs_with_distinct_run_ids_do_not_interfere() -> None:
    store = MemoryBackend()
    a, sa = cluster(14, backend=store)
    b_sts = topology_states(15, canonical_replicas=4, world_size=2)
    b = Cluster(backend=store)
    for (r, w), s in sorted(b_sts.items()):
        b.add(f"b{r}", machine_for(s, cfg(r, w, rid="rid1", namespace="other-0")))
    run_together([a, b], stride=7)
    assert all(
        isinstance(p.outcome, Finish) and p.outcome.merged == merge(list(sa.values()))
        for p in a.members
    )
    assert all(
        isinstance(p.outcome, Finish) and p.outcome.merged == merge(list(b_sts.values()))
        for p in b.members
    )


@pytest.mark.parametrize("stride", range(1, 7))
def test_two_runs_with_the_same_run_id_refuse_or_produce_a_complete_merge(stride: int) -> None:
    store = MemoryBackend()
    a, sa = cluster(16, backend=store, rid="ra")
    b, sb = cluster(17, backend=store, rid="rb")
    run_together([a, b], stride=stride)
    full = {lane for s in sa.values() for lane in s["progress"]}
    for p in a.members + b.members:
        out = p.outcome
        assert out is not None
        if isinstance(out, Finish):
            m = out.merged
            assert set(m["progress"]) == full  # never a lane missing
            for lane, v in m["progress"].items():
                assert v in (
                    next(s["progress"][lane] for s in sa.values() if lane in s["progress"]),
                    next(s["progress"][lane] for s in sb.values() if lane in s["progress"]),
                )
        else:
            assert isinstance(out.error, AggregationError)
    for key, v in store.data.items():
        if v[:1] == b"R":
            assert set(codec.decode(v[1:])["progress"]) == full, key


# ------------------------------------------------------------------ storage faults and refusals


def test_storage_failure_before_publishing_fails_cleanly() -> None:
    store = FailingBackend()
    store.fail = lambda op, key: op == "list" and any(".shard.r1" in k for k in store.data)
    cl, _ = cluster(18, backend=store)
    cl.run(pick=1)
    lead, fol = cl.members
    assert isinstance(lead.outcome, Abort) and lead.outcome.error.reason == "storage"  # type: ignore[union-attr]
    assert isinstance(fol.outcome, Abort) and isinstance(fol.outcome.error, LeaderFailed)
    assert not any(v[:1] == b"R" for v in store.data.values())


def test_follower_shard_publish_failure_aborts_that_follower() -> None:
    store = FailingBackend(lambda op, key: op == "put" and ".shard.r1" in key)
    cl, _ = cluster(19, backend=store)
    cl.run()
    lead, fol = cl.members
    assert isinstance(fol.outcome, Abort) and fol.outcome.error.reason == "storage"  # type: ignore[union-attr]
    assert isinstance(lead.outcome, Abort) and isinstance(lead.outcome.error, AggregationTimeout)


def test_io_failed_event_is_accepted_in_every_storage_phase() -> None:
    sts = topology_states(20, canonical_replicas=2, world_size=2)
    lead = Leader(sts[(0, 0)], cfg(0))
    c = lead.apply(Started(0))
    c = lead.apply(IOFailed(1, "disk full"))
    assert isinstance(c, PutIfAbsent) and c.data.startswith(b"F") and b"disk full" in c.data
    c = lead.apply(IOFailed(2, "x"))
    assert c == Delete(announce_key(NS))
    c = lead.apply(Stored(3))
    c = lead.apply(Created(3, True)) if isinstance(c, PutIfAbsent) else lead.apply(Stored(3))
    assert isinstance(c, Abort) and c.error.reason == "storage"  # type: ignore[union-attr]
    fol = Follower(sts[(1, 0)], cfg(1))
    fol.apply(Started(0))
    assert fol.apply(IOFailed(1, "x")) == Sleep(11)
    assert fol.apply(Woke(11)) == Get(announce_key(NS))
    assert isinstance(fol.apply(Fetched(12, None)), Sleep)


def test_bad_configs_and_states_are_refused_before_any_io() -> None:
    sts = topology_states(21, canonical_replicas=2, world_size=2)
    with pytest.raises(ConfigError, match="rank"):
        cfg(2)
    with pytest.raises(ConfigError, match="token"):
        RoundConfig(namespace=NS, rank=0, world_size=1, token="a.b", timeout=1)
    with pytest.raises(ConfigError, match="namespace"):
        RoundConfig(namespace=".x", rank=0, world_size=1, token="a", timeout=1)
    with pytest.raises(ConfigError, match="round_id"):
        cfg(0, rid="a/b")
    with pytest.raises(ConfigError, match="round id supplied"):
        Leader(sts[(0, 0)], cfg(0, rid=None))
    with pytest.raises(ConfigError, match="not the state's last_round_id"):
        Leader(dict(sts[(0, 0)], last_round_id="rid1"), cfg(0))
    with pytest.raises(ConfigError, match="world_size"):
        Follower(sts[(1, 0)], RoundConfig(namespace=NS, rank=1, world_size=3, token="a", timeout=1))
    with pytest.raises(ConfigError, match="the caller's rank"):
        Leader(sts[(1, 0)], cfg(0))
    with pytest.raises(ConfigError, match="rank 0, worker 0"):
        Leader(sts[(1, 0)], cfg(1))
    with pytest.raises(ConfigError, match="not rank 0 worker 0"):
        Follower(sts[(0, 0)], cfg(0))
    with pytest.raises(StateFormatError):
        Follower(dict(sts[(1, 0)], version=1), cfg(1))
    with pytest.raises(StateFormatError, match="finite"):
        Follower(dict(sts[(1, 0)], work_config={"x": float("nan")}), cfg(1))

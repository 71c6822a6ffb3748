"""Merge the per-participant engine states of one aggregation round (notes 5.1, 5.2).

Theory of operation
-------------------
:func:`merge` is a pure function: a list of engine-state dicts in (one per
participant: a rank, or one DataLoader worker of a rank), one merged engine
state out.  It owns the rules that decide whether a set of shards *is* one
consistent checkpoint:

1. **Shape.**  Every shard is a version-2 engine state with a full ``world``
   (canonical_replicas, world_size, global_rank, dp_group_id, mapping).  Its lane
   tables, each lane's values and its round-robin pointers follow the rules a
   restore applies, checked by :mod:`zephon_ref.state` (``lane_table``,
   ``check_lane``, ``check_rr``); a participant's world and the lanes it reports
   are merge's own.  Lane and cid keys may be ints or digit strings (json round
   trips); the output always uses ints.
2. **Universal fields agree**: canonical_replicas, world_size, last_round_id,
   checkpoint_reload_count, the DP-group lane mapping and any extra top-level
   key (a fingerprint, say).  These are checked *before* DP-peer dedupe so a
   divergent peer cannot hide by being dropped.
3. **DP-peer dedupe.**  Ranks that share a ``dp_group_id`` (TP/PP peers) own the
   same lanes.  The lowest rank of the group represents it; every other rank
   must agree with it on ``progress`` and ``replay_cursors`` lane by lane, and
   on every ``rr_next_idx`` entry they share.  rr entries are unioned (peers
   may split lanes across DataLoader workers differently).
4. **Union of lane-keyed fields.**  After dedupe every lane comes from exactly
   one shard; a lane reported by two shards that survive dedupe is an error.
5. **Coverage.**  Every canonical lane has progress, lane_next_cid and
   lane_ws_state exactly once; no lane outside ``[0, C)`` appears.

The merged ``world`` holds only canonical_replicas and world_size; work_source
is None; work_config is the first non-empty one in participant order.  Output
maps are built in sorted key order, so equal inputs give equal (and equally
encoded) outputs whatever order the shards arrive in.  Inputs are never
mutated; the output shares no mutable object with them.

What may not live here: I/O, clocks, the round protocol, coverage *waiting*
(that is the leader's job in :mod:`zephon_ref.coordination.protocol`).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from zephon_ref import state as state_schema
from zephon_ref import windows
from zephon_ref.errors import ContractError, StateFormatError, StateMismatchError, expected

__all__ = [
    "LANE_FIELDS",
    "REQUIRED_LANE_FIELDS",
    "UNIVERSAL_FIELDS",
    "ShardWorld",
    "merge",
    "shard_world",
]

# Lane-keyed, required and universal fields: the one definition in zephon_ref.state.
LANE_FIELDS: tuple[str, ...] = state_schema.LANE_FIELDS
# Fields every canonical lane must have in a merged state (a restore refuses
# a lane without them, notes 4.3).
REQUIRED_LANE_FIELDS: tuple[str, ...] = state_schema.REQUIRED_LANE_FIELDS
UNIVERSAL_FIELDS: tuple[str, ...] = state_schema.UNIVERSAL_FIELDS
# Fields that must be present in every shard (the others default to empty).
_REQUIRED_TOP = ("version", "world", *REQUIRED_LANE_FIELDS)
# Fields that DP peers must agree on, lane by lane.
_DELIVERY_SYNCED = ("progress", "replay_cursors")


@dataclass(frozen=True, slots=True)
class ShardWorld:
    """The validated ``world`` of one shard, with int keys."""

    canonical_replicas: int
    world_size: int
    global_rank: int
    dp_group_id: int
    mapping: tuple[tuple[int, tuple[int, ...]], ...]  # sorted (dp_group, sorted lanes)
    lanes: tuple[int, ...]  # sorted lanes this shard reports (progress keys)


def shard_world(state: Any, *, who: str = "state") -> ShardWorld:
    """Validate the parts of one shard the round protocol and merge rely on."""
    if not isinstance(state, Mapping):
        raise StateFormatError(expected(who, "an engine-state dict", type(state).__name__))
    for name in _REQUIRED_TOP:
        if name not in state:
            raise StateFormatError(
                expected(f"{who} keys", f"a {name!r} entry", sorted(map(str, state)))
            )
    if type(state["version"]) is not int or state["version"] not in state_schema.ACCEPTED_VERSIONS:
        raise StateFormatError(expected(f"{who} version", f"one of {state_schema.ACCEPTED_VERSIONS}",
                                        state["version"]))
    world = state["world"]
    if not isinstance(world, Mapping):
        raise StateFormatError(expected(f"{who} world", "a dict", type(world).__name__))
    for name in ("canonical_replicas", "world_size", "global_rank", "dp_group_id", "mapping"):
        if name not in world:
            raise StateFormatError(
                expected(
                    f"{who} world", f"a {name!r} entry (a per-rank state)", sorted(map(str, world))
                )
            )
    c = state_schema.check_int(world["canonical_replicas"], f"{who} world.canonical_replicas", lo=1)
    ws = state_schema.check_int(world["world_size"], f"{who} world.world_size", lo=1)
    rank = state_schema.check_int(world["global_rank"], f"{who} world.global_rank", lo=0)
    if rank >= ws:
        raise StateFormatError(expected(f"{who} world.global_rank", f"an int in [0, {ws})", rank))
    group = state_schema.check_int(world["dp_group_id"], f"{who} world.dp_group_id", lo=0)
    raw_mapping = world["mapping"]
    if not isinstance(raw_mapping, Mapping) or not raw_mapping:
        raise StateFormatError(
            expected(f"{who} world.mapping", "a non-empty dict dp_group -> lanes", raw_mapping)
        )
    mapping: dict[int, tuple[int, ...]] = {}
    owner: dict[int, int] = {}
    for g_raw, lanes_raw in raw_mapping.items():
        g = state_schema.int_key(g_raw)
        if g is None:
            raise StateFormatError(expected(f"{who} world.mapping key", "a DP group id (an int or a digit "
                                            "string)", g_raw))
        if g in mapping:
            raise StateFormatError(expected(f"{who} world.mapping keys", "unique DP groups", g_raw))
        if not isinstance(lanes_raw, (list, tuple)):
            raise StateFormatError(
                expected(f"{who} world.mapping[{g}]", "a list of lanes", lanes_raw)
            )
        for lane in lanes_raw:
            if type(lane) is not int or not 0 <= lane < c:
                raise StateFormatError(
                    expected(f"{who} world.mapping[{g}] lane", f"a lane id (an int) in [0, {c})", lane)
                )
            if lane in owner:
                raise StateFormatError(
                    expected(
                        f"{who} world.mapping lane {lane}",
                        "owned by one DP group",
                        f"groups {owner[lane]} and {g}",
                    )
                )
            owner[lane] = g
        mapping[g] = tuple(sorted(lanes_raw))
    if group not in mapping:
        raise StateFormatError(
            expected(
                f"{who} world.dp_group_id", f"one of the mapped groups {sorted(mapping)}", group
            )
        )
    progress = state_schema.lane_table(state, "progress", c, who=who)
    own = set(mapping[group])
    stray = sorted(set(progress) - own)
    if stray:
        raise StateFormatError(
            expected(
                f"{who} lanes (rank {rank}, DP group {group})",
                f"a subset of the group's lanes {sorted(own)}",
                stray,
            )
        )
    return ShardWorld(
        canonical_replicas=c,
        world_size=ws,
        global_rank=rank,
        dp_group_id=group,
        mapping=tuple(sorted(mapping.items())),
        lanes=tuple(sorted(progress)),
    )


@dataclass(slots=True)
class _Shard:
    index: int
    world: ShardWorld
    lanes: dict[str, dict[int, Any]]  # field -> lane -> value
    rr: dict[str, int]
    state: Mapping[str, Any]

    @property
    def who(self) -> str:
        return f"states[{self.index}] (rank {self.world.global_rank})"


def _load(index: int, state: Any, world: ShardWorld | None = None) -> _Shard:
    who = f"states[{index}]"
    if world is None:
        world = shard_world(state, who=who)
    c = world.canonical_replicas
    lanes = {f: state_schema.lane_table(state, f, c, who=who) for f in LANE_FIELDS}
    reported = set(world.lanes)
    for field in LANE_FIELDS:
        extra = sorted(set(lanes[field]) - reported)
        if extra:
            raise StateFormatError(
                expected(
                    f"{who} lanes of {field!r}",
                    f"lanes the shard reports progress for {sorted(reported)}",
                    extra,
                )
            )
    for field in REQUIRED_LANE_FIELDS:
        missing = sorted(reported - set(lanes[field]))
        if missing:
            raise StateFormatError(
                expected(
                    f"{who} field {field!r}",
                    f"an entry for every reported lane {sorted(reported)}",
                    f"missing lanes {missing}",
                )
            )
    # each reported lane's values, by the one definition a restore applies
    for lane in world.lanes:
        state_schema.check_lane(lane, {f: lanes[f][lane] for f in LANE_FIELDS if lane in lanes[f]}, who=who)
    rr = state_schema.check_rr(state.get("rr_next_idx", {}), who=who)
    return _Shard(index=index, world=world, lanes=lanes, rr=rr, state=state)


def _intact(state: Mapping[str, Any]) -> bool:
    """Whether a shard's integrity digest verifies (a merge of altered shards stays unsealed)."""
    try:
        state_schema.verify_integrity(state)
    except StateMismatchError:
        return False
    return True


def _check_universal(shards: Sequence[_Shard]) -> None:
    first = shards[0]
    checks: list[tuple[str, Any]] = [
        ("world.canonical_replicas", lambda s: s.world.canonical_replicas),
        ("world.world_size", lambda s: s.world.world_size),
        ("world.mapping", lambda s: s.world.mapping),
        ("schema", lambda s: s.state.get("schema")),
        ("version", lambda s: s.state.get("version")),
        ("fingerprint", lambda s: s.state.get("fingerprint")),
        ("last_round_id", lambda s: s.state.get("last_round_id")),
        ("checkpoint_reload_count", lambda s: s.state.get("checkpoint_reload_count", 0)),
    ]
    extra = sorted(
        {str(k) for s in shards for k in s.state} - set(LANE_FIELDS) - set(UNIVERSAL_FIELDS)
    )
    for name in extra:
        checks.append((name, lambda s, name=name: s.state.get(name)))
    for name, get in checks:
        want = get(first)
        for s in shards[1:]:
            got = get(s)
            if got != want:
                raise ContractError(
                    expected(
                        f"{name} of {s.who}",
                        f"the same value in every shard ({first.who} has {want!r})",
                        got,
                    )
                )


def _dedupe(shards: Sequence[_Shard]) -> tuple[list[_Shard], dict[str, int]]:
    """Keep the lowest rank's shards per DP group; check peers; union rr entries."""
    by_group: dict[int, dict[int, list[_Shard]]] = {}
    for s in shards:
        by_group.setdefault(s.world.dp_group_id, {}).setdefault(s.world.global_rank, []).append(s)
    kept: list[_Shard] = []
    rr: dict[str, int] = {}
    rr_from: dict[str, str] = {}
    for group in sorted(by_group):
        ranks = by_group[group]
        rep_rank = min(ranks)
        rep = ranks[rep_rank]
        kept.extend(rep)
        synced = {
            f: {lane: v for s in rep for lane, v in s.lanes[f].items()} for f in _DELIVERY_SYNCED
        }
        for rank in sorted(ranks):
            for s in ranks[rank]:
                if rank != rep_rank:
                    for lane in s.world.lanes:
                        for field in _DELIVERY_SYNCED:
                            want = synced[field].get(lane)
                            got = s.lanes[field].get(lane)
                            if lane in synced["progress"] and got != want:
                                raise ContractError(
                                    f"DP group {group} lane {lane}: {field} of rank {rank}: expected the "
                                    f"value of rank {rep_rank} (the group's representative) {want!r}, "
                                    f"received {got!r}; "
                                    "DP peers diverged: call a barrier before checkpoint() so every peer has "
                                    "delivered the same batches"
                                )
                for key in sorted(s.rr):
                    value = s.rr[key]
                    if key in rr and rr[key] != value:
                        raise ContractError(
                            f"rr_next_idx[{key!r}] of {s.who}: expected {rr[key]!r} as in {rr_from[key]}, "
                            f"received {value!r}; DP peers diverged: call a barrier before checkpoint()"
                        )
                    rr[key] = value
                    rr_from.setdefault(key, s.who)
    return kept, rr


def merge(
    states: Sequence[Mapping[str, Any]],
    *,
    warn_mid_window: bool = True,
    worlds: Sequence[ShardWorld] | None = None,
) -> dict[str, Any]:
    """Merge one round's per-participant engine states into one engine state.

    Raises StateFormatError for a malformed shard, ContractError for shards that
    do not form one consistent checkpoint (universal fields differ, DP peers
    diverge, a lane twice, a canonical lane missing).  Never mutates ``states``.

    ``worlds``: ``shard_world(states[i])`` for each shard, when the caller already
    validated them at its trust boundary (the round's leader does, as each shard
    arrives) and has not changed them since; merge then does not validate the
    ``world`` part a second time.  Everything else is checked as without it.
    """
    if isinstance(states, Mapping) or not isinstance(states, Sequence):
        raise StateFormatError(
            expected("merge() states", "a list of engine-state dicts", type(states).__name__)
        )
    if not states:
        raise ContractError(expected("merge() states", "at least one shard", 0))
    if worlds is not None and (
        len(worlds) != len(states) or not all(isinstance(w, ShardWorld) for w in worlds)
    ):
        raise ContractError(
            expected("merge() worlds", f"one ShardWorld per state ({len(states)})", len(worlds))
        )
    shards = [_load(i, s, None if worlds is None else worlds[i]) for i, s in enumerate(states)]
    _check_universal(shards)
    # Deterministic participant order: by rank, then by the shard's first lane.
    shards.sort(key=lambda s: (s.world.global_rank, s.world.lanes, s.index))
    kept, rr = _dedupe(shards)
    c = shards[0].world.canonical_replicas

    lanes: dict[str, dict[int, Any]] = {f: {} for f in LANE_FIELDS}
    source: dict[int, str] = {}
    for s in kept:
        for lane in s.world.lanes:
            if lane in source:
                raise ContractError(
                    expected(
                        f"lane {lane}",
                        f"reported by one shard after DP-peer dedupe (already in {source[lane]})",
                        f"a second report in {s.who}",
                    )
                )
            source[lane] = s.who
        for field in LANE_FIELDS:
            lanes[field].update(s.lanes[field])

    for field in REQUIRED_LANE_FIELDS:
        missing = [lane for lane in range(c) if lane not in lanes[field]]
        if missing:
            raise ContractError(
                expected(
                    f"merged {field!r}",
                    f"an entry for every canonical lane 0..{c - 1}",
                    f"missing lanes {missing}",
                )
            )

    first = shards[0]
    slices: dict[int, dict[str, Any]] = {lane: {} for lane in sorted(lanes["progress"])}
    # the nested values (inflight chunks, lane_ws_state, replay_cursors) are copied below, all at once
    for lane, chunks in lanes["inflight"].items():
        slices[lane]["inflight"] = {int(cid): chunks[cid] for cid in sorted(chunks, key=int)}
    for lane, p in lanes["progress"].items():
        slices[lane]["progress"] = {"chunk_id": int(p["chunk_id"]), "offset": int(p["offset"])}
    for field in ("lane_ws_state", "replay_cursors"):
        for lane, v in lanes[field].items():
            slices[lane][field] = v
    slices = state_schema.owned_copy(slices)  # the output shares no mutable object with the inputs
    for field in ("lane_next_cid", "lane_emitted"):
        for lane, n in lanes[field].items():
            slices[lane][field] = int(n)
    for lane, v in lanes["epoch_boundaries"].items():
        slices[lane]["epoch_boundaries"] = [int(b) for b in v]
    out = state_schema.new_state(
        fingerprint=first.state.get("fingerprint"),
        world={"canonical_replicas": c, "world_size": first.world.world_size},
        lanes=slices,
        last_round_id=first.state.get("last_round_id"),
        checkpoint_reload_count=first.state.get("checkpoint_reload_count", 0),
        rr_next_idx=rr,
        sealed=False,  # sealed once below, after the last edit
    )
    out["work_config"] = copy.deepcopy(
        next((s.state.get("work_config") for s in shards if s.state.get("work_config")), None)
    )
    for name in sorted({str(k) for k in first.state} - set(out)):
        out[name] = copy.deepcopy(first.state[name])
    intact = all(_intact(s.state) for s in shards)
    out = state_schema.seal(out) if intact else {**out, "integrity": None}
    if warn_mid_window:
        windows.warn_if_mid_window(out["lane_emitted"], c, stacklevel=2)
    return dict(sorted(out.items()))

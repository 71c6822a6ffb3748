"""Scale mode: one aggregation round alone, star (leader/follower) against the manifest tree.

Theory of operation
-------------------
This module drives the *real* round machines of zephon_ref at rank counts no job here
could reach (1,000 to 200,000) and measures what one round costs: messages the leader
(or the tree's root) handles, bytes it holds, storage operations, virtual time.  It
re-implements none of the protocol: every decision is taken by
:class:`zephon_ref.coordination.protocol.Leader` / ``Follower`` (the star) or by
:class:`zephon_ref.checkpoint.tree.TreeParticipant` (the tree); this driver only carries
commands to a store and answers back, on the kernel's integer clock.

Star.  Every rank is one participant (worker 0) with its own machine.  A storage command
issued at tick ``t`` by rank ``r`` completes at ``t + latency[r]``: the driver then
performs it against one :class:`~zephon_ref.coordination.backends.MemoryBackend` through
the runner's own :func:`~zephon_ref.coordination.driver.perform` (so one op is atomic at
its completion tick) and feeds the answer to the machine.  ``Sleep`` is where scale
would drown a naive driver (200,000 followers polling every ``poll`` ticks while the
leader reads 200,000 shards is billions of events), so sleeps may be *parked*: the
driver records what a participant read since it last woke (keys it got, prefixes it
listed, each with the store's write sequence at the read).  If none of that changed
before it sleeps, waking it would only repeat the same reads against the same data, so
it is parked until a write touches one of those keys or prefixes, or its deadline; it
then wakes on the first poll tick (``until + k * poll``) at or after that write, as an
instantly-polling process would.  The elided polls are counted
(``storage_ops_elided``, an upper bound: a real poller's own op latencies
stretch its period a little), never hidden.  ``park=False`` runs every poll for real (small
rank counts; the tests check both give the same result).  Parking assumes a machine's
answer to a poll depends only on what it reads and on its deadline, which the
protocol's theory of operation states (no clocks, no I/O of its own).

Shared work.  200,000 machines in one process would each pack a state that differs from
its DP group's only in ``world``, and each decode the same announcement and result.  The
star hands its followers a codec (the real Follower's ``codec=`` seam, protocol.Codec:
``_ScaleCodec``) built on the fast codec (:class:`zephon_ref.fast.codec.FastCodec`, the plain
codec's bytes and refusals, checked by properties.fast_codec): a packer that packs each group's
shared parts once and splices (bytes and refusals exactly codec.pack's: ``_GroupPacker``),
envelopes assembled from that packed state, and a decode memo that gives every follower the
one object decoded from equal bytes (``_SharedDecode``; the followers' Finish results are then
that one object).  The leader gets the FastCodec itself, and so do the tree's shard writes.
The machines still take every decision and refuse what they refused; the driver only saves
repeating identical work.

Tree.  Every rank is one role of a :class:`~zephon_ref.checkpoint.tree.TreeShape`;
writing its shard and its group manifest are storage operations (latency as above),
commitments and completions are messages (``message_latency`` ticks).

States.  The round needs one engine-state contribution per rank.  :func:`rank_state`
builds a small synthetic one that satisfies :func:`zephon_ref.state.validate` and the
merge rules: ``dp_degree`` DP groups own ``canonical_replicas`` lanes contiguously, rank
``r`` is in group ``r mod dp_degree`` and carries its group's lane slices (DP peers
agree, as after a barrier), nothing inflight, nothing delivered.  Every shard carries
the full DP-group mapping, so the star's cost grows as ranks x dp_degree: keep the
degree modest at 200,000 ranks.

Checks.  Star: when the leader finishes, every follower still alive has decoded the
round's result (the leader's acks mean exactly that); ``leftover_acks_of`` starts the
store with acks a crashed earlier round left behind, which the leader must not count.
Tree: the root publishes only after every role committed.  A broken invariant is a
``violations`` entry, never an exception, so a sweep can count them.

Crash.  ``crash=(rank, ops)`` kills that rank (a SIGKILL: its keys stay) once it has
completed ``ops`` storage operations; the round then ends as the protocol says (star:
timeouts and a failure notice; tree: the subtree never commits, nobody reports).

What may not live here: protocol decisions (the machines take them), wall clocks in
anything that decides order (``wall_s`` is measured around the run, for the report only).
"""

from __future__ import annotations

import contextlib
import functools
import gc
import hashlib
import itertools
import json
import operator
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from sim.choices import SeededChoices
from sim.cluster import contiguous_mapping
from sim.kernel import EventHandle, Kernel
from zephon_ref import codec
from zephon_ref import state as schema
from zephon_ref.checkpoint.schema import sha256_hex
from zephon_ref.checkpoint.tree import (
    CapturePrefix,
    Effect,
    Report,
    SendCommitment,
    SendCompletion,
    ShardRecord,
    TreeParticipant,
    TreeShape,
    WriteGroupManifest,
)
from zephon_ref.codec import Codec
from zephon_ref.coordination import protocol
from zephon_ref.coordination.backends import MemoryBackend
from zephon_ref.coordination.driver import perform
from zephon_ref.coordination.protocol import (
    Abort,
    Command,
    Delete,
    Fetched,
    Finish,
    Follower,
    Get,
    Leader,
    ListKeys,
    Machine,
    Put,
    PutIfAbsent,
    RoundConfig,
    Sleep,
    Started,
    Woke,
)
from zephon_ref.errors import ConfigError, StateFormatError, expected
from zephon_ref.fast.codec import FastCodec, SharingLeaderCodec

_FAST = FastCodec()

__all__ = ["RoundStats", "ScaleConfig", "main", "rank_state", "run_round", "star_round", "tree_round"]

Topology = Literal["star", "tree"]
NAMESPACE = "scale-0"
ROUND_ID = "round1"


@dataclass(frozen=True, slots=True)
class ScaleConfig:
    """One round: ``ranks`` participants, ``topology`` star or tree.

    ``dp_degree`` defaults to ``min(ranks, 16)`` and ``canonical_replicas`` to the DP
    degree; ``max_latency`` > 1 draws each rank's storage latency from the seed.
    ``fast_codec`` (the default) encodes with the FastCodec and the star's shared work (module
    docstring); False gives every machine the plain codec and the tree's shards plain encoding
    (the same bytes and decisions, slower: bench_sim_scale measures both).
    """

    ranks: int
    topology: Topology = "star"
    dp_degree: int | None = None
    canonical_replicas: int | None = None
    fanout: int = 16
    seed: int = 0
    max_latency: int = 1
    message_latency: int = 1
    poll: int = 50
    timeout: int = 10_000_000
    park: bool = True
    crash: tuple[int, int] | None = None  # (rank, after this many completed storage ops)
    leftover_acks_of: str | None = (
        None  # star: storage starts with every follower's ack of this earlier round
    )
    fast_codec: bool = True

    def __post_init__(self) -> None:
        for name in ("ranks", "fanout", "max_latency", "poll", "timeout"):
            v = getattr(self, name)
            if type(v) is not int or v < 1:
                raise ConfigError(expected(f"ScaleConfig.{name}", "an int >= 1", v))
        if type(self.fast_codec) is not bool:
            raise ConfigError(expected("ScaleConfig.fast_codec", "a bool", self.fast_codec))
        if type(self.message_latency) is not int or self.message_latency < 0:
            raise ConfigError(expected("ScaleConfig.message_latency", "an int >= 0", self.message_latency))
        if self.topology not in ("star", "tree"):
            raise ConfigError(expected("ScaleConfig.topology", "'star' or 'tree'", self.topology))
        d, c = self.dp, self.lanes
        if type(d) is not int or not 1 <= d <= self.ranks:
            raise ConfigError(expected("ScaleConfig.dp_degree", f"an int in [1, ranks={self.ranks}]", d))
        if type(c) is not int or c < d:
            raise ConfigError(expected("ScaleConfig.canonical_replicas", f"an int >= dp_degree={d}", c))
        if self.crash is not None:
            rank, ops = self.crash
            if type(rank) is not int or not 0 <= rank < self.ranks or type(ops) is not int or ops < 0:
                raise ConfigError(
                    expected("ScaleConfig.crash", f"(rank in [0, {self.ranks}), ops >= 0)", self.crash)
                )

    @property
    def dp(self) -> int:
        return min(self.ranks, 16) if self.dp_degree is None else self.dp_degree

    @property
    def lanes(self) -> int:
        return self.dp if self.canonical_replicas is None else self.canonical_replicas


@dataclass(frozen=True, slots=True)
class RoundStats:
    """What one round cost; one JSON line of the CLI."""

    topology: str
    ranks: int
    dp_degree: int
    canonical_replicas: int
    outcome: str  # "ok", or the error type the leader / root ended with
    detail: str
    virtual_time: int  # ticks from the start to the last participant's end
    leader_messages: int  # star: the leader's storage ops; tree: the root's messages + storage ops
    leader_bytes_held: int  # star: shard bytes read + result; tree: root's commitments + manifest
    storage_ops: int
    storage_ops_elided: int  # polls a parked sleeper did not repeat (star with park=True)
    storage_bytes_written: int
    max_messages_per_participant: int
    participants_done: int  # finished with success (star: Finish; tree: Report)
    events: int
    fingerprint: str  # of the kernel trace and the result: the same config gives the same one
    merged_digest: str | None  # sha256 of the merged state (star) / the root manifest (tree)
    violations: tuple[str, ...]  # broken round invariants the driver saw (see the module docstring)
    wall_s: float = field(compare=False)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True, separators=(",", ":"))


# ---------------------------------------------------------------- per-rank contributions


def _group_slices(c: int, lanes: Sequence[int]) -> dict[str, dict[int, Any]]:
    """The lane-keyed fields of one DP group: valid, small, nothing inflight or delivered."""
    return {
        "inflight": {lane: {} for lane in lanes},
        "progress": {lane: {"chunk_id": -1, "offset": 0} for lane in lanes},
        "lane_next_cid": {lane: 0 for lane in lanes},
        "lane_ws_state": {lane: {"lane_id": lane, "canonical_replicas": c, "global_chunk_index": lane}
                          for lane in lanes},
        "replay_cursors": {lane: None for lane in lanes},
        "epoch_boundaries": {lane: [] for lane in lanes},
        "lane_emitted": {lane: 0 for lane in lanes},
    }


def _group_base(canonical_replicas: int, mapping: dict[int, list[int]], g: int) -> dict[str, Any]:
    """Everything of a rank's state but its ``world``: the same for every rank of DP group ``g``."""
    st = schema.new_state(fingerprint="scale-synthetic", world={}, lanes={}, last_round_id=None,
                          checkpoint_reload_count=0, rr_next_idx={f"0/1:{','.join(map(str, mapping[g]))}": 0})
    st.update(_group_slices(canonical_replicas, mapping[g]))
    return st


def rank_state(rank: int, *, ranks: int, dp_degree: int, canonical_replicas: int,
               _cache: dict[tuple[int, int, int], tuple[dict[int, list[int]], list[dict[str, Any]]]]
               | None = None) -> dict[str, Any]:
    """The engine-state contribution of ``rank`` (synthetic, valid; see the module docstring).

    ``_cache`` (one dict per round) keeps the mapping and each group's base state, so a
    200,000-rank round builds (and seals) ``dp_degree`` bases, not one per rank: every
    rank's state is a fresh top-level dict whose values are shared, never mutated (the
    machines and merge only read states), equal to what an uncached call returns.
    """
    g = rank % dp_degree
    key = (ranks, dp_degree, canonical_replicas)
    if _cache is None:
        mapping = contiguous_mapping(canonical_replicas, dp_degree)
        st = _group_base(canonical_replicas, mapping, g)
    else:
        if key not in _cache:
            mapping = contiguous_mapping(canonical_replicas, dp_degree)
            _cache[key] = (mapping, [_group_base(canonical_replicas, mapping, h) for h in range(dp_degree)])
        mapping, bases = _cache[key]
        st = dict(bases[g])
    st["world"] = {"canonical_replicas": canonical_replicas, "world_size": ranks, "global_rank": rank,
                   "dp_degree": dp_degree, "dp_group_id": g, "mapping": mapping}
    return st


# ---------------------------------------------------------------- the star


_STORAGE = frozenset({Get, ListKeys, Put, PutIfAbsent, Delete})  # exact types: _complete dispatches on them


class _GroupPacker:
    """codec.pack for the states :func:`rank_state` builds from one round's cache, in parts.

    Every rank of DP group ``g`` carries the very objects of the group's base state (see
    rank_state) and a ``world`` of its own whose ``mapping`` is the round's one mapping
    object.  Those shared parts are packed once per group; a rank's state is then its
    world's few ints packed here, spliced with the packed mapping, spliced with the
    group's packed fields (FastCodec.pack_map_with: the bytes of codec.pack of the
    whole state).  Only a state that is exactly such a composition takes the splice: every
    top-level key but ``world`` holds the base's own object (identity), ``world`` is a
    str-keyed dict holding that mapping object.  Anything else (a replaced or extra field,
    a foreign state), and any refusal, goes to FastCodec.pack (codec.pack's bytes and
    refusals), so bytes and error messages are codec.pack's.  It relies on what rank_state
    promises: the shared objects are never mutated.
    """

    __slots__ = ("_bases", "_mapping", "_packed_mapping", "_shared", "_templates")

    def __init__(self, mapping: dict[int, list[int]], bases: list[dict[str, Any]]) -> None:
        self._mapping = mapping
        self._bases = bases
        # per group: its keys but "world", and the objects they hold (compared by identity)
        self._shared = [(tuple(k for k in b if k != "world"), tuple(v for k, v in b.items() if k != "world"))
                        for b in bases]
        self._packed_mapping = codec.pack(mapping)
        self._templates: list[MapTemplate | None] = [None] * len(bases)

    def __call__(self, value: Any, *, root: str = "$") -> bytes:
        world = value.get("world") if type(value) is dict else None
        g = world.get("dp_group_id") if type(world) is dict else None
        if type(g) is int and 0 <= g < len(self._bases):
            assert type(world) is dict and type(value) is dict
            base = self._bases[g]
            keys, objs = self._shared[g]
            if (len(value) == len(base) and world.get("mapping") is self._mapping
                    and set(map(type, world)) == _STR_ONLY
                    and all(map(operator.is_, map(value.get, keys, itertools.repeat(_MISSING)), objs))):
                try:
                    return self._splice(g, base, world)
                except StateFormatError:
                    pass  # the pack below raises it with the caller's path
        return _FAST.pack(value, root=root)

    def _splice(self, g: int, base: dict[str, Any], world: dict[str, Any]) -> bytes:
        template = self._templates[g]
        if template is None:
            template = self._templates[g] = MapTemplate(
                {}, {k: _FAST.pack(v) for k, v in base.items() if k != "world"}, slot="world")
        own = _FAST.pack_map_with({k: v for k, v in world.items() if k != "mapping"},
                                  {"mapping": self._packed_mapping})
        return template.fill(own)


_MISSING = object()
_STR_ONLY = {str}


class MapTemplate:
    """A str-keyed map packed once with one value left open: :meth:`fill` gives, for the
    packed bytes ``b`` of that value, ``FastCodec().pack_map_with(fields, {**packed, slot: b})``.

    For a driver that packs many maps differing in one value (the star's followers share all
    of their state but its ``world``): the map is packed once, through FastCodec.pack_map_with,
    with a marker value in the slot, and cut at the marker; a fill is head + ``b`` + tail
    (msgpack writes a map as a header, then each key and value in order, so the bytes are
    those of packing the whole map).  The caller vouches that ``b`` is the output of
    codec.pack, as for pack_map_with.
    """

    __slots__ = ("_head", "_tail")

    _MARK = codec.pack(b"\x00sim.scale.MapTemplate slot marker\x00")

    def __init__(self, fields: dict[str, Any], packed: dict[str, bytes], *, slot: str) -> None:
        if type(slot) is not str or slot in fields or slot in packed:
            raise StateFormatError(
                expected("MapTemplate slot", "a str key of neither fields nor packed", slot)
            )
        parts = _FAST.pack_map_with(fields, {**packed, slot: self._MARK}).split(self._MARK)
        if len(parts) != 2:  # a packed value holds the marker's bytes: no unambiguous cut
            raise StateFormatError(expected("MapTemplate parts", "values that do not contain the slot marker",
                                            f"{len(parts) - 1} occurrences"))
        self._head, self._tail = parts

    def fill(self, value_packed: bytes) -> bytes:
        if type(value_packed) is not bytes or not value_packed:
            raise StateFormatError(
                expected("MapTemplate value", "the non-empty bytes of pack()", value_packed)
            )
        return self._head + value_packed + self._tail


class _SharedDecode:
    """codec.decode, remembering the last few values it decoded: equal bytes, the same object.

    Every follower of a round decodes the same announcement (twice) and the same result;
    200,000 private copies of a decoded merged state cost gigabytes and seconds.  This
    memo hands each follower the one object decoded from those bytes (the Follower's
    ``decode`` hook says the shared value is never mutated; the machines and this driver
    only read it).  Bytes are compared by value (length first), never by hash; what
    codec.decode refuses raises as before and is not remembered.  A handful of entries
    covers a round (announcement, result); the oldest is dropped when a new one comes.
    """

    __slots__ = ("_entries",)
    _KEEP = 4

    def __init__(self) -> None:
        self._entries: list[tuple[bytes, Any]] = []

    def __call__(self, data: bytes) -> Any:
        for seen, value in self._entries:
            if seen is data or seen == data:
                return value
        value = _FAST.decode(data)
        if len(self._entries) >= self._KEEP:
            del self._entries[0]
        self._entries.append((bytes(data), value))
        return value


class _ScaleCodec:
    """The followers' codec (protocol.Codec): ``pack`` is the group packer's, ``decode`` the
    shared memo's, and ``encode`` of a shard envelope (a str-keyed dict of str and int fields
    and a ``"state"``) splices the packer's bytes of the state with the fields
    (FastCodec.encode_map_with: the bytes of encoding the whole envelope); anything else is
    FastCodec's ``encode``.  Bytes and refusals are the plain codec's: the envelope's fields
    cannot be refused, so a refused state is refused with the path encoding the whole map gives
    (``$['state']...``)."""

    __slots__ = ("_decode", "_packer")

    def __init__(self, packer: _GroupPacker, decode: _SharedDecode) -> None:
        self._packer, self._decode = packer, decode

    def pack(self, value: Any, *, root: str = "$") -> bytes:
        return self._packer(value, root=root)

    def encode(self, value: Any) -> bytes:
        if type(value) is dict and "state" in value and all(
                type(k) is str and (k == "state" or type(v) in (str, int)) for k, v in value.items()):
            return _FAST.encode_map_with({k: v for k, v in value.items() if k != "state"},
                                         {"state": self._packer(value["state"], root="$['state']")})
        return _FAST.encode(value)

    def decode(self, data: bytes) -> Any:
        return self._decode(data)


class _Star:
    def __init__(self, cfg: ScaleConfig) -> None:
        self.cfg = cfg
        self.kernel = Kernel(keep_trace=False)
        self.backend = MemoryBackend()
        choices = SeededChoices(cfg.seed)
        n = cfg.ranks
        self.latency = [choices.integer("scale/latency", 1, cfg.max_latency) for _ in range(n)]
        cache: dict[Any, Any] = {}
        rank_state(0, ranks=n, dp_degree=cfg.dp, canonical_replicas=cfg.lanes, _cache=cache)  # fills it
        # the leader's codec also shares one decoded lane mapping across the shards it holds
        lead_codec: Codec = SharingLeaderCodec() if cfg.fast_codec else codec
        followers: Codec = (_ScaleCodec(_GroupPacker(*cache[(n, cfg.dp, cfg.lanes)]), _SharedDecode())
                            if cfg.fast_codec else codec)
        self.machines: list[Machine] = []
        for r in range(n):
            st = rank_state(r, ranks=n, dp_degree=cfg.dp, canonical_replicas=cfg.lanes, _cache=cache)
            rc = RoundConfig(namespace=NAMESPACE, rank=r, world_size=n, token="t", timeout=cfg.timeout,
                             poll=cfg.poll, round_id=ROUND_ID if r == 0 else None)
            self.machines.append(
                Leader(st, rc, warn_mid_window=False, codec=lead_codec)
                if r == 0
                else Follower(st, rc, codec=followers)
            )
        self.ops = [0] * n
        self.dead = [False] * n
        self.ended: list[Finish | Abort | None] = [None] * n
        self.end_time = 0
        self.bytes_written = 0
        self.leader_bytes = 0
        self.elided = 0
        # parking: what each participant read since it last woke, and who watches what
        self.wseq = 0
        self.key_ver: dict[str, int] = {}
        self.prefix_ver: dict[str, int] = {}
        self.reads: list[list[tuple[bool, str, int]]] = [[] for _ in range(n)]
        self.key_watch: dict[str, set[int]] = {}
        self.prefix_watch: dict[str, set[int]] = {}
        self.parked: dict[int, tuple[Sleep, EventHandle, list[tuple[bool, str]]]] = {}
        self.violations: list[str] = []
        self.park = cfg.park
        self.crash_rank, self.crash_ops = (-1, 0) if cfg.crash is None else cfg.crash
        if cfg.leftover_acks_of is not None:
            for m in self.machines[1:]:
                self.backend.data[protocol.ack_key(NAMESPACE, cfg.leftover_acks_of, m.cfg.participant)] = (
                    b"ok"
                )

    # -- driving ------------------------------------------------------------------------
    def run(self) -> None:
        for r in range(self.cfg.ranks):
            self._issue(r, self.machines[r].apply(Started(0)))
        self.kernel.run()

    def _issue(self, r: int, cmd: Command) -> None:
        if type(cmd) in _STORAGE:  # the common case first: one storage op, done after r's latency
            self.kernel.post(functools.partial(self._complete, r, cmd), after=self.latency[r], label="op")
            return
        if isinstance(cmd, (Finish, Abort)):
            self.ended[r] = cmd
            self.end_time = max(self.end_time, self.kernel.now)
            if r == 0 and isinstance(cmd, Finish):
                late = [f for f, m in enumerate(self.machines) if f and not self.dead[f]
                        and getattr(m, "merged", None) is None]
                if late:
                    self.violations.append(f"the leader finished at {self.kernel.now} before followers "
                                           f"{late[:5]}{'...' if len(late) > 5 else ''} decoded the result")
            return
        if isinstance(cmd, Sleep):
            if not (self.cfg.park and self._park(r, cmd)):
                self.kernel.post(functools.partial(self._wake, r), at=max(cmd.until, self.kernel.now),
                                     label="wake")
            return
        self.kernel.post(functools.partial(self._complete, r, cmd), after=self.latency[r], label="op")

    def _complete(self, r: int, cmd: Command) -> None:
        if self.dead[r]:
            return
        ev = perform(cmd, self.backend, now=self.kernel.now)
        self.ops[r] += 1
        # _issue posts exact storage command types only; dispatch by exact type is cheaper than
        # isinstance on this path, and mypy does not narrow on `type(x) is T` (hence the ignores)
        t = type(cmd)
        if t is Get or t is ListKeys:
            if self.park:
                if t is ListKeys:
                    self.reads[r].append((True, cmd.prefix, self.wseq))  # type: ignore[union-attr]
                else:
                    self.reads[r].append((False, cmd.key, self.wseq))  # type: ignore[union-attr]
            if r == 0 and type(ev) is Fetched and ev.data is not None:
                self.leader_bytes += len(ev.data)
        else:
            assert t is Put or t is PutIfAbsent or t is Delete, cmd
            if t is not Delete:
                self.bytes_written += len(cmd.data)  # type: ignore[union-attr]
            self._written(cmd.key)  # type: ignore[union-attr]
        if r == self.crash_rank and self.ops[r] >= self.crash_ops:
            self.dead[r] = True  # a SIGKILL after this op: its writes stay, it never answers again
            self.end_time = max(self.end_time, self.kernel.now)
            return
        self._issue(r, self.machines[r].apply(ev))

    def _wake(self, r: int) -> None:
        if self.dead[r]:
            return
        self.reads[r] = []
        self._issue(r, self.machines[r].apply(Woke(self.kernel.now)))

    # -- parking ------------------------------------------------------------------------
    def _park(self, r: int, cmd: Sleep) -> bool:
        reads = self.reads[r]
        if not reads:
            return False
        for is_prefix, k, seq in reads:
            if (self.prefix_ver if is_prefix else self.key_ver).get(k, 0) > seq:
                return False  # changed since it was read: poll for real
        watched = sorted({(p, k) for p, k, _ in reads})
        for is_prefix, k in watched:
            (self.prefix_watch if is_prefix else self.key_watch).setdefault(k, set()).add(r)
        deadline = self.machines[r].deadline
        fallback = self.kernel.schedule(lambda: self._unpark(r, deadline), at=max(deadline, cmd.until),
                                        label="wake")
        self.parked[r] = (cmd, fallback, watched)
        return True

    def _written(self, key: str) -> None:
        self.wseq = wseq = self.wseq + 1
        self.key_ver[key] = wseq
        woken: set[int] = set()
        watchers = self.key_watch.get(key)
        if watchers:
            woken |= watchers
        prefix_ver, prefix_watch = self.prefix_ver, self.prefix_watch
        i = key.find(".")
        while i >= 0:
            prefix = key[: i + 1]
            prefix_ver[prefix] = wseq
            watchers = prefix_watch.get(prefix)
            if watchers:
                woken |= watchers
            i = key.find(".", i + 1)
        for r in sorted(woken):
            cmd, fallback, _ = self.parked[r]
            self.kernel.cancel(fallback)
            now, poll = self.kernel.now, self.cfg.poll
            at = cmd.until if now <= cmd.until else cmd.until + -(-(now - cmd.until) // poll) * poll
            at = min(at, max(self.machines[r].deadline, cmd.until))
            self._unwatch(r)
            self.kernel.post(functools.partial(self._unpark, r, at), at=at, label="wake")

    def _unwatch(self, r: int) -> None:
        cmd, _, watched = self.parked[r]
        for is_prefix, k in watched:
            watchers = (self.prefix_watch if is_prefix else self.key_watch)[k]
            watchers.discard(r)
        self.parked[r] = (cmd, self.parked[r][1], [])

    def _unpark(self, r: int, at: int) -> None:
        cmd, _, watched = self.parked.pop(r)
        if watched:
            for is_prefix, k in watched:
                (self.prefix_watch if is_prefix else self.key_watch)[k].discard(r)
        # the polls it would have made between its sleep and now saw nothing new
        skipped = max(0, (at - cmd.until) // self.cfg.poll)
        self.elided += skipped * max(1, len(self.reads[r]))
        self._wake(r)

    # -- result -------------------------------------------------------------------------
    def stats(self, wall_s: float) -> RoundStats:
        lead = self.ended[0]
        leader = self.machines[0]
        assert isinstance(leader, Leader)
        merged_digest = None
        if isinstance(lead, Finish):
            outcome, detail = "ok", f"round {lead.round_id}"
            merged = codec.encode(lead.merged)
            merged_digest = sha256_hex(merged)
        elif isinstance(lead, Abort):
            outcome, detail = type(lead.error).__name__, str(lead.error)[:300]
        else:
            outcome, detail = "leader-lost", "the leader did not end (crashed)"
        done = sum(1 for e in self.ended if isinstance(e, Finish))
        fp = hashlib.sha256(f"{self.kernel.fingerprint()} {outcome} {merged_digest} {self.ops}".encode())
        return RoundStats(
            topology="star", ranks=self.cfg.ranks, dp_degree=self.cfg.dp, canonical_replicas=self.cfg.lanes,
            outcome=outcome, detail=detail, virtual_time=self.end_time, leader_messages=self.ops[0],
            leader_bytes_held=self.leader_bytes + len(leader.own_bytes), storage_ops=sum(self.ops),
            storage_ops_elided=self.elided, storage_bytes_written=self.bytes_written,
            max_messages_per_participant=max(self.ops), participants_done=done, events=self.kernel.events_run,
            fingerprint=fp.hexdigest(), merged_digest=merged_digest, violations=tuple(self.violations),
            wall_s=wall_s,
        )


@contextlib.contextmanager
def _no_cyclic_gc() -> Iterator[None]:
    """Hold Python's cyclic collector off for one round (restored after, however it ends).

    A 200,000-rank round keeps millions of long-lived containers (one machine and one
    state per rank) and makes almost no reference cycles; every full collection walks
    all of them, for nothing (about a third of the round's wall time).  Reference
    counting still frees everything as usual; the few cycles wait for the next collection.
    Wall time only: no decision depends on the collector.  On the way out one young-
    generation pass walks what the round allocated (the first collection after it would
    anyway); a round's ``wall_s`` counts that pass.
    """
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
            gc.collect(0)


def star_round(cfg: ScaleConfig) -> tuple[RoundStats, list[Finish | Abort | None]]:
    """Run one star round; the stats and every participant's end (None: crashed or stuck)."""
    t0 = time.perf_counter()
    with _no_cyclic_gc():
        star = _Star(cfg)
        star.run()
    # wall_s includes the collector's catch-up pass after the round (see _no_cyclic_gc)
    return star.stats(time.perf_counter() - t0), star.ended


# ---------------------------------------------------------------- the tree


class _Tree:
    def __init__(self, cfg: ScaleConfig) -> None:
        self.cfg = cfg
        n = cfg.ranks
        self.kernel = Kernel(keep_trace=False)
        choices = SeededChoices(cfg.seed)
        self.latency = [choices.integer("scale/latency", 1, cfg.max_latency) for _ in range(n)]
        self.shape = TreeShape(n, cfg.fanout)
        self.prefix = CapturePrefix(generation=1, schema_digest="0" * 64, capture_id="scale")
        self.parts = [TreeParticipant(self.shape, r, self.prefix) for r in range(n)]
        self.store: dict[str, bytes] = {}
        self.msgs = [0] * n
        self.ops = [0] * n
        self.dead = [False] * n
        self.reported: list[int] = []
        self.end_time = 0
        self.bytes_written = 0
        self.root_bytes = 0
        self.root_digest: str | None = None
        self.cache: dict[Any, Any] = {}
        self.violations: list[str] = []
        self.committed: set[int] = set()  # roles whose group manifest is durable

    def run(self) -> None:
        for r in range(self.cfg.ranks):
            self.kernel.post(functools.partial(self._shards, r), after=self.latency[r], label="op")
        self.kernel.run()

    def _count_op(self, r: int) -> bool:
        """One storage op of ``r`` completed; False if ``r`` died with it."""
        self.ops[r] += 1
        crash = self.cfg.crash
        if crash is not None and crash[0] == r and self.ops[r] >= crash[1]:
            self.dead[r] = True
            return False
        return True

    def _shards(self, r: int) -> None:
        if self.dead[r]:
            return
        if self.cfg.crash == (r, 0):
            self.dead[r] = True
            return
        st = rank_state(r, ranks=self.cfg.ranks, dp_degree=self.cfg.dp, canonical_replicas=self.cfg.lanes,
                        _cache=self.cache)
        data = (_FAST if self.cfg.fast_codec else codec).encode(st)  # codec.encode's bytes either way
        digest = sha256_hex(data)
        self.store[f"tree-g1.role-{r}.engine.{digest}.shard"] = data
        self.bytes_written += len(data)
        if r == 0:
            self.root_bytes += len(data)
        if self._count_op(r):
            self._effects(r, self.parts[r].shards_written((ShardRecord("engine", digest, len(data)),)))

    def _effects(self, r: int, effects: list[Effect]) -> None:
        now = self.kernel.now
        for e in effects:
            if isinstance(e, WriteGroupManifest):
                self.kernel.post(functools.partial(self._manifest, e), after=self.latency[r], label="op")
            elif isinstance(e, (SendCommitment, SendCompletion)):
                self.msgs[r] += 1
                self.kernel.post(functools.partial(self._deliver, r, e), after=self.cfg.message_latency,
                                     label="msg")
            else:
                assert isinstance(e, Report)
                self.reported.append(e.role)
                self.end_time = max(self.end_time, now)

    def _manifest(self, e: WriteGroupManifest) -> None:
        if self.dead[e.role]:
            return
        name = "tree-g1.root.json" if e.is_root else f"tree-g1.role-{e.role}.{e.digest}.grp"
        self.store[name] = e.data
        self.bytes_written += len(e.data)
        if e.is_root:
            self.root_digest = e.digest
            self.root_bytes += len(e.data)
            missing = [r for r in range(1, self.cfg.ranks) if r not in self.committed]
            if missing:
                self.violations.append(f"the root published before roles {missing[:5]} wrote their manifests")
        else:
            self.committed.add(e.role)
        if self._count_op(e.role):
            self._effects(e.role, self.parts[e.role].manifest_durable())

    def _deliver(self, src: int, e: SendCommitment | SendCompletion) -> None:
        to = e.to_role
        if self.dead[to] or self.dead[src]:
            return  # a message to (or still in flight from) a dead rank is lost
        self.msgs[to] += 1
        if isinstance(e, SendCommitment):
            self._effects(to, self.parts[to].receive_commitment(e.commitment))
        else:
            self._effects(to, self.parts[to].receive_completion(e.completion))

    def stats(self, wall_s: float) -> RoundStats:
        n = self.cfg.ranks
        ok = len(self.reported) == n
        outcome = "ok" if ok else "incomplete"
        detail = (f"root published generation 1, {len(self.reported)} of {n} roles reported" if ok else
                  f"{len(self.reported)} of {n} roles reported; the root "
                  f"{'published' if self.root_digest else 'never published'}")
        end = self.end_time if ok else self.kernel.now
        fp = hashlib.sha256(f"{self.kernel.fingerprint()} {outcome} {self.root_digest} {self.msgs}".encode())
        return RoundStats(
            topology="tree",
            ranks=n,
            dp_degree=self.cfg.dp,
            canonical_replicas=self.cfg.lanes,
            outcome=outcome,
            detail=detail,
            virtual_time=end,
            leader_messages=self.msgs[0] + self.ops[0],
            # the root's own shard and manifest, plus one commitment per child (prefix + digest,
            # about 80 bytes)
            leader_bytes_held=self.root_bytes + 80 * len(self.shape.children(0)),
            storage_ops=sum(self.ops),
            storage_ops_elided=0,
            storage_bytes_written=self.bytes_written,
            max_messages_per_participant=max(m + o for m, o in zip(self.msgs, self.ops, strict=True)),
            participants_done=len(self.reported),
            events=self.kernel.events_run,
            fingerprint=fp.hexdigest(),
            merged_digest=self.root_digest,
            violations=tuple(self.violations),
            wall_s=wall_s,
        )


def tree_round(cfg: ScaleConfig) -> tuple[RoundStats, list[int]]:
    """Run one tree round; the stats and the roles that reported success, in order."""
    t0 = time.perf_counter()
    with _no_cyclic_gc():
        tree = _Tree(cfg)
        tree.run()
    return tree.stats(time.perf_counter() - t0), tree.reported


def run_round(cfg: ScaleConfig) -> RoundStats:
    return star_round(cfg)[0] if cfg.topology == "star" else tree_round(cfg)[0]


# ---------------------------------------------------------------- CLI


def main(argv: Sequence[str] | None = None, *, out: Callable[[str], object] = print) -> int:
    # the project's parser and codes (zephon_ref.exits; docs/cli.md): usage errors are one line, exit 2
    from zephon_ref.exits import (
        EPILOG,
        EXIT_USAGE,
        DefaultsHelpFormatter,
        OneLineArgumentParser,
        refuse,
    )

    ap = OneLineArgumentParser(
        prog="python -m sim.scale",
        description=__doc__.split("\n")[0] if __doc__ else "",
        formatter_class=DefaultsHelpFormatter,
        epilog=EPILOG,
    )
    ap.add_argument("--ranks", type=int, required=True, help="participants in the round (an int >= 1)")
    ap.add_argument("--topology", choices=("star", "tree"), default="star",
                    help="star: leader and followers; tree: the manifest tree")
    ap.add_argument("--dp-degree", type=int, default=None, help="DP groups (default: min(ranks, 16))")
    ap.add_argument("--lanes", type=int, default=None, help="canonical_replicas (default: the DP degree)")
    ap.add_argument("--fanout", type=int, default=16, help="tree: children per node")
    ap.add_argument("--seed", type=int, default=0, help="draws each rank's storage latency")
    ap.add_argument("--max-latency", type=int, default=1, help="storage latency drawn in 1..N ticks per rank")
    ap.add_argument("--rounds", type=int, default=1, help="rounds to run, one JSON line each")
    ap.add_argument("--no-park", action="store_true", help="run every poll for real (small rank counts)")
    ap.add_argument("--crash", type=int, nargs=2, metavar=("RANK", "OPS"), default=None,
                    help="kill RANK after OPS completed storage operations")
    a = ap.parse_args(argv)
    try:
        if a.rounds < 1:
            raise ConfigError(expected("--rounds", "an int >= 1", a.rounds))
        cfg = ScaleConfig(
            ranks=a.ranks,
            topology=a.topology,
            dp_degree=a.dp_degree,
            canonical_replicas=a.lanes,
            fanout=a.fanout,
            seed=a.seed,
            max_latency=a.max_latency,
            park=not a.no_park,
            crash=None if a.crash is None else (a.crash[0], a.crash[1]),
        )
    except ConfigError as exc:
        return refuse("python -m sim.scale", "usage error", str(exc), EXIT_USAGE)
    for _ in range(a.rounds):
        out(run_round(cfg).to_json())
    return 0


if __name__ == "__main__":
    sys.exit(main())

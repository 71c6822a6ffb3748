"""The aggregation round as sans-IO state machines (notes 3.14 item 4, seed "Multi-rank aggregation").

Theory of operation
-------------------
One round merges the engine states of every participant (a rank, or one
DataLoader worker of a rank) into one checkpoint.  The leader is global rank 0,
worker 0; everybody else is a follower.  Each side is a :class:`Leader` or
:class:`Follower` object that owns its round's state and nothing else.  It is
driven by *events in, commands out*: the driver performs the one outstanding
:data:`Command` against a storage backend and answers it with exactly one
:data:`Event`, which it passes to :meth:`Machine.apply`; ``apply`` returns the
next command.  :class:`Finish` and :class:`Abort` end the round.  There are no
clocks and no I/O here: every event carries ``now``, an integer tick
(milliseconds of the driver's clock), and waits are :class:`Sleep` commands
with an integer deadline.  That is what lets unit tests and the in-memory
simulator drive every step by hand and interleave N participants at will.

Keys (``<ns>`` is ``<run_id>-<reload_count>``; names never contain ``/``)::

    <ns>/round.announce             the open round's announcement (leader overwrites)
    <ns>/<rid>.shard.<participant>  one participant's engine state, in an envelope
    <ns>/<rid>.outcome              "R" + merged state, or "F" + failure notice;
                                    created only if absent, so the first wins
    <ns>/<rid>.ack.<participant>    a follower has decoded the result

``participant`` is ``r<rank>_w<worker>_<token>``; the token is unique per call
(process id and random bits in the runners), so two processes claiming one
rank are seen as two participants and refused, never silently overwritten.

Invariants:

* **One budget.**  ``deadline = now(Started) + timeout``; every wait of the
  round checks the same deadline.  Storage operations themselves are not
  interrupted (the runner's backends bound them separately).
* **Never a partial merge.**  The leader merges only once every rank in
  ``0..world_size-1`` has reported every lane of its DP group (per rank, so a
  TP/PP peer cannot stand in for a worker that is late), and merge itself
  re-checks that every canonical lane is present exactly once.
* **Fail at once, fail cleanly.**  A shard whose lane mapping differs from the
  leader's, whose rank differs from its publisher's name, or that duplicates a
  participant, fails the round immediately.  Any failure before the result is
  published creates the failure notice *in the outcome slot* (so a result can
  never appear afterwards for that round), withdraws the announcement and the
  leader's shard, and aborts.  Followers that see the notice fail at once.
  Nothing a failed round leaves behind is readable as a result: results are
  keyed by a round id that is never reused and carry the "R" tag.
* **Result wins.**  The outcome slot is written only if absent, so a published
  result cannot be revoked by a later notice and vice versa.
* **Stale announcements are refused.**  A follower joins only an announcement
  whose namespace, world size, canonical_replicas, reload count and previous
  round id match its own state, that is younger than ``timeout + grace``, that
  is not the round its own state already took part in, and whose outcome slot
  is still empty.

What may not live here: storage, sleeping, wall clocks, random numbers, process
ids.  Round ids and participant tokens are supplied by the driver.
"""

from __future__ import annotations

import enum
import re
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, TypeAlias

from zephon_ref import codec
from zephon_ref.codec import Codec
from zephon_ref.coordination.merge import ShardWorld, merge, shard_world
from zephon_ref.errors import (
    AggregationError,
    AggregationTimeout,
    ConfigError,
    ContractError,
    LeaderFailed,
    ZephonRefError,
    expected,
)

__all__ = [
    "ANNOUNCE_NAME",
    "Abort",
    "Command",
    "Coverage",
    "Created",
    "Delete",
    "Event",
    "Fetched",
    "Finish",
    "Follower",
    "Get",
    "IOFailed",
    "Leader",
    "ListKeys",
    "Listed",
    "Machine",
    "Put",
    "PutIfAbsent",
    "RoundConfig",
    "Sleep",
    "Started",
    "Stored",
    "Woke",
    "ack_key",
    "machine_for",
    "announce_key",
    "outcome_key",
    "parse_participant",
    "participant_name",
    "shard_key",
]

ANNOUNCE_NAME = "round.announce"
PROTOCOL_VERSION = 1
RESULT_TAG = b"R"
FAILURE_TAG = b"F"
MAX_NOTICE_CHARS = 64 * 1024

_ID = re.compile(r"[A-Za-z0-9_-]+")
_TOKEN = re.compile(r"[A-Za-z0-9]+")
_NAMESPACE = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]*")
_PARTICIPANT = re.compile(r"r(0|[1-9][0-9]*)_w(0|[1-9][0-9]*)_([A-Za-z0-9]+)")


# ---------------------------------------------------------------- names


def participant_name(rank: int, worker: int, token: str) -> str:
    return f"r{rank}_w{worker}_{token}"


def parse_participant(name: str) -> tuple[int, int, str]:
    m = _PARTICIPANT.fullmatch(name)
    if m is None:
        raise AggregationError(
            expected("shard publisher name", "r<rank>_w<worker>_<token>", name), reason="bad-name"
        )
    return int(m.group(1)), int(m.group(2)), m.group(3)


def announce_key(ns: str) -> str:
    return f"{ns}/{ANNOUNCE_NAME}"


def shard_prefix(ns: str, rid: str) -> str:
    return f"{ns}/{rid}.shard."


def shard_key(ns: str, rid: str, participant: str) -> str:
    return shard_prefix(ns, rid) + participant


def outcome_key(ns: str, rid: str) -> str:
    return f"{ns}/{rid}.outcome"


def ack_prefix(ns: str, rid: str) -> str:
    return f"{ns}/{rid}.ack."


def ack_key(ns: str, rid: str, participant: str) -> str:
    return ack_prefix(ns, rid) + participant


# ---------------------------------------------------------------- events (driver -> machine)


@dataclass(frozen=True, slots=True)
class Started:
    """First event: the round begins at ``now``."""

    now: int


@dataclass(frozen=True, slots=True)
class Stored:
    """Answer to :class:`Put` and :class:`Delete`."""

    now: int


@dataclass(frozen=True, slots=True)
class Created:
    """Answer to :class:`PutIfAbsent`: ``won`` is False when the key already existed."""

    now: int
    won: bool


@dataclass(frozen=True, slots=True)
class Fetched:
    """Answer to :class:`Get`; ``data`` is None when the key does not exist."""

    now: int
    data: bytes | None


@dataclass(frozen=True, slots=True)
class Listed:
    """Answer to :class:`ListKeys`: the full keys that start with the prefix, sorted."""

    now: int
    keys: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Woke:
    """Answer to :class:`Sleep`."""

    now: int


@dataclass(frozen=True, slots=True)
class IOFailed:
    """Answer to any storage command that raised; ``message`` says what failed."""

    now: int
    message: str


Event: TypeAlias = Started | Stored | Created | Fetched | Listed | Woke | IOFailed


# ---------------------------------------------------------------- commands (machine -> driver)


@dataclass(frozen=True, slots=True)
class Put:
    """Write ``data`` at ``key`` atomically (readers see all of it or nothing)."""

    key: str
    data: bytes


@dataclass(frozen=True, slots=True)
class PutIfAbsent:
    """Create ``key`` with ``data`` only if it does not exist."""

    key: str
    data: bytes


@dataclass(frozen=True, slots=True)
class Get:
    key: str


@dataclass(frozen=True, slots=True)
class ListKeys:
    """List the keys that start with ``prefix`` (which ends with ``.``)."""

    prefix: str


@dataclass(frozen=True, slots=True)
class Delete:
    """Remove ``key`` if it exists."""

    key: str


@dataclass(frozen=True, slots=True)
class Sleep:
    """Nothing to do before tick ``until``; answer with :class:`Woke`."""

    until: int


@dataclass(frozen=True, slots=True)
class Finish:
    """The round succeeded: ``merged`` is the decoded merged state."""

    merged: dict[str, Any]
    round_id: str


@dataclass(frozen=True, slots=True)
class Abort:
    """The round failed; the driver raises ``error``."""

    error: AggregationError | ZephonRefError
    round_id: str | None


Command: TypeAlias = Put | PutIfAbsent | Get | ListKeys | Delete | Sleep | Finish | Abort


# ---------------------------------------------------------------- configuration


@dataclass(frozen=True, slots=True)
class RoundConfig:
    """What one participant needs to know about its round.

    ``timeout`` and ``poll`` and ``stale_grace`` are in ticks (the driver's unit,
    milliseconds in the runners).  ``round_id`` is used by the leader only.
    """

    namespace: str
    rank: int
    world_size: int
    token: str
    timeout: int
    worker: int = 0
    poll: int = 50
    stale_grace: int = 30_000
    round_id: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.namespace, str) or not _NAMESPACE.fullmatch(self.namespace):
            raise ConfigError(
                expected(
                    "namespace", "a name of [A-Za-z0-9._-] not starting with '.'", self.namespace
                )
            )
        for name in ("rank", "worker", "world_size", "timeout", "poll", "stale_grace"):
            v, lo = getattr(self, name), 1 if name in ("world_size", "poll") else 0
            if type(v) is not int or v < lo:
                raise ConfigError(expected(name, "an int >= 1" if lo else "a non-negative int", v))
        if self.rank >= self.world_size:
            raise ConfigError(expected("rank", f"an int in [0, {self.world_size})", self.rank))
        if not isinstance(self.token, str) or not _TOKEN.fullmatch(self.token):
            raise ConfigError(
                expected("participant token", "a non-empty [A-Za-z0-9]+ string", self.token)
            )
        if self.round_id is not None and (
            not isinstance(self.round_id, str) or not _ID.fullmatch(self.round_id)
        ):
            raise ConfigError(
                expected("round_id", "a non-empty [A-Za-z0-9_-]+ string", self.round_id)
            )

    @property
    def participant(self) -> str:
        return participant_name(self.rank, self.worker, self.token)

    @property
    def is_leader(self) -> bool:
        return self.rank == 0 and self.worker == 0


# ---------------------------------------------------------------- coverage


@dataclass(slots=True)
class Coverage:
    """The leader's record of which ranks reported which lanes (one owner: the Leader)."""

    world: ShardWorld  # the leader's own
    slot_owner: dict[tuple[int, int], str] = field(default_factory=dict)  # (rank, worker) -> name
    group_of_rank: dict[int, int] = field(default_factory=dict)
    lanes_of_rank: dict[int, set[int]] = field(default_factory=dict)

    def add(self, participant: str, rank: int, worker: int, w: ShardWorld) -> None:
        """Record one shard; raise AggregationError at once on any inconsistency."""
        mine = self.world
        if w.mapping != mine.mapping:
            groups = sorted({g for g, _ in w.mapping} | {g for g, _ in mine.mapping})
            differ = [g for g in groups if dict(w.mapping).get(g) != dict(mine.mapping).get(g)]
            raise AggregationError(
                expected(
                    f"lane mapping in the shard of {participant}",
                    f"the leader's mapping {dict(mine.mapping)}",
                    f"{dict(w.mapping)} (differing DP groups {differ})",
                ),
                reason="mapping-mismatch",
            )
        for name in ("canonical_replicas", "world_size"):
            if getattr(w, name) != getattr(mine, name):
                raise AggregationError(
                    expected(
                        f"{name} in the shard of {participant}",
                        f"the leader's {getattr(mine, name)}",
                        getattr(w, name),
                    ),
                    reason="world-mismatch",
                )
        if w.global_rank != rank:
            raise AggregationError(
                expected(
                    f"world.global_rank in the shard published as {participant}",
                    f"{rank} (the publisher's rank)",
                    w.global_rank,
                ),
                reason="rank-mismatch",
            )
        slot = (rank, worker)
        if slot in self.slot_owner:
            raise AggregationError(
                expected(
                    f"one participant for rank {rank} worker {worker}",
                    self.slot_owner[slot],
                    f"a second one, {participant}: two runs share this run_id and storage, or a process "
                    "was started twice",
                ),
                reason="duplicate-participant",
            )
        group = self.group_of_rank.get(rank)
        if group is not None and group != w.dp_group_id:
            raise AggregationError(
                expected(
                    f"DP group of rank {rank} in the shard of {participant}",
                    str(group),
                    w.dp_group_id,
                ),
                reason="group-mismatch",
            )
        have = self.lanes_of_rank.get(rank, set())
        twice = sorted(have & set(w.lanes))
        if twice:
            raise AggregationError(
                expected(
                    f"lanes of rank {rank} across its workers",
                    "disjoint",
                    f"lanes {twice} reported twice (last by {participant})",
                ),
                reason="duplicate-lane",
            )
        self.slot_owner[slot] = participant
        self.group_of_rank[rank] = w.dp_group_id
        self.lanes_of_rank[rank] = have | set(w.lanes)

    def _group_lanes(self, group: int) -> set[int]:
        return set(dict(self.world.mapping).get(group, ()))

    def complete(self) -> bool:
        ranks = set(range(self.world.world_size))
        if set(self.lanes_of_rank) != ranks:
            return False
        covered: set[int] = set()
        for rank, lanes in self.lanes_of_rank.items():
            if lanes != self._group_lanes(self.group_of_rank[rank]):
                return False
            covered |= lanes
        return covered == set(range(self.world.canonical_replicas))

    def missing(self) -> tuple[tuple[int, ...], tuple[int, ...], str]:
        """(missing ranks, missing lanes, a sentence naming both)."""
        ranks = tuple(r for r in range(self.world.world_size) if r not in self.lanes_of_rank)
        covered = set().union(*self.lanes_of_rank.values()) if self.lanes_of_rank else set()
        uncovered = {lane for lane in range(self.world.canonical_replicas) if lane not in covered}
        partial: dict[int, list[int]] = {}
        for rank in sorted(self.lanes_of_rank):
            gap = self._group_lanes(self.group_of_rank[rank]) - self.lanes_of_rank[rank]
            if gap:
                partial[rank] = sorted(gap)
        guess: dict[int, list[int]] = {}
        if len(self.world.mapping) == self.world.world_size:
            # dp_degree == world_size: DP group g is rank g (the default layout).
            guess = {r: sorted(self._group_lanes(r)) for r in ranks}
        lanes = tuple(
            sorted(
                uncovered
                | {lane for v in partial.values() for lane in v}
                | {lane for v in guess.values() for lane in v}
            )
        )
        parts = [f"missing ranks {list(ranks)}"]
        if guess:
            parts.append("their lanes " + ", ".join(f"rank {r}: {v}" for r, v in guess.items()))
        parts.append(f"lanes no shard covered {sorted(uncovered)}")
        if partial:
            parts.append(
                "lanes missing from ranks that reported "
                + ", ".join(f"rank {r}: {v}" for r, v in partial.items())
            )
        return ranks, lanes, "; ".join(parts)


# ---------------------------------------------------------------- the machines


class Phase(enum.Enum):
    NEW = "new"
    # leader
    ANNOUNCE = "announce"
    PUBLISH_OWN = "publish-own"
    LIST_SHARDS = "list-shards"
    READ_SHARD = "read-shard"
    SHARD_POLL = "shard-poll"
    CLOSE = "close"
    PUBLISH_RESULT = "publish-result"
    DELETE_OWN = "delete-own"
    LIST_ACKS = "list-acks"
    ACK_POLL = "ack-poll"
    DELETE_ACKS = "delete-acks"
    DELETE_PREVIOUS = "delete-previous"
    NOTICE = "notice"
    RETRACT_ANNOUNCE = "retract-announce"
    RETRACT_OWN = "retract-own"
    # follower
    SEEK = "seek"
    SEEK_POLL = "seek-poll"
    CHECK_OPEN = "check-open"
    PUBLISH_SHARD = "publish-shard"
    AWAIT = "await"
    AWAIT_POLL = "await-poll"
    RECHECK = "recheck"
    SWITCH = "switch"
    WITHDRAW = "withdraw"
    DELETE_SHARD = "delete-shard"
    ACK = "ack"
    # both
    DONE = "done"


_Handler = Callable[[Any, Any], Command]


def _checked_codec(c: Any) -> Codec:
    """``c`` if it has callable ``pack``, ``encode`` and ``decode`` (a :class:`~zephon_ref.codec.Codec`:
    the plain module by default); else ConfigError."""
    missing = [m for m in ("pack", "encode", "decode") if not callable(getattr(c, m, None))]
    if missing:
        raise ConfigError(expected("codec", "an object with pack, encode and decode (zephon_ref.codec)",
                                   f"{type(c).__name__} without {', '.join(missing)}"))
    return c  # type: ignore[no-any-return]


def _validated(state: Mapping[str, Any], cfg: RoundConfig) -> ShardWorld:
    """Check a participant's own state against its config (StateFormatError, ConfigError)."""
    w = shard_world(state, who=f"the state of rank {cfg.rank}")
    if w.global_rank != cfg.rank:
        raise ConfigError(
            expected("state world.global_rank", f"the caller's rank {cfg.rank}", w.global_rank)
        )
    if w.world_size != cfg.world_size:
        raise ConfigError(
            expected(
                "state world.world_size", f"the caller's world_size {cfg.world_size}", w.world_size
            )
        )
    return w


class Machine:
    """Shared plumbing: the transition table lookup, the deadline, terminal commands."""

    TABLE: ClassVar[dict[tuple[Phase, type], _Handler]] = {}

    def __init__(self, state: Mapping[str, Any], cfg: RoundConfig, *, codec: Codec = codec) -> None:
        # Validate first: a refused call writes nothing.
        self.codec: Codec = _checked_codec(codec)
        self.cfg = cfg
        self.world = _validated(state, cfg)
        self.state = state
        self.phase = Phase.NEW
        self.deadline = 0
        self.round_id: str | None = cfg.round_id
        self.last_round_id: Any = state.get("last_round_id")
        self.reload_count: Any = state.get("checkpoint_reload_count", 0)
        self.error: AggregationError | ZephonRefError | None = None  # set when the failure path begins
        self.merged: dict[str, Any] | None = None  # the decoded result, once there is one

    # -- the one apply function -------------------------------------------------------

    def apply(self, event: Event) -> Command:
        """Feed the answer to the outstanding command; return the next command."""
        handler = self.TABLE.get((self.phase, type(event)))
        if handler is None:
            raise ContractError(
                expected(
                    f"event for {type(self).__name__} in phase {self.phase.value!r}",
                    "one the transition table accepts",
                    type(event).__name__,
                )
            )
        cmd = handler(self, event)
        if isinstance(cmd, (Finish, Abort)):
            self.phase = Phase.DONE
        return cmd

    @property
    def done(self) -> bool:
        return self.phase is Phase.DONE

    def _go(self, phase: Phase, cmd: Command) -> Command:
        self.phase = phase
        return cmd

    def _sleep(self, now: int, phase: Phase) -> Command:
        return self._go(phase, Sleep(until=min(now + self.cfg.poll, self.deadline)))

    def _key(self, kind: str) -> str:
        """This participant's key of the joined round: its ``shard``, its ``ack``, or the ``outcome``."""
        ns, rid = self.cfg.namespace, self.round_id
        assert rid is not None, "no round joined yet"
        if kind == "shard":
            return shard_key(ns, rid, self.cfg.participant)
        if kind == "outcome":
            return outcome_key(ns, rid)
        if kind == "ack":
            return ack_key(ns, rid, self.cfg.participant)
        raise AssertionError(kind)  # pragma: no cover

    def _envelope(self) -> bytes:
        """The shard as published: the encoding of the envelope dict below, the participant's
        state under ``"state"`` (a faster codec may assemble the same bytes from parts it
        packed once: sim.scale's does)."""
        assert self.round_id is not None
        return self.codec.encode(
            {
                "protocol": PROTOCOL_VERSION,
                "round_id": self.round_id,
                "participant": self.cfg.participant,
                "rank": self.cfg.rank,
                "worker": self.cfg.worker,
                "state": self.state,
            }
        )

    def _finish(self, ev: Event | None = None) -> Command:
        """The round succeeded: hand back the decoded result."""
        assert self.merged is not None and self.round_id is not None
        return Finish(self.merged, self.round_id)

    def _abort(self, ev: Stored | IOFailed) -> Command:
        """The failure path's last step: abort with the error recorded where it began."""
        assert self.error is not None
        return Abort(self.error, self.round_id)

    def _storage_error(self, doing: str, ev: IOFailed) -> AggregationError:
        return AggregationError(f"{doing}: {ev.message}", reason="storage")

    def _timeout_text(self, now: int) -> str:
        return (
            f"after {now - (self.deadline - self.cfg.timeout)} of {self.cfg.timeout} ticks "
            "(aggregate_timeout_s budget)"
        )


class Leader(Machine):
    """Global rank 0, worker 0: announce, collect, check coverage, merge, publish, await acks."""

    def __init__(
        self, state: Mapping[str, Any], cfg: RoundConfig, *, warn_mid_window: bool = True,
        codec: Codec = codec,
    ) -> None:
        if not cfg.is_leader:
            raise ConfigError(
                expected(
                    "Leader config", "rank 0, worker 0", f"rank {cfg.rank}, worker {cfg.worker}"
                )
            )
        if cfg.round_id is None:
            raise ConfigError(
                expected("Leader round_id", "a round id supplied by the driver", None)
            )
        if cfg.round_id == state.get("last_round_id"):
            raise ConfigError(
                expected(
                    "Leader round_id", "a new id (not the state's last_round_id)", cfg.round_id
                )
            )
        super().__init__(state, cfg, codec=codec)
        self.warn_mid_window = warn_mid_window
        # An unencodable state is refused here (StateFormatError, the path as inside the
        # envelope) before any I/O.
        self.own_bytes = self._envelope()
        self.coverage = Coverage(world=self.world)
        # decoded here, never mutated (a codec may share equal decoded values between them:
        # zephon_ref.fast.codec.SharingLeaderCodec)
        self.states: dict[str, Mapping[str, Any]] = {}
        self.worlds: dict[str, ShardWorld] = {}  # shard_world() of each, from _accept
        self.listed: set[str] = set()
        # FIFO queues (deque: popping the head of a 200,000-key list costs a memmove each)
        self.queue: deque[str] = deque()
        self.acks_pending: set[str] = set()
        self.ack_queue: deque[str] = deque()

    def announcement(self, now: int) -> bytes:
        return self.codec.encode(
            {
                "protocol": PROTOCOL_VERSION,
                "round_id": self.round_id,
                "namespace": self.cfg.namespace,
                "issued_at": now,
                "world_size": self.world.world_size,
                "canonical_replicas": self.world.canonical_replicas,
                "reload_count": self.reload_count,
                "prev_round_id": self.last_round_id,
                "leader": self.cfg.participant,
            }
        )

    # -- happy path ----------------------------------------------------------------

    def _start(self, ev: Started) -> Command:
        self.deadline = ev.now + self.cfg.timeout
        return self._go(
            Phase.ANNOUNCE, Put(announce_key(self.cfg.namespace), self.announcement(ev.now))
        )

    def _announced(self, ev: Stored) -> Command:
        return self._go(Phase.PUBLISH_OWN, Put(self._key("shard"), self.own_bytes))

    def _own_published(self, ev: Stored) -> Command:
        env = self.codec.decode(self.own_bytes)  # the same round trip followers' shards take
        try:
            self._accept(self.cfg.participant, env)
        except ZephonRefError as exc:  # pragma: no cover - the constructor validated it
            return self._fail(exc)
        return self._list(ev.now)

    def _list(self, now: int) -> Command:
        assert self.round_id is not None
        return self._go(
            Phase.LIST_SHARDS, ListKeys(shard_prefix(self.cfg.namespace, self.round_id))
        )

    def _listed_shards(self, ev: Listed) -> Command:
        assert self.round_id is not None
        prefix = shard_prefix(self.cfg.namespace, self.round_id)
        for key in ev.keys:
            if not key.startswith(prefix) or key in self.listed:
                continue
            name = key[len(prefix) :]
            if name == self.cfg.participant:
                continue
            self.listed.add(key)
            self.queue.append(key)
        return self._next_shard(ev.now)

    def _next_shard(self, now: int) -> Command:
        if self.queue:
            return self._go(Phase.READ_SHARD, Get(self.queue[0]))
        if self.coverage.complete():
            return self._go(Phase.CLOSE, Delete(announce_key(self.cfg.namespace)))
        if now >= self.deadline:
            ranks, lanes, text = self.coverage.missing()
            return self._fail(
                AggregationTimeout(
                    expected(
                        f"aggregation round {self.round_id}: shards {self._timeout_text(now)}",
                        f"every rank 0..{self.world.world_size - 1} reporting every lane of its DP group",
                        text,
                    )
                    + f" (received {len(self.states)} shards); did every rank call checkpoint()?",
                    waiting_for="shards",
                    missing_ranks=ranks,
                    missing_lanes=lanes,
                )
            )
        return self._sleep(now, Phase.SHARD_POLL)

    def _read_shard(self, ev: Fetched) -> Command:
        key = self.queue.popleft()
        if ev.data is None:
            # Vanished between list and read (a follower withdrew): forget it, re-list later.
            self.listed.discard(key)
            return self._next_shard(ev.now)
        assert self.round_id is not None
        name = key[len(shard_prefix(self.cfg.namespace, self.round_id)) :]
        try:
            env = self.codec.decode(ev.data)
        except ZephonRefError as exc:
            return self._fail(
                AggregationError(
                    expected(f"shard of {name}", "a decodable envelope", str(exc)),
                    reason="corrupt-shard",
                )
            )
        try:
            self._accept(name, env)
        except ZephonRefError as exc:
            return self._fail(exc)
        return self._next_shard(ev.now)

    def _accept(self, name: str, env: Any) -> None:
        rank, worker, _ = parse_participant(name)
        if (
            not isinstance(env, dict)
            or env.get("protocol") != PROTOCOL_VERSION
            or "state" not in env
        ):
            raise AggregationError(
                expected(
                    f"shard of {name}",
                    f"a protocol-{PROTOCOL_VERSION} envelope",
                    type(env).__name__,
                ),
                reason="corrupt-shard",
            )
        for k, want in (
            ("round_id", self.round_id),
            ("participant", name),
            ("rank", rank),
            ("worker", worker),
        ):
            if env.get(k) != want:
                raise AggregationError(
                    expected(f"{k} in the shard published as {name}", repr(want), env.get(k)),
                    reason="rank-mismatch" if k == "rank" else "envelope-mismatch",
                )
        # The trust boundary: a shard is validated here, once, as it arrives; merge is
        # handed this ShardWorld instead of validating the world part again.
        w = shard_world(env["state"], who=f"the shard of {name}")
        self.coverage.add(name, rank, worker, w)
        self.states[name] = env["state"]
        # Coverage.add refused a mapping unlike the leader's: hold the leader's equal tuple (values
        # do not change, only which object holds them)
        assert w.mapping == self.world.mapping
        self.worlds[name] = replace(w, mapping=self.world.mapping)

    def _closed(self, ev: Stored | IOFailed) -> Command:
        if isinstance(ev, IOFailed):
            return self._fail(self._storage_error(f"closing round {self.round_id}", ev))
        order = sorted(self.states, key=parse_participant)
        try:
            merged = merge(
                [self.states[n] for n in order],
                warn_mid_window=self.warn_mid_window,
                worlds=[self.worlds[n] for n in order],
            )
            data = self.codec.encode(merged)
        except ZephonRefError as exc:
            return self._fail(exc)
        # Return exactly what followers decode.
        self.merged = self.codec.decode(data)
        return self._go(Phase.PUBLISH_RESULT, PutIfAbsent(self._key("outcome"), RESULT_TAG + data))

    def _published(self, ev: Created | IOFailed) -> Command:
        if isinstance(ev, IOFailed):
            return self._fail(self._storage_error(f"publishing the result of round {self.round_id}", ev))
        if not ev.won:
            # The slot is taken (by a notice or a result we did not write): never overwrite it.
            self.error = AggregationError(
                expected(
                    f"outcome slot of round {self.round_id}",
                    "empty before the leader publishes",
                    "an existing outcome",
                ),
                reason="publish-conflict",
            )
            return self._go(Phase.RETRACT_ANNOUNCE, Delete(announce_key(self.cfg.namespace)))
        self.acks_pending = {n for n in self.states if n != self.cfg.participant}
        return self._go(Phase.DELETE_OWN, Delete(self._key("shard")))

    def _own_deleted(self, ev: Stored | IOFailed) -> Command:
        return self._list_acks()

    def _list_acks(self) -> Command:
        assert self.round_id is not None
        return self._go(Phase.LIST_ACKS, ListKeys(ack_prefix(self.cfg.namespace, self.round_id)))

    def _listed_acks(self, ev: Listed | IOFailed) -> Command:
        assert self.round_id is not None
        if isinstance(ev, Listed):
            prefix = ack_prefix(self.cfg.namespace, self.round_id)
            for key in ev.keys:
                name = key[len(prefix) :]
                if key.startswith(prefix) and name in self.acks_pending:
                    self.acks_pending.discard(name)
                    self.ack_queue.append(key)
        if not self.acks_pending:
            return self._next_ack_delete()
        if ev.now >= self.deadline:
            missing = tuple(sorted(self.acks_pending))
            return Abort(
                AggregationTimeout(
                    expected(
                        f"aggregation round {self.round_id}: "
                        f"acknowledgements {self._timeout_text(ev.now)}",
                        f"an ack from each of {len(self.states) - 1} followers",
                        f"none from {list(missing)}",
                    )
                    + f"; the result stays at {self._key('outcome')} for late readers",
                    waiting_for="acks",
                    missing_ranks=tuple(sorted({parse_participant(n)[0] for n in missing})),
                    missing_participants=missing,
                ),
                self.round_id,
            )
        return self._sleep(ev.now, Phase.ACK_POLL)

    def _next_ack_delete(self) -> Command:
        if self.ack_queue:
            return self._go(Phase.DELETE_ACKS, Delete(self.ack_queue.popleft()))
        prev = self.last_round_id
        if isinstance(prev, str) and _ID.fullmatch(prev) and prev != self.round_id:
            return self._go(Phase.DELETE_PREVIOUS, Delete(outcome_key(self.cfg.namespace, prev)))
        return self._finish()

    def _ack_deleted(self, ev: Stored | IOFailed) -> Command:
        return self._next_ack_delete()

    # -- failure path -----------------------------------------------------------------

    def _fail(self, error: ZephonRefError) -> Command:
        self.error = error
        notice = f"{type(error).__name__}: {error}"[:MAX_NOTICE_CHARS].encode("utf-8")
        return self._go(Phase.NOTICE, PutIfAbsent(self._key("outcome"), FAILURE_TAG + notice))

    def _io_failed(self, ev: IOFailed) -> Command:
        return self._fail(self._storage_error(
            f"aggregation round {self.round_id}: storage failed in phase {self.phase.value!r}", ev))

    def _noticed(self, ev: Created | IOFailed) -> Command:
        return self._go(Phase.RETRACT_ANNOUNCE, Delete(announce_key(self.cfg.namespace)))

    def _retracted_announce(self, ev: Stored | IOFailed) -> Command:
        return self._go(Phase.RETRACT_OWN, Delete(self._key("shard")))

    TABLE: ClassVar[dict[tuple[Phase, type], _Handler]] = {
        (Phase.NEW, Started): _start,
        (Phase.ANNOUNCE, Stored): _announced,
        (Phase.ANNOUNCE, IOFailed): _io_failed,
        (Phase.PUBLISH_OWN, Stored): _own_published,
        (Phase.PUBLISH_OWN, IOFailed): _io_failed,
        (Phase.LIST_SHARDS, Listed): _listed_shards,
        (Phase.LIST_SHARDS, IOFailed): _io_failed,
        (Phase.READ_SHARD, Fetched): _read_shard,
        (Phase.READ_SHARD, IOFailed): _io_failed,
        (Phase.SHARD_POLL, Woke): lambda self, ev: self._list(ev.now),
        (Phase.CLOSE, Stored): _closed,
        (Phase.CLOSE, IOFailed): _closed,
        (Phase.PUBLISH_RESULT, Created): _published,
        (Phase.PUBLISH_RESULT, IOFailed): _published,
        (Phase.DELETE_OWN, Stored): _own_deleted,
        (Phase.DELETE_OWN, IOFailed): _own_deleted,
        (Phase.LIST_ACKS, Listed): _listed_acks,
        (Phase.LIST_ACKS, IOFailed): _listed_acks,
        (Phase.ACK_POLL, Woke): lambda self, ev: self._list_acks(),
        (Phase.DELETE_ACKS, Stored): _ack_deleted,
        (Phase.DELETE_ACKS, IOFailed): _ack_deleted,
        (Phase.DELETE_PREVIOUS, Stored): Machine._finish,
        (Phase.DELETE_PREVIOUS, IOFailed): Machine._finish,
        (Phase.NOTICE, Created): _noticed,
        (Phase.NOTICE, IOFailed): _noticed,
        (Phase.RETRACT_ANNOUNCE, Stored): _retracted_announce,
        (Phase.RETRACT_ANNOUNCE, IOFailed): _retracted_announce,
        (Phase.RETRACT_OWN, Stored): Machine._abort,
        (Phase.RETRACT_OWN, IOFailed): Machine._abort,
    }


class Follower(Machine):
    """Every participant but rank 0 worker 0: join the open round, publish, await, ack."""

    def __init__(
        self,
        state: Mapping[str, Any],
        cfg: RoundConfig,
        *,
        codec: Codec = codec,
    ) -> None:
        """``codec`` (a :class:`~zephon_ref.codec.Codec`) packs the state, encodes the envelope and
        decodes the announcement and the result."""
        if cfg.is_leader:
            raise ConfigError(
                expected("Follower config", "not rank 0 worker 0", "rank 0, worker 0")
            )
        super().__init__(state, cfg, codec=codec)
        self.round_id = None
        self.codec.pack(self.state)  # refuse an unencodable state before any I/O
        self.skipped: str = "no announcement seen"
        self.switch_to: str | None = None
        self.abandoned: list[str] = []

    def _start(self, ev: Started) -> Command:
        self.deadline = ev.now + self.cfg.timeout
        return self._seek()

    def _seek(self) -> Command:
        return self._go(Phase.SEEK, Get(announce_key(self.cfg.namespace)))

    def _judge(self, data: bytes | None, now: int) -> str | None:
        """The round id of an open announcement, else None (and why, in self.skipped)."""
        if data is None:
            self.skipped = "no announcement seen"
            return None
        try:
            ann = self.codec.decode(data)
        except ZephonRefError as exc:
            self.skipped = f"an unreadable announcement ({exc})"
            return None
        if not isinstance(ann, dict) or ann.get("protocol") != PROTOCOL_VERSION:
            self.skipped = f"an announcement of another protocol ({type(ann).__name__})"
            return None
        rid = ann.get("round_id")
        if not isinstance(rid, str) or not _ID.fullmatch(rid):
            self.skipped = f"an announcement with a bad round id {rid!r}"
            return None
        if rid == self.last_round_id:
            self.skipped = (
                f"announcement of round {rid}, which this state already took part in (stale)"
            )
            return None
        issued = ann.get("issued_at")
        checks = (
            ("namespace", self.cfg.namespace),
            ("world_size", self.world.world_size),
            ("canonical_replicas", self.world.canonical_replicas),
            ("reload_count", self.reload_count),
            ("prev_round_id", self.last_round_id),
        )
        for k, want in checks:
            if ann.get(k) != want:
                self.skipped = (
                    f"announcement of round {rid} with {k}={ann.get(k)!r}, ours is {want!r} "
                    "(stale, or another run)"
                )
                return None
        if type(issued) is not int or now - issued > self.cfg.timeout + self.cfg.stale_grace:
            self.skipped = (
                f"announcement of round {rid} issued at {issued!r}, older than timeout + grace at {now} "
                "(stale)"
            )
            return None
        return rid

    def _sought(self, ev: Fetched | IOFailed) -> Command:
        rid = self._judge(ev.data, ev.now) if isinstance(ev, Fetched) else None
        if isinstance(ev, IOFailed):
            self.skipped = f"announcement unreadable ({ev.message})"
        if rid is None:
            return self._wait_announcement(ev.now)
        self.round_id = rid
        return self._go(Phase.CHECK_OPEN, Get(self._key("outcome")))

    def _wait_announcement(self, now: int) -> Command:
        if now >= self.deadline:
            self.round_id = None
            return Abort(
                AggregationTimeout(
                    expected(
                        f"rank {self.cfg.rank} worker {self.cfg.worker}: open round announcement "
                        f"{self._timeout_text(now)}",
                        f"a fresh announcement at {announce_key(self.cfg.namespace)} from the leader "
                        "(rank 0, worker 0)",
                        self.skipped,
                    ),
                    waiting_for="announcement",
                    missing_ranks=(0,),
                ),
                None,
            )
        return self._sleep(now, Phase.SEEK_POLL)

    def _checked_open(self, ev: Fetched | IOFailed) -> Command:
        if isinstance(ev, IOFailed) or ev.data is not None:
            self.skipped = (
                f"announcement of round {self.round_id}, which already has an outcome (closed)"
            )
            self.round_id = None
            return self._wait_announcement(ev.now)
        return self._go(Phase.PUBLISH_SHARD, Put(self._key("shard"), self._envelope()))

    def _shard_published(self, ev: Stored | IOFailed) -> Command:
        if isinstance(ev, IOFailed):
            return self._withdraw(self._storage_error(
                f"publishing the shard of {self.cfg.participant} in round {self.round_id}", ev))
        return self._go(Phase.AWAIT, Get(self._key("outcome")))

    def _awaited(self, ev: Fetched | IOFailed) -> Command:
        data = ev.data if isinstance(ev, Fetched) else None
        if data is None:
            if ev.now >= self.deadline:
                return self._withdraw(
                    AggregationTimeout(
                        expected(
                            f"rank {self.cfg.rank} worker {self.cfg.worker}: "
                            f"outcome of round {self.round_id} {self._timeout_text(ev.now)}",
                            "a result or a failure notice from the leader (rank 0, worker 0)",
                            "neither (the leader died, or is waiting for another rank)",
                        ),
                        waiting_for="outcome",
                        missing_ranks=(0,),
                    )
                )
            # Is the round still the open one?  A different open announcement means
            # ours was abandoned (its leader died, e.g. a crashed earlier run with
            # this run_id): withdraw and join the new one.
            return self._go(Phase.RECHECK, Get(announce_key(self.cfg.namespace)))
        tag, body = data[:1], data[1:]
        if tag == FAILURE_TAG:
            return self._withdraw(
                LeaderFailed(
                    f"aggregation round {self.round_id} failed on the leader: "
                    f"{body.decode('utf-8', 'replace')}"
                )
            )
        if tag != RESULT_TAG:
            return self._withdraw(
                AggregationError(
                    expected(f"outcome of round {self.round_id}", "an 'R' or 'F' tag", tag),
                    reason="corrupt-result",
                )
            )
        try:
            merged = self.codec.decode(body)
        except ZephonRefError as exc:
            return self._withdraw(
                AggregationError(
                    expected(f"result of round {self.round_id}", "a decodable state", str(exc)),
                    reason="corrupt-result",
                )
            )
        if not isinstance(merged, dict):
            return self._withdraw(
                AggregationError(
                    expected(f"result of round {self.round_id}", "a dict", type(merged).__name__),
                    reason="corrupt-result",
                )
            )
        self.merged = merged
        return self._go(Phase.DELETE_SHARD, Delete(self._key("shard")))

    def _rechecked(self, ev: Fetched | IOFailed) -> Command:
        if isinstance(ev, Fetched) and ev.data is not None:
            joined, joined_skip = self.round_id, self.skipped
            rid = self._judge(ev.data, ev.now)
            self.skipped = joined_skip
            if rid is not None and rid != joined:
                self.switch_to = rid
                return self._go(Phase.SWITCH, Delete(self._key("shard")))
        return self._sleep(ev.now, Phase.AWAIT_POLL)

    def _switched(self, ev: Stored | IOFailed) -> Command:
        assert self.switch_to is not None
        self.abandoned.append(self.round_id or "")
        self.round_id, self.switch_to = self.switch_to, None
        return self._go(Phase.CHECK_OPEN, Get(self._key("outcome")))

    def _withdraw(self, error: ZephonRefError) -> Command:
        self.error = error
        return self._go(Phase.WITHDRAW, Delete(self._key("shard")))

    def _shard_deleted(self, ev: Stored | IOFailed) -> Command:
        return self._go(Phase.ACK, Put(self._key("ack"), b"ok"))

    def _acked(self, ev: Stored | IOFailed) -> Command:
        if isinstance(ev, IOFailed):
            return Abort(self._storage_error(f"acknowledging round {self.round_id}", ev), self.round_id)
        return self._finish()

    TABLE: ClassVar[dict[tuple[Phase, type], _Handler]] = {
        (Phase.NEW, Started): _start,
        (Phase.SEEK, Fetched): _sought,
        (Phase.SEEK, IOFailed): _sought,
        (Phase.SEEK_POLL, Woke): lambda self, ev: self._seek(),
        (Phase.CHECK_OPEN, Fetched): _checked_open,
        (Phase.CHECK_OPEN, IOFailed): _checked_open,
        (Phase.PUBLISH_SHARD, Stored): _shard_published,
        (Phase.PUBLISH_SHARD, IOFailed): _shard_published,
        (Phase.AWAIT, Fetched): _awaited,
        (Phase.AWAIT, IOFailed): _awaited,
        (Phase.AWAIT_POLL, Woke): lambda self, ev: self._go(Phase.AWAIT, Get(self._key("outcome"))),
        (Phase.RECHECK, Fetched): _rechecked,
        (Phase.RECHECK, IOFailed): _rechecked,
        (Phase.SWITCH, Stored): _switched,
        (Phase.SWITCH, IOFailed): _switched,
        (Phase.WITHDRAW, Stored): Machine._abort,
        (Phase.WITHDRAW, IOFailed): Machine._abort,
        (Phase.DELETE_SHARD, Stored): _shard_deleted,
        (Phase.DELETE_SHARD, IOFailed): _shard_deleted,
        (Phase.ACK, Stored): _acked,
        (Phase.ACK, IOFailed): _acked,
    }


def machine_for(
    state: Mapping[str, Any], cfg: RoundConfig, *, warn_mid_window: bool = True, codec: Codec = codec
) -> Machine:
    """The Leader for rank 0 worker 0, a Follower for everybody else (``codec``: a codec.Codec)."""
    if cfg.is_leader:
        return Leader(state, cfg, warn_mid_window=warn_mid_window, codec=codec)
    return Follower(state, cfg, codec=codec)

"""The manifest tree: publishing and restoring one generation across many ranks.

Theory of operation
-------------------
This module owns the *hierarchical* publication protocol of the seed document
("On a hierarchy: the manifest tree"), as a sans-IO state machine
(:class:`TreeParticipant`); its file driver (``publish_tree``, ``restore_role``) is
:mod:`zephon_ref.checkpoint.tree_files`.  A simulator can drive the participants itself, with
its own message delays and faults.

Shape.  :class:`TreeShape` numbers ``size`` roles in preorder with fan-out at
most ``fanout``: a role's subtree is the role range ``[role, role + size)``, and
the ``size - 1`` roles below a node are split among at most ``fanout``
children in sizes that differ by at most one, larger first.  Coverage is
therefore structural: if every parent checks that each commitment names
exactly the child role and subtree size the shape prescribes, the root covers
every role exactly once (by induction on the subtree).

Protocol, per participant:

1. write its own shards durably (the driver does; the machine gets the records);
2. wait for one :class:`Commitment` per child.  A commitment naming another
   role, another subtree size, another capture prefix, or a child already
   committed is refused (:class:`CheckpointRefused`) and changes nothing;
3. emit its group manifest (prefix, own shard records, one record per child:
   role, size, digest of the child's group manifest) to be written durably;
4. a non-root sends its parent only a commitment (prefix + one record); the
   root's manifest written under the root name *is* the publication;
5. completion is released downward only after the root is durable; a
   participant reports success only when completion reaches it.

A missing subtree never commits, so its ancestors never write, the root never
publishes, and nobody reports success; the driver (or simulator) decides when
to ``abort``.

Restore of one role reads the root manifest, then each group manifest on the
path down to its own, each checked against the digest, role and size its
parent records and against the root's prefix: depth + 1 <= height + 1
manifests, never a sibling subtree; then the role's own shards.

What may not live here: engine state knowledge, clocks, threads, sockets.
"""

from __future__ import annotations

import enum
import json
import re
from dataclasses import dataclass, field
from typing import Any

from zephon_ref.checkpoint.schema import sha256_hex
from zephon_ref.errors import ConfigError, ContractError, expected
from zephon_ref.storage.errors import CheckpointCorrupt, CheckpointRefused

__all__ = [
    "GROUP_MAGIC",
    "CapturePrefix",
    "ChildRecord",
    "Commitment",
    "Completion",
    "Effect",
    "GroupManifest",
    "Phase",
    "Report",
    "SendCommitment",
    "SendCompletion",
    "ShardRecord",
    "TreeParticipant",
    "TreeShape",
    "WriteGroupManifest",
    "decode_group_manifest",
    "encode_group_manifest",
]

GROUP_MAGIC = b"ZEPHON-REF-TREE-MANIFEST 1\n"
_DESCRIPTOR = re.compile(r"[a-z0-9_-]{1,64}")
_HEX64 = re.compile(r"[0-9a-f]{64}")


# ---------------------------------------------------------------- shape


@dataclass(frozen=True, slots=True)
class TreeShape:
    """``size`` roles in preorder with bounded ``fanout``."""

    size: int
    fanout: int
    _sizes: tuple[int, ...] = field(init=False, repr=False, compare=False)
    _parent: tuple[int, ...] = field(init=False, repr=False, compare=False)
    _depth: tuple[int, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if type(self.size) is not int or self.size < 1:
            raise ConfigError(expected("tree size", "an int >= 1", self.size))
        if type(self.fanout) is not int or self.fanout < 1:
            raise ConfigError(expected("tree fanout", "an int >= 1", self.fanout))
        sizes = [0] * self.size
        parent = [-1] * self.size
        depth = [0] * self.size
        stack = [(0, self.size, -1, 0)]
        while stack:
            role, sz, par, d = stack.pop()
            sizes[role], parent[role], depth[role] = sz, par, d
            for child, csz in _split(role, sz, self.fanout):
                stack.append((child, csz, role, d + 1))
        object.__setattr__(self, "_sizes", tuple(sizes))
        object.__setattr__(self, "_parent", tuple(parent))
        object.__setattr__(self, "_depth", tuple(depth))

    def _check(self, role: int) -> None:
        if type(role) is not int or not 0 <= role < self.size:
            raise ConfigError(expected("tree role", f"an int in [0, {self.size})", role))

    def subtree_size(self, role: int) -> int:
        self._check(role)
        return self._sizes[role]

    def children(self, role: int) -> tuple[tuple[int, int], ...]:
        """``(child role, subtree size)`` pairs, in preorder."""
        self._check(role)
        return tuple(_split(role, self._sizes[role], self.fanout))

    def parent(self, role: int) -> int | None:
        self._check(role)
        p = self._parent[role]
        return None if p < 0 else p

    def depth(self, role: int) -> int:
        self._check(role)
        return self._depth[role]

    @property
    def height(self) -> int:
        return max(self._depth)

    def path(self, role: int) -> tuple[int, ...]:
        """Roles from the root down to ``role``, inclusive."""
        self._check(role)
        out = [role]
        while self._parent[out[-1]] >= 0:
            out.append(self._parent[out[-1]])
        return tuple(reversed(out))


def _split(role: int, size: int, fanout: int) -> list[tuple[int, int]]:
    rest = size - 1
    if rest == 0:
        return []
    k = min(fanout, rest)
    base, extra = divmod(rest, k)
    out = []
    nxt = role + 1
    for i in range(k):
        csz = base + (1 if i < extra else 0)
        out.append((nxt, csz))
        nxt += csz
    return out


# ---------------------------------------------------------------- records


@dataclass(frozen=True, slots=True)
class CapturePrefix:
    """What every piece of one generation must agree on."""

    generation: int
    schema_digest: str
    capture_id: str


@dataclass(frozen=True, slots=True)
class ShardRecord:
    descriptor: str
    digest: str
    size: int


@dataclass(frozen=True, slots=True)
class ChildRecord:
    role: int
    subtree_size: int
    manifest_digest: str


@dataclass(frozen=True, slots=True)
class Commitment:
    """What a child sends its parent: the prefix plus one child record."""

    prefix: CapturePrefix
    role: int
    subtree_size: int
    manifest_digest: str


@dataclass(frozen=True, slots=True)
class Completion:
    """Released downward once the root is durable."""

    generation: int
    root_digest: str


@dataclass(frozen=True, slots=True)
class GroupManifest:
    prefix: CapturePrefix
    role: int
    subtree_size: int
    shards: tuple[ShardRecord, ...]
    children: tuple[ChildRecord, ...]


def encode_group_manifest(m: GroupManifest) -> bytes:
    body = json.dumps(
        {
            "prefix": [m.prefix.generation, m.prefix.schema_digest, m.prefix.capture_id],
            "role": m.role,
            "subtree_size": m.subtree_size,
            "shards": [[s.descriptor, s.digest, s.size] for s in m.shards],
            "children": [[c.role, c.subtree_size, c.manifest_digest] for c in m.children],
        },
        sort_keys=True,
        separators=(",", ":"),
    ).encode("ascii")
    return GROUP_MAGIC + body + b"\n" + sha256_hex(body).encode("ascii") + b"\n"


def _bad(what: str, exp: str, got: Any, reason: str = "manifest-malformed") -> CheckpointCorrupt:
    return CheckpointCorrupt(expected(what, exp, got), reason=reason)


def decode_group_manifest(data: bytes) -> GroupManifest:
    """Parse and validate; any deviation from the canonical bytes raises CheckpointCorrupt."""
    if not data.startswith(GROUP_MAGIC) or len(data) < len(GROUP_MAGIC) + 66:
        raise _bad("group manifest header", repr(GROUP_MAGIC), data[: len(GROUP_MAGIC)])
    rest = data[len(GROUP_MAGIC) :]
    body, digest = rest[:-66], rest[-65:-1]
    if rest[-66:-65] != b"\n" or rest[-1:] != b"\n" or sha256_hex(body).encode("ascii") != digest:
        raise _bad("group manifest digest", "sha256 of its body", digest, "manifest-digest")
    try:
        obj = json.loads(body.decode("ascii"))
        gen, schema, cap = obj["prefix"]
        m = GroupManifest(
            prefix=CapturePrefix(generation=gen, schema_digest=schema, capture_id=cap),
            role=obj["role"],
            subtree_size=obj["subtree_size"],
            shards=tuple(ShardRecord(descriptor=d, digest=h, size=s) for d, h, s in obj["shards"]),
            children=tuple(
                ChildRecord(role=r, subtree_size=z, manifest_digest=h) for r, z, h in obj["children"]
            ),
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise _bad("group manifest body", "canonical JSON of a group manifest", str(exc)) from exc
    if encode_group_manifest(m) != data:
        raise _bad("group manifest encoding", "the canonical form", "a non-canonical variant")
    return m


# ---------------------------------------------------------------- the state machine


class Phase(enum.Enum):
    IDLE = "idle"  # own shards not yet written
    COLLECTING = "collecting"  # waiting for children's commitments
    WRITING = "writing"  # group manifest handed to the driver, not yet durable
    COMMITTED = "committed"  # (non-root) commitment sent, waiting for completion
    DONE = "done"  # completion seen (or, at the root, published): success reported
    ABORTED = "aborted"


# Transition table: (phase, event) -> phase.  Events not listed are contract errors.
_TRANSITIONS: dict[tuple[Phase, str], Phase] = {
    (Phase.IDLE, "shards_written"): Phase.COLLECTING,
    (Phase.IDLE, "commitment"): Phase.IDLE,  # a child may finish before its parent's shards
    (Phase.COLLECTING, "commitment"): Phase.COLLECTING,
    (Phase.COLLECTING, "children_complete"): Phase.WRITING,
    (Phase.WRITING, "manifest_durable"): Phase.COMMITTED,
    (Phase.WRITING, "root_durable"): Phase.DONE,
    (Phase.COMMITTED, "completion"): Phase.DONE,
    (Phase.IDLE, "abort"): Phase.ABORTED,
    (Phase.COLLECTING, "abort"): Phase.ABORTED,
    (Phase.WRITING, "abort"): Phase.ABORTED,
    (Phase.COMMITTED, "abort"): Phase.ABORTED,
}


@dataclass(frozen=True, slots=True)
class WriteGroupManifest:
    role: int
    is_root: bool
    data: bytes
    digest: str


@dataclass(frozen=True, slots=True)
class SendCommitment:
    to_role: int
    commitment: Commitment


@dataclass(frozen=True, slots=True)
class SendCompletion:
    to_role: int
    completion: Completion


@dataclass(frozen=True, slots=True)
class Report:
    """The participant may now report the generation as committed."""

    role: int
    generation: int


Effect = WriteGroupManifest | SendCommitment | SendCompletion | Report


class TreeParticipant:
    """One role's side of the tree protocol.  Methods return the effects to perform."""

    __slots__ = ("shape", "role", "prefix", "phase", "_shards", "_children", "_expected", "_digest")

    def __init__(self, shape: TreeShape, role: int, prefix: CapturePrefix) -> None:
        shape.subtree_size(role)  # validates the role
        self.shape = shape
        self.role = role
        self.prefix = prefix
        self.phase = Phase.IDLE
        self._shards: tuple[ShardRecord, ...] = ()
        self._expected: dict[int, int] = dict(shape.children(role))
        self._children: dict[int, ChildRecord] = {}
        self._digest: str | None = None

    def _go(self, event: str) -> None:
        nxt = _TRANSITIONS.get((self.phase, event))
        if nxt is None:
            raise ContractError(
                expected(
                    f"tree role {self.role} event {event!r}",
                    "an event allowed in this phase",
                    self.phase.value,
                )
            )
        self.phase = nxt

    def _allowed(self, event: str) -> None:
        if (self.phase, event) not in _TRANSITIONS:
            raise ContractError(
                expected(
                    f"tree role {self.role} event {event!r}",
                    "an event allowed in this phase",
                    self.phase.value,
                )
            )

    def shards_written(self, shards: tuple[ShardRecord, ...]) -> list[Effect]:
        self._allowed("shards_written")
        descs = [s.descriptor for s in shards]
        if len(set(descs)) != len(descs) or not all(_DESCRIPTOR.fullmatch(d) for d in descs):
            raise ConfigError(expected("shard descriptors", "unique names of [a-z0-9_-]", descs))
        self._shards = tuple(sorted(shards, key=lambda s: s.descriptor))
        self._go("shards_written")
        return self._maybe_write()

    def receive_commitment(self, c: Commitment) -> list[Effect]:
        """Check a child's commitment; refuse (changing nothing) unless it is exactly right."""
        self._allowed("commitment")
        if c.prefix != self.prefix:
            raise CheckpointRefused(
                expected(f"capture prefix of commitment from role {c.role}", repr(self.prefix), c.prefix),
                reason="capture-mismatch",
            )
        if c.role not in self._expected:
            raise CheckpointRefused(
                expected(
                    f"commitment to role {self.role}", f"one of child roles {sorted(self._expected)}", c.role
                ),
                reason="wrong-role",
            )
        if c.subtree_size != self._expected[c.role]:
            raise CheckpointRefused(
                expected(
                    f"subtree size committed by role {c.role}", str(self._expected[c.role]), c.subtree_size
                ),
                reason="wrong-size",
            )
        if c.role in self._children:
            raise CheckpointRefused(
                expected(f"commitment from role {c.role}", "the first one", "a duplicate"), reason="duplicate"
            )
        if not _HEX64.fullmatch(c.manifest_digest):
            raise CheckpointRefused(
                expected("commitment manifest digest", "64 lowercase hex digits", c.manifest_digest),
                reason="manifest-digest",
            )
        self._go("commitment")
        self._children[c.role] = ChildRecord(c.role, c.subtree_size, c.manifest_digest)
        return self._maybe_write()

    def _maybe_write(self) -> list[Effect]:
        if self.phase is not Phase.COLLECTING or len(self._children) != len(self._expected):
            return []
        self._go("children_complete")
        m = GroupManifest(
            prefix=self.prefix,
            role=self.role,
            subtree_size=self.shape.subtree_size(self.role),
            shards=self._shards,
            children=tuple(self._children[r] for r in sorted(self._children)),
        )
        data = encode_group_manifest(m)
        self._digest = sha256_hex(data)
        return [WriteGroupManifest(self.role, self.role == 0, data, self._digest)]

    def manifest_durable(self) -> list[Effect]:
        """The driver wrote the group manifest durably (at the root: published it)."""
        assert self._digest is not None or self.phase is not Phase.WRITING
        parent = self.shape.parent(self.role)
        if parent is None:
            self._go("root_durable")
            assert self._digest is not None
            return self._release(Completion(self.prefix.generation, self._digest))
        self._go("manifest_durable")
        assert self._digest is not None
        c = Commitment(self.prefix, self.role, self.shape.subtree_size(self.role), self._digest)
        return [SendCommitment(parent, c)]

    def receive_completion(self, c: Completion) -> list[Effect]:
        self._allowed("completion")
        if c.generation != self.prefix.generation:
            raise CheckpointRefused(
                expected("completion generation", str(self.prefix.generation), c.generation),
                reason="stale-generation",
            )
        self._go("completion")
        return self._release(c)

    def _release(self, c: Completion) -> list[Effect]:
        out: list[Effect] = [SendCompletion(child, c) for child in sorted(self._expected)]
        out.append(Report(self.role, self.prefix.generation))
        return out

    def abort(self) -> None:
        self._go("abort")

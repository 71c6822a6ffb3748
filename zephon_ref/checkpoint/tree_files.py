"""The manifest tree's file driver: publish a generation through a Storage, restore one role.

Theory of operation
-------------------
:func:`publish_tree` drives every :class:`~zephon_ref.checkpoint.tree.TreeParticipant` of a
:class:`~zephon_ref.checkpoint.tree.TreeShape` in one process: it writes each role's shards
and group manifest through the shared publish routine (:mod:`zephon_ref.storage`),
delivers commitments upward and completions downward, and reports which roles succeeded.
:func:`restore_role` reads the root manifest, then each group manifest on the path down to
the role's own, each checked against the digest, role and size its parent records and
against the root's prefix (never a sibling subtree), then the role's own shards.

File names: ``tree-g<gen>.role-<role>.<descriptor>.<digest>.shard`` for shards,
``tree-g<gen>.role-<role>.<digest>.grp`` for group manifests, ``tree-g<gen>.root.json``
for the root's (its publication).

What may not live here: the protocol's rules (tree.py), engine state knowledge, clocks.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from zephon_ref.checkpoint.schema import sha256_hex
from zephon_ref.checkpoint.tree import (
    CapturePrefix,
    Effect,
    SendCommitment,
    SendCompletion,
    ShardRecord,
    TreeParticipant,
    TreeShape,
    WriteGroupManifest,
    decode_group_manifest,
)
from zephon_ref.errors import expected
from zephon_ref.storage import PosixStorage, Storage, ensure_dir, publish, read_bytes
from zephon_ref.storage.errors import CheckpointCorrupt, CheckpointNotFound, CheckpointRefused

__all__ = ["RoleRestore", "TreeRun", "publish_tree", "restore_role"]


def _shard_name(gen: int, role: int, descriptor: str, digest: str) -> str:
    return f"tree-g{gen:012d}.role-{role:06d}.{descriptor}.{digest}.shard"


def _group_name(gen: int, role: int, digest: str) -> str:
    return f"tree-g{gen:012d}.role-{role:06d}.{digest}.grp"


def _root_name(gen: int) -> str:
    return f"tree-g{gen:012d}.root.json"


@dataclass(frozen=True, slots=True)
class TreeRun:
    """What :func:`publish_tree` did: the ordered event log and who reported success."""

    log: tuple[str, ...]
    reported: tuple[int, ...]
    root_digest: str | None


def publish_tree(
    directory: str | Path,
    shape: TreeShape,
    prefix: CapturePrefix,
    shards_by_role: Mapping[int, Mapping[str, bytes]],
    *,
    absent_roles: frozenset[int] = frozenset(),
    storage: Storage | None = None,
) -> TreeRun:
    """Run every participant in this process over one directory (FIFO message order).

    ``absent_roles`` never write or commit (a failed subtree): their ancestors
    never publish and no role reports success.  Files go through ``storage``
    (POSIX by default) and its one publish routine.
    """
    st: Storage = PosixStorage() if storage is None else storage
    root_dir = Path(directory)
    ensure_dir(st, root_dir)
    parts = [TreeParticipant(shape, r, prefix) for r in range(shape.size)]
    log: list[str] = []
    reported: list[int] = []
    root_digest: str | None = None
    queue: deque[tuple[int, Effect]] = deque()

    def run(role: int, effects: list[Effect]) -> None:
        for e in effects:
            queue.append((role, e))

    gen = prefix.generation
    for r in range(shape.size):
        if r in absent_roles:
            continue
        records = []
        for desc, data in sorted(shards_by_role.get(r, {}).items()):
            digest = sha256_hex(data)
            publish(st, root_dir / _shard_name(gen, r, desc, digest), data)
            records.append(ShardRecord(desc, digest, len(data)))
        log.append(f"shards {r}")
        run(r, parts[r].shards_written(tuple(records)))
    while queue:
        role, e = queue.popleft()
        to = getattr(e, "to_role", None)
        if to is not None and to in absent_roles:
            log.append(f"dropped {type(e).__name__} {role}->{to}")
            continue
        if isinstance(e, WriteGroupManifest):
            name = _root_name(gen) if e.is_root else _group_name(gen, e.role, e.digest)
            publish(st, root_dir / name, e.data)
            log.append(f"{'root durable' if e.is_root else 'manifest'} {e.role}")
            if e.is_root:
                root_digest = e.digest
            run(e.role, parts[e.role].manifest_durable())
        elif isinstance(e, SendCommitment):
            log.append(f"commit {e.commitment.role}->{e.to_role}")
            run(e.to_role, parts[e.to_role].receive_commitment(e.commitment))
        elif isinstance(e, SendCompletion):
            log.append(f"complete {role}->{e.to_role}")
            run(e.to_role, parts[e.to_role].receive_completion(e.completion))
        else:
            log.append(f"report {e.role}")
            reported.append(e.role)
    return TreeRun(tuple(log), tuple(reported), root_digest)


@dataclass(frozen=True, slots=True)
class RoleRestore:
    prefix: CapturePrefix
    manifests_read: tuple[str, ...]
    shards: dict[str, bytes]


def _read_verified(st: Storage, path: Path, digest: str | None, what: str) -> bytes:
    data = read_bytes(st, path)
    if data is None:
        raise CheckpointCorrupt(
            expected(what, f"file {path.name}", "no such file"), reason="missing-manifest"
        )
    if digest is not None and sha256_hex(data) != digest:
        raise CheckpointCorrupt(
            expected(f"sha256 of {what}", digest, sha256_hex(data)), reason="digest-mismatch"
        )
    return data


def restore_role(
    directory: str | Path,
    shape: TreeShape,
    generation: int,
    role: int,
    *,
    expected_prefix: CapturePrefix | None = None,
    storage: Storage | None = None,
) -> RoleRestore:
    """Read root -> ... -> ``role`` (depth + 1 manifests) and the role's own shards."""
    st: Storage = PosixStorage() if storage is None else storage
    root_dir = Path(directory)
    shape.subtree_size(role)
    read: list[str] = []
    root_bytes = read_bytes(st, root_dir / _root_name(generation))
    if root_bytes is None:
        raise CheckpointNotFound(
            expected(f"tree root of generation {generation}", "a published root manifest", "none"),
            reason="missing-manifest",
        )
    read.append(_root_name(generation))
    m = decode_group_manifest(root_bytes)
    prefix = m.prefix
    if prefix.generation != generation:
        raise CheckpointCorrupt(expected("tree root generation", str(generation), prefix.generation))
    if expected_prefix is not None and prefix != expected_prefix:
        raise CheckpointRefused(
            expected("tree capture prefix", repr(expected_prefix), prefix), reason="capture-mismatch"
        )
    if m.role != 0 or m.subtree_size != shape.size:
        raise CheckpointRefused(
            expected("tree root identity", f"role 0 of size {shape.size}", (m.role, m.subtree_size)),
            reason="wrong-size",
        )
    for nxt in shape.path(role)[1:]:
        want = shape.subtree_size(nxt)
        recs = [c for c in m.children if c.role == nxt]
        if len(recs) != 1 or recs[0].subtree_size != want:
            raise CheckpointRefused(
                expected(
                    f"record of child role {nxt} in role {m.role}'s manifest",
                    f"one record of size {want}",
                    recs,
                ),
                reason="wrong-size",
            )
        name = _group_name(generation, nxt, recs[0].manifest_digest)
        read.append(name)
        m = decode_group_manifest(
            _read_verified(st, root_dir / name, recs[0].manifest_digest, f"group manifest of role {nxt}")
        )
        if m.prefix != prefix:
            raise CheckpointRefused(
                expected(f"prefix of role {nxt}", repr(prefix), m.prefix), reason="capture-mismatch"
            )
        if m.role != nxt or m.subtree_size != want:
            raise CheckpointRefused(
                expected(
                    f"identity of role {nxt}'s manifest", f"role {nxt} size {want}", (m.role, m.subtree_size)
                ),
                reason="wrong-role",
            )
    shards = {
        s.descriptor: _read_verified(
            st,
            root_dir / _shard_name(generation, role, s.descriptor, s.digest),
            s.digest,
            f"shard {s.descriptor} of role {role}",
        )
        for s in m.shards
    }
    return RoleRestore(prefix=prefix, manifests_read=tuple(read), shards=shards)

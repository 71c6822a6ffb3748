"""Manifest tree: shape, commitments, completion order, restore reads height+1 manifests."""

from __future__ import annotations

from pathlib import Path

import pytest

from zephon_ref.checkpoint import tree as T
from zephon_ref.checkpoint import tree_files as TF
from zephon_ref.errors import ContractError
from zephon_ref.storage.errors import CheckpointCorrupt, CheckpointRefused

P = T.CapturePrefix(generation=1, schema_digest="a" * 64, capture_id="b" * 64)


def _shards(n: int) -> dict[int, dict[str, bytes]]:
    return {r: {"lanes": f"role {r} lanes".encode(), "meta": bytes([r % 256]) * 3} for r in range(n)}


@pytest.mark.parametrize("size", [1, 2, 3, 7, 13, 40, 100])
@pytest.mark.parametrize("fanout", [1, 2, 3, 8])
def test_shape_is_preorder_with_exact_coverage(size: int, fanout: int) -> None:
    s = T.TreeShape(size, fanout)
    for r in range(size):
        kids = s.children(r)
        assert len(kids) <= fanout
        # Children tile [r+1, r+size) exactly, in preorder.
        nxt = r + 1
        for c, z in kids:
            assert c == nxt and z == s.subtree_size(c) and s.parent(c) == r
            nxt += z
        assert nxt == r + s.subtree_size(r)
        assert s.path(r)[0] == 0 and s.path(r)[-1] == r and len(s.path(r)) == s.depth(r) + 1


@pytest.mark.parametrize("size,fanout", [(1, 2), (5, 2), (13, 3), (31, 2), (64, 4)])
def test_restore_of_every_role_reads_depth_plus_one_manifests(tmp_path: Path, size: int, fanout: int) -> None:
    s = T.TreeShape(size, fanout)
    run = TF.publish_tree(tmp_path, s, P, _shards(size))
    assert sorted(run.reported) == list(range(size)) and run.root_digest is not None
    for r in range(size):
        got = TF.restore_role(tmp_path, s, 1, r, expected_prefix=P)
        assert len(got.manifests_read) == s.depth(r) + 1 <= s.height + 1
        assert got.shards == _shards(size)[r]
        # Never a sibling subtree: only the manifests of roles on the path.
        roles_read = [0] + [int(n.split(".role-")[1][:6]) for n in got.manifests_read[1:]]
        assert tuple(roles_read) == s.path(r)


def test_completion_released_only_after_root_durable(tmp_path: Path) -> None:
    s = T.TreeShape(13, 3)
    run = TF.publish_tree(tmp_path, s, P, _shards(13))
    root_at = run.log.index("root durable 0")
    firsts = [i for i, e in enumerate(run.log) if e.startswith(("complete", "report"))]
    assert firsts and min(firsts) > root_at


def test_missing_subtree_never_publishes_and_nobody_reports(tmp_path: Path) -> None:
    s = T.TreeShape(13, 3)
    run = TF.publish_tree(tmp_path, s, P, _shards(13), absent_roles=frozenset({6}))
    assert run.reported == () and run.root_digest is None
    assert not list(tmp_path.glob("*.root.json"))
    with pytest.raises(FileNotFoundError):
        TF.restore_role(tmp_path, s, 1, 0)


def _child_commit(shape: T.TreeShape, child: int, **over: object) -> T.Commitment:
    base = dict(prefix=P, role=child, subtree_size=shape.subtree_size(child), manifest_digest="c" * 64)
    base.update(over)
    return T.Commitment(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "over, reason",
    [
        ({"role": 2}, "wrong-role"),  # a grandchild, not a child of 0
        ({"subtree_size": 5}, "wrong-size"),  # claims one role too many
        ({"subtree_size": 3}, "wrong-size"),
        ({"prefix": T.CapturePrefix(1, "a" * 64, "d" * 64)}, "capture-mismatch"),
        ({"prefix": T.CapturePrefix(2, "a" * 64, "b" * 64)}, "capture-mismatch"),
        ({"manifest_digest": "xyz"}, "manifest-digest"),
    ],
)
def test_wrong_commitment_refused_and_changes_nothing(over: dict[str, object], reason: str) -> None:
    s = T.TreeShape(13, 3)  # children of 0: (1,4), (5,4), (9,4)
    p = T.TreeParticipant(s, 0, P)
    p.shards_written(())
    bad = _child_commit(s, 1, **over)
    with pytest.raises(CheckpointRefused) as info:
        p.receive_commitment(bad)
    assert info.value.reason == reason
    assert p.phase is T.Phase.COLLECTING
    # The right commitments still complete the participant afterwards.
    out: list[T.Effect] = []
    for c, _ in s.children(0):
        out += p.receive_commitment(_child_commit(s, c))
    assert [type(e) for e in out] == [T.WriteGroupManifest]


def test_duplicate_commitment_refused() -> None:
    s = T.TreeShape(7, 2)
    p = T.TreeParticipant(s, 0, P)
    p.receive_commitment(_child_commit(s, 1))  # before own shards: buffered
    with pytest.raises(CheckpointRefused, match="duplicate"):
        p.receive_commitment(_child_commit(s, 1))


def test_events_out_of_phase_are_contract_errors() -> None:
    s = T.TreeShape(3, 2)
    p = T.TreeParticipant(s, 1, P)
    with pytest.raises(ContractError):
        p.receive_completion(T.Completion(1, "e" * 64))
    p.shards_written(())
    p.abort()
    with pytest.raises(ContractError):
        p.manifest_durable()


def test_restore_refuses_tampered_group_manifest(tmp_path: Path) -> None:
    s = T.TreeShape(7, 2)
    TF.publish_tree(tmp_path, s, P, _shards(7))
    grp = sorted(tmp_path.glob("*.role-000004.*.grp"))[0]
    grp.chmod(0o644)
    data = grp.read_bytes()
    grp.write_bytes(data[:40] + bytes([data[40] ^ 1]) + data[41:])
    with pytest.raises(CheckpointCorrupt):
        TF.restore_role(tmp_path, s, 1, 5)  # 5 is under 4
    assert TF.restore_role(tmp_path, s, 1, 1).shards == _shards(7)[1]  # other subtree untouched
    with pytest.raises(CheckpointRefused):
        TF.restore_role(tmp_path, T.TreeShape(8, 2), 1, 1)  # another hierarchy


def test_failed_root_publish_is_typed_and_publishes_nothing(tmp_path: Path) -> None:
    """The tree's file driver writes through a Storage: a full disk at the root's link
    is a typed StorageError, no root exists, and restore refuses."""
    import errno

    from sim.storage import Fault, FaultyStorage
    from zephon_ref.storage.errors import CheckpointNotFound, StorageError

    s = T.TreeShape(7, 2)
    faulty = FaultyStorage(faults=[Fault("link", errno.ENOSPC, name_contains=".root.")])
    with pytest.raises(StorageError) as info:
        TF.publish_tree(tmp_path, s, P, _shards(7), storage=faulty)
    assert info.value.reason == "disk-full" and faulty.injected == 1
    assert not [p for p in tmp_path.iterdir() if ".root." in p.name]
    with pytest.raises(CheckpointNotFound):
        TF.restore_role(tmp_path, s, 1, 3, storage=faulty)

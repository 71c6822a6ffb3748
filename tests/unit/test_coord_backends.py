"""The backend contract, the same for memory, directory and TCPStore; runner arguments."""

from __future__ import annotations

import errno
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sim.cluster import topology_states
from sim.storage import Fault, FaultyStorage
from zephon_ref.coordination import aggregate
from zephon_ref.coordination.backends import (
    DirectoryBackend,
    MemoryBackend,
    TCPStoreBackend,
    open_backend,
)
from zephon_ref.errors import ConfigError, StateFormatError
from zephon_ref.storage.errors import StorageError


@pytest.fixture(params=["memory", "directory", "tcpstore"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    if request.param == "memory":
        yield MemoryBackend()
    elif request.param == "directory":
        yield DirectoryBackend(tmp_path)
    else:
        pytest.importorskip("torch", reason="torch is not importable")
        from datetime import timedelta

        import torch.distributed as dist

        master = dist.TCPStore(
            "127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=10)
        )
        yield TCPStoreBackend("127.0.0.1", master.port, timeout_s=10, max_value=64)
        del master


def test_backend_contract(backend: Any) -> None:
    assert backend.get("ns-0/a.x") is None
    backend.put("ns-0/a.x", b"1")
    backend.put("ns-0/a.x", b"2" * 1000)  # over max_value for the TCP store: chunked
    assert backend.get("ns-0/a.x") == b"2" * 1000
    assert backend.put_if_absent("ns-0/r.shard.p1", b"v" * 300)
    assert not backend.put_if_absent("ns-0/r.shard.p1", b"w")
    assert backend.get("ns-0/r.shard.p1") == b"v" * 300
    backend.put("ns-0/r.shard.p2", b"x")
    backend.put("ns-0/r.shard.p2.extra", b"x")  # not directly under the prefix
    backend.put("other-0/r.shard.p3", b"x")
    assert backend.list("ns-0/r.shard.") == ["ns-0/r.shard.p1", "ns-0/r.shard.p2"]
    backend.delete("ns-0/r.shard.p1")
    backend.delete("ns-0/r.shard.p1")
    assert backend.list("ns-0/r.shard.") == ["ns-0/r.shard.p2"]
    assert backend.list("nothing-0/r.ack.") == []
    with pytest.raises(ConfigError):
        backend.put("no-slash", b"x")
    with pytest.raises(ConfigError):
        backend.put("ns-0/.hidden", b"x")
    with pytest.raises(ConfigError):
        backend.put("ns-0/a", b"")
    with pytest.raises(ConfigError):
        backend.list("ns-0/r.shard")


def test_directory_backend_never_lists_temp_files(tmp_path: Path) -> None:
    b = DirectoryBackend(tmp_path)
    b.put("ns-0/r.shard.p1", b"x")
    (tmp_path / "ns-0" / ".tmp.r.shard.p9.1.ab").write_bytes(b"partial")
    assert b.list("ns-0/r.shard.") == ["ns-0/r.shard.p1"]
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(ConfigError):
        DirectoryBackend(f)


def test_tcpstore_chunk_digest_mismatch_is_refused() -> None:
    pytest.importorskip("torch", reason="torch is not importable")
    from datetime import timedelta

    import torch.distributed as dist

    master = dist.TCPStore(
        "127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=10)
    )
    b = TCPStoreBackend("127.0.0.1", master.port, timeout_s=10, max_value=64)
    b.put("ns-0/big", bytes(range(200)))
    manifest = master.get("zephon_ref/ns-0/big")
    wid = manifest[4:20].hex()
    master.set(f"zephon_ref/ns-0/big#{wid}/1", b"\x00" * 64)
    with pytest.raises(StateFormatError, match="digest"):
        b.get("ns-0/big")
    master.delete_key(f"zephon_ref/ns-0/big#{wid}/2")
    with pytest.raises(StateFormatError, match="missing"):
        b.get("ns-0/big")


@pytest.mark.parametrize(
    "uri",
    [
        "torch://host",
        "torch://host:0",
        "torch://host:99999",
        "torch://u@host:1",
        "torch://host:1/path",
        "s3://x",
        "memory://x",
    ],
)
def test_bad_store_uris_are_refused(uri: str) -> None:
    with pytest.raises(ConfigError):
        open_backend(uri)


def test_torch_uri_reads_master_env_lazily(monkeypatch: pytest.MonkeyPatch) -> None:
    b = TCPStoreBackend.from_uri("torch://")
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    monkeypatch.delenv("MASTER_PORT", raising=False)
    with pytest.raises(ConfigError, match="MASTER_ADDR"):
        b.endpoint()
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "1234")
    assert b.endpoint() == ("127.0.0.1", 1234)
    assert TCPStoreBackend.from_uri("torch://h:5").endpoint() == ("h", 5)
    assert isinstance(open_backend("memory://"), MemoryBackend)


def test_aggregate_validates_before_any_io(tmp_path: Path) -> None:
    st = topology_states(0, canonical_replicas=2, world_size=1)[(0, 0)]
    store = MemoryBackend()
    for kw in (
        {"run_id": "bad/id"},
        {"run_id": ".hidden"},
        {"timeout_s": 0},
        {"timeout_s": float("nan")},
        {"world_size": 2},
        {"rank": 1},
    ):
        args: dict[str, Any] = {
            "backend": store,
            "rank": 0,
            "world_size": 1,
            "run_id": "r",
            "timeout_s": 1.0,
        }
        args.update(kw)
        with pytest.raises(ConfigError):
            aggregate(st, **args)
    with pytest.raises(StateFormatError):
        aggregate(
            dict(st, checkpoint_reload_count=-1),
            backend=store,
            rank=0,
            world_size=1,
            run_id="r",
            timeout_s=1.0,
        )
    with pytest.raises(StateFormatError):
        aggregate([], backend=store, rank=0, world_size=1, run_id="r", timeout_s=1.0)  # type: ignore[arg-type]
    assert store.data == {} and store.ops == 0


def test_single_participant_round_through_the_runner(tmp_path: Path) -> None:
    st = topology_states(0, canonical_replicas=3, world_size=1)[(0, 0)]
    out = aggregate(
        st,
        backend=tmp_path,
        rank=0,
        world_size=1,
        run_id="solo",
        timeout_s=2.0,
        warn_mid_window=False,
    )
    assert sorted(out["progress"]) == [0, 1, 2]
    assert [p.name.endswith(".outcome") for p in (tmp_path / "solo-0").iterdir()] == [True]


def test_directory_backend_syncs_what_it_publishes(tmp_path: Path) -> None:
    """Regression: the directory backend used to publish without any fsync."""
    fs = FaultyStorage()
    b = DirectoryBackend(tmp_path, storage=fs)
    for op_name, call in (
        ("put", lambda: b.put("r/a.1", b"x")),
        ("put_if_absent", lambda: b.put_if_absent("r/b.1", b"y")),
    ):
        fs.log.clear()
        call()
        ops = [op for op, _ in fs.log]
        # Data synced before the name appears; the directory synced after.
        place = "rename" if op_name == "put" else "link"
        last_dir_sync = len(ops) - 1 - ops[::-1].index("sync_dir")
        assert ops.index("sync") < ops.index(place) < last_dir_sync, (op_name, ops)
    assert b.get("r/a.1") == b"x" and b.get("r/b.1") == b"y"


@pytest.mark.parametrize("op", ["create", "write", "sync", "close", "rename", "sync_dir"])
@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS, errno.EIO])
def test_directory_backend_faults_are_typed_and_leave_old_value(tmp_path: Path, op: str, code: int) -> None:
    fs = FaultyStorage()
    b = DirectoryBackend(tmp_path, storage=fs)
    b.put("r/k.1", b"old")
    fs.faults.append(Fault(op, code, torn=True))
    with pytest.raises(StorageError) as info:
        b.put("r/k.1", b"new value")
    assert info.value.errno == code and info.value.op == op
    # Before the rename the old value stays; a failed directory sync comes after it.
    assert b.get("r/k.1") == (b"new value" if op == "sync_dir" else b"old")
    assert sorted(p.name for p in (tmp_path / "r").iterdir()) == ["k.1"]  # no temp left


def test_directory_backend_put_if_absent_fault_creates_nothing(tmp_path: Path) -> None:
    fs = FaultyStorage(faults=[Fault("write", errno.ENOSPC, torn=True)])
    b = DirectoryBackend(tmp_path, storage=fs)
    with pytest.raises(StorageError) as info:
        b.put_if_absent("r/k.1", b"value")
    assert info.value.reason == "disk-full"
    assert b.get("r/k.1") is None and b.list("r/k.") == []
    assert b.put_if_absent("r/k.1", b"value") and not b.put_if_absent("r/k.1", b"other")
    assert b.get("r/k.1") == b"value"


_KEYS = ["ns-0/a.x", "a/b", "no-slash", "ns-0/.hidden", ".ns/a", "a/b/c", "a//b", "/b", "a/", "", "/",
         "ns 0/a", "ns-0/a\n", "ns-0/\u00e4", "_-./x", "_/.", "-/-", "ns-0/a.b.c-d_e", "a/b\x00"]


@pytest.mark.parametrize("key", _KEYS)
def test_memory_backend_refuses_exactly_the_keys_split_key_refuses(key: str) -> None:
    """MemoryBackend checks keys with one precompiled match (the simulator's hot path); it must
    let through and refuse exactly what split_key does, for every operation, and a refused
    operation changes nothing (no value, no op counted)."""
    from zephon_ref.coordination.backends import split_key

    try:
        split_key(key)
        valid = True
    except ConfigError:
        valid = False
    store = MemoryBackend()
    ops = [lambda: store.put(key, b"x"), lambda: store.put_if_absent(key, b"x"), lambda: store.get(key),
           lambda: store.delete(key)]
    for op in ops:
        if valid:
            op()
        else:
            with pytest.raises(ConfigError):
                op()
    assert store.ops == (4 if valid else 0)
    assert valid or store.data == {}

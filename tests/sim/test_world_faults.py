"""The simulated disk's layers, the storage nemesis hooks, and the aggregation round run one
protocol step per kernel event inside the world."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from sim.choices import SeededChoices
from sim.runs import derive_config, reference_for, run_seed, workload_of, world_config
from sim.storage import Fault, FaultyStorage, MemStorage
from sim.workloads import item_view
from sim.world import World, WorldConfig, check_run
from zephon_ref.checkpoint import store
from zephon_ref.checkpoint.storage import publish
from zephon_ref.storage.errors import CheckpointCorrupt, StorageError

D = Path("/d")


def test_memstorage_loses_what_was_not_flushed() -> None:
    m = MemStorage()
    assert m.make_dirs(D) and not m.make_dirs(D)
    publish(m, D / "a", b"alpha")  # synced data, linked, directory synced: durable
    w = m.create(D / "b")
    w.write(b"beta")
    w.sync()
    w.close()  # the name "b" is pending: its directory was never synced
    assert m.list(D) == ["a", "b"]
    lost = m.crash(lambda d, n: False)
    assert ("/d", "b") in lost and m.list(D) == ["a"] and m.read(D / "a") == b"alpha"
    w = m.create(D / "c")
    w.write(b"gamma")  # never synced
    m.sync_dir(D)
    m.crash(lambda d, n: True)
    assert m.read(D / "c") == b""  # the name survived, the unsynced data did not


def test_memstorage_lists_temp_files_under_stable_names() -> None:
    names = []
    for _ in range(2):
        m = MemStorage()
        m.make_dirs(D)
        m.create(D / ".tmp.x.shard.0123456789abcdef")
        m.create(D / ".tmp.x.shard.fedcba9876543210")
        names.append(m.list(D))
    assert names[0] == names[1] == [".tmp.x.shard.s1", ".tmp.x.shard.s2"]


class _Hooks:
    def __init__(self) -> None:
        self.stale_on = self.corrupt_on = False

    def fault(self, op: str, path: Path) -> Fault | None:
        return Fault(op, errno.EIO) if op == "sync_dir" and path.name == "boom" else None

    def corrupt(self, path: Path, data: bytes) -> bytes | None:
        return b"X" + data[1:] if self.corrupt_on else None

    def stale(self, path: Path) -> bool:
        return self.stale_on

    def latency(self, op: str, path: Path) -> int:
        return 7


def test_faulty_storage_nemesis_hooks() -> None:
    hooks = _Hooks()
    m = MemStorage()
    fs = FaultyStorage(m, nemesis=hooks)
    store.save(_state(), D, storage=fs)
    store.save(_state(), D, storage=fs)
    first = fs.list(D)
    publish(m, D / "late", b"x")  # a name the next listing should show
    hooks.stale_on = True
    assert fs.list(D) == first  # the previous listing comes back
    hooks.stale_on = False
    assert "late" in fs.list(D) and store.list_generations(D, storage=fs) == [1, 2]
    hooks.corrupt_on = True
    with pytest.raises((CheckpointCorrupt, StorageError)):
        store.load(D, 2, storage=fs)
    hooks.corrupt_on = False
    assert store.load(D, 2, storage=fs) == _state()
    assert fs.latency > 0 and fs.injected >= 2
    m.make_dirs(Path("/boom"))
    with pytest.raises(OSError):
        fs.sync_dir(Path("/boom"))


def _state() -> dict[str, object]:
    from sim.workloads import Workload

    p = Workload().build()
    return dict(p.local_state())


def test_the_aggregation_round_takes_one_protocol_step_per_event() -> None:
    cfg = derive_config(
        3,
        lanes=4,
        ranks=2,
        workers=2,
        steps=7,
        faults="none",
        aggregation=True,
        storage=True,
        checkpoint_every=3,
    )
    w = World(world_config(cfg), workload_of(cfg).build, SeededChoices(3), view=item_view)
    w.run()
    rounds = [e for e in w.kernel.trace if e.label == "round"]
    ckpts = [e for e in w.history if e.kind == "checkpoint" and e.type == "ok"]
    assert len(ckpts) == 2
    # 4 participants (2 ranks x 2 workers) each take several storage steps per round
    assert len(rounds) >= 2 * 4 * 3
    assert check_run(w.history, reference_for(workload_of(cfg))).ok
    assert store.list_generations("/sim/ckpt", storage=w.disk) == [1, 2]


def test_a_crash_can_land_between_any_two_protocol_steps() -> None:
    seen = 0
    for seed in range(4):
        r = run_seed(seed, lanes=4, ranks=2, workers=2, aggregation=True, storage=True, faults="round_crash",
                     round_crash=[1, 8], max_crashes=2, checkpoint_every=2, steps=14)
        assert r.ok, r.problems[:2]
        seen += r.probes["crash_during_aggregation"]
    assert seen >= 2


def test_world_config_refuses_bad_shapes() -> None:
    with pytest.raises(ValueError, match="ranks"):
        WorldConfig(canonical_replicas=4, ranks=3, steps=1)
    assert WorldConfig(canonical_replicas=4, ranks=3, steps=1, allow_uneven=True).ranks == 3
    with pytest.raises(ValueError, match="unrecoverable"):
        WorldConfig(canonical_replicas=4, ranks=2, steps=1, unrecoverable=True)

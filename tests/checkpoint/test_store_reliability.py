"""Store reliability: OS failures are typed and change nothing, concurrent savers, temp
names, gc and readers, and the CLI's exit codes.

Each test is named after what it protects.  Faults are injected through
sim.storage.FaultyStorage (the storage the store takes as ``storage=``); the
states are real engine states (a pipeline iterated a few items).
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from properties.ckpt_campaigns import race
from sim.storage import Fault, FaultyStorage
from zephon_ref.checkpoint import storage as storage_mod
from zephon_ref.checkpoint import store
from zephon_ref.checkpoint.cli import (
    EXIT_CORRUPT,
    EXIT_MISMATCH,
    EXIT_MISSING,
    EXIT_OK,
    EXIT_STORAGE,
    EXIT_USAGE,
)
from zephon_ref.checkpoint.cli import main as ckpt_main
from zephon_ref.checkpoint.schema import MANIFEST_MAGIC, manifest_file_name, sha256_hex
from zephon_ref.errors import ConfigError
from zephon_ref.storage.errors import CheckpointNotFound, PublishConflict, StorageError

CHILD = Path(__file__).with_name("_crash_child.py")
sys.path.insert(0, str(CHILD.parent))
from _crash_child import state_for  # noqa: E402

ROOT = CHILD.parents[2]
ERRNOS = {
    errno.ENOSPC: "disk-full",
    errno.EROFS: "read-only-fs",
    errno.EFBIG: "file-too-large",
    errno.EIO: "io-error",
    errno.EDQUOT: "quota-exceeded",
    errno.EACCES: "permission",
}


def _files(d: Path) -> list[str]:
    return sorted(os.listdir(d))


def _nth_fault(log: list[tuple[str, str]], k: int, code: int) -> Fault:
    """A fault that fails exactly the k-th (1-based) operation of ``log``."""
    op = log[k - 1][0]
    nth = sum(1 for o, _ in log[:k] if o == op)
    return Fault(op, code, nth=nth, torn=op == "write")


# ---------------------------------------------------------------- every errno, every op


def test_os_failures_are_typed_and_keep_previous_generation(tmp_path: Path) -> None:
    """For each errno, fail each operation of a save in turn: a typed StorageError with
    the errno's reason, generation 1 intact, and nothing left behind unless the
    manifest was already linked (then generation 2 is whole, and save still raised)."""
    s1, s2 = state_for(11), state_for(12)
    dry = tmp_path / "dry"
    store.save(s1, dry)
    observed = FaultyStorage()
    store.save(s2, dry, storage=observed)
    log = observed.log
    manifest_link = log.index(("link", manifest_file_name(2))) + 1
    report: dict[str, Counter[str]] = {}
    for code, reason in ERRNOS.items():
        outcomes: Counter[str] = Counter()
        for k in range(1, len(log) + 1):
            d = tmp_path / f"e{code}-{k}"
            store.save(s1, d)
            gen1_files = _files(d)
            faulty = FaultyStorage(faults=[_nth_fault(log, k, code)])
            with pytest.raises(StorageError) as info:
                store.save(s2, d, storage=faulty)
            assert faulty.injected == 1
            assert info.value.reason == reason and info.value.errno == code, (k, info.value)
            assert isinstance(info.value, OSError) and "expected success" in str(info.value)
            assert store.load(d, 1) == s1  # the previous generation, always
            assert not [n for n in _files(d) if n.startswith(".tmp")]
            if k > manifest_link:
                assert store.load(d) == s2 and store.list_generations(d) == [1, 2]
                outcomes["raised-after-publish(gen2-whole)"] += 1
            else:
                assert _files(d) == gen1_files and store.load(d) == s1
                outcomes["refused(gen1-intact,no-leftovers)"] += 1
        report[reason] = outcomes
        assert sum(outcomes.values()) == len(log)
    print(json.dumps({"faulty_saves_per_errno": len(log), "outcomes": report}))


def test_path_that_is_a_file_is_a_typed_storage_error(tmp_path: Path) -> None:
    f = tmp_path / "plain"
    f.write_bytes(b"not a directory")
    for call in (
        lambda: store.save(state_for(1), f),
        lambda: store.save(state_for(1), f / "sub"),
        lambda: store.load(f),
        lambda: store.list_generations(f),
        lambda: store.gc(f, keep=1),
    ):
        with pytest.raises(StorageError) as info:
            call()
        assert info.value.reason == "not-a-directory", info.value
    assert f.read_bytes() == b"not a directory"


def test_symlink_loop_is_a_typed_storage_error(tmp_path: Path) -> None:
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    for call in (lambda: store.save(state_for(1), loop), lambda: store.load(loop)):
        with pytest.raises(StorageError) as info:
            call()
        assert info.value.reason == "symlink-loop", info.value


def test_directory_squatting_on_a_manifest_name_is_typed_and_save_goes_above_it(tmp_path: Path) -> None:
    s1 = state_for(21)
    store.save(s1, tmp_path)
    (tmp_path / manifest_file_name(2)).mkdir()
    with pytest.raises(StorageError) as info:
        store.load(tmp_path)
    assert info.value.reason == "is-a-directory"
    assert store.load(tmp_path, 1) == s1
    assert ckpt_main(["verify", str(tmp_path)]) == EXIT_STORAGE
    s3 = state_for(23)
    assert store.save(s3, tmp_path) == 3 and store.load(tmp_path) == s3


# ---------------------------------------------------------------- races


def _steal_generation_after_first_link(d: Path, times: int) -> tuple[FaultyStorage, dict[int, int]]:
    """A storage whose observer publishes a rival generation (with plain storage)
    right after each attempt of this save links its first shard, ``times`` times; and the
    rivals' {generation: seed}."""
    rivals: dict[int, int] = {}

    def after(op: str, path: Path) -> None:
        if op == "link" and len(rivals) < times and ".universal." in path.name:
            seed = 900 + len(rivals)
            rivals[store.save(state_for(seed), d)] = seed

    return FaultyStorage(after=after), rivals


def test_save_that_loses_a_generation_race_takes_the_next_one(tmp_path: Path) -> None:
    store.save(state_for(1), tmp_path)
    mine = state_for(2)
    faulty, rivals = _steal_generation_after_first_link(tmp_path, 1)
    gen = store.save(mine, tmp_path, storage=faulty)
    # The rival saw our generation-2 shard and published 3 above it; we retried above that.
    assert rivals == {3: 900} and gen == 4
    assert store.load(tmp_path) == mine and store.load(tmp_path, 3) == state_for(900)
    assert store.list_generations(tmp_path) == [1, 3, 4]
    assert not [n for n in _files(tmp_path) if n.startswith("g000000000002")]  # our abandoned shards are gone


def test_save_that_keeps_losing_says_why_and_changes_nothing_of_its_own(tmp_path: Path) -> None:
    store.save(state_for(1), tmp_path)
    faulty, rivals = _steal_generation_after_first_link(tmp_path, 99)
    with pytest.raises(PublishConflict) as info:
        store.save(state_for(2), tmp_path, storage=faulty, max_attempts=3)
    assert info.value.reason == "generation-race" and "3 attempts" in str(info.value)
    assert len(rivals) == 3 and store.list_generations(tmp_path) == [1, *sorted(rivals)]
    assert all(store.load(tmp_path, g) == state_for(seed) for g, seed in rivals.items())
    named = {manifest_file_name(g) for g in [1, *rivals]} | {
        e.file_name(g) for g in [1, *rivals] for e in store.read_manifest(tmp_path, g).shards
    }
    assert set(_files(tmp_path)) == named  # no temp, no orphan of ours
    with pytest.raises(ConfigError):
        store.save(state_for(2), tmp_path, max_attempts=0)


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    env.update(extra)
    return env


def _race(d: Path, seeds: list[int], n: int, **env: str) -> list[list[Any]]:
    return race([subprocess.Popen([sys.executable, str(CHILD), str(d), "race", str(n), str(s)],
                                  env=_env(**env), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                 for s in seeds])


def test_two_concurrent_savers_all_succeed_on_distinct_generations(tmp_path: Path) -> None:
    """Regression: 16 of 40 concurrent saves failed with PublishConflict."""
    results = _race(tmp_path, [1000, 2000], 20)
    gens = [g for g, _ in results if isinstance(g, int)]
    print(json.dumps({"concurrent_savers": 2, "attempted": len(results), "succeeded": len(gens),
                      "generations_taken": len(set(gens)), "highest": max(gens)}))
    assert len(results) == 40 and len(gens) == 40 and len(set(gens)) == 40, [
        r for r in results if not isinstance(r[0], int)]
    for g, seed in results:
        assert store.load(tmp_path, g) == state_for(seed)
    assert store.list_generations(tmp_path) == sorted(gens)


def test_two_writers_sharing_a_pid_never_collide_on_temp_names(tmp_path: Path) -> None:
    """Regression: temp names were <pid>.<counter>, so two containers' writers (same PID,
    same counter, same state) picked one temp name and deleted each other's file."""
    results = _race(tmp_path, [3000, 3000], 20, ZR_FAKE_PID="4242")
    gens = [g for g, _ in results if isinstance(g, int)]
    print(json.dumps({"same_pid_savers": 2, "attempted": len(results), "succeeded": len(gens),
                      "generations_taken": len(set(gens))}))
    assert len(gens) == 40 and len(set(gens)) == 40, [r for r in results if not isinstance(r[0], int)]
    assert not [n for n in _files(tmp_path) if n.startswith(".tmp")]
    for g, seed in results:
        assert store.load(tmp_path, g) == state_for(seed)


def test_publish_never_touches_a_temp_file_it_did_not_create(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "f"
    squatter = tmp_path / f".tmp.f.{'a' * 16}"
    squatter.write_bytes(b"someone else's temp")
    tokens = iter(["a" * 16, "b" * 16])
    monkeypatch.setattr(storage_mod, "_token", lambda: next(tokens))
    store.publish_bytes(target, b"mine")
    assert target.read_bytes() == b"mine" and squatter.read_bytes() == b"someone else's temp"
    squatter_g = tmp_path / f".tmp.g.{'a' * 16}"
    squatter_g.write_bytes(b"another writer's temp")
    monkeypatch.setattr(storage_mod, "_token", lambda: "a" * 16)  # every draw collides
    with pytest.raises(StorageError) as info:
        store.publish_bytes(tmp_path / "g", b"x")
    assert info.value.reason == "temp-collision" and not (tmp_path / "g").exists()
    assert squatter_g.read_bytes() == b"another writer's temp"


# ---------------------------------------------------------------- gc


def test_gc_bounds_the_files_of_many_saves(tmp_path: Path) -> None:
    """Regression: 1,000 saves left 6,000 files (no retention)."""
    states = [state_for(i, canonical_replicas=4) for i in range(100)]
    for s in states:
        store.save(s, tmp_path)
    before = len(_files(tmp_path))
    r = store.gc(tmp_path, keep=3)
    print(json.dumps({"gc_saves": 100, "files_before": before, "files_after": r.files_after,
                      "removed_generations": len(r.removed_generations)}))
    assert before == 100 * 6 and r.files_after == 3 * 6 == len(_files(tmp_path))
    assert r.kept == (98, 99, 100) and r.removed_generations == tuple(range(1, 98))
    assert [store.load(tmp_path, g) for g in r.kept] == states[-3:]
    again = store.gc(tmp_path, keep=3)
    assert again.files_before == again.files_after and not again.removed_generations


def test_gc_removes_torn_leftovers_but_nothing_of_the_newest_or_foreign(tmp_path: Path) -> None:
    """Regression: 25 SIGKILLs left temp files and orphan shards that nothing cleaned."""
    for i in range(3):
        store.save(state_for(i), tmp_path)
    keep_files = set(_files(tmp_path))
    torn = [
        f".tmp.g{2:012d}.universal.{'a' * 64}.shard.{'1' * 16}",  # a killed save of gen 2's era
        f".tmp.{manifest_file_name(1)}.{'2' * 16}",
        f"g{2:012d}.lane-000000.{'b' * 64}.shard",  # orphan: no manifest names it
    ]
    live = [
        f".tmp.g{4:012d}.universal.{'c' * 64}.shard.{'3' * 16}",  # a saver above the newest
        f"g{4:012d}.lane-000001.{'d' * 64}.shard",
        f"g{3:012d}.lane-000009.{'e' * 64}.shard",  # generation N itself is never touched
        "notes.txt",
    ]
    for n in torn + live:
        (tmp_path / n).write_bytes(b"x")
    r = store.gc(tmp_path, keep=3)
    assert r.removed_generations == () and r.removed_temps == 2 and r.removed_shards == 1
    assert set(_files(tmp_path)) == keep_files | set(live)
    assert [store.load(tmp_path, g) for g in (1, 2, 3)] == [state_for(i) for i in range(3)]
    with pytest.raises(ConfigError):
        store.gc(tmp_path, keep=0)
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / f".tmp.{manifest_file_name(1)}.{'4' * 16}").write_bytes(b"x")  # a first save in flight
    assert store.gc(empty, keep=1).files_after == 1


def test_gc_during_a_save_leaves_the_save_whole(tmp_path: Path) -> None:
    store.save(state_for(1), tmp_path)
    store.save(state_for(2), tmp_path)
    ran: list[store.GcReport] = []

    def after(op: str, path: Path) -> None:
        if op == "link" and not ran:
            ran.append(store.gc(tmp_path, keep=1))

    gen = store.save(state_for(3), tmp_path, storage=FaultyStorage(after=after))
    assert ran[0].removed_generations == (1,) and gen == 3
    assert store.load(tmp_path) == state_for(3) and store.load(tmp_path, 2) == state_for(2)


def test_reader_of_a_collected_generation_gets_a_typed_refusal(tmp_path: Path) -> None:
    store.save(state_for(1), tmp_path)
    store.save(state_for(2), tmp_path)

    def after(op: str, path: Path) -> None:
        if op == "read" and path.name == manifest_file_name(1):
            store.gc(tmp_path, keep=1)  # collects generation 1 while it is being read

    with pytest.raises(CheckpointNotFound) as info:
        store.load(tmp_path, 1, storage=FaultyStorage(after=after))
    assert info.value.reason == "generation-collected" and "expected" in str(info.value)
    assert store.load(tmp_path) == state_for(2)


def test_readers_concurrent_with_saves_and_gc_never_see_wrong_data(tmp_path: Path) -> None:
    seeds = list(range(40))
    states = {s: state_for(s) for s in seeds}
    store.save(states[0], tmp_path)
    gen_seed = {1: 0}
    done = threading.Event()
    outcomes: Counter[str] = Counter()

    def writer() -> None:
        try:
            for s in seeds[1:]:
                gen_seed[store.save(states[s], tmp_path)] = s
                store.gc(tmp_path, keep=2)
        finally:
            done.set()

    t = threading.Thread(target=writer)
    t.start()
    while not done.is_set() or outcomes["loaded"] == 0:
        gens = store.list_generations(tmp_path)
        g = gens[0]  # the oldest kept: the one gc collects next
        try:
            loaded = store.load(tmp_path, g)
        except CheckpointNotFound as exc:
            assert exc.reason in ("generation-collected", "missing-manifest"), exc
            outcomes[exc.reason] += 1
            continue
        assert loaded == states[gen_seed[g]]
        outcomes["loaded"] += 1
    t.join()
    print(json.dumps({"reader_vs_gc": dict(outcomes)}))
    assert outcomes["loaded"] > 0


# ---------------------------------------------------------------- CLI


def test_cli_verify_of_a_file_is_one_line_and_exit_code_storage(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Regression: ``zephon-ref ckpt verify <a file>`` printed a traceback."""
    f = tmp_path / "file"
    f.write_bytes(b"x")
    assert ckpt_main(["verify", str(f)]) == EXIT_STORAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not-a-directory" in err and "Traceback" not in err
    proc = subprocess.run([sys.executable, "-m", "zephon_ref.cli", "ckpt", "verify", str(f)],
                          env=_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == EXIT_STORAGE and "Traceback" not in proc.stderr
    assert proc.stderr.count("\n") == 1


def test_cli_exit_codes_are_distinct_per_refusal(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    codes = {EXIT_OK, EXIT_CORRUPT, EXIT_MISSING, EXIT_MISMATCH, EXIT_STORAGE, EXIT_USAGE}
    assert len(codes) == 6
    d = tmp_path / "d"
    assert ckpt_main(["verify", str(d)]) == EXIT_MISSING
    store.save(state_for(1), d)
    store.save(state_for(2), d)
    assert ckpt_main(["verify", str(d)]) == EXIT_OK
    assert ckpt_main(["gc", str(d), "--keep", "1"]) == EXIT_OK
    assert "files 10 -> 5" in capsys.readouterr().out
    assert ckpt_main(["gc", str(d), "--keep", "0"]) == EXIT_USAGE
    assert ckpt_main(["nonsense"]) == EXIT_USAGE
    assert capsys.readouterr().err.count("usage error") == 2
    shard = d / store.read_manifest(d, 2).lanes[0].file_name(2)
    os.chmod(shard, 0o644)
    shard.write_bytes(shard.read_bytes()[:-1])
    assert ckpt_main(["verify", str(d)]) == EXIT_CORRUPT
    assert ckpt_main(["inspect", str(d)]) == EXIT_CORRUPT
    # A well-formed shard of another capture (generation 3's lane 0 under generation 4,
    # manifest digests repaired): a mismatch, not corruption.
    e = tmp_path / "e"
    store.save(state_for(3), e)
    store.save(state_for(3), e)
    m3, m4 = store.read_manifest(e, 1), store.read_manifest(e, 2)
    old = m3.lanes[0]
    (e / f"g{2:012d}.lane-000000.{old.digest}.shard").write_bytes((e / old.file_name(1)).read_bytes())
    mf = e / manifest_file_name(2)
    raw = mf.read_bytes()
    body = json.loads(raw[len(MANIFEST_MAGIC):-66])
    body["lanes"][0]["digest"], body["lanes"][0]["size"] = old.digest, old.size
    nb = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    os.chmod(mf, 0o644)
    mf.write_bytes(MANIFEST_MAGIC + nb + b"\n" + sha256_hex(nb).encode() + b"\n")
    assert m4.lanes[0].digest != old.digest
    assert ckpt_main(["verify", str(e)]) == EXIT_MISMATCH

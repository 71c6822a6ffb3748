"""Crash safety with real processes killed by SIGKILL around every storage step of a save.

* 120 runs where the child SIGKILLs itself right after storage operation k of a
  3-lane save (every one of the save's operations at least once, the rest
  seeded-random); the operations are observed through sim.storage.FaultyStorage
  and counted here by a dry run of the same save;
* 20 runs where a child saves in a loop and the parent kills it after a seeded
  random delay.
After each kill the newest published generation loads and equals exactly what
was saved for it; a torn generation is invisible; the next save still works;
gc then removes every torn leftover.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from sim.storage import FaultyStorage
from zephon_ref.checkpoint import Manifest, store
from zephon_ref.checkpoint.schema import manifest_file_name

CHILD = Path(__file__).with_name("_crash_child.py")
sys.path.insert(0, str(CHILD.parent))
from _crash_child import C, state_for  # noqa: E402

ROOT = CHILD.parents[2]


def _save_ops(tmp: Path) -> list[tuple[str, str]]:
    """The storage operations of the second save into a directory (a dry run)."""
    d = tmp / "dry"
    store.save(state_for(1), d)
    observed = FaultyStorage()
    store.save(state_for(2), d, storage=observed)
    return observed.log


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    return env


def _step_run(args: tuple[Path, int, int]) -> tuple[int, int, str]:
    d, k, seed = args
    proc = subprocess.run(
        [sys.executable, str(CHILD), str(d), "step", str(k), str(seed)],
        env=_env(), capture_output=True, text=True, timeout=60,
    )
    return k, proc.returncode, proc.stderr


def test_sigkill_at_every_publish_step(tmp_path: Path) -> None:
    ops = _save_ops(tmp_path)
    total_steps = len(ops)
    # 1-based index of the manifest's link: from this op on, generation 2 is visible.
    manifest_linked = ops.index(("link", manifest_file_name(2))) + 1
    assert sum(1 for op, _ in ops if op == "link") == 1 + C + 1  # universal, lanes, manifest
    rnd = random.Random(20240611)
    runs = []
    for i in range(120):
        k = i % total_steps + 1 if i < total_steps else rnd.randint(1, total_steps)
        d = tmp_path / f"run{i:03d}"
        store.save(state_for(1000 + i), d)  # generation 1, complete
        runs.append((d, k, 5000 + i))
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(_step_run, runs))
    outcomes = {"killed": 0, "gen1": 0, "gen2": 0, "leftover_files": 0, "gc_removed": 0}
    for (d, k, seed), (_, rc, err) in zip(runs, results, strict=True):
        assert rc == -signal.SIGKILL, (k, rc, err)
        outcomes["killed"] += 1
        newest = store.latest_complete_generation(d)
        want_gen, want_seed = (2, seed) if k >= manifest_linked else (1, 1000 + int(d.name[3:]))
        assert newest == want_gen, (k, newest)
        assert store.load(d) == state_for(want_seed)
        assert all(isinstance(r, Manifest) for _, r in store.iter_verify(d))
        outcomes[f"gen{want_gen}"] += 1
        published = store.read_manifest(d, want_gen).shards
        outcomes["leftover_files"] += len(os.listdir(d)) - (len(published) + 1) * want_gen
        # Recovery: the next save works and does not collide with leftovers.
        g = store.save(state_for(9), d)
        assert g > want_gen and store.load(d) == state_for(9)
        # gc keeps the newest generation and leaves exactly its files.
        report = store.gc(d, keep=1)
        outcomes["gc_removed"] += report.files_before - report.files_after
        assert sorted(os.listdir(d)) == sorted(
            [e.file_name(g) for e in store.read_manifest(d, g).shards] + [manifest_file_name(g)]
        )
        assert store.load(d) == state_for(9)
    print(json.dumps({"kill_campaign": "self-kill after storage op k", "runs": len(runs), **outcomes,
                      "ops_per_save": total_steps, "distinct_steps": len({k for _, k, _ in runs})}))
    assert len({k for _, k, _ in runs}) == total_steps


def _timed_run(args: tuple[Path, float, int]) -> tuple[Path, int, int]:
    d, delay, seed0 = args
    proc = subprocess.Popen(
        [sys.executable, str(CHILD), str(d), "loop", "200", str(seed0)],
        env=_env(), stdout=subprocess.PIPE, text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    time.sleep(delay)  # clock-ok: the kill time is the thing being randomised
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    return d, proc.returncode, seed0


def test_sigkill_at_random_times(tmp_path: Path) -> None:
    rnd = random.Random(77)
    runs = [(tmp_path / f"t{i:02d}", rnd.uniform(0.0, 0.25), 100 * i) for i in range(20)]
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(_timed_run, runs))
    gens = []
    for d, rc, seed0 in results:
        assert rc == -signal.SIGKILL
        newest = store.latest_complete_generation(d)
        gens.append(newest or 0)
        if newest is None:
            continue  # killed before the first manifest: nothing was ever published
        state = store.load(d)
        assert state == state_for(seed0 + newest - 1)
        assert store.load(d, 1) == state_for(seed0)
    print(json.dumps({"kill_campaign": "timed external kill", "runs": len(runs), "generations_seen": gens}))
    assert sum(1 for g in gens if g > 0) >= 10

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

import os
import subprocess
import sys
from pathlib import Path

from properties.ckpt_campaigns import LocalFiles, step_kill_campaign, timed_kill_campaign
from sim.storage import FaultyStorage
from zephon_ref.checkpoint import store
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


def _step_run(d: str, k: int, seed: int) -> tuple[int, str]:
    proc = subprocess.run(
        [sys.executable, str(CHILD), d, "step", str(k), str(seed)],
        env=_env(), capture_output=True, text=True, timeout=60,
    )
    return proc.returncode, proc.stderr


def test_sigkill_at_every_publish_step(tmp_path: Path) -> None:
    ops = _save_ops(tmp_path)
    assert sum(1 for op, _ in ops if op == "link") == 1 + C + 1  # universal, lanes, manifest
    step_kill_campaign(
        [str(tmp_path / f"run{i:03d}") for i in range(120)], run_step=_step_run,
        files_for=lambda d: LocalFiles(Path(d)), total_steps=len(ops),
        # 1-based index of the manifest's link: from this op on, generation 2 is visible.
        visible_from=ops.index(("link", manifest_file_name(2))) + 1,
        label="self-kill after storage op k",
    )


def _start_loop(d: str, seed0: int) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, str(CHILD), d, "loop", "200", str(seed0)], env=_env(),
                            stdout=subprocess.PIPE, text=True)


def test_sigkill_at_random_times(tmp_path: Path) -> None:
    timed_kill_campaign([str(tmp_path / f"t{i:02d}") for i in range(20)], start_loop=_start_loop,
                        max_delay_s=0.25, label="timed external kill", min_published=10)

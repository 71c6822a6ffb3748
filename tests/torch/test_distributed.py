"""Ranks through torch.distributed (gloo, loopback), the aggregation round over their TCPStore, end to end.

A single-process run is the reference. The same global steps trained on 2 ranks, then
(checkpoint at a global-step boundary) on 4, then on 1, must hold the same set of
batches per global step, the same loss at every step and the same final parameters.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch", reason="the torch path needs torch (pip install 'zephon_ref[torch]')")

from sim.invariants import global_step_problems, lane_stream_problems, per_lane  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def launch(tmp: Path, tag: str, world_size: int, steps: int, *extra: str) -> list[dict[str, Any]]:
    """Run ``world_size`` rank processes; return each rank's result."""
    port = free_port()
    procs = []
    for rank in range(world_size):
        out = tmp / f"{tag}-r{rank}.json"
        cmd = [sys.executable, "-m", "zephon_ref.torch.distributed", "--rank", str(rank), "--world-size",
               str(world_size), "--port", str(port), "--steps", str(steps), "--seed", "2", "--out", str(out),
               *extra]
        procs.append(
            (subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True), out)
        )
    results = []
    for proc, out in procs:
        _, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, err[-3000:]
        results.append(json.loads(out.read_text()))
    for r in results[1:]:
        assert r == results[0], "every rank sees the same global batches, losses and parameters"
    return results


def as_steps(result: dict[str, Any]) -> list[tuple[tuple[int, str], ...]]:
    return [tuple((int(b[0]), json.dumps(b[1:])) for b in step) for step in result["steps"]]


def test_rank_count_changes_keep_global_batches_and_the_loss_curve(tmp_path: Path) -> None:
    steps = 4
    (ref,) = launch(tmp_path, "ref", 1, steps)
    ref_steps = as_steps(ref)
    assert all(len({lane for lane, _ in s}) == 4 == len(s) for s in ref_steps), "full rounds only"

    ckpt = str(tmp_path / "ckpt")
    two = launch(tmp_path, "two", 2, 2, "--checkpoint-dir", ckpt)[0]
    four = launch(tmp_path, "four", 4, 1, "--checkpoint-dir", ckpt, "--resume")[0]
    one = launch(tmp_path, "one", 1, 1, "--checkpoint-dir", ckpt, "--resume")[0]

    observed = as_steps(two) + as_steps(four) + as_steps(one)
    assert len(observed) == steps
    assert global_step_problems(observed, ref_steps) == []
    assert lane_stream_problems(per_lane(observed), per_lane(ref_steps)) == []
    assert [sorted(s) for s in observed] == [sorted(s) for s in ref_steps]
    assert one["losses"] == ref["losses"], "the loss curve is identical across 2 -> 4 -> 1 ranks"
    assert one["params"] == ref["params"]


@pytest.mark.slow
def test_ranks_reading_through_dataloader_workers_checkpoint_every_worker_shard(tmp_path: Path) -> None:
    """2 ranks x 2 DataLoader workers: each worker's shard joins the round over the TCPStore (one
    participant per worker); the state resumes on 1 rank with 3 workers and on 4 ranks with 1."""
    steps = 4
    (ref,) = launch(tmp_path, "ref", 1, steps)
    ckpt = str(tmp_path / "ckpt")
    first = launch(tmp_path, "a", 2, 2, "--checkpoint-dir", ckpt, "--workers", "2")[0]
    second = launch(tmp_path, "b", 1, 1, "--checkpoint-dir", ckpt, "--resume", "--workers", "3")[0]
    third = launch(tmp_path, "c", 4, 1, "--checkpoint-dir", ckpt, "--resume", "--workers", "1")[0]
    observed = as_steps(first) + as_steps(second) + as_steps(third)
    assert [sorted(s) for s in observed] == [sorted(s) for s in as_steps(ref)]
    assert third["losses"] == ref["losses"] and third["params"] == ref["params"]

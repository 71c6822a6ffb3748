"""Seed 001's acceptance test: 5 uninterrupted updates == 3 updates + checkpoint + 2 more in fresh processes.

The pipeline packs and shuffles (the demo pipeline); parameters and optimizer state
are compared with torch.equal; the loss curves must be identical too.
"""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="the torch path needs torch (pip install 'zephon_ref[torch]')")

from zephon_ref.demo import build_demo_pipeline  # noqa: E402
from zephon_ref.errors import ContractError, StateMismatchError  # noqa: E402
from zephon_ref.storage.errors import CheckpointCorrupt, CheckpointNotFound  # noqa: E402
from zephon_ref.torch.trainer import ReferenceTrainer, TrainerConfig  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def trainer_process(tmp: Path, *args: str) -> None:
    cmd = [sys.executable, "-m", "zephon_ref.torch.trainer", *args]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=240, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]


def assert_same(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert a["updates"] == b["updates"]
    assert a["losses"] == b["losses"]
    assert list(a["model"]) == list(b["model"])
    for key in a["model"]:
        assert torch.equal(a["model"][key], b["model"][key]), key
    assert sorted(a["optimizer_state"]) == sorted(b["optimizer_state"])
    for idx, st in a["optimizer_state"].items():
        other = b["optimizer_state"][idx]
        assert sorted(st) == sorted(other)
        for name, value in st.items():
            if isinstance(value, torch.Tensor):
                assert torch.equal(value, other[name]), (idx, name)
            else:
                assert value == other[name], (idx, name)


@pytest.mark.parametrize("workers", [pytest.param(0, marks=pytest.mark.slow), 2])
def test_five_updates_equal_three_checkpoint_two_in_fresh_processes(tmp_path: Path, workers: int) -> None:
    w = ["--workers", str(workers), "--seed", "3"]
    trainer_process(tmp_path, "--updates", "5", "--snapshot", str(tmp_path / "a.pt"), *w)
    ckpt = tmp_path / "ckpt"
    trainer_process(tmp_path, "--updates", "3", "--checkpoint-dir", str(ckpt), *w)
    trainer_process(tmp_path, "--updates", "2", "--resume", "--checkpoint-dir", str(ckpt),
                    "--snapshot", str(tmp_path / "b.pt"), *w)
    a = torch.load(tmp_path / "a.pt", weights_only=True)
    b = torch.load(tmp_path / "b.pt", weights_only=True)
    assert a["updates"] == 5 and len(a["losses"]) == 5
    assert_same(a, b)


def test_the_comparison_sees_a_resume_that_skipped_the_pipeline_state(tmp_path: Path) -> None:
    """Proof the check can fail: model and optimizer resumed, but the data restarted from the beginning."""
    torch.set_num_threads(1)
    full = ReferenceTrainer(build_demo_pipeline(seed=3), config=TrainerConfig(seed=3))
    full.train(5)
    first = ReferenceTrainer(build_demo_pipeline(seed=3), config=TrainerConfig(seed=3))
    first.train(3)
    first.save(tmp_path)
    wrong = ReferenceTrainer(build_demo_pipeline(seed=3), config=TrainerConfig(seed=3))
    right = ReferenceTrainer(build_demo_pipeline(seed=3), config=TrainerConfig(seed=3))
    right.load(tmp_path)
    wrong.model.load_state_dict(copy.deepcopy(right.model.state_dict()))
    wrong.optimizer.load_state_dict(copy.deepcopy(right.optimizer.state_dict()))
    wrong.updates, wrong.losses = right.updates, list(right.losses)
    right.train(2)
    wrong.train(2)
    assert_same(full.snapshot(), right.snapshot())
    with pytest.raises(AssertionError):
        assert_same(full.snapshot(), wrong.snapshot())


def test_refusals_change_nothing(tmp_path: Path) -> None:
    t = ReferenceTrainer(build_demo_pipeline(seed=3), config=TrainerConfig(seed=3))
    with pytest.raises(CheckpointNotFound):
        t.load(tmp_path / "empty")
    t.train(1)
    t.save(tmp_path)
    with pytest.raises(ContractError, match="not trained"):
        t.load(tmp_path)
    other = ReferenceTrainer(build_demo_pipeline(seed=4), config=TrainerConfig(seed=3))
    before = other.snapshot()
    with pytest.raises(StateMismatchError):  # another pipeline's data settings (fingerprint)
        other.load(tmp_path)
    assert other.updates == 0
    for k, v in before["model"].items():
        assert torch.equal(v, other.model.state_dict()[k])
    trainer_file = next(tmp_path.glob("trainer-g*.pt"))
    data = bytearray(trainer_file.read_bytes())
    data[-1] ^= 1
    trainer_file.chmod(0o644)
    trainer_file.write_bytes(bytes(data))
    fresh = ReferenceTrainer(build_demo_pipeline(seed=3), config=TrainerConfig(seed=3))
    with pytest.raises(CheckpointCorrupt, match="digest"):
        fresh.load(tmp_path)

"""scripts/gpu_check.py on a machine without a GPU: the skip, the CPU path, and a FAIL it must catch."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="the torch path needs torch (pip install 'zephon_ref[torch]')")

import zephon_ref.torch as zt  # noqa: E402

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu_check.py"


def _load_script() -> Any:
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the skip on a machine without CUDA")
def test_without_cuda_an_explicit_cuda_target_skips_and_exits_0() -> None:
    res = subprocess.run([sys.executable, str(SCRIPT), "--device", "cuda"], capture_output=True, text=True,
                         check=False, cwd="/")
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "gpu_check: no CUDA device: skipped"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU fallback on a machine without CUDA")
def test_the_full_run_says_where_it_ran_and_reports_each_part_in_one_line() -> None:
    one_test = "tests/torch/test_training_collate.py::test_training_layout_is_exactly_the_documented_one"
    res = subprocess.run(
        [sys.executable, str(SCRIPT), "--lanes", "2", "--tests", one_test, "--budget-s", "300"],
        capture_output=True,
        text=True,
        check=False,
        cwd="/",
    )
    lines = res.stdout.strip().splitlines()
    assert len(lines) == 1, res.stdout + res.stderr
    line = lines[0]
    assert line.startswith("gpu_check: PASS on the CPU (no CUDA): checks ok; "), line
    assert f"{one_test}: 1 passed" in line
    assert "bench_tensor: " in line and res.returncode == 0


@pytest.mark.slow
def test_a_failing_test_part_is_a_fail_line() -> None:
    res = subprocess.run([sys.executable, str(SCRIPT), "--device", "cpu", "--lanes", "2", "--tests",
                          "tests/torch/no_such_test_file.py", "--budget-s", "300"],
                         capture_output=True, text=True, check=False, cwd="/")
    assert res.returncode == 1
    assert res.stdout.startswith("gpu_check: FAIL on the CPU: checks ok; tests/torch/no_such_test_file.py: ")


def test_the_cpu_target_passes_in_one_line() -> None:
    res = subprocess.run([sys.executable, str(SCRIPT), "--device", "cpu", "--checks-only", "--lanes", "3"],
                         capture_output=True, text=True, check=False, cwd="/")
    assert res.returncode == 0, res.stdout + res.stderr
    lines = res.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpu_check: PASS: ")


def test_a_device_collation_that_differs_is_a_fail(monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    real = zt.collate_batch

    def corrupt(batch: Any, **kw: Any) -> Any:
        out = real(batch, **kw)
        if isinstance(kw.get("device"), torch.device):  # only the script's device collation
            out["position_ids"] = out["position_ids"] + 1
        return out

    monkeypatch.setattr(zt, "collate_batch", corrupt)
    assert _load_script().main(["--device", "cpu", "--checks-only", "--lanes", "2"]) == 1
    out = capsys.readouterr().out.strip()
    assert out == "gpu_check: FAIL: batch 0 position_ids: the cpu collation differs from the CPU collation"

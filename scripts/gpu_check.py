#!/usr/bin/env python
"""GPU check of the torch path: quick device checks, the torch-path tests and the tensor benchmark, one line.

Three parts, all within one fixed time budget (``--budget-s``, default 540 s, under
10 minutes); the target is CUDA when it is available, else the CPU, and the line
says which:

A. the device checks below (the demo pipeline through DataLoader workers to the device);
B. the torch-path tests, ``pytest tests/torch`` (CUDA-only tests run where CUDA is);
C. the tensor implementation's benchmark, ``bench/bench_tensor.py --quick``, when that
   file exists (otherwise the line says it was skipped and why).

A part that fails, or the budget running out, makes the line a FAIL.  ``--checks-only``
runs part A alone (what the tests of this script use).

Part A's checks, on the target device:

1. every lane's batches through ``DataLoader(num_workers=2)`` equal the
   single-process run's, in order (the worker split loses, repeats and reorders
   nothing inside a lane);
2. ``collate_batch(batch, device="cuda")`` equals the CPU collation of the same
   batch, field by field (values, int64 dtype, shape), and lives on the GPU;
3. the usual production shape: workers collate on the CPU
   (``to_torch_dataset(device="cpu")``), the loader pins memory, the main
   process copies to the GPU; the result equals check 2's tensors in order.

Prints one line, ``gpu_check: PASS ...`` or ``gpu_check: FAIL ...``, and exits
0 / 1.  Without torch it prints why it skipped and exits 0.  ``--device auto``
(the default) targets CUDA when available, else the CPU and says "no CUDA: ran on
the CPU"; ``--device cuda`` without CUDA skips (exit 0); ``--device cpu`` forces the CPU.

Usage: ``python scripts/gpu_check.py [--device auto|cuda|cpu] [--checks-only] [--budget-s 540]
[--seed 0] [--lanes 4]``
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
import warnings
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

from zephon_ref.demo import build_demo_pipeline  # noqa: E402

NUM_WORKERS = 2


def _cursor_view(batch: Any) -> tuple[int, tuple[Any, ...]]:
    return batch.lane_ids[0], tuple(r.meta.cursor.as_key() for r in batch.records)


def _per_lane(views: list[tuple[int, Any]]) -> dict[int, list[Any]]:
    out: dict[int, list[Any]] = defaultdict(list)
    for lane, v in views:
        out[lane].append(v)
    return dict(out)


def _same(a: Any, b: Any, torch: Any) -> bool:
    return bool(a.dtype == b.dtype == torch.int64 and a.shape == b.shape and torch.equal(a.cpu(), b.cpu()))


def run(device_name: str, seed: int, lanes: int) -> tuple[bool, str]:
    import torch
    from torch.utils.data import DataLoader

    from zephon_ref.torch import COLLATED_FIELDS, collate_batch, to_torch_dataset

    device = torch.device(device_name)
    t0 = time.monotonic()
    reference = [_cursor_view(b) for b in build_demo_pipeline(seed, lanes)]
    # both loaders fork their workers before this process touches CUDA (workers stay on the CPU)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*worker processes in total.*")
        loader = DataLoader(to_torch_dataset(build_demo_pipeline(seed, lanes)), batch_size=None,
                            num_workers=NUM_WORKERS, multiprocessing_context="fork", timeout=300)
        raw = list(loader)
        # for check 3: collate on the CPU in the workers, pinned by the loader when the target is CUDA
        loader = DataLoader(to_torch_dataset(build_demo_pipeline(seed, lanes), device="cpu"), batch_size=None,
                            num_workers=NUM_WORKERS, multiprocessing_context="fork", timeout=300,
                            pin_memory=device.type == "cuda")
        worker_collated = list(loader)
    # check 1: the worker split
    if _per_lane([_cursor_view(b) for b in raw]) != _per_lane(reference):
        return (
            False,
            f"per-lane streams through DataLoader(num_workers={NUM_WORKERS}) differ from the "
            "single-process run",
        )
    # check 2: collation on the device equals the CPU collation of the same batches
    on_device: list[dict[str, Any]] = []
    tokens = 0
    for i, batch in enumerate(raw):
        cpu = collate_batch(batch)
        dev = collate_batch(batch, device=device)
        for name in COLLATED_FIELDS:
            if dev[name].device.type != device.type:
                return (
                    False,
                    f"batch {i} {name}: expected a tensor on {device}, received one on {dev[name].device}",
                )
            if not _same(dev[name], cpu[name], torch):
                return False, f"batch {i} {name}: the {device} collation differs from the CPU collation"
        tokens += int(dev["attention_mask"].sum().item())  # a reduction that runs on the device
        on_device.append(dev)
    # check 3: the worker-collated CPU tensors, copied to the device, equal check 2's in order
    moved = [{k: v.to(device, non_blocking=True) for k, v in item.items()} for item in worker_collated]
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    if len(moved) != len(on_device):
        return False, f"worker-collated stream has {len(moved)} batches, expected {len(on_device)}"
    for i, (a, b) in enumerate(zip(moved, on_device, strict=True)):
        for name in COLLATED_FIELDS:
            if not _same(a[name], b[name], torch):
                return False, f"batch {i} {name}: worker-collated tensors copied to {device} differ"
    where = str(device) if device.type != "cuda" else f"{device} ({torch.cuda.get_device_name(device)})"
    return True, (
        f"{len(raw)} batches ({tokens} tokens, {lanes} lanes) via DataLoader(num_workers={NUM_WORKERS}) "
        f"on {where}: per-lane streams identical to the single-process run, device tensors equal "
        f"the CPU collation, worker-collated copies equal too ({time.monotonic() - t0:.1f} s)"
    )


def _tail(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1].strip() if lines else "(no output)"


def _run_part(cmd: list[str], budget_end: float) -> tuple[bool, str]:
    """Run ``cmd`` in the checkout within what is left of the budget: (ok, its last output line)."""
    left = budget_end - time.monotonic()
    if left < 5:
        return False, "budget exhausted before it started"
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    try:
        res = subprocess.run(
            cmd, cwd=ROOT, capture_output=True, text=True, timeout=left, check=False, env=env
        )
    except subprocess.TimeoutExpired:
        return False, f"stopped by the time budget after {left:.0f} s"
    return res.returncode == 0, _tail(res.stdout + "\n" + res.stderr if res.returncode else res.stdout)


def _bench_summary(stdout_line: str) -> str:
    return re.sub(r"\s+", " ", stdout_line)[:200]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--device", default="auto", choices=("auto", "cuda", "cpu"))
    ap.add_argument("--checks-only", action="store_true", help="part A only (the device checks)")
    ap.add_argument("--budget-s", type=float, default=540.0, help="time budget for all parts (< 600)")
    ap.add_argument("--tests", default="tests/torch", help="what part B runs under pytest")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lanes", type=int, default=4)
    args = ap.parse_args(argv)
    t0 = time.monotonic()
    budget_end = t0 + min(args.budget_s, 590.0)
    try:
        import torch
    except ImportError:
        print("gpu_check: torch not importable: skipped (pip install 'zephon_ref[torch]')")
        return 0
    cuda = bool(torch.cuda.is_available())
    if args.device == "cuda" and not cuda:
        print("gpu_check: no CUDA device: skipped")
        return 0
    device = "cuda:0" if args.device in ("cuda", "auto") and cuda else "cpu"
    where = f"on {device} ({torch.cuda.get_device_name(0)})" if device != "cpu" else (
        "on the CPU (no CUDA)" if args.device == "auto" else "on the CPU")
    try:
        ok, detail = run(device, args.seed, args.lanes)
    except Exception as exc:  # a crash is a FAIL with its reason on the one line
        ok, detail = False, f"{type(exc).__name__}: {exc}"
    if args.checks_only:
        print(f"gpu_check: {'PASS' if ok else 'FAIL'}: {detail}")
        return 0 if ok else 1
    parts = [f"checks {'ok' if ok else 'FAILED: ' + detail}"]
    tests_ok, tests_line = _run_part(
        [sys.executable, "-m", "pytest", "-n", "0", "-q", "-p", "no:cacheprovider", args.tests], budget_end
    )
    parts.append(f"{args.tests}: {tests_line}")
    bench = ROOT / "bench" / "bench_tensor.py"
    bench_ok = True
    if bench.exists():
        bench_ok, bench_line = _run_part([sys.executable, str(bench), "--quick"], budget_end)
        parts.append(f"bench_tensor: {_bench_summary(bench_line)}")
    else:
        parts.append("bench_tensor: skipped (bench/bench_tensor.py not present)")
    all_ok = ok and tests_ok and bench_ok
    print(f"gpu_check: {'PASS' if all_ok else 'FAIL'} {where}: " + "; ".join(parts)
          + f" ({time.monotonic() - t0:.0f} s of a {min(args.budget_s, 590.0):.0f} s budget)")
    return 0 if all_ok else 1


if __name__ == "__main__":
    raise SystemExit(main())

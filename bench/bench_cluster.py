"""The executor's cost (issue 25): a seed sweep in one process, in 2 local processes, on a local 2-CPU Ray
instance; per-task overhead; memory per worker of the 64-rank x 512-lane seed.

usage: python bench/bench_cluster.py [--quick]     (or python -m bench --only cluster)

Rows (``results(quick=...)``):

* seeds/min of the same sweep (default seed-derived configs; full: seeds 0..199, ``--quick``:
  0..59) run three ways: one process (:class:`~sim.executor.InlineBackend`), ``--jobs 2``
  (:class:`~sim.executor.ProcessBackend`), and a local Ray instance with 2 CPUs
  (:class:`~sim.executor.RayBackend`).  The machine is shared, so the seeds are cut into
  blocks and every block runs in all three ways, the order rotating from block to block
  (alternating, side by side); the ratios are of the summed times, and the note gives the
  spread of the per-block Ray / jobs-2 ratio and the load average before and after.  The goal:
  Ray >= 0.9 of ``--jobs 2``.  The three summaries must be equal (the benchmark checks what it
  measures: a mismatch is reported in the note);
* per-task overhead: ms per no-op task, pipelined (N tasks that return at once, wall / N), on
  the process pool and on Ray; and the Ray sweep's extra time per seed against ``--jobs 2``;
* memory per worker: peak RSS of a fresh (spawned) worker process that ran the 64x512 configuration of
  bench/bench_sim.py for a few global steps (two step counts, so the growth per step shows),
  minus nothing (the idle worker's RSS is in the note).  Not 2,000 steps.

The wall clock measures only.  ``theirs`` is None (no peer has an executor to compare with);
the ratio column carries Ray / jobs-2 and jobs-2 / one process.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def _peak_rss_mib() -> float:
    """This process's own peak RSS (VmHWM: ru_maxrss would carry the parent's peak across fork and exec)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _worker_memory(steps: int) -> dict[str, Any]:
    """A task: the 64x512 configuration for ``steps`` global steps; this worker's peak RSS (MiB)."""
    from bench.bench_sim import _big_options
    from sim.runs import run_seed

    r = run_seed(1, **_big_options(steps))
    return {"rss_mib": _peak_rss_mib(), "steps": r.steps, "ok": r.ok}


def _idle_memory() -> dict[str, Any]:
    import sim.runs  # noqa: F401 - what a worker has imported before its first seed

    return {"rss_mib": _peak_rss_mib()}


def _sweep(seeds: Sequence[int], backend: Any) -> tuple[float, dict[str, Any], list[float]]:
    from sim.sweep import run_sweep

    t0 = time.perf_counter()  # clock-ok: measurement only
    summary, records = run_sweep(list(seeds), {}, backend=backend)
    return time.perf_counter() - t0, summary, [float(r.get("cpu_seconds", 0.0)) for r in records]  # clock-ok


def _noop_ms(backend: Any, n: int) -> float:
    from sim import chaos
    from sim.executor import Task, run_tasks

    tasks = [Task(f"noop:{i}", chaos.sleeps, (0.0,)) for i in range(n)]
    t0 = time.perf_counter()  # clock-ok: measurement only
    run_tasks(tasks, backend)
    return 1000 * (time.perf_counter() - t0) / n  # clock-ok


def _row(name: str, ours: Any, unit: str, ratio: Any, note: str) -> dict[str, object]:
    return {"name": name, "ours": ours, "theirs": None, "unit": unit, "ratio": ratio, "note": note}


def results(*, quick: bool = True) -> list[dict[str, object]]:
    import warnings

    from sim.executor import InlineBackend, ProcessBackend, RayBackend, Task, run_tasks

    warnings.simplefilter("ignore")
    n, blocks = (60, 3) if quick else (200, 4)
    seeds = list(range(n))
    cut = [seeds[i * n // blocks:(i + 1) * n // blocks] for i in range(blocks)]
    load0 = _load()
    rows: list[dict[str, object]] = []
    t0 = time.perf_counter()  # clock-ok
    ray_be: Any = None
    try:
        ray_be = RayBackend(None, num_cpus=2, object_store_memory=200 * 2**20)
        ray_be.check_code()
        ray_init = time.perf_counter() - t0  # clock-ok
    except Exception as exc:  # no Ray (the cluster extra): the local rows still mean something
        ray_init, ray_err = 0.0, f"{type(exc).__name__}: {exc}"[:200]
    procs = ProcessBackend(2)
    modes: dict[str, Any] = {"one process": InlineBackend(), "--jobs 2": procs}
    if ray_be is not None:
        modes["Ray, 2 CPUs"] = ray_be
    times = dict.fromkeys(modes, 0.0)
    per_block: dict[str, list[float]] = {m: [] for m in modes}
    summaries: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
    cpu: list[float] = []  # CPU seconds per seed, from the one-process runs
    try:
        names = list(modes)
        for b, block in enumerate(cut):
            for m in names[b % len(names):] + names[:b % len(names)]:  # the order rotates block by block
                dt, s, c = _sweep(block, modes[m])
                if m == "one process":
                    cpu += c
                times[m] += dt
                per_block[m].append(dt)
                summaries[m].append(s)
        noop = {"--jobs 2": _noop_ms(procs, 400)}
        if ray_be is not None:
            noop["Ray, 2 CPUs"] = _noop_ms(ray_be, 400)
        # memory per worker: a fresh worker process per measurement
        mem: list[tuple[int, float, bool]] = []
        idle = 0.0
        for steps in ((1, 3) if quick else (2, 10)):
            for fn, args in ((_idle_memory, ()), (_worker_memory, (steps,))):
                pb = ProcessBackend(1, start_method="spawn")  # a fresh interpreter: its own memory only
                try:
                    (rec,) = run_tasks([Task("mem", fn, args)], pb)
                finally:
                    pb.close()
                if fn is _idle_memory:
                    idle = rec.get("rss_mib", 0.0)
            mem.append((steps, rec.get("rss_mib", float("nan")), bool(rec.get("ok"))))
    finally:
        procs.close()
        if ray_be is not None:
            ray_be.close()
    load1 = _load()
    same = all(summaries[m] == summaries["one process"] for m in modes)
    check = "summaries equal in all modes" if same else "SUMMARIES DIFFER between modes"
    failed = sum(s["failed"] for s in summaries["one process"])
    spm = {m: 60 * n / t for m, t in times.items()}
    base_note = (f"seeds 0..{n - 1} in {blocks} blocks, the three ways alternating per block; {check}; "
                 f"{failed} failing seeds; load average {load0} before, {load1} after (2 cores, shared)")
    rows.append(
        _row(
            f"sim sweep of {n} seeds, one process, seeds/min",
            round(spm["one process"], 1),
            "seeds/min",
            None,
            base_note,
        )
    )
    rows.append(
        _row(
            f"sim sweep of {n} seeds, --jobs 2 (local processes), seeds/min",
            round(spm["--jobs 2"], 1),
            "seeds/min",
            round(spm["--jobs 2"] / spm["one process"], 3),
            "ratio: --jobs 2 / one process; " + base_note,
        )
    )
    if ray_be is not None:
        r = [a / b for a, b in zip(per_block["--jobs 2"], per_block["Ray, 2 CPUs"], strict=True)]
        rows.append(
            _row(
                f"sim sweep of {n} seeds, --ray (local instance, 2 CPUs), seeds/min",
                round(spm["Ray, 2 CPUs"], 1),
                "seeds/min",
                round(spm["Ray, 2 CPUs"] / spm["--jobs 2"], 3),
                f"ratio: Ray / --jobs 2 (goal >= 0.9); per-block ratio {min(r):.2f}..{max(r):.2f} (the "
                f"noise); Ray start {ray_init:.1f} s, not in the sweep times; " + base_note,
            )
        )
        extra = 1000 * (times["Ray, 2 CPUs"] - times["--jobs 2"]) * 2 / n
        rows.append(
            _row(
                "Ray's extra time per seed against --jobs 2 (worker-ms per seed)",
                round(extra, 1),
                "ms",
                None,
                f"(Ray sweep wall - jobs-2 sweep wall) x 2 workers / {n} seeds; a seed took "
                f"{1000 * times['--jobs 2'] * 2 / n:.0f} worker-ms of wall time here; negative = within "
                "the noise",
            )
        )
    else:
        rows.append(_row("sim sweep on Ray: not measured", None, "", None, f"no Ray here ({ray_err})"))
    cs = sorted(cpu)
    rows.append(
        _row(
            f"CPU time per default seed (mean of seeds 0..{n - 1})",
            round(sum(cs) / len(cs), 3),
            "s",
            None,
            f"one process, CPU time (the load shows in wall time only): median {cs[len(cs) // 2]:.3f} s, "
            f"p99 {cs[min(len(cs) - 1, int(0.99 * len(cs)))]:.3f} s, max {cs[-1]:.3f} s; "
            "docs/scale-out.md plans with these",
        )
    )
    for m, ms in noop.items():
        rows.append(
            _row(
                f"per-task overhead, {m}, no-op task pipelined (ms per task)",
                round(ms, 2),
                "ms",
                None,
                "400 tasks that return at once, wall / 400 (2 workers): scheduling, pickling, the pipe or "
                "Ray's object store, the JSON record",
            )
        )
    (s0, m0, ok0), (s1, m1, ok1) = mem
    per_step = (m1 - m0) / (s1 - s0)
    rows.append(
        _row(
            f"memory per worker, 64 ranks x 512 lanes seed, {s1} global steps (peak RSS)",
            round(m1, 1),
            "MiB",
            None,
            f"fresh worker process (VmHWM); {s0} steps: {m0:.0f} MiB, so {per_step:.1f} MiB per "
            f"step over the first steps (the corpus is sized to the steps; the history and the "
            f"reference grow with them); idle worker {idle:.0f} MiB; "
            f"checker {'ok' if ok0 and ok1 else 'FOUND problems'}",
        )
    )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ns = ap.parse_args()
    for r in results(quick=ns.quick):
        print(f"{r['name']:<78} {r['ours']!s:>10} {r['unit']!s:<10} {r['ratio']!s:>6}  {r['note']}")


if __name__ == "__main__":
    main()

"""A seed sweep on the executor: one task per seed, records streamed to JSONL, one summary.

Theory of operation
-------------------
:func:`seed_task` is what runs on a worker (this process, a local worker process or a Ray
worker): :func:`sim.runs.run_seed` and the run's summary, plus the kinds of the checker's
witnesses.  :func:`run_sweep` makes one :class:`~sim.executor.Task` per seed (its ``meta``
is the seed and the one-line command that reproduces it on a laptop), runs them with
:func:`sim.executor.run_tasks` (any backend; ``jsonl`` streams every record as it arrives,
``resume`` skips the seeds that file already has), and :func:`summarise` turns the records
into the summary.  :func:`summarise` sorts by seed and reads nothing that depends on where or
when a seed ran (not ``seconds``, not ``attempts``), so the same seeds and overrides give the
same summary, probe counts and fingerprints with one process, with ``--jobs N``, on a Ray
cluster, after a worker was killed, or resumed from a partial JSONL.

A seed whose run raised is a failing seed with its traceback (``status "error"``), one that
ran past the budget is reported as ``status "timeout"``; both count as failed.  With ``batch``
K a task runs K consecutive seeds (:func:`batch_task`: fewer, longer tasks where a big
cluster's scheduler would otherwise be the limit, see docs/scale-out.md); :func:`flatten` turns
its record back into per-seed ones, and a resume skips finished seeds whatever the batch size.

What may not live here: the execution machinery (sim.executor), simulation logic (sim.runs).
"""

from __future__ import annotations

import json
import shlex
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sim.executor import Backend, Record, Task, execute, make_backend, read_records, run_tasks
from sim.runs import KNOB_PROBES, run_seed
from sim.world import PROBES
from zephon_ref.errors import ConfigError, DataDroppedWarning

__all__ = [
    "CLI_OVERRIDES",
    "FAULT_PROBES",
    "batch_task",
    "flatten",
    "reproduce",
    "run_sweep",
    "seed_task",
    "summarise",
    "tasks_for",
]

#: probes outside the ``fault_`` family that name a fault kind too
_FAULT_KIND_PROBES = frozenset({
    "job_crash", "rank_crash", "planned_resize", "slow_rank", "crash_during_aggregation",
    "crash_during_restore", "crash_between_shards_and_manifest", "restore_refused_all",
})

#: the probes that name a fault kind (a sweep lists those no seed reached)
FAULT_PROBES: tuple[str, ...] = tuple(k for k in PROBES if k.startswith("fault_") or k in _FAULT_KIND_PROBES)


#: the overrides ``python -m sim run`` takes as flags (a test keeps this equal to the parser's)
CLI_OVERRIDES = frozenset(
    {
        "ranks",
        "workers",
        "lanes",
        "steps",
        "checkpoint_every",
        "max_crashes",
        "docs",
        "mid_step",
        "faults",
        "aggregation",
        "storage",
        "unrecoverable",
    }
)


def reproduce(seed: int, overrides: Mapping[str, Any]) -> str:
    """The one-line command that runs ``seed`` with ``overrides`` again: ``python -m sim run ...``, or,
    when an override has no flag (an API caller's ``crash=[1, 300]``), ``python -c`` calling
    :func:`sim.runs.run_seed`."""
    if not set(overrides) <= CLI_OVERRIDES:
        kw = ", ".join(
            f"{k}={json.dumps(v) if isinstance(v, str) else repr(v)}" for k, v in sorted(overrides.items())
        )
        code = f"from sim.runs import run_seed; r = run_seed({seed}, {kw}); print(r.ok, r.problems[:3])"
        return " ".join(shlex.quote(p) for p in ["python", "-c", code])
    parts = ["python", "-m", "sim", "run", "--seed", str(seed)]
    for k, v in sorted(overrides.items()):
        flag = "--" + k.replace("_", "-")
        if isinstance(v, bool):
            parts.append(flag if v else "--no-" + k.replace("_", "-"))
        else:
            parts += [flag, str(v)]
    return " ".join(shlex.quote(p) for p in parts)


def seed_task(seed: int, overrides: Mapping[str, Any]) -> dict[str, Any]:
    """One seed, run and checked (a task function: module level, picklable, returns plain data)."""
    with warnings.catch_warnings():
        # the workload drops oversized documents by design; 'python -m sim run --seed N' reports the counts
        warnings.simplefilter("ignore", DataDroppedWarning)
        r = run_seed(seed, **dict(overrides))
    out = r.summary()
    out["kinds"] = sorted(
        {w.kind for w in r.witnesses} | ({"problem"} if r.problems and not r.witnesses else set())
    )
    return out


def batch_task(seeds: Sequence[int], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """Several seeds in one task (fewer, longer tasks for a big cluster): one record body per seed, a
    seed that raises failing alone (:func:`sim.executor.execute` per seed); the batch's budget is the
    task's."""
    ov = dict(overrides)
    return {"records": [{**execute(seed_task, (s, ov), None), "seed": s, "reproduce": reproduce(s, ov)}
                        for s in seeds]}


def tasks_for(seeds: Sequence[int], overrides: Mapping[str, Any], *, batch: int = 1) -> list[Task]:
    """One task per seed, or per ``batch`` consecutive seeds of ``seeds``."""
    ov = dict(overrides)
    if type(batch) is not int or batch < 1:
        raise ConfigError(f"batch: expected an int >= 1 (seeds per task), received {batch!r}")
    if batch == 1:
        return [
            Task(f"seed:{s}", seed_task, (s, ov), {"seed": s, "reproduce": reproduce(s, ov)}) for s in seeds
        ]
    groups = [list(seeds[i:i + batch]) for i in range(0, len(seeds), batch)]
    return [
        Task("seeds:" + ",".join(map(str, g)), batch_task, (g, ov), {"seeds": g, "overrides": ov})
        for g in groups
    ]


def flatten(records: Sequence[Record]) -> list[Record]:
    """Per-seed records from per-seed and per-batch ones (a batch that failed as a whole, past its budget or
    with its worker dead, fails each of its seeds with the batch's status and error)."""
    out: list[Record] = []
    for r in records:
        if "seeds" not in r:
            out.append(r)
            continue
        for sub in r.get("records") or []:
            out.append(
                {**sub, "task": f"seed:{sub['seed']}", "attempts": r.get("attempts"), "batch": r["task"]}
            )
        if r.get("status") != "done":
            for s in r["seeds"]:
                out.append({"seed": s, "status": r["status"], "ok": False, "error": f"(batch {r['task']}) "
                            f"{r.get('error')}", "traceback": r.get("traceback"), "task": f"seed:{s}",
                            "attempts": r.get("attempts"), "batch": r["task"], "seconds": r.get("seconds"),
                            "reproduce": reproduce(s, r.get("overrides") or {})})
    return out


def _kinds(r: Record) -> list[str]:
    if r.get("status") == "timeout":
        return ["timeout"]
    if r.get("status") == "error":
        return ["exception"]
    return list(r.get("kinds") or ["problem"])


def summarise(
    records: Sequence[Record], seeds: Sequence[int], overrides: Mapping[str, Any]
) -> dict[str, Any]:
    """The sweep's summary from its records (see the module docstring; records of other seeds are ignored)."""
    want = set(seeds)
    results = sorted((r for r in records if int(r["seed"]) in want), key=lambda r: int(r["seed"]))
    failed = [r for r in results if not r.get("ok")]
    probes = {k: sum(1 for r in results if (r.get("probes") or {}).get(k)) for k in (*PROBES, *KNOB_PROBES)}
    return {
        "seeds": [seeds[0], seeds[-1]] if seeds else [],
        "runs": len(results),
        "ok": len(results) - len(failed),
        "failed": len(failed),
        "overrides": dict(overrides),
        "errors": sum(r.get("status") == "error" for r in results),
        "timeouts": sum(r.get("status") == "timeout" for r in results),
        "probes_seeds_reached": probes,
        "fault_kinds_unreached": [k for k in FAULT_PROBES if not probes.get(k)],
        "knob_probes_unreached": [k for k in KNOB_PROBES if not probes.get(k)],
        "events": sum(int(r.get("events", 0)) for r in results),
        "failures": [
            {
                "seed": r["seed"],
                "status": r.get("status", "done"),
                "kinds": _kinds(r),
                "problems": r.get("problems"),
                "error": r.get("error"),
                "reproduce": r.get("reproduce"),
            }
            for r in failed
        ],
        "fingerprints": {str(r["seed"]): r.get("fingerprint") for r in results},
    }


def run_sweep(seeds: Sequence[int], overrides: Mapping[str, Any], *, backend: Backend | None = None,
              jobs: int | None = None, ray: str | bool | None = False, jsonl: Path | str | None = None,
              resume: bool = False, budget_s: float | None = None, retries: int = 3, progress: bool = False,
              report: Path | str | None = None, timelines: int = 12, batch: int = 1,
              task_memory_mb: int | None = None) -> tuple[dict[str, Any], list[Record]]:
    """Run the seeds (on ``backend``, or one made from ``jobs``/``ray``/``budget_s``; ``batch`` seeds per
    task), summarise, and with ``report`` write the report page (:mod:`sim.report`).  Returns the
    summary and the per-seed records.  ``resume`` skips every seed the JSONL has, whatever the batch
    size it was run with."""
    ov = dict(overrides)
    done: list[Record] = []
    if resume and jsonl is not None and Path(jsonl).exists():
        want = set(seeds)
        done = [r for r in flatten(read_records(jsonl)[1]) if int(r["seed"]) in want]
    finished = {int(r["seed"]) for r in done}
    tasks = tasks_for([s for s in seeds if s not in finished], ov, batch=batch)
    own = backend is None
    be = backend if backend is not None else make_backend(jobs=jobs, ray=ray, budget_s=budget_s,
                                                          task_memory_mb=task_memory_mb)
    try:
        new = run_tasks(tasks, be, jsonl=jsonl, resume=resume, budget_s=budget_s, retries=retries,
                        progress=progress, what="seed" if batch == 1 else "batch",
                        header={"run": "sim sweep", "overrides": ov})
    finally:
        if own:
            be.close()
    records = done + flatten(new)
    summary = summarise(records, seeds, ov)
    if report is not None:
        from sim.report import write_report  # matplotlib, only when a report is asked for

        write_report(report, summary, records, timelines=timelines, backend=be.name)
    return summary, records

"""The simulator's command line: ``python -m sim run`` one seed, ``python -m sim sweep`` many.

Theory of operation
-------------------
``run --seed N [--ranks --workers --lanes --steps --faults --checkpoint-every --mid-step N ...]``
derives the run's configuration from the seed (:func:`sim.runs.derive_config`; flags
override), prints it as one JSON line first, runs and checks it, prints a summary, on
failure a one-line command that reproduces it (the same seed and flags give the same
run), and the fingerprint last.  Exit status 1 when the checker found a problem.

``sweep --seeds A..B [--jobs J | --ray [ADDRESS]] [--jsonl F | --resume F] [--budget S]
[--report F.html] [--out summary.json] [flags]`` runs every seed of the inclusive range in
``J`` processes (default: every core) or on a Ray cluster (:mod:`sim.sweep` on
:mod:`sim.executor`), draws a progress bar on stderr, streams one JSON record per seed to the
JSONL, and writes a JSON summary: seeds run, failures with their reproduce commands, and the
coverage probes (:data:`sim.world.PROBES`) counted as the number of seeds that reached each,
plus the fault kinds no seed reached.  Results are ordered by seed, so the summary does not
depend on which process or machine finished first.  ``run --timeline F.png`` draws the run
(:mod:`sim.timeline`); ``sweep --report`` writes the report page (:mod:`sim.report`).

What may not live here: simulation logic (sim.runs, sim.world).
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Sequence
from typing import Any

from sim.runs import config_json, run_seed
from sim.sweep import reproduce

__all__ = ["main", "parse_seeds"]

_FLAGS = ("ranks", "workers", "lanes", "steps", "checkpoint_every", "max_crashes", "docs", "mid_step")


def parse_seeds(text: str) -> range:
    """``A..B`` (inclusive) or one integer."""
    try:
        if ".." in text:
            a, b = text.split("..", 1)
            lo, hi = int(a), int(b)
        else:
            lo = hi = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"seeds: expected A..B or N, received {text!r}") from None
    if hi < lo:
        raise argparse.ArgumentTypeError(f"seeds: expected A <= B, received {text!r}")
    return range(lo, hi + 1)


def _add_overrides(p: argparse.ArgumentParser) -> None:
    for name in _FLAGS:
        p.add_argument("--" + name.replace("_", "-"), type=int, default=None, dest=name)
    p.add_argument("--faults", default=None, help="comma list of fault kinds, 'all' or 'none' (default: from the seed)")
    for name in ("aggregation", "storage", "unrecoverable"):
        p.add_argument("--" + name, default=None, action=argparse.BooleanOptionalAction)


def _overrides(ns: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {k: getattr(ns, k) for k in (*_FLAGS, "aggregation", "storage", "unrecoverable")
                           if getattr(ns, k) is not None}
    if ns.faults is not None:
        out["faults"] = ns.faults
    return out


def _cmd_run(ns: argparse.Namespace) -> int:
    from sim.runs import derive_config

    ov = _overrides(ns)
    print(config_json(derive_config(ns.seed, **ov)), flush=True)
    r = run_seed(ns.seed, **ov)
    s = r.summary()
    print(f"seed {r.seed}: {'ok' if r.ok else 'FAILED'}; {r.steps} global steps, {r.events} events, "
          f"{r.crashes} crashes, {r.restores} restores, {r.history} history entries; lineage: {r.lineage}")
    print("probes: " + json.dumps(s["probes"], sort_keys=True))
    for p in r.problems[:10]:
        print("problem: " + p)
    if not r.ok:
        print("reproduce: " + reproduce(ns.seed, ov))
    print("fingerprint " + r.fingerprint)
    if ns.timeline:
        from sim.timeline import draw_seed

        print("timeline: " + str(draw_seed(ns.seed, ov, ns.timeline)))
    return 0 if r.ok else 1


def sweep(seeds: Sequence[int], overrides: dict[str, Any], *, jobs: int, progress: bool = True,
          ray: str | bool | None = False, jsonl: str | None = None, resume: bool = False,
          budget_s: float | None = None, report: str | None = None, batch: int = 1,
          task_memory_mb: int | None = None) -> dict[str, Any]:
    """Run every seed (in ``jobs`` processes, or on Ray) and summarise (see :mod:`sim.sweep`)."""
    from sim.sweep import run_sweep

    summary, _ = run_sweep(seeds, overrides, jobs=jobs, ray=ray, jsonl=jsonl, resume=resume, budget_s=budget_s,
                           progress=progress, report=report, batch=batch, task_memory_mb=task_memory_mb)
    return summary


def _cmd_sweep(ns: argparse.Namespace) -> int:
    seeds = list(ns.seeds)
    summary = sweep(seeds, _overrides(ns), jobs=ns.jobs or os.cpu_count() or 1, progress=not ns.quiet,
                    ray=ns.ray, jsonl=ns.resume or ns.jsonl, resume=ns.resume is not None, budget_s=ns.budget,
                    report=ns.report, batch=ns.batch, task_memory_mb=ns.task_memory)
    text = json.dumps(summary, indent=1, sort_keys=True)
    if ns.out:
        with open(ns.out, "w") as f:
            f.write(text + "\n")
    print(f"{summary['runs']} seeds, {summary['ok']} ok, {summary['failed']} failed; {summary['events']} events")
    print("probes (seeds reaching each): " + json.dumps(summary["probes_seeds_reached"]))
    if summary["fault_kinds_unreached"]:
        print("fault kinds no seed reached: " + ", ".join(summary["fault_kinds_unreached"]))
    for f in summary["failures"][:10]:
        print(f"FAILED seed {f['seed']}: {(f.get('problems') or [f.get('error')])[0]}")
        print("  reproduce: " + str(f["reproduce"]))
    if ns.report:
        print("report: " + ns.report)
    return 0 if not summary["failed"] else 1


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sim", description="zephon_ref's deterministic simulator")
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run and check one seed")
    r.add_argument("--seed", type=int, required=True)
    r.add_argument("--timeline", default=None, metavar="FILE.png",
                   help="draw the run's timeline (ranks against virtual time, the checker's witness marked)")
    _add_overrides(r)
    s = sub.add_parser("sweep", help="run and check a range of seeds in parallel")
    s.add_argument("--seeds", type=parse_seeds, required=True, help="A..B (inclusive)")
    s.add_argument("--jobs", type=int, default=None, help="processes (default: every core)")
    s.add_argument("--out", default=None, help="write the JSON summary here")
    s.add_argument("--quiet", action="store_true", help="no progress bar")
    s.add_argument("--ray", nargs="?", const=True, default=False, metavar="ADDRESS",
                   help="run the seeds on a Ray cluster at ADDRESS (no ADDRESS: a local Ray instance); "
                        "needs the cluster extra")
    s.add_argument("--jsonl", default=None, metavar="FILE", help="stream one JSON record per seed here as it ends")
    s.add_argument("--resume", default=None, metavar="FILE",
                   help="continue the sweep whose JSONL is FILE: seeds it has are not run again")
    s.add_argument("--budget", type=float, default=None, metavar="SECONDS",
                   help="a seed running longer is reported as a timeout (not retried)")
    s.add_argument("--batch", type=int, default=1, metavar="K", help="seeds per task (default 1)")
    s.add_argument("--task-memory", type=int, default=None, metavar="MB",
                   help="with --ray: memory to reserve per task, so a node runs only as many seeds as it holds")
    s.add_argument("--report", default=None, metavar="FILE.html",
                   help="write the report page (probe coverage, failures by kind, a timeline per failing seed)")
    _add_overrides(s)
    ns = ap.parse_args(argv)
    return _cmd_run(ns) if ns.cmd == "run" else _cmd_sweep(ns)

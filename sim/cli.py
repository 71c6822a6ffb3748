"""The simulator's command line: ``python -m sim run`` one seed, ``python -m sim sweep`` many.

Theory of operation
-------------------
``run --seed N [--ranks --workers --lanes --steps --faults --checkpoint-every --mid-step N ...]``
derives the run's configuration from the seed (:func:`sim.runs.derive_config`; flags
override), prints it as one JSON line first, runs and checks it, prints a summary, on
failure a one-line command that reproduces it (the same seed and flags give the same
run), and the fingerprint last.  Exit status 1 when the checker found a problem.

``sweep --seeds A..B [--jobs J] [--out summary.json] [flags]`` runs every seed of the
inclusive range in ``J`` processes (multiprocessing; default: every core), draws a
progress bar on stderr, and writes a JSON summary: seeds run, failures with their
reproduce commands, and the coverage probes (:data:`sim.world.PROBES` and the engine knobs'
:data:`sim.runs.KNOB_PROBES`) counted as the number of seeds that reached each, plus the fault
kinds and knobs no seed reached.  Results are
ordered by seed, so the summary does not depend on which process finished first.

What may not live here: simulation logic (sim.runs, sim.world).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shlex
import sys
from collections.abc import Sequence
from typing import Any

from sim.runs import KNOB_PROBES, RunResult, config_json, run_seed
from sim.world import PROBES

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


def reproduce(seed: int, overrides: dict[str, Any]) -> str:
    parts = ["python", "-m", "sim", "run", "--seed", str(seed)]
    for k, v in sorted(overrides.items()):
        flag = "--" + k.replace("_", "-")
        if isinstance(v, bool):
            parts.append(flag if v else "--no-" + k.replace("_", "-"))
        else:
            parts += [flag, str(v)]
    return " ".join(shlex.quote(p) for p in parts)


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
    return 0 if r.ok else 1


def _one(args: tuple[int, dict[str, Any]]) -> dict[str, Any]:
    seed, ov = args
    try:
        r: RunResult | None = run_seed(seed, **ov)
    except Exception as exc:  # a crash of the simulator itself is a failure to report, not to hide
        return {"seed": seed, "ok": False, "error": f"{type(exc).__name__}: {exc}"[:500], "probes": {},
                "reproduce": reproduce(seed, ov)}
    assert r is not None
    out = r.summary()
    if not r.ok:
        out["reproduce"] = reproduce(seed, ov)
    return out


def _bar(done: int, total: int, failed: int) -> None:
    width = 30
    n = width * done // max(total, 1)
    sys.stderr.write(f"\r[{'#' * n}{'.' * (width - n)}] {done}/{total} seeds, {failed} failed")
    sys.stderr.flush()


def sweep(seeds: Sequence[int], overrides: dict[str, Any], *, jobs: int, progress: bool = True
          ) -> dict[str, Any]:
    """Run every seed (in ``jobs`` processes) and summarise (see the module docstring)."""
    work = [(s, overrides) for s in seeds]
    results: list[dict[str, Any]] = []
    failed = 0
    if jobs <= 1:
        it: Any = map(_one, work)
        pool = None
    else:
        ctx = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn")
        pool = ctx.Pool(jobs)
        it = pool.imap_unordered(_one, work)
    try:
        for res in it:
            results.append(res)
            failed += not res["ok"]
            if progress:
                _bar(len(results), len(work), failed)
    finally:
        if pool is not None:
            pool.close()
            pool.join()
    if progress:
        sys.stderr.write("\n")
    results.sort(key=lambda r: int(r["seed"]))
    probes = {k: sum(1 for r in results if r["probes"].get(k)) for k in (*PROBES, *KNOB_PROBES)}
    faults = [k for k in PROBES if k.startswith("fault_") or k in ("job_crash", "rank_crash", "planned_resize",
                                                                   "slow_rank", "crash_during_aggregation",
                                                                   "crash_during_restore",
                                                                   "crash_between_shards_and_manifest",
                                                                   "restore_refused_all")]
    return {
        "seeds": [seeds[0], seeds[-1]] if seeds else [], "runs": len(results), "ok": len(results) - failed,
        "failed": failed, "overrides": overrides,
        "probes_seeds_reached": probes,
        "fault_kinds_unreached": [k for k in faults if not probes.get(k)],
        "knob_probes_unreached": [k for k in KNOB_PROBES if not probes.get(k)],
        "events": sum(int(r.get("events", 0)) for r in results),
        "failures": [{k: r.get(k) for k in ("seed", "problems", "error", "reproduce")} for r in results
                     if not r["ok"]],
        "fingerprints": {str(r["seed"]): r.get("fingerprint") for r in results},
    }


def _cmd_sweep(ns: argparse.Namespace) -> int:
    seeds = list(ns.seeds)
    summary = sweep(seeds, _overrides(ns), jobs=ns.jobs or os.cpu_count() or 1, progress=not ns.quiet)
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
    return 0 if not summary["failed"] else 1


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sim", description="zephon_ref's deterministic simulator")
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run and check one seed")
    r.add_argument("--seed", type=int, required=True)
    _add_overrides(r)
    s = sub.add_parser("sweep", help="run and check a range of seeds in parallel")
    s.add_argument("--seeds", type=parse_seeds, required=True, help="A..B (inclusive)")
    s.add_argument("--jobs", type=int, default=None, help="processes (default: every core)")
    s.add_argument("--out", default=None, help="write the JSON summary here")
    s.add_argument("--quiet", action="store_true", help="no progress bar")
    _add_overrides(s)
    ns = ap.parse_args(argv)
    return _cmd_run(ns) if ns.cmd == "run" else _cmd_sweep(ns)

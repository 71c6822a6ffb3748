"""``python -m properties.loaders --loader NAME [--examples N] [--json FILE]``: the generic
stateful-loader properties against one loader, as a table.

Exit status: 0 when every property holds (or is declared unsupported), 1 when one fails,
2 on bad input (one line on stderr, no traceback).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from properties.loaders.pool import check_one, prepare_process
from zephon_ref.exits import OneLineArgumentParser, int_at_least, writable_path

__all__ = ["SHRINK_RUNS", "main"]

#: the default bound on the machine runs spent shrinking one failure (docs/loaders.md, "Budget")
SHRINK_RUNS = 150


def _parser() -> argparse.ArgumentParser:
    from properties.loaders.machine import PROPERTIES
    from properties.loaders.registry import LOADERS

    p = OneLineArgumentParser(
        prog="python -m properties.loaders",
        description="Generic stateful-loader properties (resume equivalence, no skip / "
        "no duplicate, ...) against one loader; prints a table, exits 1 when "
        "a property fails.",
    )
    p.add_argument("--loader", required=True, help=f"one of {', '.join(LOADERS)}, or module:attr")
    p.add_argument(
        "--examples", type=int_at_least(1), default=30, help="Hypothesis examples per property (default 30)"
    )
    p.add_argument("--steps", type=int_at_least(1), default=10, help="moves per example (default 10)")
    p.add_argument("--property", action="append", dest="properties", metavar="NAME",
                   help=f"only these properties (repeatable): {', '.join(PROPERTIES)}")
    p.add_argument("--set", action="append", dest="knobs", default=[], metavar="KNOB=VALUE",
                   help="pin a knob of the drawn configurations (repeatable), e.g. --set workers=0")
    p.add_argument("--shrink-runs", type=int_at_least(1), default=SHRINK_RUNS, metavar="N",
                   help=f"machine runs spent shrinking each failure at most (default {SHRINK_RUNS}; the "
                   "witness is the smallest found by then)")
    p.add_argument("--no-shrink-bound", action="store_true",
                   help="shrink each failure as far as Hypothesis goes (its own limits)")
    p.add_argument("--jobs", type=int_at_least(1), default=1, metavar="N",
                   help="properties checked in N processes at once (default 1; each property is its own "
                   "search, so the results are the same)")
    p.add_argument("--json", metavar="FILE", type=writable_path, help="also write the results as JSON")
    p.add_argument(
        "--random", action="store_true", help="random examples (default: derandomized, reproducible)"
    )
    return p


def _row(r: Any) -> str:
    to_fail = "" if r.to_failure is None else str(r.to_failure)
    return f"  {r.prop:<20} {r.status:<9} {r.examples:>8} {to_fail:>10}  {r.reason[:90]}"


def _cpu_seconds() -> float:
    """User + system CPU time of this process and its finished children (the pool's processes, the
    libraries' workers): the cost of a run, less sensitive than wall time to other load on the machine."""
    try:
        import resource
    except ImportError:
        return 0.0
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from properties.loaders.machine import PROPERTIES
    from properties.loaders.registry import UnknownLoader, resolve

    props = args.properties or list(PROPERTIES)
    bad = [p for p in props if p not in PROPERTIES]
    if bad:
        sys.stderr.write(
            f"python -m properties.loaders: --property: expected one of {', '.join(PROPERTIES)}, "
            f"received {', '.join(bad)}\n"
        )
        return 2
    try:
        adapter = resolve(args.loader)
    except UnknownLoader as exc:
        sys.stderr.write(f"python -m properties.loaders: {exc}\n")
        return 2
    pins: dict[str, Any] = {}
    for kv in args.knobs:
        k, sep, v = kv.partition("=")
        if not sep:
            sys.stderr.write(f"python -m properties.loaders: --set: expected KNOB=VALUE, received {kv!r}\n")
            return 2
        pins[k] = {"true": True, "false": False}.get(v.lower(), int(v) if v.lstrip("-").isdigit() else v)
    if pins:
        from properties.loaders.core import Narrowed

        try:
            adapter = Narrowed(adapter, **pins)
        except ValueError as exc:
            sys.stderr.write(f"python -m properties.loaders: --set: {exc}\n")
            return 2
    missing = adapter.available() if hasattr(adapter, "available") else None
    if missing:
        sys.stderr.write(f"python -m properties.loaders: --loader {args.loader}: {missing}\n")
        return 2
    prepare_process()
    version = adapter.version() if hasattr(adapter, "version") else "?"
    shrink_runs = None if args.no_shrink_bound else args.shrink_runs
    if args.jobs > 1 and getattr(adapter, "single_process", False):
        print(f"{adapter.name}: --jobs {args.jobs} ignored (its processes would share the library's "
              "machine-wide state: the adapter's single_process)", flush=True)
        args.jobs = 1
    print(f"{adapter.name}: {version}; {args.examples} examples x {args.steps} moves per property"
          f"{'' if args.random else ' (derandomized)'}{f'; pinned {pins}' if pins else ''}; shrinking "
          f"{'unbounded' if shrink_runs is None else f'at most {shrink_runs} runs'}"
          f"{f'; {args.jobs} processes' if args.jobs > 1 else ''}", flush=True)
    print(f"  {'property':<20} {'status':<9} {'examples':>8} {'to_failure':>10}  reason", flush=True)
    jobs = [(args.loader, pins, prop, args.examples, args.steps, not args.random, shrink_runs)
            for prop in props]
    results: list[tuple[Any, float]] = []
    if args.jobs > 1 and len(jobs) > 1:
        import concurrent.futures
        import multiprocessing

        # spawn: a fresh interpreter per process (the parent imported the library; forking a process
        # that may hold library threads is what the libraries warn against)
        with concurrent.futures.ProcessPoolExecutor(
            max_workers=min(args.jobs, len(jobs)), mp_context=multiprocessing.get_context("spawn")
        ) as pool:
            for r, secs in pool.map(check_one, jobs):
                results.append((r, secs))
                print(_row(r), flush=True)
    else:
        cache: dict[Any, list[int]] = {}
        for job in jobs:
            r, secs = check_one(job, cache=cache, adapter=adapter)
            results.append((r, secs))
            print(_row(r), flush=True)
    failures = [r for r, _ in results if r.status == "FAIL"]
    for r in failures:
        print(f"\n{r.prop}: {r.reason}")
        if r.failure:
            f = r.failure
            print(f"  minimal config: {f['config_text']}")
            print("  moves:")
            for m in f["moves"] or ["(none)"]:
                print(f"    {m}")
            if f["first_wrong"]:
                print(f"  first wrong item: {f['first_wrong']}")
    if args.json:
        doc = {"loader": adapter.name, "version": version, "examples": args.examples, "steps": args.steps,
               "pinned": pins,
               "derandomized": not args.random, "shrink_runs": shrink_runs, "jobs": args.jobs,
               "cpu_seconds": round(_cpu_seconds(), 1),
               "results": [{**r.as_dict(), "seconds": round(s, 1)} for r, s in results]}
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(doc, fh, indent=2, default=repr)
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The simulator's command line: ``python -m sim run`` one seed, ``python -m sim sweep`` many.

Theory of operation
-------------------
``run --seed N [--ranks --workers --lanes --steps --faults --checkpoint-every --mid-step N ...]``
derives the run's configuration from the seed (:func:`sim.runs.derive_config`; flags
override), prints it first as named fields, one a line, each with its unit and meaning
(:data:`CONFIG_FIELDS`; docs/sim.md), runs and checks it, prints a summary, on failure a
one-line command that reproduces it (the same seed and flags give the same run), and the
fingerprint last.  ``--json FILE`` also writes the configuration and the result as one
JSON document.  Exit status 1 when the checker found a problem.

Bad input (``--lanes 0``, ``--faults bogus``, ``--ranks 3 --lanes 4``, a ``--json`` in a
directory that does not exist) is refused before anything runs or is written: one line on
stderr, exit 2 (the project's codes, :mod:`zephon_ref.exits`; docs/cli.md).
``python -m sim scale ...`` is scale mode, ``python -m sim.scale ...`` under another name.

``sweep --seeds A..B [--jobs J | --ray [ADDRESS]] [--jsonl F | --resume F] [--budget S]
[--report F.html] [--out summary.json] [flags]`` runs every seed of the inclusive range in
``J`` processes (default: every core) or on a Ray cluster (:mod:`sim.sweep` on
:mod:`sim.executor`), draws a progress bar on stderr (tqdm: off with ``--quiet`` or when
stderr is not a terminal, :mod:`sim.progress`), streams one JSON record per seed to the
JSONL, and writes a JSON summary: seeds run, failures with their reproduce commands, and the
coverage probes (:data:`sim.world.PROBES` and the engine knobs' :data:`sim.runs.KNOB_PROBES`)
counted as the number of seeds that reached each, plus the fault kinds and knobs no seed reached.
Results are ordered by seed, so the summary does not depend on which process or machine finished
first.  ``run --timeline F.png`` draws the run
(:mod:`sim.timeline`); ``sweep --report`` writes the report page (:mod:`sim.report`).

What may not live here: simulation logic (sim.runs, sim.world).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings
from collections.abc import Sequence
from typing import Any

from sim.runs import FAULTS, run_seed
from sim.sweep import reproduce
from zephon_ref.errors import DataDroppedWarning, ZephonRefError
from zephon_ref.exits import (
    EPILOG,
    EXIT_USAGE,
    DefaultsHelpFormatter,
    OneLineArgumentParser,
    existing_file,
    int_at_least,
    number_above,
    refuse,
    writable_path,
)

__all__ = ["CONFIG_FIELDS", "describe_config", "main", "parse_seeds"]

_FLAGS = ("ranks", "workers", "lanes", "steps", "checkpoint_every", "max_crashes", "docs", "mid_step")

#: each override flag: (the smallest value it takes, its help)
_FLAG_HELP: dict[str, tuple[int, str]] = {
    "ranks": (1, "data-parallel ranks at the start (a divisor of --lanes unless rank counts may be uneven)"),
    "workers": (1, "DataLoader workers per rank (each worker is a participant owning some lanes)"),
    "lanes": (1, "canonical_replicas: the lanes the data is split into"),
    "steps": (1, "global steps to train (a global step takes one item from every lane)"),
    "checkpoint_every": (1, "a checkpoint at every N-th global step boundary"),
    "max_crashes": (0, "at most N job or rank crashes in the run"),
    "docs": (1, "corpus size: N web documents, N/2 code, N/4 books (default: the workload's own layout)"),
    "mid_step": (0, "a checkpoint cut inside a global step once in N deliveries (0: never)"),
}

#: every field of a derived configuration: (unit, meaning).  A ratio ``[n, d]`` is a chance of
#: n in d per the unit named ("never" for [0, 1]); virtual time is in integer ticks.
CONFIG_FIELDS: dict[str, tuple[str, str]] = {
    "seed": ("", "the run's seed: every derived value and every choice of the run comes from it"),
    "lanes": ("lanes", "canonical_replicas: the lanes the data is split into"),
    "ranks": ("ranks", "data-parallel ranks at the start"),
    "workers": ("workers per rank", "DataLoader workers per rank, each a participant owning some lanes"),
    "steps": (
        "global steps",
        "steps to train; a global step takes one item from every lane (the run ends "
        "earlier at the end of data)",
    ),
    "checkpoint_every": (
        "global steps",
        "a checkpoint at every N-th step boundary (and before a planned resize)",
    ),
    "restart_ranks": ("ranks", "the rank counts a restart or a planned resize may pick"),
    "allow_uneven": ("", "rank counts that do not divide lanes are allowed"),
    "aggregation": (
        "",
        "checkpoints run the real aggregation round, one protocol step per kernel event "
        "(off: the participants' states are merged at once)",
    ),
    "storage": ("", "checkpoints are saved by the durable store into FaultyStorage (off: kept in memory)"),
    "unrecoverable": (
        "",
        "every stored generation is damaged at a crash; the run checks that restore refuses",
    ),
    "max_crashes": ("crashes", "at most this many job or rank crashes"),
    "max_latency": (
        "ticks",
        "each participant event (an engine step) comes 1..N ticks of virtual time after "
        "the last, times its rank's slowdown",
    ),
    "microbatch_size": ("items", "the workload's batch size"),
    "ensure_mixture": ("", "the workload's pipeline has ensure_mixture"),
    "shuffle_seed": ("", "the workload's shuffle seed"),
    "pack_algorithm": ("", "the workload's packing: first_fit, best_fit or wrap"),
    "shuffle_algorithm": ("", "the workload's shuffle: streaming or block"),
    "drop_last": (
        "",
        "the workload's batch drops each lane's final partial batch (the lineage check "
        "excuses exactly what an uninterrupted run drops)",
    ),
    "mapping_strategy": ("", "how lanes map onto ranks: contiguous or interleaved"),
    "restart_microbatch": (
        "items",
        "the micro-batch sizes a restart or a planned resize may pick (empty: never changed; "
        "when it changes, the checker compares records, not batches)",
    ),
    "mid_step_checkpoint": ("deliveries", "a checkpoint cut right after a delivery inside a global step"),
    "crash": ("participant events", "the whole job crashes"),
    "rank_crash": ("participant events", "one rank crashes (the job notices 20 ticks later)"),
    "resize": ("global steps", "a planned resize at the step boundary"),
    "slow": ("ranks and incarnations", "the rank is slow: its events come 2..4 times later"),
    "round_crash": ("protocol steps", "the job crashes inside an aggregation round"),
    "storage_crash": ("storage operations", "the job crashes inside a save or restore"),
    "io_error": ("storage operations", "an injected I/O error (a torn write for writes)"),
    "read_corruption": ("reads", "damaged bytes come back"),
    "stale_listing": ("changed listings", "the previous listing comes back"),
    "latency_spike": ("storage operations", "50..500 extra ticks"),
    "bit_rot": ("crashes", "a file of a published generation is damaged"),
}
_RATIO_FIELDS = frozenset((*FAULTS, "mid_step_checkpoint"))


def _value(name: str, value: Any) -> str:
    unit = CONFIG_FIELDS.get(name, ("", ""))[0]
    if name in _RATIO_FIELDS and isinstance(value, (list, tuple)) and len(value) == 2:
        n, d = value
        return "never" if n == 0 else f"{n} in {d} {unit}"
    if isinstance(value, bool):
        return "on" if value else "off"
    return f"{value} {unit}".strip() if unit and not isinstance(value, (list, dict)) else \
        (f"{value} ({unit})" if unit else json.dumps(value, sort_keys=True))


def describe_config(cfg: dict[str, Any]) -> list[str]:
    """The configuration as named fields, one a line: ``name = value  meaning`` (ratios as "n in d UNIT")."""
    names = [n for n in CONFIG_FIELDS if n in cfg] + sorted(n for n in cfg if n not in CONFIG_FIELDS)
    width = max(len(n) for n in names)
    vals = {n: _value(n, cfg[n]) for n in names}
    vwidth = max(len(v) for v in vals.values())
    return [f"  {n:<{width}} = {vals[n]:<{vwidth}}  {CONFIG_FIELDS.get(n, ('', 'override'))[1]}".rstrip()
            for n in names]


def _faults(text: str) -> str:
    """``--faults``: a comma list of fault kinds, 'all' or 'none'."""
    names = [f.strip() for f in text.split(",")]
    if text in ("all", "none") or (all(names) and all(f in FAULTS for f in names)):
        return text
    bad = [f for f in names if f not in FAULTS] or [text]
    raise argparse.ArgumentTypeError(f"expected a comma list of {', '.join(FAULTS)}, 'all' or 'none', "
                                     f"received {', '.join(map(repr, bad))}")


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
    if lo < 0:
        raise argparse.ArgumentTypeError(f"seeds: expected seeds >= 0, received {text!r}")
    if hi < lo:
        raise argparse.ArgumentTypeError(f"seeds: expected A <= B, received {text!r}")
    return range(lo, hi + 1)


def _add_overrides(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group(
        "overrides (each defaults to the value the seed derives; see the configuration fields above)"
    )
    for name in _FLAGS:
        low, text = _FLAG_HELP[name]
        g.add_argument("--" + name.replace("_", "-"), type=int_at_least(low), default=None, dest=name,
                       metavar="N", help=text if "(default" in text else text + " (default: from the seed)")
    g.add_argument(
        "--faults",
        type=_faults,
        default=None,
        metavar="KINDS",
        help=f"comma list of fault kinds ({', '.join(FAULTS)}), 'all' or 'none' (default: from the seed)",
    )
    for name, text in (("aggregation", "checkpoints run the real aggregation round"),
                       ("storage", "checkpoints go through the durable store into FaultyStorage"),
                       ("unrecoverable", "damage every stored generation at a crash; restore must refuse")):
        g.add_argument("--" + name, default=None, action=argparse.BooleanOptionalAction,
                       help=text + " (default: from the seed)")


def _overrides(ns: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {k: getattr(ns, k) for k in (*_FLAGS, "aggregation", "storage", "unrecoverable")
                           if getattr(ns, k) is not None}
    if ns.faults is not None:
        out["faults"] = ns.faults
    return out


def checked_config(seed: int, overrides: dict[str, Any]) -> dict[str, Any]:
    """The derived configuration, refused (ValueError, one line) unless the world and workload accept it."""
    from sim.runs import derive_config, workload_of, world_config

    cfg = derive_config(seed, **dict(overrides))
    world_config(cfg)
    workload_of(cfg).source()
    return cfg


def _cmd_run(ns: argparse.Namespace) -> int:
    ov = _overrides(ns)
    try:
        cfg = checked_config(ns.seed, ov)
    except (ValueError, TypeError, ZephonRefError) as exc:
        return refuse("python -m sim run", "usage error", str(exc), EXIT_USAGE)
    print(f"seed {ns.seed}: configuration (derived from the seed, flags override; docs/sim.md):")
    print("\n".join(describe_config(cfg)), flush=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", DataDroppedWarning)
        r = run_seed(ns.seed, **ov)
    for w in caught:  # anything else is shown as usual
        if not isinstance(w.message, DataDroppedWarning):
            warnings.showwarning(w.message, w.category, w.filename, w.lineno)
    s = r.summary()
    print(f"seed {r.seed}: {'ok' if r.ok else 'FAILED'}; {r.steps} global steps, {r.events} events, "
          f"{r.crashes} crashes, {r.restores} restores, {r.history} history entries; lineage: {r.lineage}")
    print("probes: " + json.dumps(s["probes"], sort_keys=True))
    for p in r.problems[:10]:
        print("problem: " + p)
    if not r.ok:
        print("reproduce: " + reproduce(ns.seed, ov))
    print(dropped_line(caught))
    print("fingerprint " + r.fingerprint)
    if ns.json:
        doc = {
            "command": reproduce(ns.seed, ov),
            "config": cfg,
            "config_fields": {
                k: {"unit": u, "meaning": m} for k, (u, m) in CONFIG_FIELDS.items() if k in cfg
            },
            "result": {**s, "problems": list(r.problems)},
            "reproduce": None if r.ok else reproduce(ns.seed, ov),
        }
        _write_json(ns.json, doc)
    if ns.timeline:
        from sim.timeline import draw_seed

        print("timeline: " + str(draw_seed(ns.seed, ov, ns.timeline)))
    return 0 if r.ok else 1


def dropped_line(caught: Sequence[warnings.WarningMessage]) -> str:
    """One line for the DataDroppedWarnings of a run (the workload's configuration drops data by design:
    first_fit at max_length 48 drops longer documents), per cause: the totals the engines that reached
    their end of data reported at their close (``phase="total"``; a crashed engine's counts die with it),
    and on how many lanes dropping started (``phase="start"``, one warning per lane and kind per run)."""
    by: dict[str, list[DataDroppedWarning]] = {}
    for w in caught:
        if isinstance(w.message, DataDroppedWarning):
            by.setdefault(w.message.cause, []).append(w.message)
    if not by:
        return "dropped data: none"
    parts = []
    for cause, ws in sorted(by.items()):
        totals = [w for w in ws if w.phase == "total"]
        starts = [w for w in ws if w.phase == "start"]
        part = f"{cause}: {sum(w.records for w in totals)} records"
        if any(w.tokens is not None for w in totals):
            part += f" ({sum(w.tokens or 0 for w in totals)} tokens)"
        parts.append(part + f" at {len(totals)} closes; started on {len({w.lane for w in starts})} lanes")
    return "dropped data (DataDroppedWarning, by the workload's configuration; docs/drops.md): " + "; ".join(
        parts
    )


def _write_json(path: str, doc: Any) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)


def sweep(seeds: Sequence[int], overrides: dict[str, Any], *, jobs: int, progress: bool = True,
          ray: str | bool | None = False, jsonl: str | None = None, resume: bool = False,
          budget_s: float | None = None, report: str | None = None, batch: int = 1,
          task_memory_mb: int | None = None) -> dict[str, Any]:
    """Run every seed (in ``jobs`` processes, or on Ray) and summarise (see :mod:`sim.sweep`)."""
    from sim.sweep import run_sweep

    summary, _ = run_sweep(
        seeds,
        overrides,
        jobs=jobs,
        ray=ray,
        jsonl=jsonl,
        resume=resume,
        budget_s=budget_s,
        progress=progress,
        report=report,
        batch=batch,
        task_memory_mb=task_memory_mb,
    )
    return summary


def _cmd_sweep(ns: argparse.Namespace) -> int:
    seeds = list(ns.seeds)
    try:  # the overrides must make a valid run (checked on the first seed, before any process starts)
        checked_config(seeds[0], _overrides(ns))
    except (ValueError, TypeError, ZephonRefError) as exc:
        return refuse("python -m sim sweep", "usage error", str(exc), EXIT_USAGE)
    summary = sweep(seeds, _overrides(ns), jobs=ns.jobs or os.cpu_count() or 1, progress=not ns.quiet,
                    ray=ns.ray, jsonl=ns.resume or ns.jsonl, resume=ns.resume is not None, budget_s=ns.budget,
                    report=ns.report, batch=ns.batch, task_memory_mb=ns.task_memory)
    text = json.dumps(summary, indent=1, sort_keys=True)
    if ns.out:
        _write_json(ns.out, json.loads(text))
    print(
        f"{summary['runs']} seeds, {summary['ok']} ok, {summary['failed']} failed; {summary['events']} events"
    )
    print("probes (seeds reaching each): " + json.dumps(summary["probes_seeds_reached"]))
    if summary["fault_kinds_unreached"]:
        print("fault kinds no seed reached: " + ", ".join(summary["fault_kinds_unreached"]))
    if summary.get("knob_probes_unreached"):
        print("engine knobs no seed reached: " + ", ".join(summary["knob_probes_unreached"]))
    for f in summary["failures"][:10]:
        print(f"FAILED seed {f['seed']}: {(f.get('problems') or [f.get('error')])[0]}")
        print("  reproduce: " + str(f["reproduce"]))
    if ns.report:
        print("report: " + ns.report)
    return 0 if not summary["failed"] else 1


_RUN_DESCRIPTION = """\
Run and check one seed.  The seed derives the whole configuration (flags override it); the
run prints it first, one field a line with its unit and meaning, then a summary, a
reproduce command on failure, and the fingerprint (the same seed and flags give the same
run, in any process).  Virtual time is in integer ticks (not seconds); a ratio "n in d
UNIT" is a chance per UNIT ("never" when off).

configuration fields (docs/sim.md):
""" + "\n".join(f"  {k:<19} {m}{f' [{u}]' if u else ''}" for k, (u, m) in CONFIG_FIELDS.items())


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["scale"]:  # scale mode: python -m sim.scale under another name
        from sim.scale import main as scale_main

        return scale_main(args[1:])
    ap = OneLineArgumentParser(prog="python -m sim", description="zephon_ref's deterministic simulator: "
                               "one seed (run), a range of seeds (sweep), or one aggregation round at up to "
                               "200,000 ranks (scale)", epilog=EPILOG)
    sub = ap.add_subparsers(dest="cmd", required=True, metavar="{run,sweep,scale}")
    r = sub.add_parser("run", help="run and check one seed", description=_RUN_DESCRIPTION,
                       formatter_class=DefaultsHelpFormatter, epilog=EPILOG)
    r.add_argument("--seed", type=int_at_least(0), required=True, help="the run's seed, an int >= 0")
    r.add_argument(
        "--json",
        type=writable_path,
        default=None,
        metavar="FILE",
        help="also write the configuration (with each field's unit and meaning) and the result here "
        "(default: none)",
    )
    r.add_argument("--timeline", type=writable_path, default=None, metavar="FILE.png",
                   help="draw the run's timeline (ranks against virtual time, the checker's witness marked) "
                        "(default: none)")
    _add_overrides(r)
    s = sub.add_parser("sweep", help="run and check a range of seeds in parallel",
                       description="Run and check every seed of A..B in parallel processes or on a Ray "
                                   "cluster; a JSON summary "
                                   "(failures with their reproduce commands, probe coverage) and a progress "
                                   "bar on stderr.", formatter_class=DefaultsHelpFormatter, epilog=EPILOG)
    s.add_argument("--seeds", type=parse_seeds, required=True, help="A..B (inclusive) or N, seeds >= 0")
    s.add_argument("--jobs", type=int_at_least(1), default=None, help="processes (default: every core)")
    s.add_argument(
        "--out", type=writable_path, default=None, metavar="FILE", help="write the JSON summary here"
    )
    s.add_argument(
        "--quiet",
        action="store_true",
        help="no progress bar (it is off anyway when stderr is not a terminal)",
    )
    s.add_argument("--ray", nargs="?", const=True, default=False, metavar="ADDRESS",
                   help="run the seeds on a Ray cluster at ADDRESS (no ADDRESS: a local Ray instance); "
                        "needs the cluster extra (default: off)")
    s.add_argument(
        "--jsonl",
        type=writable_path,
        default=None,
        metavar="FILE",
        help="stream one JSON record per seed here as it ends (default: none)",
    )
    s.add_argument(
        "--resume",
        type=existing_file,
        default=None,
        metavar="FILE",
        help="continue the sweep whose JSONL is FILE: seeds it has are not run again (default: none)",
    )
    s.add_argument("--budget", type=number_above(0), default=None, metavar="SECONDS",
                   help="a seed running longer is reported as a timeout (not retried) (default: no budget)")
    s.add_argument("--batch", type=int_at_least(1), default=1, metavar="K", help="seeds per task")
    s.add_argument(
        "--task-memory",
        type=int_at_least(1),
        default=None,
        metavar="MB",
        help="with --ray: memory to reserve per task, so a node runs only as many seeds as it holds "
        "(default: none)",
    )
    s.add_argument(
        "--report",
        type=writable_path,
        default=None,
        metavar="FILE.html",
        help="write the report page (probe coverage, failures by kind, a timeline per failing seed) "
        "(default: none)",
    )
    _add_overrides(s)
    sub.add_parser("scale", help="one aggregation round, star or manifest tree, at up to 200,000 ranks "
                                 "(python -m sim.scale; 'python -m sim scale --help' for its options)",
                   add_help=False)
    ns = ap.parse_args(args)
    return _cmd_run(ns) if ns.cmd == "run" else _cmd_sweep(ns)

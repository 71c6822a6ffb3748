"""Long property campaigns on the executor: conformance shards, the zephon-checkpoint survey, mutation scores.

Theory of operation
-------------------
A nightly budget is split into independent *shards*, one :class:`sim.executor.Task` each, run
on any backend of :mod:`sim.executor` (this process, ``--jobs N`` local processes, or
``--ray [ADDRESS]``), streamed to a JSONL as they finish and resumable (``--resume``):

* ``conformance``: ``--examples E`` Hypothesis examples per property against ``--impl``, in
  ``--shards K`` shards of ``ceil(E / K)`` examples each.  Shard ``i`` runs
  :func:`properties.conformance.run_suite` with ``derandomize=False`` under its own seed,
  ``derive_seed(seed, "campaign/conformance/i")``, given to Hypothesis as the run's forced
  seed (what ``pytest --hypothesis-seed`` sets), so the shards explore different examples and
  each one reruns exactly: a failing shard's record carries the command that does so;
* ``checkpoints``: ``--cuts C`` zephon checkpoints judged (:func:`properties.zephon_checkpoints.survey`)
  in shards of independent seeds; the tallies add up;
* ``mutation``: the mutation score (:mod:`properties.mutation_score`): a seeded sample of source
  mutants of the core, one task per (mutant, checker), each a checker run in a mutated copy of the
  repository; the summary counts verdicts per checker (the same tasks and records as
  ``python -m properties.mutation_score run``, here with the executor's cluster options).

The summary adds the shards up; a shard that raised or ran past its budget (``--budget``) is
a failing shard with its traceback, never a lost one.  A task is a module-level function of
this module and plain arguments, so a Ray worker imports it from this checkout (the Ray
backend checks that the cluster runs this checkout's ``zephon_ref``, ``sim`` and ``properties``).

What may not live here: the properties themselves (properties.conformance), the execution
machinery (sim.executor).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import shlex
import sys
import warnings
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from sim.executor import Backend, Record, Task, make_backend, run_tasks
from zephon_ref.errors import ConfigError
from zephon_ref.exits import (
    EXIT_USAGE,
    OneLineArgumentParser,
    existing_file,
    int_at_least,
    number_above,
    refuse,
    writable_path,
)
from zephon_ref.seeding import derive_seed

__all__ = [
    "checkpoint_shard",
    "conformance_shard",
    "conformance_tasks",
    "main",
    "mutation_tasks",
    "run_campaign",
    "summarise_checkpoints",
    "summarise_conformance",
    "summarise_mutation",
]

ROOT = Path(__file__).resolve().parents[1]
CODE_ROOTS = ("zephon_ref", "sim", "properties")


@contextlib.contextmanager
def hypothesis_seed(seed: int) -> Iterator[None]:
    """Every ``@given`` run inside (random, not derandomized) draws from ``Random(seed)``: Hypothesis's own
    forced seed (``hypothesis.core.global_force_seed``, what ``pytest --hypothesis-seed`` sets), put back
    after."""
    import hypothesis.core as core

    if not hasattr(core, "global_force_seed"):  # a Hypothesis that moved it: say so rather than run unseeded
        raise RuntimeError("hypothesis.core.global_force_seed is gone from this Hypothesis version; a shard "
                           "cannot be seeded (give properties.conformance.run_suite a seed= parameter)")
    before = core.global_force_seed
    core.global_force_seed = seed
    try:
        yield
    finally:
        core.global_force_seed = before


# -- conformance ------------------------------------------------------------------------------

def conformance_shard(impl: str, examples: int, seed: int, only: Sequence[str] = ()) -> dict[str, Any]:
    """One shard: the suite against ``impl`` with ``examples`` random examples per property under ``seed``."""
    from properties.adapters import load_adapter
    from properties.conformance import run_suite

    adapter = load_adapter(impl)
    with hypothesis_seed(seed), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rows = run_suite(adapter, examples=examples, derandomize=False, only=list(only))
    return {"rows": [{"prop": r.prop, "examples": r.examples, "passed": r.passed, "failure": r.failure,
                      "skipped": r.skipped} for r in rows],
            "ok": not any(r.failure for r in rows)}


def _shard_command(impl: str, examples: int, seed: int, only: Sequence[str]) -> str:
    parts = ["python", "-m", "properties.campaigns", "shard", "--impl", impl, "--examples", str(examples),
             "--shard-seed", str(seed)]
    for p in only:
        parts += ["--property", p]
    return " ".join(shlex.quote(p) for p in parts)


def conformance_tasks(
    impl: str, examples: int, shards: int, seed: int, only: Sequence[str] = ()
) -> list[Task]:
    if examples < 1 or shards < 1:
        raise ConfigError(
            f"conformance campaign: expected examples >= 1 and shards >= 1, received {examples}, {shards}"
        )
    per = math.ceil(examples / shards)
    out = []
    for i in range(shards):
        s = derive_seed(seed, f"campaign/conformance/{i}")
        out.append(Task(f"shard:{i}", conformance_shard, (impl, per, s, tuple(only)),
                        {"shard": i, "shard_seed": s, "reproduce": _shard_command(impl, per, s, only)}))
    return out


def summarise_conformance(records: Sequence[Record]) -> dict[str, Any]:
    props: dict[str, dict[str, Any]] = {}
    bad_shards = []
    for r in sorted(records, key=lambda r: int(r["shard"])):
        if r.get("status") != "done":
            bad_shards.append({"shard": r["shard"], "status": r.get("status"), "error": r.get("error"),
                               "reproduce": r.get("reproduce")})
            continue
        for row in r["rows"]:
            p = props.setdefault(row["prop"], {"examples": 0, "passed": 0, "failures": [], "skipped": None})
            p["examples"] += row["examples"]
            p["passed"] += row["passed"]
            p["skipped"] = p["skipped"] or row["skipped"]
            if row["failure"]:
                p["failures"].append(
                    {"shard": r["shard"], "failure": row["failure"], "reproduce": r["reproduce"]}
                )
    return {"shards": len(records), "failed_shards": bad_shards, "properties": props,
            "ok": not bad_shards and not any(p["failures"] for p in props.values())}


# -- the zephon-checkpoint survey -------------------------------------------------------------

def checkpoint_shard(cuts: int, seed: int) -> dict[str, Any]:
    from properties.zephon_checkpoints import survey

    tally = dataclasses.asdict(survey(cuts, seed=seed))
    return {"tally": tally, "ok": not tally["ref_failures"]}


def checkpoint_tasks(cuts: int, shards: int, seed: int) -> list[Task]:
    if cuts < 1 or shards < 1:
        raise ConfigError(f"checkpoint survey: expected cuts >= 1 and shards >= 1, received {cuts}, {shards}")
    per = math.ceil(cuts / shards)
    out = []
    for i in range(shards):
        s = derive_seed(seed, f"campaign/checkpoints/{i}")
        out.append(Task(f"shard:{i}", checkpoint_shard, (per, s),
                        {"shard": i, "shard_seed": s,
                         "reproduce": f"python -m properties.zephon_checkpoints --cuts {per} --seed {s}"}))
    return out


def summarise_checkpoints(records: Sequence[Record]) -> dict[str, Any]:
    total: dict[str, Any] = {}
    bad = []
    for r in sorted(records, key=lambda r: int(r["shard"])):
        if r.get("status") != "done":
            bad.append({"shard": r["shard"], "status": r.get("status"), "error": r.get("error"),
                        "reproduce": r.get("reproduce")})
            continue
        for k, v in r["tally"].items():
            if isinstance(v, int):
                total[k] = total.get(k, 0) + v
            elif isinstance(v, list):
                total.setdefault(k, []).extend(v)
            elif isinstance(v, dict):
                d = total.setdefault(k, {})
                for kk, vv in v.items():
                    d[kk] = d.get(kk, 0) + vv
    return {"shards": len(records), "failed_shards": bad, "tally": total,
            "ok": not bad and not total.get("ref_failures")}


# -- mutation scores --------------------------------------------------------------------------

def mutation_tasks(*, sample: int = 200, seed: int = 0, first: int | None = None,
                   checkers: Sequence[str] = ("conformance", "sim", "ci"), timeout: float = 900.0,
                   examples: int = 20, seeds: str = "0..39") -> list[Task]:
    """The mutation score's tasks (:func:`properties.mutation_score.tasks_for` on a seeded sample) for
    the executor."""
    from properties import mutation_score as ms

    bad = [c for c in checkers if c not in ms.CHECKERS]
    if bad or not checkers:
        raise ConfigError(
            f"mutation: expected checkers among {sorted(ms.CHECKERS)}, received {list(checkers)}"
        )
    chosen = ms.sample(ms.generate(), sample, seed)[:first]
    return ms.executor_tasks(
        ms.tasks_for(chosen, list(checkers), timeout=timeout, examples=examples, seeds=seeds)
    )


def summarise_mutation(records: Sequence[Record]) -> dict[str, Any]:
    """Verdicts per checker (killed, survived, timeout, error) and the kill share of each."""
    from properties.mutation_score import verdict_of

    per: dict[str, dict[str, int]] = {}
    for r in records:
        v = per.setdefault(str(r.get("checker", "?")), {})
        verdict = verdict_of(dict(r))
        v[verdict] = v.get(verdict, 0) + 1
    score = {c: (round(v.get("killed", 0) / (sum(v.values()) - v.get("error", 0)), 4)
                 if sum(v.values()) > v.get("error", 0) else None) for c, v in sorted(per.items())}
    failed = [{"shard": r["task"], "status": r.get("status"), "error": r.get("error"),
               "reproduce": r.get("reproduce")} for r in records if r.get("status") != "done"]
    return {"checkers": {c: per[c] for c in sorted(per)}, "score": score, "failed_shards": failed,
            "ok": not failed}


# -- driver -----------------------------------------------------------------------------------

SUMMARISE = {"conformance": summarise_conformance, "checkpoints": summarise_checkpoints,
             "mutation": summarise_mutation}


def run_campaign(
    kind: str,
    tasks: Sequence[Task],
    header: Mapping[str, Any],
    *,
    backend: Backend | None = None,
    jobs: int | None = None,
    ray: str | bool | None = False,
    jsonl: str | Path | None = None,
    resume: bool = False,
    budget_s: float | None = None,
    progress: bool = False,
) -> tuple[dict[str, Any], list[Record]]:
    """Run a campaign's shards on the executor and add them up (``kind``: conformance, checkpoints,
    mutation)."""
    own = backend is None
    be = backend if backend is not None else make_backend(jobs=jobs, ray=ray, budget_s=budget_s,
                                                          code_roots=CODE_ROOTS)
    try:
        records = run_tasks(
            tasks,
            be,
            jsonl=jsonl,
            header={"run": f"campaign {kind}", **header},
            resume=resume,
            budget_s=budget_s,
            progress=progress,
            what="shard",
        )
    finally:
        if own:
            be.close()
    keys = {t.key for t in tasks}
    return SUMMARISE[kind]([r for r in records if r["task"] in keys]), records


def _print(kind: str, summary: Mapping[str, Any]) -> None:
    if kind == "conformance":
        print(f"{'property':<22} {'examples':>8} {'passed':>7}  failures (shard: reproduce)")
        for name, p in summary["properties"].items():
            tail = f"skipped: {p['skipped']}" if p["skipped"] and not p["examples"] else \
                "; ".join(f"{f['failure']} ({f['reproduce']})" for f in p["failures"][:3]) or "-"
            print(f"{name:<22} {p['examples']:>8} {p['passed']:>7}  {tail}")
    elif kind == "checkpoints":
        t = summary["tally"]
        print(
            f"cuts {t.get('cuts', 0)}: zephon_ref exact {t.get('ref_exact', 0)}, "
            f"refused {t.get('ref_refused', 0)}, "
            f"differs {t.get('ref_differs', 0)}; zephon's own resume exact {t.get('zephon_exact', 0)}, "
            f"wrong {t.get('zephon_wrong', 0)}"
        )
        for line in (t.get("ref_failures") or [])[:10]:
            print("REF  " + line)
    else:
        print(f"mutation score (killed share per checker) {json.dumps(summary['score'], sort_keys=True)}: "
              f"{json.dumps(summary['checkers'], sort_keys=True)}")
    for b in summary["failed_shards"]:
        print(
            f"FAILED shard {b.get('shard', b.get('path'))} ({b['status']}): {b['error']}\n"
            f"  reproduce: {b['reproduce']}"
        )


def main(argv: Sequence[str] | None = None) -> int:
    ap = OneLineArgumentParser(prog="python -m properties.campaigns", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="kind", required=True)
    c = sub.add_parser(
        "conformance", help="the property suite, a budget of examples split into seeded shards"
    )
    c.add_argument("--impl", default="inline", help="inline, threads, zephon, tensor, or module:attr")
    c.add_argument(
        "--examples", type=int_at_least(1), default=200, help="examples per property, all shards together"
    )
    c.add_argument("--shards", type=int_at_least(1), default=8)
    c.add_argument("--property", action="append", default=[], help="only this property (repeatable)")
    k = sub.add_parser("checkpoints", help="judge zephon checkpoints at random cuts (needs zephon)")
    k.add_argument("--cuts", type=int_at_least(1), default=400)
    k.add_argument("--shards", type=int_at_least(1), default=8)
    m = sub.add_parser("mutation", help="the mutation score: a seeded sample of mutants x checkers "
                                        "(properties.mutation_score)")
    m.add_argument("--sample", type=int_at_least(1), default=200, help="mutants in the seeded sample")
    m.add_argument("--first", type=int_at_least(1), default=None, help="only the first N of the sample")
    m.add_argument("--checkers", default="conformance,sim,ci", help="comma list: conformance, sim, ci")
    m.add_argument("--timeout", type=number_above(0), default=900.0, help="seconds per mutant and checker")
    sh = sub.add_parser(
        "shard", help="run one conformance shard here (what a failing shard's reproduce line runs)"
    )
    sh.add_argument("--impl", default="inline")
    sh.add_argument("--examples", type=int_at_least(1), required=True)
    sh.add_argument("--shard-seed", type=int, required=True)
    sh.add_argument("--property", action="append", default=[])
    for p in (c, k, m):
        p.add_argument(
            "--seed", type=int_at_least(0), default=0, help="the campaign's seed (shard seeds derive from it)"
        )
        p.add_argument(
            "--jobs", type=int_at_least(1), default=None, help="local processes (default: every core)"
        )
        p.add_argument(
            "--ray",
            nargs="?",
            const=True,
            default=False,
            metavar="ADDRESS",
            help="run the shards on a Ray cluster (no ADDRESS: a local instance); needs the cluster extra",
        )
        p.add_argument(
            "--jsonl",
            type=writable_path,
            default=None,
            metavar="FILE",
            help="stream one record per shard here",
        )
        p.add_argument(
            "--resume",
            type=existing_file,
            default=None,
            metavar="FILE",
            help="continue a campaign from its JSONL",
        )
        p.add_argument("--budget", type=number_above(0), default=None, metavar="SECONDS", help="per shard")
        p.add_argument("--out", type=writable_path, default=None, help="write the JSON summary here")
        p.add_argument("--quiet", action="store_true", help="no progress bar")
    a = ap.parse_args(argv)
    if a.kind == "shard":
        res = conformance_shard(a.impl, a.examples, a.shard_seed, a.property)
        for row in res["rows"]:
            print(
                f"{row['prop']:<22} {row['examples']:>8} {row['passed']:>7}  "
                f"{row['failure'] or row['skipped'] or '-'}"
            )
        return 0 if res["ok"] else 1
    if a.kind == "conformance":
        tasks = conformance_tasks(a.impl, a.examples, a.shards, a.seed, a.property)
        header: dict[str, Any] = {"impl": a.impl, "examples": a.examples, "shards": a.shards, "seed": a.seed,
                                  "only": a.property}
    elif a.kind == "checkpoints":
        tasks = checkpoint_tasks(a.cuts, a.shards, a.seed)
        header = {"cuts": a.cuts, "shards": a.shards, "seed": a.seed}
    else:
        checkers = [c.strip() for c in a.checkers.split(",") if c.strip()]
        from properties.mutation_score import CHECKERS

        if not checkers or any(c not in CHECKERS for c in checkers):
            return refuse(
                ap.prog,
                "usage error",
                f"--checkers: expected a comma list of {', '.join(sorted(CHECKERS))}, "
                f"received {a.checkers!r}",
                EXIT_USAGE,
            )
        tasks = mutation_tasks(
            sample=a.sample, seed=a.seed, first=a.first, checkers=checkers, timeout=a.timeout
        )
        header = {"kind": "mutation_score", "sample": a.sample, "seed": a.seed, "first": a.first,
                  "checkers": checkers, "timeout": a.timeout}
    summary, _ = run_campaign(a.kind, tasks, header, jobs=a.jobs, ray=a.ray, jsonl=a.resume or a.jsonl,
                              resume=a.resume is not None, budget_s=a.budget, progress=not a.quiet)
    _print(a.kind, summary)
    if a.out:
        Path(a.out).write_text(json.dumps(summary, indent=1, sort_keys=True) + "\n")
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())

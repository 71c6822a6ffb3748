"""Mutation score of zephon_ref's core (opt-in, not in CI): which checker kills which mutant.

Theory of operation
-------------------
:func:`generate` walks the syntax trees of ``zephon_ref/engine``, ``ops``, ``work`` and
``state.py`` and proposes small source mutants (:class:`~properties.mutation.Mutant` with a
line and column): a comparison flipped (``==``/``!=``, ``<``/``<=``, ``>``/``>=``, ``in``/``not
in``, ``is``/``is not``), an arithmetic operator swapped (``+``/``-``, ``*``/``//``), an integer
constant moved by one, ``True``/``False`` swapped, a ``not`` removed, a ``return`` of a value
made ``return None``, a ``break``/``continue`` swapped, and a simple statement (a call, an
assignment, an augmented assignment) replaced by ``pass``.  Docstrings, strings, annotations,
``assert`` statements and ``raise`` statements are left alone (an assert is an internal check,
a raise a refusal message).  :func:`sample` takes a seeded sample.

A *task* is one (mutant, checker) pair as plain data (a dict), and :func:`run_task` (top level,
picklable) runs the checker in a mutated copy of the repository with a time limit and returns a
result dict whose ``verdict`` is ``killed`` (the checker failed), ``survived`` (it passed),
``timeout`` (the clock ended it: detected, but not by an assertion) or ``error`` (the mutant could
not be applied).  :func:`run_tasks` runs a list of independent tasks on the project's one
executor (:mod:`sim.executor`: this process, local processes or a Ray cluster) and appends each
record to a JSONL file as it finishes; tasks already in the file are skipped, so a run resumes
where it stopped.  ``python -m properties.campaigns mutation`` runs the same tasks with the
executor's cluster options.

Checkers (each a command in the mutated copy; exit status 0 = the mutant survived):

* ``conformance``: ``python -m properties.conformance --impl inline --examples N`` (the property
  suite a user runs against their loader; inline is zephon_ref itself, so today it can only
  kill what breaks the suite's self-consistency rows);
* ``sim``: the seeds of ``python -m sim sweep --seeds 0..39`` run one by one (:func:`sim.runs.run_seed`,
  the same check the sweep runs), stopping at the first failure;
* ``ci``: a targeted subset of the CI suite with ``pytest -x`` under the ci profile
  (:data:`CI_TESTS`; the whole suite is 5-25 minutes per mutant here, see docs/mutation.md).

Usage (docs/mutation.md)::

    python -m properties.mutation_score run --sample 200 --seed 0 --out mutation-results/score.jsonl
    python -m properties.mutation_score report mutation-results/score.jsonl

What may not live here: engine logic; anything imported from the engine in this process (a
mutant's effects live only in its child process).
"""

from __future__ import annotations

import ast
import json
import random
import subprocess
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from properties.mutation import ROOT, Mutant, StaleMutant, run_mutated
from sim.executor import Backend, Task, make_backend, read_records
from sim.executor import run_tasks as execute_tasks
from zephon_ref.exits import (
    EXIT_USAGE,
    OneLineArgumentParser,
    existing_file,
    int_at_least,
    number_above,
    refuse,
)

__all__ = [
    "CHECKERS",
    "CI_TESTS",
    "KILL_CODES",
    "executor_tasks",
    "generate",
    "mutants_from",
    "report",
    "run_task",
    "run_tasks",
    "sample",
    "tasks_for",
    "verdict_of",
]

TARGETS = ("zephon_ref/engine", "zephon_ref/ops", "zephon_ref/work", "zephon_ref/state.py")

#: the CI subset the ``ci`` checker runs (-x): the engine, operator, source and state unit tests,
#: conformance with zephon 0.2.0, elastic lanes, the property suite's own tests and the simulator's
#: smoke sweep; tests/quality is left out (its tests assert that the suite *fails* under a planted
#: bug, so a second mutant on top leaves them passing), and so are torch, notebooks, s3 and the
#: durable-store crash tests (they exercise the torch path and the store, not the mutated core)
CI_TESTS = ("tests/unit", "tests/conformance", "tests/elastic", "tests/regressions", "tests/properties",
            "tests/sim/test_runs.py", "tests/sim/test_world_lineage.py")

CHECKERS: dict[str, list[str]] = {
    # every row: the torch row, skipped here while the to_torch_dataset() resume bug stood (it failed on
    # the unmutated tree, so every mutant counted as killed: 30 of 30 on 2026-12-04), runs again since
    # that bug's fix (issue 34); a row red on the unmutated tree is refused by main()'s baseline run
    "conformance": ["python", "-m", "properties.conformance", "--impl", "inline", "--examples", "{examples}",
                    "--quiet"],
    "sim": ["python", "-m", "properties.mutation_score", "sim-seeds", "{seeds}"],
    # -n 0, not -p no:xdist: pyproject's addopts carry xdist's --dist, which pytest refuses without the plugin
    "ci": ["python", "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-n", "0", "-p", "no:randomly",
           *CI_TESTS],
}
#: exit codes that mean "the checker found the mutant" where not every non-zero code does: pytest
#: exits 1 when a test failed and 2-5 when it could not run the tests (interrupted, internal error,
#: usage error, nothing collected), which is the checker's failure, not the mutant's kill
KILL_CODES: dict[str, frozenset[int]] = {"ci": frozenset({1})}

_CMP_SWAP = {ast.Eq: "!=", ast.NotEq: "==", ast.Lt: "<=", ast.LtE: "<", ast.Gt: ">=", ast.GtE: ">",
             ast.In: "not in", ast.NotIn: "in", ast.Is: "is not", ast.IsNot: "is"}
_CMP_TEXT = {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=",
             ast.In: "in", ast.NotIn: "not in", ast.Is: "is", ast.IsNot: "is not"}
_BIN_SWAP = {ast.Add: ("+", "-"), ast.Sub: ("-", "+"), ast.Mult: ("*", "//"), ast.FloorDiv: ("//", "*"),
             ast.Mod: ("%", "//")}


def _files(root: Path) -> list[Path]:
    out: list[Path] = []
    for t in TARGETS:
        p = root / t
        out += sorted(p.rglob("*.py")) if p.is_dir() else [p]
    return [f for f in out if "__pycache__" not in f.parts]


def _docstring_nodes(tree: ast.AST) -> set[int]:
    ids: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                ids.add(id(first))
    return ids


def _skip_subtrees(tree: ast.AST) -> set[int]:
    """Nodes inside annotations, asserts, raises, docstrings and f-strings: never mutated."""
    skip: set[int] = set()
    roots: list[ast.AST] = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assert, ast.Raise, ast.JoinedStr)):
            roots.append(node)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            roots += [a.annotation for a in (*node.args.args, *node.args.kwonlyargs, *node.args.posonlyargs)
                      if a.annotation is not None]
            if node.returns is not None:
                roots.append(node.returns)
        if isinstance(node, ast.AnnAssign):
            roots.append(node.annotation)
    for r in roots:
        skip.update(id(n) for n in ast.walk(r))
    return skip | _docstring_nodes(tree)


def _offset(lines: list[str], line: int, col: int) -> int:
    return sum(len(x) for x in lines[: line - 1]) + col


def _utf8_col(lines: list[str], line: int, col_bytes: int) -> int:
    return len(lines[line - 1].encode()[:col_bytes].decode(errors="replace"))


def _mutants_of(path: Path, root: Path) -> Iterator[Mutant]:
    rel = str(path.relative_to(root))
    text = path.read_text()
    tree = ast.parse(text)
    lines = text.splitlines(keepends=True)
    skip = _skip_subtrees(tree)

    def at(node: ast.AST, original: str, replacement: str, kind: str, line: int | None = None,
           col: int | None = None) -> Mutant:
        ln = line if line is not None else node.lineno  # type: ignore[attr-defined]
        cl = col if col is not None else _utf8_col(lines, ln, node.col_offset)  # type: ignore[attr-defined]
        return Mutant(f"{rel}:{ln}:{cl}:{kind}", rel, original, replacement, line=ln, col=cl)

    def between(a: ast.AST, b: ast.AST, token: str) -> tuple[int, int] | None:
        """(line, col) of ``token`` in the source between the end of ``a`` and the start of ``b``."""
        start = _offset(lines, a.end_lineno, _utf8_col(lines, a.end_lineno, a.end_col_offset))  # type: ignore[attr-defined]
        end = _offset(lines, b.lineno, _utf8_col(lines, b.lineno, b.col_offset))  # type: ignore[attr-defined]
        gap = text[start:end]
        k = gap.find(token)
        if k < 0 or "#" in gap:
            return None
        pos = start + k
        ln = text.count("\n", 0, pos) + 1
        return ln, pos - _offset(lines, ln, 0)

    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Compare):
            left = node.left
            for op, right in zip(node.ops, node.comparators, strict=True):
                t = _CMP_TEXT[type(op)]
                where = between(left, right, t)
                if where is not None and not (
                    t == "in" and text[_offset(lines, *where) - 4 : _offset(lines, *where)].endswith("not ")
                ):
                    yield at(node, t, _CMP_SWAP[type(op)], f"cmp {t}", *where)
                left = right
        elif isinstance(node, ast.BinOp) and type(node.op) in _BIN_SWAP:
            t, r = _BIN_SWAP[type(node.op)]
            where = between(node.left, node.right, t)
            if where is not None:
                yield at(node, t, r, f"binop {t}", *where)
        elif isinstance(node, ast.Constant) and type(node.value) is int and node.lineno == node.end_lineno:
            src = ast.get_source_segment(text, node)
            if src is not None and src.isdigit():
                yield at(node, src, str(node.value + 1), f"const {src}+1")
        elif isinstance(node, ast.Constant) and type(node.value) is bool:
            yield at(node, str(node.value), str(not node.value), f"bool {node.value}")
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            yield at(node, "not ", "", "drop not")
        elif isinstance(node, ast.Return) and node.value is not None and node.lineno == node.end_lineno:
            src = ast.get_source_segment(text, node)
            if src and not (isinstance(node.value, ast.Constant) and node.value.value is None):
                yield at(node, src, "return None", "return None")
        elif isinstance(node, ast.Break):
            yield at(node, "break", "continue", "break->continue")
        elif isinstance(node, ast.Continue):
            yield at(node, "continue", "break", "continue->break")
        elif isinstance(node, (ast.Expr, ast.Assign, ast.AugAssign)) and node.lineno == node.end_lineno:
            if isinstance(node, ast.Expr) and not isinstance(node.value, ast.Call):
                continue
            src = ast.get_source_segment(text, node)
            if src:
                yield at(node, src, "pass", "statement->pass")


def generate(root: Path = ROOT) -> list[Mutant]:
    """Every proposed mutant of :data:`TARGETS`, in a fixed order (file, line, column, kind)."""
    out = [m for f in _files(root) for m in _mutants_of(f, root)]
    return sorted(out, key=lambda m: (m.file, m.line or 0, m.col or 0, m.name))


def sample(mutants: Sequence[Mutant], n: int, seed: int) -> list[Mutant]:
    """A seeded sample of ``n`` mutants (all of them when there are fewer), in the sample's random
    order, so that any prefix of it (``--first``) is a seeded random sample too."""
    picked = random.Random(seed).sample(range(len(mutants)), min(n, len(mutants)))
    return [mutants[i] for i in picked]


def mutants_from(results: Path, *, moved_since: str | None = None) -> list[Mutant]:
    """The mutants an earlier results file ran, in the order they first appear.

    The seeded sample is drawn from :func:`generate` over the source as it is, so an edit to the
    core between two runs draws another sample; a checker added to an earlier run (``run
    --mutants-from FILE``) must take that run's mutants instead.  A mutant whose line moved since
    is refused as stale when it runs (``verdict: error``), never applied elsewhere.

    ``moved_since`` (a git revision the earlier run's source was at) follows moved lines: a mutant's
    line is looked up by its text at that revision, and the mutant moves to the line of the source as
    it is with the same text, or else with the same start through the mutated snippet (the nearest such
    line when there are several); a line found neither way stays where it was and is refused as stale.
    The mutant keeps its name (the old position), so records of both runs line up.
    """
    out: dict[str, Mutant] = {}
    for r in read_records(results)[1]:
        name = r.get("mutant")
        if not isinstance(name, str) or name in out or r.get("line") is None:
            continue
        col = r.get("col")  # records written before "col" was recorded: the generated name carries it
        col = int(name.split(":")[2]) if col is None else int(col)
        line = int(r["line"])
        if moved_since is not None:
            line = _moved_line(r["file"], line, moved_since, upto=col + len(r["original"]))
        out[name] = Mutant(name=name, file=r["file"], original=r["original"], replacement=r["replacement"],
                           line=line, col=col)
    return list(out.values())


def _moved_line(file: str, line: int, rev: str, *, upto: int) -> int:
    """Where the text of ``file``'s line ``line`` at git revision ``rev`` is now: the same whole line,
    else the same first ``upto`` characters (the line's start through the mutated snippet); ``line``
    when it is nowhere, or ``rev`` does not have the file."""
    root = Path(ROOT)
    got = subprocess.run(["git", "show", f"{rev}:{file}"], cwd=root, capture_output=True, text=True,
                         check=False)
    old = got.stdout.splitlines()
    if got.returncode != 0 or not 1 <= line <= len(old):
        return line
    now = (root / file).read_text(encoding="utf-8").splitlines()
    same = [i + 1 for i, text in enumerate(now) if text == old[line - 1]]
    if not same:
        head = old[line - 1][:upto]
        same = [i + 1 for i, text in enumerate(now) if text[:upto] == head]
    return min(same, key=lambda i: (abs(i - line), i)) if same else line


def tasks_for(mutants: Iterable[Mutant], checkers: Sequence[str], *, timeout: float, examples: int = 20,
              seeds: str = "0..39") -> list[dict[str, Any]]:
    """Independent tasks (plain, JSON-able dicts), one per (mutant, checker)."""
    return [
        {
            "id": f"{m.name}|{c}",
            "mutant": asdict(m),
            "checker": c,
            "timeout": timeout,
            "examples": examples,
            "seeds": seeds,
        }
        for m in mutants
        for c in checkers
    ]


def checker_argv(checker: str, *, examples: int = 20, seeds: str = "0..39") -> list[str]:
    """The command line of ``checker`` (:data:`CHECKERS` with its placeholders filled)."""
    return [a.format(examples=examples, seeds=seeds) for a in CHECKERS[checker]]


def baseline_failure(checker: str, *, timeout: float, examples: int = 20, seeds: str = "0..39",
                     root: Path = ROOT) -> str | None:
    """How ``checker`` fails on the unmutated tree (None: it passes, so its failures are kills)."""
    argv = checker_argv(checker, examples=examples, seeds=seeds)
    out = run_mutated([], argv, timeout=timeout, root=root, env={"HYPOTHESIS_PROFILE": "ci"})
    if out.timed_out:
        return f"a timeout after {timeout:g} s"
    if out.returncode != 0:
        return f"exit {out.returncode}: {out.tail.strip().splitlines()[-1][:200] if out.tail.strip() else ''}"
    return None


def run_task(task: dict[str, Any]) -> dict[str, Any]:
    """Run one task (see the module docstring); never raises for a mutant's behaviour."""
    m = Mutant(**task["mutant"])
    argv = checker_argv(task["checker"], examples=task.get("examples", 20), seeds=task.get("seeds", "0..39"))
    base = {"id": task["id"], "mutant": m.name, "checker": task["checker"], "file": m.file, "line": m.line,
            "col": m.col, "original": m.original, "replacement": m.replacement}
    try:
        out = run_mutated([m], argv, timeout=float(task["timeout"]), env={"HYPOTHESIS_PROFILE": "ci"})
    except StaleMutant as exc:
        return {**base, "verdict": "error", "checker_seconds": 0.0, "detail": str(exc)}
    kills = KILL_CODES.get(task["checker"])
    if out.timed_out:
        verdict = "timeout"
    elif out.returncode == 0:
        verdict = "survived"
    else:
        verdict = "killed" if kills is None or out.returncode in kills else "error"
    lines = [x for x in out.tail.strip().splitlines() if x.strip()]
    return {
        **base,
        "verdict": verdict,
        "checker_seconds": round(out.seconds, 1),
        "returncode": out.returncode,
        "detail": "\n".join(lines[-3:])[-600:],
    }


def executor_tasks(tasks: Sequence[dict[str, Any]]) -> list[Task]:
    """The tasks as :class:`sim.executor.Task` s (key: the task's id; :func:`run_task` runs each)."""
    return [Task(t["id"], run_task, (t,), {"reproduce": "python -m properties.mutation_score run ... (task "
                                                          f"{t['id']})"}) for t in tasks]


def verdict_of(record: dict[str, Any]) -> str:
    """A record's verdict: the checker's (killed, survived, timeout, error), or the executor's ``error`` /
    ``timeout`` when the task itself failed."""
    return str(record.get("verdict") if record.get("status", "done") == "done" else record.get("status"))


def run_tasks(tasks: Sequence[dict[str, Any]], results: Path, *, jobs: int = 1, progress: bool = True,
              backend: Backend | None = None) -> int:
    """Run every task not yet in ``results`` (JSONL) on the executor (``jobs`` local processes, or
    ``backend``), appending each record as it finishes; returns how many ran now."""
    results.parent.mkdir(parents=True, exist_ok=True)
    resume = results.exists() and results.stat().st_size > 0
    before = len(read_records(results)[1]) if resume else 0
    own = backend is None
    be = make_backend(jobs=jobs) if backend is None else backend

    def say(rec: dict[str, Any]) -> None:
        if progress:
            print(
                f"{verdict_of(rec):<8} {rec.get('checker_seconds', rec.get('seconds'))!s:>7}s "
                f"{rec.get('checker', '?'):<11} {rec.get('mutant', rec['task'])}",
                file=sys.stderr,
                flush=True,
            )

    try:
        records = execute_tasks(executor_tasks(tasks), be, jsonl=results, header={"kind": "mutation_score"},
                                resume=resume, retries=1, progress=False, on_record=say)
    finally:
        if own:
            be.close()
    return len(records) - before


def report(results: Path) -> dict[str, Any]:
    """Per checker: mutants run, killed, timed out, survived, the kill share, seconds per mutant;
    and the mutants every checker that ran them let survive."""
    rows = read_records(results)[1]
    by: dict[str, dict[str, Any]] = {}
    status: dict[str, dict[str, str]] = {}
    for r in rows:
        s = by.setdefault(r["checker"], {"run": 0, "killed": 0, "timeout": 0, "survived": 0, "error": 0,
                                         "seconds": 0.0})
        s["run"] += 1
        s[verdict_of(r)] += 1
        s["seconds"] += float(r.get("checker_seconds", r.get("seconds", 0.0)))
        status.setdefault(r["mutant"], {})[r["checker"]] = verdict_of(r)
    for s in by.values():
        valid = s["run"] - s["error"]
        s["killed_share"] = round(s["killed"] / valid, 3) if valid else None
        s["detected_share"] = round((s["killed"] + s["timeout"]) / valid, 3) if valid else None
        s["seconds_per_mutant"] = round(s["seconds"] / max(s["run"], 1), 1)
    survivors = sorted(m for m, st in status.items() if st and all(v == "survived" for v in st.values()))
    return {"checkers": by, "mutants": len(status), "survived_everything": survivors,
            "status": {m: status[m] for m in sorted(status)}}


def _sim_seeds(spec: str) -> int:
    """The ``sim`` checker's child: run the seeds in order, stop at the first failure (exit 1)."""
    from sim.cli import parse_seeds
    from sim.runs import run_seed

    for seed in parse_seeds(spec):
        try:
            r = run_seed(seed)
        except Exception as exc:  # noqa: BLE001 - the simulator or engine crashing is a failure too
            print(f"seed {seed}: raised {type(exc).__name__}: {str(exc)[:300]}")
            return 1
        if not r.ok:
            print(f"seed {seed}: {r.problems[0][:300]}")
            return 1
    print("all seeds ok")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    ap = OneLineArgumentParser(prog="python -m properties.mutation_score", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run a seeded sample of mutants against the checkers (resumable)")
    r.add_argument("--sample", type=int_at_least(1), default=200)
    r.add_argument("--seed", type=int_at_least(0), default=0)
    r.add_argument("--checkers", default="conformance,sim,ci", help=f"comma list of {sorted(CHECKERS)}")
    r.add_argument("--timeout", type=number_above(0), default=900.0, help="seconds per mutant and checker")
    r.add_argument("--examples", type=int_at_least(1), default=20, help="conformance: examples per property")
    r.add_argument("--seeds", default="0..39", help="sim: the seed range")
    r.add_argument("--jobs", type=int_at_least(1), default=1)
    r.add_argument(
        "--first", type=int_at_least(1), default=None, help="only the first N mutants of the sample"
    )
    r.add_argument("--out", default="mutation-results/score.jsonl")
    r.add_argument("--mutants-from", type=existing_file, default=None, metavar="FILE",
                   help="run the mutants of this earlier results file instead of drawing the sample again "
                        "(the sample depends on the source, so an edit to the core draws another)")
    r.add_argument("--moved-since", default=None, metavar="REV",
                   help="with --mutants-from: the git revision that run's source was at; a mutant whose line "
                        "moved since (same text elsewhere in its file) follows it")
    rep = sub.add_parser("report", help="summarise a results file")
    rep.add_argument("results", type=existing_file)
    ls = sub.add_parser("list", help="print the sample's mutants")
    ls.add_argument("--sample", type=int_at_least(1), default=200)
    ls.add_argument("--seed", type=int_at_least(0), default=0)
    ss = sub.add_parser("sim-seeds", help="(the sim checker's child) run seeds until the first failure")
    ss.add_argument("seeds")
    ns = ap.parse_args(argv)
    if ns.cmd == "sim-seeds":
        return _sim_seeds(ns.seeds)
    if ns.cmd == "report":
        print(json.dumps(report(Path(ns.results)), indent=1))
        return 0
    if ns.cmd == "run" and ns.mutants_from:
        chosen = mutants_from(Path(ns.mutants_from), moved_since=ns.moved_since)
    else:
        chosen = sample(generate(), ns.sample, ns.seed)
    if ns.cmd == "list":
        for m in chosen:
            print(f"{m.name}: {m.original!r} -> {m.replacement!r}")
        print(f"{len(chosen)} mutants (of {len(generate())} proposed)")
        return 0
    checkers = [c.strip() for c in ns.checkers.split(",") if c.strip()]
    if not checkers or any(c not in CHECKERS for c in checkers):
        return refuse(
            ap.prog,
            "usage error",
            f"--checkers: expected a comma list of {', '.join(sorted(CHECKERS))}, received {ns.checkers!r}",
            EXIT_USAGE,
        )
    for c in checkers:
        failing = baseline_failure(c, timeout=ns.timeout, examples=ns.examples, seeds=ns.seeds)
        if failing is not None:
            return refuse(ap.prog, "checker fails without a mutant",
                          f"checker {c!r}: expected exit 0 on the unmutated tree (else every mutant "
                          f"counts as killed), received {failing}", EXIT_USAGE)
    tasks = tasks_for(chosen[: ns.first] if ns.first else chosen, checkers, timeout=ns.timeout,
                      examples=ns.examples, seeds=ns.seeds)
    run_tasks(tasks, Path(ns.out), jobs=ns.jobs)
    print(json.dumps(report(Path(ns.out))["checkers"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

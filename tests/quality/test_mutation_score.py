"""The mutation-score runner (properties/mutation_score.py): its generated mutants apply and parse,
its sample is seeded, its tasks run in a mutated copy (the child imports the copy, not the
checkout) and a results file resumes.  The score itself is opt-in (docs/mutation.md)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from properties import mutation_score as ms
from properties.mutation import ROOT, Mutant, StaleMutant
from sim.executor import read_records


@pytest.fixture(scope="module")
def mutants() -> list[Mutant]:
    return ms.generate()


def test_the_sampled_mutants_apply_and_parse(mutants: list[Mutant]) -> None:
    assert len(mutants) > 1000
    assert {m.file.split("/")[1] for m in mutants} >= {"engine", "ops", "work", "state.py"}
    texts = {f: (ROOT / f).read_text() for f in {m.file for m in mutants}}
    for m in ms.sample(mutants, 200, 0):  # the default sample (all 4,000: about a minute of parsing)
        assert m.line is not None
        ast.parse(m.apply(texts[m.file]), m.file)


def test_the_sample_is_seeded_and_every_prefix_is_a_sample(mutants: list[Mutant]) -> None:
    a, b = ms.sample(mutants, 200, 0), ms.sample(mutants, 200, 0)
    assert a == b and len(set(a)) == 200 and ms.sample(mutants, 200, 1) != a
    assert sorted(a[:20], key=mutants.index) != a[:20]  # random order, not generation order


def test_tasks_run_in_the_mutated_copy_and_results_resume(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    probe = ["python", "-c", "import pathlib, sys, zephon_ref; "
             "sys.exit(1 if 'MUTATED' in pathlib.Path(zephon_ref.__file__).read_text() else 0)"]
    monkeypatch.setitem(ms.CHECKERS, "probe", probe)
    first = (ROOT / "zephon_ref/__init__.py").read_text().splitlines(keepends=True)[0]
    seen = Mutant("seen", "zephon_ref/__init__.py", first, first + "# MUTATED\n", line=1, col=0)
    unseen = Mutant("unseen", "zephon_ref/errors.py", "\n", "\n\n", line=1, col=len(
        (ROOT / "zephon_ref/errors.py").read_text().splitlines()[0]))
    stale = Mutant("stale", "zephon_ref/__init__.py", "not there", "x", line=1, col=0)
    tasks = ms.tasks_for([seen, unseen, stale], ["probe"], timeout=120)
    out = tmp_path / "r.jsonl"
    assert ms.run_tasks(tasks, out, progress=False) == 3
    got = {r["mutant"]: ms.verdict_of(r) for r in read_records(out)[1]}
    assert got == {"seen": "killed", "unseen": "survived", "stale": "error"}
    assert ms.run_tasks(tasks, out, progress=False) == 0  # resumed: nothing left to run
    assert ms.mutants_from(out) == [seen, unseen, stale]  # a later checker runs these, not a new sample
    rep = ms.report(out)
    assert rep["checkers"]["probe"]["killed_share"] == 0.5 and rep["survived_everything"] == ["unseen"]


def test_a_checker_that_cannot_run_is_an_error_not_a_kill(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pytest's exit 4 (usage error) under the ci checker once counted every mutant as killed."""
    monkeypatch.setitem(ms.CHECKERS, "usage", ["python", "-c", "import sys; sys.exit(4)"])
    monkeypatch.setitem(ms.CHECKERS, "fails", ["python", "-c", "import sys; sys.exit(1)"])
    monkeypatch.setitem(ms.KILL_CODES, "usage", frozenset({1}))
    monkeypatch.setitem(ms.KILL_CODES, "fails", frozenset({1}))
    first = (ROOT / "zephon_ref/__init__.py").read_text().splitlines(keepends=True)[0]
    m = Mutant("m", "zephon_ref/__init__.py", first, first + "# MUTATED\n", line=1, col=0)
    out = tmp_path / "r.jsonl"
    ms.run_tasks(ms.tasks_for([m], ["usage", "fails"], timeout=120), out, progress=False)
    got = {r["checker"]: ms.verdict_of(r) for r in read_records(out)[1]}
    assert got == {"usage": "error", "fails": "killed"}


def test_the_ci_checker_runs_under_the_projects_pytest_options() -> None:
    """The ci checker's pytest command line is accepted with pyproject's addopts (no usage error)."""
    import subprocess
    import sys

    argv = [a for a in ms.CHECKERS["ci"] if a not in ms.CI_TESTS]
    proc = subprocess.run(
        [sys.executable, *argv[1:], "--collect-only", "-q", "tests/unit/test_data_dropped.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-800:] + proc.stderr[-800:]


def test_a_checker_that_fails_without_a_mutant_stops_the_run_before_any_mutant(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A checker red on the unmutated tree counts every mutant as killed (the conformance checker did,
    through the torch row: 30 of 30 on 2026-12-04): main() runs each checker once without a mutant
    and refuses to score; nothing is written."""
    red = ["python", "-c", "import sys; print('row x failed'); sys.exit(1)"]
    monkeypatch.setitem(ms.CHECKERS, "red", red)
    monkeypatch.setitem(ms.CHECKERS, "green", ["python", "-c", "pass"])
    out = tmp_path / "r.jsonl"
    code = ms.main(["run", "--sample", "1", "--checkers", "green,red", "--timeout", "120", "--out", str(out)])
    assert code == 2 and not out.exists()
    err = capsys.readouterr().err
    assert "checker 'red'" in err and "exit 1" in err and "row x failed" in err, err
    assert ms.baseline_failure("green", timeout=120) is None


def test_the_conformance_checker_leaves_out_only_named_rows() -> None:
    argv = ms.CHECKERS["conformance"]
    skipped = [argv[i + 1] for i, a in enumerate(argv) if a == "--skip"]
    # none since issue 34's fix (the torch row was skipped while it failed on the unmutated tree); a row
    # skipped again must fail on the unmutated tree, with the reason beside CHECKERS and here
    assert skipped == [], "each skipped row fails on the unmutated tree; say why beside CHECKERS"


def test_moved_since_follows_a_moved_line_and_leaves_a_rewritten_one_stale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An earlier run's mutants (``run --mutants-from F --moved-since REV``) follow their lines after an
    edit above them moved them; a line whose text changed up to the snippet stays put (refused stale)."""
    import json
    import subprocess

    def git(*args: str) -> None:
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=tmp_path,
                       check=True, capture_output=True)

    src = tmp_path / "m.py"
    src.write_text("a = 1\nb = a + 2\nc = b * 3\n")
    git("init", "-q")
    git("add", "m.py")
    git("commit", "-qm", "old")
    src.write_text("# one\n# two\na = 1\nb = a + 2\nc = b / 3\n")
    records = [{"task": line, "mutant": f"m.py:{line}:6:binop {op}", "file": "m.py", "original": op,
                "replacement": new, "line": line, "col": 6}
               for line, op, new in ((2, "+", "-"), (3, "*", "/"))]
    results = tmp_path / "r.jsonl"
    results.write_text("".join(json.dumps(r) + "\n" for r in [{"header": {}}, *records]))
    monkeypatch.setattr(ms, "ROOT", tmp_path)
    moved = ms.mutants_from(results, moved_since="HEAD")
    assert [m.line for m in moved] == [4, 3]
    text = src.read_text()
    assert moved[0].apply(text).splitlines()[3] == "b = a - 2"
    with pytest.raises(StaleMutant):
        moved[1].apply(text)
    assert [m.line for m in ms.mutants_from(results)] == [2, 3]  # without it: the recorded lines

"""The executor for long runs (sim.executor) and the sweep on it (sim.sweep), without Ray: a killed
worker loses no seed, a budget is a timeout, an exception a failing seed with its traceback,
``--resume`` runs only what a partial JSONL lacks, and every backend gives the same summary.
The Ray backend's tests are in test_cluster.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sim import chaos
from sim.cli import main
from sim.executor import (
    ExecutorError,
    InlineBackend,
    ProcessBackend,
    Task,
    code_digest,
    read_records,
    run_tasks,
)
from sim.sweep import CLI_OVERRIDES, flatten, reproduce, run_sweep, seed_task, summarise, tasks_for
from zephon_ref.errors import ConfigError

SMALL: dict[str, Any] = {"steps": 12}  # short seeds: every probe path, a fraction of a second each
SEEDS = list(range(6))


@pytest.fixture(scope="module")
def reference() -> dict[str, Any]:
    """The undisturbed summary of SEEDS, in this process."""
    summary, _ = run_sweep(SEEDS, SMALL, backend=InlineBackend())
    assert summary["runs"] == len(SEEDS) and summary["failed"] == 0
    return summary


def test_local_processes_give_the_single_process_summary(reference: dict[str, Any], tmp_path: Path) -> None:
    be = ProcessBackend(2)
    try:
        summary, records = run_sweep(SEEDS, SMALL, backend=be, jsonl=tmp_path / "s.jsonl")
    finally:
        be.close()
    assert summary == reference
    header, on_disk = read_records(tmp_path / "s.jsonl")
    assert header == {"run": "sim sweep", "overrides": SMALL}
    assert sorted(r["seed"] for r in on_disk) == SEEDS and all(r["status"] == "done" for r in on_disk)


def test_batches_give_the_same_summary_and_resume_across_batch_sizes(reference: dict[str, Any],
                                                                      tmp_path: Path) -> None:
    path = tmp_path / "b.jsonl"
    summary, records = run_sweep(SEEDS[:4], SMALL, backend=InlineBackend(), batch=3, jsonl=path)
    assert [r["seed"] for r in records] == SEEDS[:4] and {r["batch"] for r in records} == {
        "seeds:0,1,2",
        "seeds:3",
    }
    ran: list[Any] = []
    summary, records = run_sweep(SEEDS, SMALL, backend=_Counting(ran), batch=1, jsonl=path, resume=True)
    assert ran == ["seed:4", "seed:5"] and summary == reference
    bad, _ = run_sweep([1, 2], {"faults": "meteor"}, backend=InlineBackend(), batch=2)
    assert bad["errors"] == 2 and all("ValueError" in f["error"] for f in bad["failures"])
    timed = flatten(run_tasks(tasks_for([1, 2], SMALL, batch=2)[:1], InlineBackend(), budget_s=1e-3))
    assert [(r["seed"], r["status"]) for r in timed] == [(1, "timeout"), (2, "timeout")]
    assert timed[0]["reproduce"] == "python -m sim run --seed 1 --steps 12"


def test_a_killed_worker_loses_no_seed(reference: dict[str, Any], tmp_path: Path) -> None:
    """Every seed's first attempt SIGKILLs its worker process; each runs again on a fresh worker."""
    tasks = [
        Task(t.key, chaos.dies_once, (str(tmp_path), t.key, t.fn, t.args), t.meta)
        for t in tasks_for(SEEDS, SMALL)
    ]
    be = ProcessBackend(2)
    try:
        records = run_tasks(tasks, be, retries=2)
    finally:
        be.close()
    assert len(list(tmp_path.glob("*.died"))) == len(SEEDS)  # every first attempt really died
    assert [r["attempts"] for r in records] == [2] * len(SEEDS)
    assert summarise(records, SEEDS, SMALL) == reference


def test_a_worker_that_always_dies_is_a_failing_task_not_a_lost_one(tmp_path: Path) -> None:
    task = Task("k", chaos.dies_once, (str(tmp_path), "k", chaos.sleeps, (0.0,)), {"seed": 1})
    be = ProcessBackend(1)
    try:
        (rec,) = run_tasks([task], be, retries=0)
    finally:
        be.close()
    assert rec["status"] == "error" and rec["ok"] is False and "worker died" in rec["error"], rec


def test_an_exception_is_a_failing_seed_with_its_traceback() -> None:
    seeds = [3, 4]
    summary, records = run_sweep(seeds, {"faults": "meteor"}, backend=InlineBackend())
    assert summary["failed"] == summary["errors"] == 2 and summary["runs"] == 2
    for r in records:
        assert r["status"] == "error" and "ValueError" in r["error"] and "derive_config" in r["traceback"]
    assert [f["kinds"] for f in summary["failures"]] == [["exception"], ["exception"]]
    assert summary["failures"][0]["reproduce"] == "python -m sim run --seed 3 --faults meteor"


@pytest.mark.parametrize("backend", ["inline", "processes"])
def test_a_task_past_its_budget_is_a_timeout_not_retried(backend: str) -> None:
    be = InlineBackend() if backend == "inline" else ProcessBackend(1)
    try:
        recs = run_tasks(
            [Task("slow", chaos.sleeps, (60.0,), {"seed": 9}), Task("quick", chaos.sleeps, (0.0,))],
            be,
            budget_s=0.5,
            retries=3,
        )
    finally:
        be.close()
    by = {r["task"]: r for r in recs}
    assert by["slow"]["status"] == "timeout" and by["slow"]["attempts"] == 1 and by["slow"]["ok"] is False
    assert by["slow"]["seconds"] < 30 and "budget of 0.5 s" in by["slow"]["error"]
    assert by["quick"]["status"] == "done" and by["quick"]["slept"] == 0.0


def test_the_driver_kills_a_task_deaf_to_its_budget() -> None:
    be = ProcessBackend(1)
    be.GRACE_S = 0.5
    try:
        (rec,) = run_tasks([Task("deaf", chaos.sleeps_deaf, (60.0,))], be, budget_s=0.5)
        (again,) = run_tasks(
            [Task("after", chaos.sleeps, (0.0,))], be
        )  # the backend goes on with a new worker
    finally:
        be.close()
    assert rec["status"] == "timeout" and "killed by the driver" in rec["error"] and rec["seconds"] < 30
    assert again["status"] == "done"


def test_resume_runs_only_the_seeds_the_jsonl_lacks(reference: dict[str, Any], tmp_path: Path) -> None:
    path = tmp_path / "sweep.jsonl"
    run_sweep(SEEDS[:3], SMALL, backend=InlineBackend(), jsonl=path)
    with path.open("a") as f:  # the driver was killed while writing a record
        f.write('{"task": "seed:3", "seed": 3, "ok": tr')
    ran: list[Any] = []
    summary, records = run_sweep(SEEDS, SMALL, backend=_Counting(ran), jsonl=path, resume=True)
    assert sorted(ran) == ["seed:3", "seed:4", "seed:5"]
    assert summary == reference and len(records) == len(SEEDS)
    _, on_disk = read_records(path)
    assert sorted(r["seed"] for r in on_disk) == SEEDS
    with pytest.raises(ExecutorError, match="another run"):
        run_sweep(SEEDS, {"steps": 13}, backend=InlineBackend(), jsonl=path, resume=True)
    with pytest.raises(ConfigError, match="resume"):
        run_sweep(SEEDS, SMALL, backend=InlineBackend(), jsonl=tmp_path / "missing.jsonl", resume=True)


def test_run_tasks_resume_skips_tasks_with_a_record(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    tasks = [Task(f"t{i}", chaos.sleeps, (0.0,), {"i": i}) for i in range(4)]
    run_tasks(tasks[:2], InlineBackend(), jsonl=path, header={"run": "x"})
    ran: list[Any] = []
    out = run_tasks(tasks, _Counting(ran), jsonl=path, header={"run": "x"}, resume=True)
    assert ran == ["t2", "t3"] and sorted(r["task"] for r in out) == ["t0", "t1", "t2", "t3"]
    assert [r["task"] for r in read_records(path)[1]] == ["t0", "t1", "t2", "t3"]


class _Counting(InlineBackend):
    def __init__(self, ran: list[Any]) -> None:
        self.ran = ran

    def run(self, tasks: Any, *, budget_s: float | None, retries: int) -> Any:
        self.ran += [t.key for t in tasks]
        return super().run(tasks, budget_s=budget_s, retries=retries)


def test_the_cli_streams_jsonl_and_resumes(reference: dict[str, Any], tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    path, out = tmp_path / "s.jsonl", tmp_path / "summary.json"
    assert (
        main(["sweep", "--seeds", "0..2", "--jobs", "1", "--quiet", "--steps", "12", "--jsonl", str(path)])
        == 0
    )
    assert main(["sweep", "--seeds", "0..5", "--jobs", "2", "--quiet", "--steps", "12", "--resume", str(path),
                 "--out", str(out)]) == 0
    capsys.readouterr()
    _, on_disk = read_records(path)
    assert sorted(r["seed"] for r in on_disk) == SEEDS  # each seed once: 0..2 were not run again
    assert json.loads(out.read_text()) == json.loads(json.dumps(reference))


def test_reproduce_lines_run_the_same_seed() -> None:
    import argparse

    from sim import cli

    ap = argparse.ArgumentParser()
    cli._add_overrides(ap)
    assert {a.dest for a in ap._actions if a.dest != "help"} == CLI_OVERRIDES
    assert reproduce(7, {"storage": False, "lanes": 4}) == "python -m sim run --seed 7 --lanes 4 --no-storage"
    line = reproduce(7, {"crash": [1, 300], "faults": "crash", "steps": 12})
    assert line.startswith("python -c ") and 'crash=[1, 300], faults="crash", steps=12' in line
    assert seed_task(7, {"steps": 12})["fingerprint"] == run_sweep([7], SMALL)[0]["fingerprints"]["7"]


def test_bad_input_is_refused_before_anything_runs(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unique"):
        run_tasks([Task("a", chaos.sleeps, (0.0,)), Task("a", chaos.sleeps, (0.0,))], InlineBackend())
    with pytest.raises(ConfigError, match="budget_s"):
        run_tasks([], InlineBackend(), budget_s=0)
    with pytest.raises(ConfigError, match="jobs"):
        ProcessBackend(0)
    (tmp_path / "x.jsonl").write_text('{"header": {}}\nnot json\n{"task": "a"}\n')
    with pytest.raises(ExecutorError, match="line 2"):
        read_records(tmp_path / "x.jsonl")
    assert len(code_digest()) == 64

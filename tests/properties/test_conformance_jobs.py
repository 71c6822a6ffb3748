"""``python -m properties.conformance --jobs N``: the rows in N worker processes give the table and
the JSON of one process (timings aside), in the usual order; a worker that dies is a failing row
with its reason, not a hang; Ctrl-C ends every worker."""

from __future__ import annotations

import json
import multiprocessing
import os
import warnings
from pathlib import Path
from typing import Any

import pytest

from properties import conformance
from properties.regressions import regressions_for

# cheap rows of three kinds (property rows, a case row, the operators row) and the oracle row,
# which with zephon 0.2.0 installed asks it for a second opinion
ROWS = ["oracle", "lineage", "tamper refused", "lane remap", "shared walk", "operators"]


def _run(jobs: int, tmp_path: Path,
         capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str], dict[str, Any]]:
    out_json = tmp_path / f"jobs{jobs}.json"
    argv = ["--impl", "inline", "--examples", "2", "--quiet", "--coverage", "--jobs", str(jobs),
            "--json", str(out_json)]
    for name in ROWS:
        argv += ["--property", name]
    code = conformance.main(argv)
    lines = capsys.readouterr().out.splitlines()
    # the ex/min column (wall time) is the one thing allowed to differ: blank it
    table = [line[:39] + line[47:] if line.split("  ")[0].strip() in conformance.ORDER else line
             for line in lines]
    doc = json.loads(out_json.read_text())
    for r in doc["rows"]:
        assert r["cpu_seconds"] > 0 or r["skipped"], r
        r.pop("seconds"), r.pop("cpu_seconds")
    doc.pop("seconds")
    return code, table, doc


def test_jobs_2_gives_the_table_and_the_json_of_one_process(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    one, two = _run(1, tmp_path, capsys), _run(2, tmp_path, capsys)
    assert one[0] == two[0] == 0
    assert [r["property"] for r in two[2]["rows"]] == [n for n in conformance.ORDER if n in ROWS]
    assert one[1] == two[1]  # the table and the coverage table, line for line
    assert one[2] == two[2]  # the JSON: rows, coverage, versions
    assert sum(two[2]["coverage"]["calls"].values()) > 0  # the workers' draws were merged


def test_a_row_that_starts_processes_runs_in_a_worker(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """The torch row forks DataLoader workers: a --jobs worker must be allowed children (a daemonic
    one is not: the row failed with "daemonic processes are not allowed to have children")."""
    pytest.importorskip("torch")
    pytest.importorskip("torchdata.stateful_dataloader")
    out_json = tmp_path / "torch.json"
    code = conformance.main(["--impl", "inline", "--examples", "3", "--quiet", "--jobs", "2",
                             "--property", "torch", "--property", "shared walk", "--json", str(out_json)])
    rows = {r["property"]: r for r in json.loads(out_json.read_text())["rows"]}
    capsys.readouterr()
    assert rows["torch"]["failure"] is None and rows["torch"]["passed"] > 0, rows["torch"]
    assert code == 0


def test_a_worker_that_dies_is_a_failing_row_not_a_hang(monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    real = conformance._one_row

    def dies(adapter: Any, name: str, *args: Any) -> Any:
        if name == "tamper refused":
            os._exit(3)  # a crash the row cannot catch (a segfault, the OOM killer)
        return real(adapter, name, *args)

    monkeypatch.setattr(conformance, "_one_row", dies)  # the forked workers inherit it
    code = conformance.main(["--impl", "inline", "--examples", "2", "--quiet", "--jobs", "2",
                             "--property", "lineage", "--property", "tamper refused"])
    out = capsys.readouterr().out
    assert code == 1
    rows = {line.split("  ")[0].strip(): line for line in out.splitlines()}
    assert "died (exit code 3) before reporting" in rows["tamper refused"]
    assert "--property 'tamper refused' --jobs 1" in rows["tamper refused"]
    n = str(2 + len(regressions_for("lineage")))  # its drawn examples and its fixed regression examples
    assert rows["lineage"].split()[1:3] == [n, n]


def test_ctrl_c_ends_every_worker(monkeypatch: pytest.MonkeyPatch,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    import time

    def forever(*args: Any) -> Any:
        time.sleep(600)

    def interrupted(conns: Any) -> Any:
        assert len(multiprocessing.active_children()) == 2  # both workers started
        raise KeyboardInterrupt

    monkeypatch.setattr(conformance, "_one_row", forever)
    monkeypatch.setattr(conformance, "_wait_any", interrupted)
    t0 = time.monotonic()
    with warnings.catch_warnings():
        # pylance, where installed and imported earlier in this process, warns at every fork that it is
        # not fork-safe (a library's line on stderr, not the CLI's); the one line counted is the CLI's
        warnings.filterwarnings("ignore", message="lance is not fork-safe")
        code = conformance.main(["--impl", "inline", "--examples", "2", "--quiet", "--jobs", "2",
                                 "--property", "lineage", "--property", "lane remap"])
    err = capsys.readouterr().err
    assert code == 130 and "interrupted" in err and len(err.strip().splitlines()) == 1
    assert multiprocessing.active_children() == [] and time.monotonic() - t0 < 60


def test_the_launch_order_names_only_rows_of_the_suite() -> None:
    """--jobs starts the dearest rows first (conformance.ROW_COST, measured); a renamed row would
    silently fall back to the default cost, so the table's names must be the suite's."""
    assert set(conformance.ROW_COST) <= set(conformance.ORDER)
    assert max(conformance.ROW_COST, key=conformance.ROW_COST.__getitem__) == "eviction safety"

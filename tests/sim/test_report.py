"""The sweep's report page and a run's timeline (sim.report, sim.timeline): a planted restore bug
shows up as a failing seed with its kind, its reproduce line and a timeline with the witness
marked; ``sim run --timeline`` writes a PNG."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from sim.cli import main
from sim.executor import InlineBackend
from sim.history import Event, Problem
from sim.storage import stale_loads
from sim.sweep import run_sweep
from sim.timeline import _witness_at, figure
from zephon_ref.checkpoint import store

PNG = b"\x89PNG\r\n\x1a\n"
CRASHY: dict[str, Any] = {"storage": True, "faults": "crash", "crash": [1, 300], "max_crashes": 3}


def _plant_stale_restore(monkeypatch: pytest.MonkeyPatch) -> None:
    """Planted bug: the store answers a load of generation g with generation g-1's state."""
    monkeypatch.setattr(store, "load_checkpoint", stale_loads(store.load_checkpoint))


def test_the_report_shows_a_planted_bug_with_its_timeline(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _plant_stale_restore(monkeypatch)
    seeds = [0, 1, 2]
    summary, _ = run_sweep(seeds, CRASHY, backend=InlineBackend(), report=tmp_path / "r.html")
    assert summary["failed"] >= 1, "the planted stale restore went unnoticed"
    page = (tmp_path / "r.html").read_text()
    bad = summary["failures"][0]
    assert "bad-restore" in bad["kinds"]
    assert f"<h3 id='seed-{bad['seed']}'>" in page and "bad-restore" in page
    assert "run_seed(" in page and "Probe coverage" in page and "Failures by kind" in page
    # coverage + kinds + one timeline per failing seed, each a real PNG
    pngs = re.findall(r"data:image/png;base64,([A-Za-z0-9+/=]+)", page)
    assert len(pngs) == 2 + summary["failed"]
    import base64

    assert all(base64.b64decode(p)[:8] == PNG for p in pngs)


def test_a_clean_sweep_reports_no_failure(tmp_path: Path) -> None:
    summary, _ = run_sweep([3], {"steps": 12}, backend=InlineBackend(), report=tmp_path / "r.html")
    page = (tmp_path / "r.html").read_text()
    assert summary["failed"] == 0 and "No seed failed." in page and "Failing seeds" not in page


def test_the_witness_is_marked_where_its_step_was_taken() -> None:
    hist = [
        Event(0, "start", 0, 2),
        Event(5, "deliver", 0, (1, "a"), process="r1w0"),
        Event(6, "step", 1, ()),
        Event(9, "crash", 1, 2, "info"),
        Event(9, "restore", 0, 2, extra={"generation": None}),
        Event(12, "deliver", 0, (1, "a"), process="r0w0"),
        Event(14, "step", 1, ()),
        Event(20, "end", 1, "steps"),
    ]
    w = Problem("duplicated", "lane 1 ...", 0, 1, 1, "a")
    assert _witness_at(hist, w) == (14, 1, 0)  # the step kept in the timeline, the rank that delivered lane 1
    assert _witness_at(hist, Problem("lineage", "...", 0, None, 1, "a"))[0] == 20
    fig = figure(hist, seed=0, witnesses=[w])
    labels = fig.legends[0].get_texts()
    assert "checker's witness" in {t.get_text() for t in labels}
    assert fig.axes[1].get_xlabel() == "virtual time (kernel ticks)"
    fig_clean = figure(hist, seed=0)
    assert "checker's witness" not in {t.get_text() for t in fig_clean.legends[0].get_texts()}


def test_sim_run_draws_a_timeline(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    png = tmp_path / "t.png"
    assert main(["run", "--seed", "2", "--steps", "12", "--timeline", str(png)]) == 0
    assert png.read_bytes()[:8] == PNG and f"timeline: {png}" in capsys.readouterr().out


def test_a_long_failing_seed_is_not_run_again_for_its_timeline(tmp_path: Path) -> None:
    from sim.report import write_report
    from sim.sweep import summarise

    rec = {
        "seed": 3,
        "ok": False,
        "status": "done",
        "problems": ["seed 3: planted"],
        "kinds": ["lost"],
        "probes": {},
        "events": 1,
        "fingerprint": "f",
        "seconds": 9000.0,
        "reproduce": "python -m sim run --seed 3",
    }
    page = write_report(tmp_path / "r.html", summarise([rec], [3], {}), [rec]).read_text()
    assert "no timeline: the seed took 9000 s" in page and page.count("data:image/png") == 2

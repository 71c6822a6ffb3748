"""The `python -m bench` harness (bench/__main__.py): discovery, selection, rows, README rewrite.

No benchmark is run here (they are long); a fake module stands in for one.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

from bench import __main__ as harness


def test_discovers_every_bench_module_in_order() -> None:
    names = harness.discover()
    assert names == sorted(names)
    assert {"bench_source", "bench_pipeline", "bench_checkpoint_store", "bench_peers"} <= set(names)
    assert harness.select(names, "source,peers") == ["bench_peers", "bench_source"]
    with pytest.raises(SystemExit, match="unknown benchmark"):
        harness.select(names, "nosuch")


def test_rows_failures_and_missing_results_become_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    good = types.ModuleType("bench.bench_fake_ok")
    good.results = lambda *, quick=True: [  # type: ignore[attr-defined]
        {
            "name": "a vs b",
            "ours": 2.0,
            "theirs": 1.0,
            "vs": "b",
            "unit": "x/s",
            "ratio": 2.0,
            "note": "checked",
        },
        {"name": "bad row"},
        {"name": "c vs ?", "ours": 3.0, "theirs": 1.5, "unit": "x/s", "ratio": 2.0, "note": "no vs"},
        {
            "name": "c alone",
            "ours": 3.0,
            "theirs": None,
            "unit": "x/s",
            "ratio": None,
            "note": "nothing to compare",
        },
    ]
    broken = types.ModuleType("bench.bench_fake_broken")

    def boom(*, quick: bool = True) -> list[dict[str, object]]:
        raise RuntimeError("no device")

    broken.results = boom  # type: ignore[attr-defined]
    bare = types.ModuleType("bench.bench_fake_bare")
    monkeypatch.setitem(sys.modules, "bench.bench_fake_ok", good)
    monkeypatch.setitem(sys.modules, "bench.bench_fake_broken", broken)
    monkeypatch.setitem(sys.modules, "bench.bench_fake_bare", bare)
    rows = harness.run_module("bench_fake_ok", quick=True)
    assert rows[0]["ratio"] == 2.0 and "malformed" in str(rows[1]["name"])
    # a "theirs" whose row does not say what it is is shown as unstated, never as nothing
    assert rows[2]["vs"] == harness.UNSTATED and rows[3]["vs"] is None
    assert "no device" in str(harness.run_module("bench_fake_broken", quick=True)[0]["note"])
    assert "no results()" in str(harness.run_module("bench_fake_bare", quick=True)[0]["note"])
    missing = harness.run_module("bench_fake_not_there", quick=True)[0]
    assert "could not import" in str(missing["note"])
    table = harness.markdown(rows)
    assert "| a vs b | 2 | 1 | b | x/s | 2.00x | checked |" in table
    assert table.splitlines()[0] == "| comparison | ours | theirs | theirs is | unit | ratio | note |"
    assert "| c alone | 3 | - | - | x/s | - | nothing to compare |" in table


def test_report_rewrites_only_between_the_markers(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(f"# t\n\nbefore\n{harness.START}\nold table\n{harness.END}\nafter\n")
    row = {"name": "n", "ours": 1.0, "theirs": None, "unit": "u", "ratio": None, "note": "why"}
    harness.rewrite_readme(readme, harness.report_block([row], quick=True, modules=["x"]))
    text = readme.read_text()
    assert text.startswith("# t\n\nbefore\n") and text.endswith(f"{harness.END}\nafter\n")
    assert "old table" not in text and "| n | 1 | - | - | u | - | why |" in text
    assert "CPUs (nproc)" in text and "Python" in text and "UTC" in text
    again = harness.report_block([row], quick=False, modules=["x"])
    harness.rewrite_readme(readme, again)
    assert readme.read_text().count(harness.END) == 1
    bare = tmp_path / "R2.md"
    bare.write_text("no markers\n")
    with pytest.raises(SystemExit, match="markers"):
        harness.rewrite_readme(bare, again)
    assert bare.read_text() == "no markers\n"


def test_the_readme_has_the_markers() -> None:
    text = (Path(harness.ROOT) / "README.md").read_text()
    assert text.count(harness.START) == 1 and text.count(harness.END) == 1


def test_every_bench_module_has_results_and_a_row_in_the_bench_readme() -> None:
    """A benchmark the harness cannot run, or that bench/README.md does not describe, is lost."""
    import ast

    readme = (harness.ROOT / "bench" / "README.md").read_text()
    for name in harness.discover():
        tree = ast.parse((harness.ROOT / "bench" / f"{name}.py").read_text())
        assert any(isinstance(n, ast.FunctionDef) and n.name == "results" for n in tree.body), (
            f"{name}: no results()"
        )
        assert f"| `{name}.py` |" in readme, f"{name}: no row in bench/README.md"


def test_every_row_with_a_theirs_says_what_theirs_is() -> None:
    """Each dict literal of a bench module that has a "theirs" other than None has a "vs" beside it."""
    import ast

    for name in harness.discover():
        tree = ast.parse((harness.ROOT / "bench" / f"{name}.py").read_text())
        for node in ast.walk(tree):
            if not isinstance(node, ast.Dict):
                continue
            keys = {k.value: v for k, v in zip(node.keys, node.values, strict=True)
                    if isinstance(k, ast.Constant) and isinstance(k.value, str)}
            theirs = keys.get("theirs")
            if theirs is None or (isinstance(theirs, ast.Constant) and theirs.value is None):
                continue
            assert "vs" in keys, f"bench/{name}.py line {node.lineno}: a row with 'theirs' but no 'vs'"


def test_json_document_has_every_row_and_column(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    fake = types.ModuleType("bench.bench_fake_json")
    fake.results = lambda *, quick=True: [  # type: ignore[attr-defined]
        {"name": "x vs y", "ours": 4.0, "theirs": 2.0, "vs": "y", "unit": "x/s", "ratio": 2.0, "note": "n"}]
    monkeypatch.setitem(sys.modules, "bench.bench_fake_json", fake)
    monkeypatch.setattr(harness, "discover", lambda: ["bench_fake_json"])
    out = tmp_path / "rows.json"
    assert harness.main(["--quick", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["rows"] == [
        {"name": "x vs y", "ours": 4.0, "theirs": 2.0, "vs": "y", "unit": "x/s", "ratio": 2.0, "note": "n"}
    ]
    assert (
        set(doc["columns"]) == set(harness.KEYS) and doc["quick"] is True and doc["modules"] == ["fake_json"]
    )

"""zephon_ref's top level against zephon 0.2.0's: every public name is there or listed as not implemented.

The list of names zephon_ref does not implement lives in docs/divergences.md under
"## Public surface (session 7)", one table row per name with its reason; the test parses
that table, so the document and the package cannot drift apart silently.
"""

from __future__ import annotations

import inspect
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import zephon_ref
from properties.sources import zephon_available

ROOT = Path(__file__).resolve().parents[2]
DIVERGENCES = ROOT / "docs" / "divergences.md"
SECTION = "## Public surface (session 7)"

#: What zephon 0.2.0 documents at its top level (notes section 1.1); checked even without zephon.
DOCUMENTED = ("Dataset", "InMemoryShard", "MixtureSpec", "Pipeline", "SampleBatch", "SampleMeta",
              "SampleRecord", "StaticMixtureWorkSource", "WorkSource", "ops", "pipeline", "types", "work")


def not_implemented_table(text: str) -> dict[str, str]:
    """``{name: reason}`` from the section's table (first column: the name in backticks)."""
    start = text.find(SECTION)
    if start < 0:
        raise AssertionError(f"{DIVERGENCES} has no section {SECTION!r}")
    body = text[start + len(SECTION):]
    end = body.find("\n## ")
    body = body if end < 0 else body[:end]
    rows: dict[str, str] = {}
    for line in body.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("|") else []
        if len(cells) < 3 or set(cells[0]) <= {"-", " "}:
            continue
        m = re.fullmatch(r"`zephon\.([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)?)`", cells[0])
        if m is None:
            continue  # the header row
        rows[m.group(1)] = cells[2]
    return rows


def public(names: list[str]) -> set[str]:
    return {n for n in names if not n.startswith("_")}


def test_table_parser_reads_rows_and_refuses_a_missing_section() -> None:
    text = (f"# x\n{SECTION}\n\n| zephon name | in zephon_ref | reason |\n|---|---|---|\n"
            "| `zephon.debug` | not implemented | process-runner hooks |\n## next\n| `zephon.io` | a | b |\n")
    assert not_implemented_table(text) == {"debug": "process-runner hooks"}
    assert not_implemented_table(text.replace("zephon.debug", "zephon.ops.spawn_child")) == \
        {"ops.spawn_child": "process-runner hooks"}
    with pytest.raises(AssertionError):
        not_implemented_table("# nothing here\n")


def test_documented_names_are_exported() -> None:
    missing = [n for n in DOCUMENTED if not hasattr(zephon_ref, n)]
    assert not missing, f"zephon_ref lacks zephon's top-level names {missing}"
    for n in ("ops", "pipeline", "types", "work"):
        assert inspect.ismodule(getattr(zephon_ref, n)), n
        assert getattr(zephon_ref, n).__name__ == f"zephon_ref.{n}"
    assert set(DOCUMENTED) - {"ops", "pipeline", "types", "work"} <= set(zephon_ref.__all__)


def test_in_memory_shard_has_zephons_constructor() -> None:
    from zephon_ref.work.dataset import InMemoryShard

    assert zephon_ref.InMemoryShard is InMemoryShard
    params = list(inspect.signature(InMemoryShard).parameters)
    assert params == ["rows"], params
    shard = zephon_ref.InMemoryShard(rows=[{"a": 1}, {"a": 2}])
    assert len(shard) == 2 and shard.getsamples([1]) == [{"a": 2}]
    ds = zephon_ref.Dataset.from_dict("d", {0: shard})
    assert ds.total() == 2


@pytest.mark.skipif(not zephon_available(), reason="zephon 0.2.0 not installed (pip install .[conformance])")
def test_every_public_zephon_name_is_present_or_listed() -> None:
    import zephon

    table = not_implemented_table(DIVERGENCES.read_text(encoding="utf-8"))
    theirs, ours = public(dir(zephon)), public(dir(zephon_ref))
    unaccounted = sorted(n for n in theirs if n not in ours and n not in table)
    assert not unaccounted, (f"zephon names neither in zephon_ref nor in {DIVERGENCES.name} "
                             f"({SECTION}): {unaccounted}")
    # the table lists only names that really are missing, each with a reason
    stale = sorted(n for n in table if n in ours)
    assert not stale, f"listed as not implemented but present in zephon_ref: {stale}"
    assert all(len(reason) > 10 for reason in table.values()), table
    # names present in both are the same kind of thing (a module is a module, a class a class)
    for n in sorted(theirs & ours):
        a, b = getattr(zephon, n), getattr(zephon_ref, n)
        assert inspect.ismodule(a) == inspect.ismodule(b) and inspect.isclass(a) == inspect.isclass(b), n


def defined_names(module: object) -> set[str]:
    """Public names a zephon submodule defines (classes and functions of zephon; not typing helpers)."""
    out = set()
    for n in public(dir(module)):
        obj = getattr(module, n)
        if not inspect.ismodule(obj) and str(getattr(obj, "__module__", "")).startswith("zephon"):
            out.add(n)
    return out


@pytest.mark.skipif(not zephon_available(), reason="zephon 0.2.0 not installed (pip install .[conformance])")
def test_shared_submodules_names_are_present_or_listed() -> None:
    import zephon

    table = not_implemented_table(DIVERGENCES.read_text(encoding="utf-8"))
    unaccounted = []
    for sub in ("io", "ops", "pipeline", "types", "work"):
        ours = public(dir(getattr(zephon_ref, sub)))
        for n in sorted(defined_names(getattr(zephon, sub))):
            if n not in ours and f"{sub}.{n}" not in table:
                unaccounted.append(f"{sub}.{n}")
            if n in ours:
                assert f"{sub}.{n}" not in table, (
                    f"zephon.{sub}.{n} is listed but present in zephon_ref.{sub}"
                )
    assert not unaccounted, f"zephon names neither in zephon_ref nor in {DIVERGENCES.name}: {unaccounted}"


def test_import_does_not_import_torch() -> None:
    code = ("import sys, zephon_ref\n"
            "assert zephon_ref.__file__.startswith(sys.argv[1]), zephon_ref.__file__\n"
            "bad = sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.'))\n"
            "assert not bad, bad\n"
            "zephon_ref.Pipeline, zephon_ref.Dataset\n"
            "import zephon_ref.torch\n"  # the torch path too imports torch only on first use
            "assert 'torch' not in sys.modules\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", code, str(ROOT / "zephon_ref")], env=env, cwd=str(ROOT),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr

"""House rule 10: the semantics import no machinery, counting every import.

Every module of zephon_ref is classified, by the table below, as **semantics** (what a pipeline
means: records and cursors, lineage, the state schema, the codec, the fingerprint, work sources
over in-memory shards, operators, the engine, the aggregation round's machines and merge, the
builder) or **machinery** (what runs, stores, moves or speeds it up: the facade, runners, storage,
the checkpoint store and tree files, coordination backends and drivers, file-backed datasets, the
zephon translator, the torch path, faster implementations, the CLI and demo).  A module no rule
classifies fails the test, so a new module must be placed on purpose.

Edges count every import: module level, inside functions and classes, and under
``if TYPE_CHECKING:`` (an annotation-only import still ties the reader of one module to the
other).  The test fails on any arrow from a semantic module into machinery, on a semantic module
importing a library that does I/O, threads or clocks, and on any import circle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

from properties.modules import module_names

ROOT = Path(__file__).resolve().parents[2]

#: (prefix, kind): the first matching prefix wins (a prefix matches the module itself and its
#: submodules).  Order from the most specific to the least.
CLASSES: tuple[tuple[str, str], ...] = (
    # the aggregation round: machines and merge are semantics, backends and drivers machinery
    ("zephon_ref.coordination.protocol", "semantics"),
    ("zephon_ref.coordination.merge", "semantics"),
    ("zephon_ref.coordination", "machinery"),
    ("zephon_ref.engine", "semantics"),
    ("zephon_ref.ops", "semantics"),
    ("zephon_ref.work", "semantics"),
    ("zephon_ref.types", "semantics"),
    ("zephon_ref.aliases", "semantics"),  # zephon's names of a record's ints and payloads (types re-exports)
    ("zephon_ref.lineage", "semantics"),
    ("zephon_ref.state", "semantics"),
    ("zephon_ref.codec", "semantics"),
    ("zephon_ref.fingerprint", "semantics"),
    ("zephon_ref.builder", "semantics"),
    ("zephon_ref.indexable", "semantics"),  # the map-style path: record i on its own, not the lane engine
    ("zephon_ref.training", "semantics"),
    ("zephon_ref.errors", "semantics"),
    ("zephon_ref.seeding", "semantics"),
    ("zephon_ref.swrr", "semantics"),
    ("zephon_ref.windows", "semantics"),
    ("zephon_ref.settings", "semantics"),  # the execution settings' table and checks (no machinery)
    # machinery
    ("zephon_ref.pipeline", "machinery"),  # the facade: the builder wired to runners, store, torch
    ("zephon_ref.runners", "machinery"),
    ("zephon_ref.storage", "machinery"),
    ("zephon_ref.checkpoint", "machinery"),
    ("zephon_ref.compat", "machinery"),
    ("zephon_ref.torch", "machinery"),
    ("zephon_ref.fast", "machinery"),
    ("zephon_ref.io", "machinery"),
    ("zephon_ref.cli", "machinery"),
    ("zephon_ref.demo", "machinery"),
    ("zephon_ref.exits", "machinery"),
    ("zephon_ref.narrow", "machinery"),
    ("zephon_ref.options", "machinery"),
    ("zephon_ref.validation", "machinery"),
    ("zephon_ref.explain", "machinery"),  # diagnostics: describes a plan, decides nothing (Pipeline.explain)
    ("zephon_ref.observability", "machinery"),
    ("zephon_ref.debug", "machinery"),
    ("zephon_ref.build_index", "machinery"),
    ("zephon_ref.synthetic", "machinery"),  # test and demo data (a fixture); decides nothing
    ("zephon_ref", "machinery"),  # the package itself: the assembly of everything
)

#: Libraries the semantics never import: I/O, processes, threads, clocks, the torch library,
#: object storage, clusters.
BANNED_LIBRARIES = frozenset({
    "boto3", "botocore", "concurrent", "io", "multiprocessing", "os", "pathlib", "queue", "ray", "shutil",
    "socket", "subprocess", "tempfile", "threading", "time", "torch",
})


def kind_of(module: str) -> str | None:
    for prefix, kind in CLASSES:
        if module == prefix or module.startswith(prefix + "."):
            return kind
    return None


def all_imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement anywhere in the module (functions, classes, TYPE_CHECKING blocks)."""
    return [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]


def edges(root: Path, package: str) -> tuple[nx.DiGraph, dict[str, set[str]]]:
    """(module -> imported module of the package, module -> external top-level libraries)."""
    mods = module_names(root, package)
    g = nx.DiGraph()
    g.add_nodes_from(mods)
    external: dict[str, set[str]] = {m: set() for m in mods}
    for name, path in mods.items():
        is_pkg = path.name == "__init__.py"
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in all_imports(tree):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                base = node.module or ""
                if node.level:
                    here = name.split(".") if is_pkg else name.split(".")[:-1]
                    anchor = here[:len(here) - (node.level - 1)]
                    base = ".".join([*anchor, base] if base else anchor)
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            for t in targets:
                if t.split(".")[0] != package:
                    external[name].add(t.split(".")[0])
                    continue
                while t and t not in mods and "." in t:
                    t = t.rsplit(".", 1)[0]
                if t in mods and t != name:
                    g.add_edge(name, t)
    return g, external


def violations(g: nx.DiGraph, external: dict[str, set[str]]) -> list[str]:
    out = []
    for a, b in sorted(g.edges):
        if kind_of(a) == "semantics" and kind_of(b) != "semantics":
            out.append(f"{a} (semantics) imports {b} ({kind_of(b)})")
    for m in sorted(external):
        if kind_of(m) == "semantics":
            bad = sorted(external[m] & BANNED_LIBRARIES)
            if bad:
                out.append(f"{m} (semantics) imports {bad}")
    return out


def test_every_module_is_classified() -> None:
    unknown = [m for m in module_names(ROOT, "zephon_ref") if kind_of(m) is None]
    assert not unknown, f"modules no rule of CLASSES places (semantics or machinery?): {unknown}"
    sem = [m for m in module_names(ROOT, "zephon_ref") if kind_of(m) == "semantics"]
    assert len(sem) > 30 and "zephon_ref.builder" in sem and "zephon_ref.engine.core" in sem


def test_the_semantics_import_no_machinery() -> None:
    g, external = edges(ROOT, "zephon_ref")
    assert g.number_of_edges() > 100  # the parser found the package
    bad = violations(g, external)
    assert not bad, "house rule 10 (the machinery takes the semantics as arguments):\n" + "\n".join(bad)


def test_no_import_circle_counting_every_import() -> None:
    g, _ = edges(ROOT, "zephon_ref")
    found = sorted(sorted(c) for c in nx.simple_cycles(g))
    assert not found, f"import circles (function-level and TYPE_CHECKING imports counted): {found}"


def test_the_check_sees_every_kind_of_import(tmp_path: Path) -> None:
    pkg = tmp_path / "zephon_ref"
    (pkg / "engine").mkdir(parents=True)
    (pkg / "runners").mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "engine" / "__init__.py").write_text("")
    (pkg / "runners" / "__init__.py").write_text("")
    (pkg / "engine" / "core.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from zephon_ref.runners import threads\n")
    (pkg / "engine" / "lanes.py").write_text(
        "def f():\n    import threading\n    from ..runners import inline\n")
    (pkg / "runners" / "threads.py").write_text("from zephon_ref.engine import core\n")
    (pkg / "runners" / "inline.py").write_text("")
    g, external = edges(tmp_path, "zephon_ref")
    bad = violations(g, external)
    assert "zephon_ref.engine.core (semantics) imports zephon_ref.runners.threads (machinery)" in bad
    assert "zephon_ref.engine.lanes (semantics) imports zephon_ref.runners.inline (machinery)" in bad
    assert "zephon_ref.engine.lanes (semantics) imports ['threading']" in bad
    assert sorted(sorted(c) for c in nx.simple_cycles(g)) == [["zephon_ref.engine.core",
                                                             "zephon_ref.runners.threads"]]
    with pytest.raises(AssertionError):
        assert not bad

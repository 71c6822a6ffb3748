"""The import graph: zephon_ref has no import cycle, and dependencies point one way.

Edges come from parsing every module with ``ast``: a *top-level* import is one that runs
when the module is imported (module body, including ``if`` / ``try`` blocks, but not
``if TYPE_CHECKING:`` blocks and not function or class bodies).  ``from a.b import c``
is an edge to ``a.b.c`` when that is a module, else to ``a.b``.  The implicit import of
a parent package is not an edge (every submodule would otherwise "cycle" through its
package's ``__init__``, which Python handles).
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

from properties.modules import module_names

ROOT = Path(__file__).resolve().parents[2]


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(body: list[ast.stmt], *, top_level_only: bool) -> list[ast.Import | ast.ImportFrom]:
    found: list[ast.Import | ast.ImportFrom] = []
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        elif isinstance(node, ast.If):
            if not _is_type_checking(node.test):
                found += _imports(node.body, top_level_only=top_level_only)
            found += _imports(node.orelse, top_level_only=top_level_only)
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody, *[h.body for h in node.handlers]):
                found += _imports(block, top_level_only=top_level_only)
        elif isinstance(node, (ast.With, ast.For, ast.While)):
            found += _imports(node.body, top_level_only=top_level_only)
        elif not top_level_only and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found += _imports(node.body, top_level_only=False)
    return found


def import_graph(root: Path, package: str, *, top_level_only: bool = True) -> nx.DiGraph:
    """Module -> imported module, for imports of ``package``'s own modules."""
    mods = module_names(root, package)
    g = nx.DiGraph()
    g.add_nodes_from(mods)
    for name, path in mods.items():
        is_pkg = path.name == "__init__.py"
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in _imports(tree.body, top_level_only=top_level_only):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                base = node.module or ""
                if node.level:  # relative: resolve against this module's package
                    here = name.split(".") if is_pkg else name.split(".")[:-1]
                    anchor = here[:len(here) - (node.level - 1)]
                    base = ".".join([*anchor, base] if base else anchor)
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            for t in targets:
                # an import of a.b.c where only a.b is ours still names a.b's module
                while t and t not in mods and "." in t:
                    t = t.rsplit(".", 1)[0]
                if t in mods and t != name:
                    g.add_edge(name, t)
    return g


def cycles(g: nx.DiGraph) -> list[list[str]]:
    return sorted(sorted(c) for c in nx.simple_cycles(g))


def test_zephon_ref_top_level_imports_are_acyclic() -> None:
    g = import_graph(ROOT, "zephon_ref")
    assert g.number_of_nodes() > 40 and g.number_of_edges() > 60  # the parser found the package
    assert ("zephon_ref", "zephon_ref.pipeline") in g.edges
    assert not cycles(g), f"import cycles among zephon_ref modules: {cycles(g)}"


def test_zephon_ref_has_no_import_cycle_even_through_function_level_imports() -> None:
    """A deferred import (inside a function) still makes two modules depend on each other:
    coordination/objectstore.py and backends.py did (issue 22).  None is left."""
    g = import_graph(ROOT, "zephon_ref", top_level_only=False)
    assert g.number_of_edges() >= import_graph(ROOT, "zephon_ref").number_of_edges()
    assert not cycles(g), (
        f"import cycles among zephon_ref modules (function-level imports counted): {cycles(g)}"
    )


def test_the_torch_path_never_imports_the_pipeline() -> None:
    # not even inside a function: Pipeline.to_torch_dataset imports the torch path, so the
    # reverse import would be a cycle the moment a caller goes through it
    g = import_graph(ROOT, "zephon_ref", top_level_only=False)
    torch_mods = [m for m in g if m == "zephon_ref.torch" or m.startswith("zephon_ref.torch.")]
    assert len(torch_mods) >= 4, torch_mods
    top = import_graph(ROOT, "zephon_ref")
    for m in torch_mods:
        assert not g.has_edge(m, "zephon_ref.pipeline"), f"{m} imports zephon_ref.pipeline"
        assert "zephon_ref.pipeline" not in nx.descendants(top, m), f"{m} reaches zephon_ref.pipeline"


def test_dependencies_point_one_way() -> None:
    """zephon_ref <- sim <- properties: the product imports neither; sim never imports properties."""
    for package, banned in (("zephon_ref", ("sim", "properties", "tests")), ("sim", ("properties", "tests")),
                            ("properties", ("tests",))):
        for name, path in module_names(ROOT, package).items():
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in _imports(tree.body, top_level_only=False):
                mods = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                bad = [m for m in mods if m.split(".")[0] in banned and not getattr(node, "level", 0)]
                assert not bad, f"{name} imports {bad}: dependencies point zephon_ref <- sim <- properties"


def test_the_check_finds_a_cycle(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from pkg import a\n")
    (pkg / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import b\n"
                              "from pkg.sub import c\n")
    (pkg / "b.py").write_text("import pkg.a\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "c.py").write_text("def f():\n    from pkg import b\n    return b\n"
                                      "from ..b import *  # noqa\n")
    g = import_graph(tmp_path, "pkg")
    assert set(g.edges) == {
        ("pkg", "pkg.a"),
        ("pkg.a", "pkg.sub.c"),
        ("pkg.sub.c", "pkg.b"),
        ("pkg.b", "pkg.a"),
    }
    assert cycles(g) == [["pkg.a", "pkg.b", "pkg.sub.c"]]
    full = import_graph(tmp_path, "pkg", top_level_only=False)
    assert ("pkg.sub.c", "pkg.b") in full.edges
    with pytest.raises(AssertionError):
        assert not cycles(g)

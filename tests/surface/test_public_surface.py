"""zephon_ref's public layout against zephon 0.2.0's: every public module and name is there or listed.

zephon 0.2.0's public modules are every module ``pkgutil.walk_packages`` finds under the installed
package with no ``_``-prefixed part (``zephon``, ``zephon.io.options``, ``zephon.ops.accumulators.base``,
...); a module's public names are its ``__all__`` (every one of them has one).  For each, the module
of the same path under ``zephon_ref`` must exist and hold the name, or docs/divergences.md's
"## Public surface (session 7)" table must have a row for it with its reason: a row
``zephon.a.b.Name`` covers one name, a row ``zephon.a`` a whole module with its submodules.  The
test parses that table, so the document and the package cannot drift apart silently: a row for a
name zephon_ref has, or for something zephon does not have, fails too.  A name zephon exports
under several paths as one object is one object in zephon_ref as well (re-exported, not copied).
"""

from __future__ import annotations

import importlib
import inspect
import os
import pkgutil
import re
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

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
        if cells and re.fullmatch(r"D-\d+", cells[0]):
            cells = cells[1:]  # the row's stable id (scripts/divergence_ids.py)
        if len(cells) < 3 or set(cells[0]) <= {"-", " "}:
            continue
        m = re.fullmatch(r"`zephon\.([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)`", cells[0])
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
    assert not_implemented_table(text.replace("| `zephon.debug`", "| D-9 | `zephon.debug`")) == \
        {"debug": "process-runner hooks"}
    assert not_implemented_table(text.replace("zephon.debug", "zephon.ops.spawn_child")) == \
        {"ops.spawn_child": "process-runner hooks"}
    assert not_implemented_table(text.replace("zephon.debug", "zephon.ops.accumulators.base.X")) == \
        {"ops.accumulators.base.X": "process-runner hooks"}
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
    shard.close()  # a no-op in zephon too: the rows stay readable
    assert shard.getsamples([0]) == [{"a": 1}]
    ds = zephon_ref.Dataset.from_dict("d", {0: shard})
    assert ds.total() == 2


def zephon_public_modules(package: ModuleType) -> dict[str, ModuleType]:
    """``{dotted name: module}`` of the package and every submodule with no ``_``-prefixed part."""
    names = [package.__name__] + [
        m.name for m in pkgutil.walk_packages(package.__path__, package.__name__ + ".")
        if not any(part.startswith("_") for part in m.name.split("."))
    ]
    return {n: importlib.import_module(n) for n in sorted(names)}


def covered(path: str, table: Mapping[str, str]) -> bool:
    """A row names ``path`` itself or a module above it."""
    parts = path.split(".")
    return any(".".join(parts[:k]) in table for k in range(1, len(parts) + 1))


def import_ours(module: str) -> ModuleType | None:
    """The module of this checkout's zephon_ref, or None where it has none.

    A module found outside this checkout's package directory does not count: an editable install
    of another checkout can otherwise answer for a submodule this tree lacks.
    """
    try:
        found = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name is not None and module.startswith(exc.name):
            return None  # that module (or a package above it) does not exist
        raise
    here = Path(zephon_ref.__file__).resolve().parent
    return found if Path(str(found.__file__)).resolve().is_relative_to(here) else None


#: Names both have whose kind differs on purpose, with the reason.
KIND_DIFFERENCES = {
    "zephon.types.SampleId": ("zephon's is the alias tuple[int, int, int]; zephon_ref's a NamedTuple of "
                              "the same three ints, equal to zephon's tuples (test_sample_id_is_a_tuple)"),
}


def kind(obj: object) -> str:
    return "module" if inspect.ismodule(obj) else "class" if inspect.isclass(obj) else \
        "function" if inspect.isroutine(obj) else "value"


def audit(modules: Mapping[str, ModuleType], table: Mapping[str, str],
          ours: Callable[[str], ModuleType | None]) -> dict[str, list[str]]:
    """Every disagreement between zephon's public layout, zephon_ref's and the table, by kind."""
    found: dict[str, list[str]] = {"unaccounted": [], "stale": [], "kind": [], "copied": []}
    same: dict[int, list[tuple[str, Any]]] = {}  # id(zephon object) -> [(path, zephon_ref object)]
    for name, module in modules.items():
        key = name.partition(".")[2]  # "" for the package itself
        mine = ours("zephon_ref" + name[len("zephon"):])
        if mine is None:
            if not covered(key, table):
                found["unaccounted"].append(name)
            continue
        if key and key in table:
            found["stale"].append(f"{name} (zephon_ref has the module)")
        for n in sorted(module.__all__):
            path, theirs = f"{key}.{n}" if key else n, getattr(module, n)
            if not hasattr(mine, n):
                if not covered(path, table):
                    found["unaccounted"].append(f"{name}.{n}")
                continue
            if path in table:
                found["stale"].append(f"{name}.{n} (zephon_ref has it)")
            k_theirs, k_mine = kind(theirs), kind(getattr(mine, n))
            if k_mine != k_theirs and f"{name}.{n}" not in KIND_DIFFERENCES:
                found["kind"].append(f"{name}.{n}: zephon {k_theirs}, zephon_ref {k_mine}")
            defined_in_zephon = str(getattr(theirs, "__module__", "")).startswith("zephon")
            if k_theirs in ("class", "function") and defined_in_zephon:
                same.setdefault(id(theirs), []).append((f"{name}.{n}", getattr(mine, n)))
    for paths in same.values():
        if any(obj is not paths[0][1] for _, obj in paths[1:]):
            found["copied"].append(" / ".join(p for p, _ in paths))
    for row in table:  # every row names something zephon has
        head, _, last = row.rpartition(".")
        module = modules.get(f"zephon.{row}") or (modules.get(f"zephon.{head}" if head else "zephon"))
        if module is None or (f"zephon.{row}" not in modules and last not in getattr(module, "__all__", ())):
            found["stale"].append(f"zephon.{row} (not a public zephon 0.2.0 name)")
    return {k: v for k, v in found.items() if v}


@pytest.mark.skipif(not zephon_available(), reason="zephon 0.2.0 not installed (pip install .[conformance])")
def test_every_public_zephon_module_and_name_is_present_or_listed() -> None:
    import zephon

    table = not_implemented_table(DIVERGENCES.read_text(encoding="utf-8"))
    modules = zephon_public_modules(zephon)
    assert len(modules) > 30 and "zephon.ops.accumulators.base" in modules  # the walk reached the leaves
    problems = audit(modules, table, import_ours)
    assert not problems, f"zephon 0.2.0's layout vs zephon_ref and {DIVERGENCES.name} ({SECTION}): {problems}"
    assert all(len(reason) > 10 for reason in table.values()), table


@pytest.mark.skipif(not zephon_available(), reason="zephon 0.2.0 not installed (pip install .[conformance])")
def test_the_audit_can_fail() -> None:
    import zephon

    table = not_implemented_table(DIVERGENCES.read_text(encoding="utf-8"))
    modules = zephon_public_modules(zephon)
    # a module zephon_ref lacks and no row lists (the table may be empty: every module is present)
    def without_debug(name: str) -> ModuleType | None:
        return None if name.startswith("zephon_ref.debug") else import_ours(name)

    assert "unaccounted" in audit(modules, table, without_debug)
    assert "unaccounted" not in audit(modules, {**table, "debug": "x" * 20}, without_debug)
    assert "stale" in audit(modules, {**table, "io.Dataset": "x" * 20}, import_ours)  # zephon_ref has it
    assert "stale" in audit(modules, {**table, "io.NoSuchName": "x" * 20}, import_ours)

    def a_copy(name: str) -> ModuleType | None:
        mod = import_ours(name)
        if name == "zephon_ref.io.memory":
            fake = ModuleType(name)
            fake.InMemoryShard = type("InMemoryShard", (), {})  # type: ignore[attr-defined]
            return fake
        return mod

    assert "copied" in audit(modules, table, a_copy)


@pytest.mark.skipif(not zephon_available(), reason="zephon 0.2.0 not installed (pip install .[conformance])")
def test_mirrored_literals_enums_and_configs_hold_zephons_values() -> None:
    """The names that are values, not behaviour: the same literal strings, enum members, fields, defaults."""
    import dataclasses
    import typing

    import zephon.ops.config
    import zephon.types
    import zephon.work.base

    import zephon_ref.ops.config
    import zephon_ref.work.base

    for n in zephon.ops.config.__all__:
        mine, theirs = getattr(zephon_ref.ops.config, n), getattr(zephon.ops.config, n)
        assert typing.get_args(mine) == typing.get_args(theirs), n
    for n in ("ComponentOrder", "MixtureReadMode"):
        z_enum, r_enum = getattr(zephon.work.base, n), getattr(zephon_ref.work.base, n)
        assert [(m.name, m.value) for m in r_enum] == [(m.name, m.value) for m in z_enum], n
        assert issubclass(r_enum, str) == issubclass(z_enum, str), n
    z_cfg, r_cfg = zephon.work.base.MixtureReadConfig, zephon_ref.work.base.MixtureReadConfig
    assert [(f.name, f.default) for f in dataclasses.fields(r_cfg)] == \
        [(f.name, f.default) for f in dataclasses.fields(z_cfg)]
    for n in ("ChunkId", "ChunkOffset", "ComponentId", "DatasetId", "LaneId", "LineageIndex", "LocalSampleId",
              "ShardId"):
        assert getattr(zephon_ref.types, n) is getattr(zephon.types, n) is int, n


@pytest.mark.skipif(not zephon_available(), reason="zephon 0.2.0 not installed (pip install .[conformance])")
def test_dataset_and_shard_methods_are_zephons() -> None:
    """Every public method of zephon's Dataset and InMemoryShard exists here with the same parameter names."""
    import zephon

    for cls in ("Dataset", "InMemoryShard"):
        theirs, mine = getattr(zephon, cls), getattr(zephon_ref, cls)
        for n in sorted(public(dir(theirs))):
            assert hasattr(mine, n), f"zephon_ref.{cls} lacks {n}"
            if callable(getattr(theirs, n)) and not inspect.isclass(getattr(theirs, n)):
                z_params = list(inspect.signature(getattr(theirs, n)).parameters)
                r_params = list(inspect.signature(getattr(mine, n)).parameters)
                assert r_params == z_params, f"{cls}.{n}: zephon {z_params}, zephon_ref {r_params}"


def test_sample_id_is_a_tuple() -> None:
    from zephon_ref.types import SampleId

    assert SampleId(1, 2, 3) == (1, 2, 3) and isinstance(SampleId(1, 2, 3), tuple)


def test_reexports_are_the_same_objects() -> None:
    """Without zephon: the paths this package mirrors hold zephon_ref's one object, not a copy."""
    import zephon_ref.io.memory
    import zephon_ref.io.options
    import zephon_ref.ops.accumulators.counting
    import zephon_ref.ops.children
    import zephon_ref.ops.grouping
    import zephon_ref.ops.traits
    import zephon_ref.work.base
    from zephon_ref import lineage, ops, work

    assert zephon_ref.io.memory.InMemoryShard is zephon_ref.InMemoryShard is work.dataset.InMemoryShard
    assert zephon_ref.io.CacheOptions is zephon_ref.io.options.CacheOptions
    assert zephon_ref.ops.accumulators.counting.CountingAccumulator is ops.base.CountingAccumulator
    assert zephon_ref.ops.children.spawn_child is lineage.spawn_child is ops.spawn_child
    assert zephon_ref.ops.traits.OpTraits is ops.OpTraits
    assert ops.DomainGroups is zephon_ref.ops.grouping.DomainGroups
    assert work.MixtureReadConfig is zephon_ref.work.base.MixtureReadConfig


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


# -- parameters ------------------------------------------------------------------------------------

#: Callables whose parameters differ from zephon 0.2.0's on purpose, each with its divergence row.
PARAMETER_DIFFERENCES = {
    "Dataset": "D-53: zephon's constructor takes a catalog backend description, zephon_ref's the shards",
    "prime_token_ratios": "D-65: zephon_ref's takes count= in place of counting_spec / io_options / "
                          "mp_context / pre_tokenize_replay",
}


def parameter_problems(theirs: Any, mine: Any) -> list[str]:
    """Where a call written for ``theirs`` would bind differently on ``mine``: a positional
    parameter at another place or not taken, a keyword not taken (absent, or positional-only)."""
    try:
        a, b = inspect.signature(theirs), inspect.signature(mine)
    except (TypeError, ValueError):
        return []  # a builtin without a signature
    pa, pb = a.parameters, b.parameters
    takes_any_keyword = any(p.kind is p.VAR_KEYWORD for p in pb.values())
    takes_more_positional = any(p.kind is p.VAR_POSITIONAL for p in pb.values())
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    pos_a = [p for p in pa.values() if p.kind in positional]
    pos_b = [p.name for p in pb.values() if p.kind in positional]
    out = []
    for i, p in enumerate(pos_a):
        if i >= len(pos_b):
            if not takes_more_positional:
                out.append(f"positional #{i} {p.name!r} not taken")
        elif pos_b[i] != p.name and p.kind is not p.POSITIONAL_ONLY:
            out.append(f"positional #{i} {p.name!r} is {pos_b[i]!r}")
    for name, p in pa.items():
        if p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL, p.POSITIONAL_ONLY):
            continue
        q = pb.get(name)
        if q is None and not takes_any_keyword:
            out.append(f"keyword {name!r} not taken")
        elif q is not None and q.kind is q.POSITIONAL_ONLY:
            out.append(f"keyword {name!r} is positional-only")
    return out


def parameter_audit(modules: Mapping[str, ModuleType],
                    ours: Callable[[str], ModuleType | None]) -> dict[str, list[str]]:
    """``{qualified name: problems}`` over every public callable both have, and the public methods
    of every public class both have."""
    found: dict[str, list[str]] = {}
    for name, module in modules.items():
        mine = ours("zephon_ref" + name[len("zephon"):])
        if mine is None:
            continue
        for n in sorted(module.__all__):
            theirs, ours_obj = getattr(module, n), getattr(mine, n, None)
            if ours_obj is None or not callable(theirs):
                continue
            if not str(getattr(theirs, "__module__", "")).startswith("zephon"):
                continue  # typing aliases, builtins re-exported
            pairs = [(n, theirs, ours_obj)]
            if inspect.isclass(theirs) and inspect.isclass(ours_obj):
                pairs += [(f"{n}.{k}", getattr(theirs, k), getattr(ours_obj, k))
                          for k, v in vars(theirs).items() if not k.startswith("_") and hasattr(ours_obj, k)
                          and (callable(v) or isinstance(v, (classmethod, staticmethod)))]
            for label, x, y in pairs:
                problems = parameter_problems(x, y)
                if problems and label not in PARAMETER_DIFFERENCES:
                    found[label] = problems
    return found


@pytest.mark.skipif(not zephon_available(), reason="zephon 0.2.0 not installed (pip install .[conformance])")
def test_every_call_written_for_zephon_binds_the_same_parameters() -> None:
    """Code calls zephon's API by keyword (``StoreOptions.from_any(obj=...)``,
    ``meta.with_contributors(value=...)``): every parameter name and position zephon 0.2.0's public
    callables take, zephon_ref's take too, except the rows of PARAMETER_DIFFERENCES."""
    import zephon

    problems = parameter_audit(zephon_public_modules(zephon), import_ours)
    assert not problems, problems
    assert all(re.match(r"D-\d+: ", why) for why in PARAMETER_DIFFERENCES.values())


def test_the_parameter_audit_can_fail() -> None:
    def theirs(obj: Any, *, field: str = "x") -> None: ...
    def renamed(value: Any, *, field: str = "x") -> None: ...
    def no_field(obj: Any) -> None: ...
    def any_keyword(obj: Any, **kw: Any) -> None: ...
    def positional_only(obj: Any, /, *, field: str = "x") -> None: ...

    assert parameter_problems(theirs, renamed) == ["positional #0 'obj' is 'value'",
                                                   "keyword 'obj' not taken"]
    assert parameter_problems(theirs, no_field) == ["keyword 'field' not taken"]
    assert parameter_problems(theirs, any_keyword) == []
    assert parameter_problems(theirs, positional_only) == ["keyword 'obj' is positional-only"]

"""Print the line counts issue 31 measures: the seed-000 checkpoint/replay unit and the whole semantics.

Every module of zephon_ref is classified with the table of house rule 10
(tests/surface/test_import_direction.py's CLASSES, through its ``kind_of``); a module's lines are
its ``wc -l`` (every line: code, docstrings, comments, blank lines).  The seed-000 unit is the
engine package, lineage, the state schema, the records and cursors (types) and the replay filter.
One walk and one rule, so whoever measures next counts the same way.

Run: python scripts/semantics_lines.py [--all]   (``--all`` lists every semantic module too)
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from properties.modules import module_names  # noqa: E402
from tests.surface.test_import_direction import kind_of  # noqa: E402

#: The seed-000 checkpoint/replay unit: a module is in it when its name is one of these or under one.
UNIT = ("zephon_ref.engine", "zephon_ref.lineage", "zephon_ref.state", "zephon_ref.types",
        "zephon_ref.ops.replay_filter")


#: Modules issue 30 (drop-in) added whole: its operators (chat tokenization, decode_text, expand_chat,
#: map_batch, add_op's keyword form), SampleBatch.to_training, the execution settings, torch tensors in
#: packing, zephon's public names and submodules.  Issue 31's goal counts "the whole semantics before
#: the drop-in issue's new operators"; what issue 30 added inside older modules (pack_flat and
#: best_fit_wrap in ops/pack.py, Hugging Face tokenizers and return_tensors in ops/tokenize.py, the
#: builder's new methods, validation errors) is not separable by module and stays counted.
DROP_IN = ("zephon_ref.training", "zephon_ref.settings", "zephon_ref.aliases",
           "zephon_ref.ops.chat_ownership", "zephon_ref.ops.tokenize_chat", "zephon_ref.ops.expand_chat",
           "zephon_ref.ops.decode_text", "zephon_ref.ops.map_batch", "zephon_ref.ops.tensors",
           "zephon_ref.ops.functional", "zephon_ref.ops.accumulators", "zephon_ref.ops.children",
           "zephon_ref.ops.traits", "zephon_ref.ops.config", "zephon_ref.ops.grouping",
           "zephon_ref.work.read_config")


def lines(path: Path) -> int:
    """What ``wc -l`` prints: the number of newline characters."""
    return path.read_bytes().count(b"\n")


def _under(module: str, roots: tuple[str, ...]) -> bool:
    return any(module == u or module.startswith(u + ".") for u in roots)


def in_unit(module: str) -> bool:
    return _under(module, UNIT)


def counts() -> dict[str, dict[str, int]]:
    """``{"unit" | "semantics" | "machinery" | "unclassified": {module: lines}}``."""
    out: dict[str, dict[str, int]] = {"unit": {}, "semantics": {}, "machinery": {}, "unclassified": {}}
    for name, path in module_names(ROOT, "zephon_ref").items():
        kind = kind_of(name) or "unclassified"
        out[kind][name] = lines(path)
        if in_unit(name):
            assert kind == "semantics", f"{name} is in the unit but classified {kind}"
            out["unit"][name] = lines(path)
    return out


def main(argv: list[str]) -> int:
    c = counts()
    print("seed-000 unit (engine + lineage + state + types + replay filter):")
    for name, n in c["unit"].items():
        print(f"  {n:6,d}  {name}")
    print(f"  {sum(c['unit'].values()):6,d}  total (goal < 2,500)")
    if "--all" in argv:
        print("semantics, every module:")
        for name, n in c["semantics"].items():
            print(f"  {n:6,d}  {name}")
    sem = c["semantics"]
    print(f"semantics: {sum(sem.values()):,d} lines in {len(sem)} modules")
    added = {name: n for name, n in sem.items() if _under(name, DROP_IN)}
    print(f"  of which {sum(added.values()):,d} in the {len(added)} modules issue 30 (drop-in) added whole")
    print(f"  without them: {sum(sem.values()) - sum(added.values()):,d} (goal < 7,500 before the drop-in "
          "issue's new operators)")
    print(f"machinery: {sum(c['machinery'].values()):,d} lines in {len(c['machinery'])} modules")
    if c["unclassified"]:
        print(f"unclassified (no CLASSES row): {sorted(c['unclassified'])}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

"""The README's layout table (one line per zephon_ref module: its kind and what it owns) matches
the tree: a module added, moved or re-described without `python scripts/readme_layout.py --write`
fails here."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _layout() -> object:
    spec = importlib.util.spec_from_file_location("readme_layout", ROOT / "scripts" / "readme_layout.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_readme_layout_table_is_the_tree() -> None:
    layout = _layout()
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    want = layout.rewrite(readme)  # type: ignore[attr-defined]
    assert readme == want, "README.md's layout table is stale: run python scripts/readme_layout.py --write"


def test_every_row_has_a_kind_and_a_summary() -> None:
    table = _layout().table()  # type: ignore[attr-defined]
    rows = [r for r in table.splitlines() if r.startswith("| `")]
    assert len(rows) > 50
    bad = [r for r in rows if "| ? |" in r or r.rstrip().endswith("|  |")]
    assert not bad, bad

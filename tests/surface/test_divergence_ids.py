"""Every row of docs/divergences.md has a stable id (``D-<n>``, unique, never reused) and every
``divergence D-<n>`` cited in the code names an existing row (scripts/divergence_ids.py)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CITE = re.compile(r"divergence (D-\d+)")


def _ids_module() -> object:
    spec = importlib.util.spec_from_file_location("divergence_ids", ROOT / "scripts" / "divergence_ids.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_every_row_has_a_unique_id() -> None:
    mod = _ids_module()
    text = (ROOT / "docs" / "divergences.md").read_text(encoding="utf-8")
    assert mod.assign(text) == text, "rows without ids: run python scripts/divergence_ids.py"  # type: ignore[attr-defined]
    ids = [i for i, _ in mod.rows(text)]  # type: ignore[attr-defined]
    assert len(ids) > 50 and all(re.fullmatch(r"D-\d+", i) for i in ids), ids[:5]
    assert len(set(ids)) == len(ids), sorted(i for i in ids if ids.count(i) > 1)


def test_a_row_without_an_id_gets_the_next_one_and_ids_never_move() -> None:
    mod = _ids_module()
    text = "| a | b |\n|---|---|\n| x | y |\n"
    once = mod.assign(text)  # type: ignore[attr-defined]
    assert "| D-1 | x | y |" in once and mod.assign(once) == once  # type: ignore[attr-defined]
    removed = once.replace("| D-1 | x | y |\n", "") + "\n| c | d |\n|---|---|\n| z | w |\n"
    assert "| D-2 | z | w |" in mod.assign(removed)  # type: ignore[attr-defined]  # D-1 is not reused


def test_every_cited_id_exists() -> None:
    mod = _ids_module()
    ids = {i for i, _ in mod.rows((ROOT / "docs" / "divergences.md").read_text(encoding="utf-8"))}  # type: ignore[attr-defined]
    cited: dict[str, list[str]] = {}
    for folder in ("zephon_ref", "properties", "sim", "tests", "bench", "scripts"):
        for f in sorted((ROOT / folder).rglob("*.py")):
            for m in CITE.finditer(f.read_text(encoding="utf-8")):
                cited.setdefault(m.group(1), []).append(str(f.relative_to(ROOT)))
    missing = {k: v for k, v in cited.items() if k not in ids}
    assert not missing, missing

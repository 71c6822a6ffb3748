"""The modules of a package, by dotted name: shared by the import-graph, import-direction and
README-layout tests (one walk, so the three tests agree on what a module is)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def module_names(root: Path, package: str) -> dict[str, Path]:
    """``{dotted name: file}`` of every module of ``package`` under ``root`` (a package is named by
    its ``__init__``)."""
    out: dict[str, Path] = {}
    for f in sorted((root / package).rglob("*.py")):
        parts = list(f.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = f
    return out

"""Give every row of docs/divergences.md a stable id (``D-<n>``) in a first column ``id``.

A row that has an id keeps it; rows without one get the next free numbers, in file order, so
ids never move once given (a removed row's id is not reused: the highest id ever given is kept
in the file's first line comment).  Code cites a row in one line: ``# divergence D-7``.
tests/surface/test_divergence_ids.py checks that every row has a unique id and every citation
names an existing row.

Run: python scripts/divergence_ids.py [--check]
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "divergences.md"
ID = re.compile(r"D-(\d+)")
HIGH = re.compile(r"<!-- highest divergence id given: D-(\d+) -->")


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def is_row(line: str) -> bool:
    return line.startswith("|")


def assign(text: str) -> str:
    lines = text.split("\n")
    m = HIGH.search(text)
    high = int(m.group(1)) if m else 0
    for line in lines:
        if is_row(line):
            c = _cells(line)[0]
            if ID.fullmatch(c):
                high = max(high, int(ID.fullmatch(c).group(1)))  # type: ignore[union-attr]
    out: list[str] = []
    in_table = False
    added = False  # this table's header got the id column now (so its separator needs one too)
    for line in lines:
        if HIGH.fullmatch(line.strip()):
            continue
        if not is_row(line):
            in_table = False
            out.append(line)
            continue
        first = _cells(line)[0]
        if not in_table:  # the header row
            in_table = True
            added = first != "id"
            out.append("| id " + line if added else line)
            continue
        if first and set(first) <= {"-", " ", ":"}:  # the separator row
            out.append("|---" + line if added else line)
            continue
        if ID.fullmatch(first):
            out.append(line)
        else:
            high += 1
            out.append(f"| D-{high} " + line)
    return f"<!-- highest divergence id given: D-{high} -->\n" + "\n".join(out)


def rows(text: str) -> list[tuple[str, list[str]]]:
    """(id, the other cells) of every body row of every table."""
    found: list[tuple[str, list[str]]] = []
    header = True
    for line in text.split("\n"):
        if not is_row(line):
            header = True
            continue
        c = _cells(line)
        if header:
            header = False
            continue
        if set(c[0]) <= {"-", " ", ":"}:
            continue
        found.append((c[0], c[1:]))
    return found


def main(argv: list[str]) -> int:
    text = DOC.read_text(encoding="utf-8")
    new = assign(text)
    if "--check" in argv:
        if new != text:
            print("docs/divergences.md has rows without ids: run python scripts/divergence_ids.py")
            return 1
        return 0
    DOC.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

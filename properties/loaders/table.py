"""``python -m properties.loaders.table FILE.json ...``: the markdown table docs/loaders.md publishes,
from the ``--json`` files of ``python -m properties.loaders`` runs (one per loader)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from properties.loaders.machine import PROPERTIES

__all__ = ["main", "render", "render_costs", "render_failures"]


def _cell(r: dict) -> str:
    if r["status"] == "FAIL":
        return f"**FAIL** ({r['to_failure']})" if r.get("to_failure") else "**FAIL**"
    if r["status"] == "declared":
        return "declared"
    return f"pass ({r['examples']})"


def render(docs: list[dict]) -> str:
    props = list(PROPERTIES)
    lines = ["| loader (version; pinned knobs) | " + " | ".join(props) + " |",
             "|---|" + "---|" * len(props)]
    for d in docs:
        by = {r["prop"]: r for r in d["results"]}
        pins = f"; {', '.join(f'{k}={v}' for k, v in d.get('pinned', {}).items())}" if d.get("pinned") else ""
        cells = [_cell(by[p]) if p in by else "-" for p in props]
        lines.append(f"| {d['loader']} ({d['version']}{pins}) | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def render_failures(docs: list[dict]) -> str:
    """One line per failing property of every loader: what failed, its witness (what happened to the
    data), the minimal configuration and how many state-machine runs reached it."""
    out = []
    for d in docs:
        for r in d["results"]:
            if r["status"] != "FAIL":
                continue
            f = r.get("failure") or {}
            wrong = f.get("first_wrong") or {}
            witness = wrong.get("witness", "")
            cfg = f.get("config_text") or "?"
            at = f"run {r['to_failure']}" if r.get("to_failure") else "?"
            out.append(f"* {d['loader']} / {r['prop']} ({at}): {r['reason']}"
                       + (f"; {witness}" if witness else "") + f"; `{cfg}`")
    return "\n".join(out)


def render_costs(docs: list[dict]) -> str:
    """Per loader: the seconds its properties took (summed over the processes that ran them), the CPU
    seconds of the run where recorded, and how far each failure was shrunk (runs after the first
    failing one, and whether the bound stopped it)."""
    lines = ["| loader | property seconds (sum) | CPU seconds | slowest property | failures: runs to first, "
             "shrink runs |", "|---|---|---|---|---|"]
    for d in docs:
        rs = d["results"]
        total = sum(r.get("seconds", 0.0) for r in rs)
        slow = max(rs, key=lambda r: r.get("seconds", 0.0))
        fails = ", ".join(
            f"{r['prop']} {r['to_failure']}+{r['examples'] - r['to_failure']}"
            + ("*" if r.get("shrink_bounded") else "")
            for r in rs if r["status"] == "FAIL" and r.get("to_failure")
        ) or "-"
        cpu = d.get("cpu_seconds")
        lines.append(f"| {d['loader']} | {total:.0f} | {'-' if cpu is None else f'{cpu:.0f}'} | "
                     f"{slow['prop']} {slow.get('seconds', 0.0):.0f} s | {fails} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    files = sys.argv[1:] if argv is None else argv
    if not files:
        sys.stderr.write("python -m properties.loaders.table: expected one or more --json result files\n")
        return 2
    docs = []
    for f in files:
        try:
            docs.append(json.loads(Path(f).read_text(encoding="utf-8")))
        except (OSError, ValueError) as exc:
            sys.stderr.write(
                f"python -m properties.loaders.table: {f}: expected a results file, received {exc}\n"
            )
            return 2
    print(render(docs))
    print()
    print(render_failures(docs))
    print()
    print(render_costs(docs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

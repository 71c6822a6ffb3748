"""``python -m bench``: run every benchmark's ``results()`` and print one table.

Usage::

    python3 -m bench [--quick] [--only source,pipeline] [--report] [--json FILE]

Each ``bench/bench_*.py`` that exposes ``results(*, quick: bool = True)`` is run in
turn (a progress line per module on stderr); its rows (``name``, ``ours``,
``theirs``, ``vs``, ``unit``, ``ratio``, ``note``) go into one table.  ``vs`` says
what "theirs" is on that row, in a column of its own ("theirs is"): another library
("zephon 0.2.0", "Grain"), the same code in another setting ("the same store's save
time", "the same merge at 8 lanes"), another backend or topology ("directory
backend", "star topology"), or a goal; a row without a "theirs" needs no ``vs``, a
row with one that does not say is shown as unstated.  ``--json FILE`` writes the
rows, the machine and the date as one JSON document (for a machine to read).  A module that cannot
be imported or run (a missing optional extra: zephon, torch, boto3, grain, ...)
becomes a row saying what could not be measured and why; a module without
``results()`` says so too.  ``--report`` rewrites the results table in README.md
between the ``bench-results`` marker comments, with the machine (nproc, Python,
CPU model) and the date.  Nothing here asserts a speed.
"""

from __future__ import annotations

import datetime
import importlib
import json
import os
import platform
import sys
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

START = (
    "<!-- bench-results:start (written by `python -m bench --report`; "
    "edit the benchmarks, not this table) -->"
)
END = "<!-- bench-results:end -->"
KEYS = ("name", "ours", "theirs", "vs", "unit", "ratio", "note")
UNSTATED = "? (unstated: the benchmark must say)"

Row = dict[str, object]


def discover() -> list[str]:
    """Module names bench_*, sorted (deterministic order)."""
    return sorted(p.stem for p in (ROOT / "bench").glob("bench_*.py"))


def _short(name: str) -> str:
    return name[len("bench_"):] if name.startswith("bench_") else name


def select(names: Sequence[str], only: str | None) -> list[str]:
    if not only:
        return list(names)
    want = {_short(x.strip()) for x in only.split(",") if x.strip()}
    unknown = sorted(want - {_short(n) for n in names})
    if unknown:
        raise SystemExit(f"--only: expected names among {[_short(n) for n in names]}, received unknown "
                         f"benchmark(s) {unknown}")
    return [n for n in names if _short(n) in want]


def check_row(module: str, row: Any) -> Row:
    """A row with exactly KEYS (``vs`` may be left out when ``theirs`` is None), else one explaining row."""
    if isinstance(row, dict) and "vs" not in row:
        row = {**row, "vs": None if row.get("theirs") is None else UNSTATED}
    if not isinstance(row, dict) or set(row) != set(KEYS):
        return {"name": f"{module}: malformed row", "ours": None, "theirs": None, "vs": None, "unit": "",
                "ratio": None, "note": f"expected keys {list(KEYS)}, received {row!r}"[:300]}
    return {k: row[k] for k in KEYS}


def run_module(name: str, *, quick: bool) -> list[Row]:
    """The rows of one module; an import failure or a crash becomes one explanatory row."""
    try:
        mod = importlib.import_module(f"bench.{name}")
    except ImportError as exc:  # an optional extra is missing
        return [{"name": f"{name}: not measured", "ours": None, "theirs": None, "vs": None, "unit": "",
                 "ratio": None, "note": f"could not import ({type(exc).__name__}: {exc})"}]
    fn = getattr(mod, "results", None)
    if fn is None:
        return [
            {
                "name": f"{name}: not measured",
                "ours": None,
                "theirs": None,
                "vs": None,
                "unit": "",
                "ratio": None,
                "note": "the module has no results() yet (run it as a script for its own tables)",
            }
        ]
    try:
        rows = fn(quick=quick)
    except Exception as exc:  # a benchmark failing must not hide the others
        tb = traceback.format_exc(limit=2).strip().splitlines()[-1]
        return [
            {
                "name": f"{name}: failed",
                "ours": None,
                "theirs": None,
                "vs": None,
                "unit": "",
                "ratio": None,
                "note": f"{type(exc).__name__}: {exc}"[:300] + f" ({tb[:120]})",
            }
        ]
    return [check_row(name, r) for r in rows]


def fmt(v: object) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        if v == 0:
            return "0"
        a = abs(v)
        return f"{v:,.0f}" if a >= 100 else f"{v:.3g}" if a >= 0.01 else f"{v:.2e}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v).replace("|", "/").replace("\n", " ")


def markdown(rows: Sequence[Row]) -> str:
    head = ["comparison", "ours", "theirs", "theirs is", "unit", "ratio", "note"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    for r in rows:
        ratio = r["ratio"]
        cells = [
            fmt(r["name"]),
            fmt(r["ours"]),
            fmt(r["theirs"]),
            fmt(r.get("vs")),
            fmt(r["unit"]),
            "-"
            if ratio is None
            else f"{float(ratio):.2f}x"
            if isinstance(ratio, (int, float))
            else fmt(ratio),
            fmt(r["note"]),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def machine() -> str:
    cpu = platform.processor() or "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{os.cpu_count()} CPUs (nproc), {cpu}, Python {platform.python_version()}, {platform.system()}"


def report_block(rows: Sequence[Row], *, quick: bool, modules: Sequence[str]) -> str:
    today = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    mode = "`python3 -m bench --quick --report`" if quick else "`python3 -m bench --report`"
    return "\n".join([
        START,
        f"Measured {today} on {machine()}, by {mode} (modules: {', '.join(modules)}). "
        "Ratios are ours / theirs measured side by side in one run (\"theirs is\" says what theirs is on "
        "each row); the machine is a noisy shared VM, so read differences under ~20% as noise.",
        "",
        markdown(rows),
        END,
    ])


def rewrite_readme(path: Path, block: str) -> None:
    text = path.read_text()
    if START.split(" (")[0] in text and END in text:
        head = text[:text.index(START.split(" (")[0])]
        tail = text[text.index(END) + len(END):]
        new = head + block + tail
    else:
        raise SystemExit(
            f"{path}: no '{START.split(' (')[0]}' ... '{END}' markers; add them where the table goes"
        )
    tmp = path.with_suffix(".md.tmp")
    tmp.write_text(new)
    os.replace(tmp, path)


def json_document(rows: Sequence[Row], *, quick: bool, modules: Sequence[str]) -> dict[str, Any]:
    """The rows as one JSON-able document: what ran, where, when, and every row with KEYS."""
    return {
        "measured": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": machine(), "quick": quick, "modules": list(modules),
        "columns": {"name": "the comparison", "ours": "our number", "theirs": "the number we compare with",
                    "vs": "what 'theirs' is on this row", "unit": "the unit of ours and theirs",
                    "ratio": "ours / theirs", "note": "how it was measured and checked"},
        "rows": [{k: r.get(k) for k in KEYS} for r in rows],
    }


def main(argv: Sequence[str] | None = None) -> int:
    from zephon_ref.exits import (
        EPILOG,
        EXIT_USAGE,
        DefaultsHelpFormatter,
        OneLineArgumentParser,
        refuse,
        writable_path,
    )

    ap = OneLineArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0],
                               formatter_class=DefaultsHelpFormatter, epilog=EPILOG)
    ap.add_argument("--quick", action="store_true", help="small sizes (minutes, not tens of minutes)")
    ap.add_argument("--only", default=None,
                    help="comma-separated names, e.g. source,pipeline (default: every bench/bench_*.py)")
    ap.add_argument("--report", action="store_true", help="rewrite the results table in README.md")
    ap.add_argument("--json", type=writable_path, default=None, metavar="FILE",
                    help="also write the rows, the machine and the date here as JSON")
    args = ap.parse_args(argv)
    if args.only is not None and not [x for x in args.only.split(",") if x.strip()]:
        return refuse("python -m bench", "usage error", f"--only: expected one or more benchmark names, "
                      f"received {args.only!r}", EXIT_USAGE)
    try:
        names = select(discover(), args.only)
    except SystemExit as exc:
        return refuse("python -m bench", "usage error", str(exc.code), EXIT_USAGE)
    rows: list[Row] = []
    for i, name in enumerate(names, 1):
        print(f"[{i}/{len(names)}] {name} ...", file=sys.stderr, flush=True)
        t0 = time.perf_counter()  # clock-ok: progress line only
        got = run_module(name, quick=args.quick)
        rows += got
        print(f"[{i}/{len(names)}] {name}: {len(got)} rows in {time.perf_counter() - t0:.0f} s",
              file=sys.stderr, flush=True)
    print(markdown(rows))
    if args.json:
        tmp = args.json + ".tmp"
        with open(tmp, "w") as f:
            f.write(json.dumps(json_document(rows, quick=args.quick, modules=[_short(n) for n in names]),
                               indent=1, default=str) + "\n")
        os.replace(tmp, args.json)
    if args.report:
        rewrite_readme(
            ROOT / "README.md", report_block(rows, quick=args.quick, modules=[_short(n) for n in names])
        )
        print("README.md results table rewritten", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The sweep's report page: one self-contained HTML file a person reads the morning after a nightly.

Theory of operation
-------------------
:func:`write_report` takes a sweep's summary (:func:`sim.sweep.summarise`) and its records and
writes one HTML file with its plots embedded as PNG (no other files, no scripts, opens from a
mail attachment):

1. the headline: seeds, ok / failed / errors / timeouts, the overrides, the backend;
2. probe coverage: how many seeds reached each coverage probe (:data:`sim.world.PROBES`), as a
   bar chart, the fault kinds no seed reached named in red;
3. failures by kind: the checker's witness kinds (lost, duplicated, bad-restore, ...), plus
   ``exception`` (the run raised: its traceback is shown) and ``timeout`` (past its budget);
4. for each failing seed (the first ``timelines`` of them, by seed), its first problems, the
   one-line command that reproduces it on a laptop, and its timeline
   (:func:`sim.timeline.figure`: the seed is run again here, deterministically, to get its
   history; a seed that raised or timed out gets no timeline, its traceback or budget instead, and
   neither does one that took more than ``timeline_max_s`` on its worker: the line to draw it).

What may not live here: running or judging seeds beyond re-running a failing one for its history.
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sim.world import PROBES

__all__ = ["write_report"]


def _png(fig: Any) -> str:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def _img(b64: str, alt: str) -> str:
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{b64}" style="max-width:100%">'


def _coverage_figure(summary: Mapping[str, Any]) -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    reached = summary["probes_seeds_reached"]
    runs = max(1, int(summary["runs"]))
    names = list(PROBES)
    unreached = set(summary.get("fault_kinds_unreached", ()))
    fig, ax = plt.subplots(figsize=(10, 0.26 * len(names) + 1.3))
    vals = [int(reached.get(k, 0)) for k in names]
    colours = ["#d62728" if k in unreached else "#1f77b4" for k in names]
    ax.barh(range(len(names)), vals, color=colours)
    for i, (k, v) in enumerate(zip(names, vals, strict=True)):
        fault = k in unreached
        ax.text(v + runs * 0.005, i, f"{v} ({100 * v / runs:.0f}%)" if v else
                ("0: a fault kind no seed reached" if fault else "0"), va="center", fontsize=7,
                color="#d62728" if fault else "#333333")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_yticks(range(len(names)), names, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, runs * 1.15)
    ax.set_xlabel(f"seeds that reached the probe (of {runs} seeds run)")
    ax.set_title("probe coverage", fontsize=10)
    fig.tight_layout()
    return fig


def _kinds_figure(kinds: Mapping[str, int]) -> Any:
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, ax = plt.subplots(figsize=(8, 0.35 * len(kinds) + 1.2))
    items = sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0]))
    ax.barh(range(len(items)), [v for _, v in items], color="#d62728")
    ax.set_yticks(range(len(items)), [k for k, _ in items], fontsize=9)
    ax.invert_yaxis()
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("failing seeds with a problem of this kind (seeds)")
    ax.set_title("failures by kind", fontsize=10)
    fig.tight_layout()
    return fig


def _failure_kinds(f: Mapping[str, Any]) -> list[str]:
    return list(f.get("kinds") or ["problem"])


def _timeline(seed: int, overrides: Mapping[str, Any]) -> tuple[str | None, str]:
    """(PNG as base64, or None, and a note) for one failing seed, run again here."""
    from sim.runs import run_seed_world
    from sim.timeline import figure

    try:
        r, world = run_seed_world(seed, **dict(overrides))
    except Exception as exc:  # the run raises here too: the traceback above says where
        return None, f"no timeline: the run raised {type(exc).__name__}: {exc}"[:300]
    title = (
        f"seed {seed}: {'ok (did not fail when run again here!)' if r.ok else 'FAILED'}; {r.steps} global "
        f"steps, {r.crashes} crashes, {r.restores} restores; {r.config['lanes']} lanes"
    )
    return _png(figure(world.history, seed=seed, witnesses=r.witnesses, title=title)), ""


def write_report(path: Path | str, summary: Mapping[str, Any], records: Sequence[Mapping[str, Any]], *,
                 timelines: int = 12, backend: str = "", title: str = "zephon_ref simulator sweep",
                 timeline_max_s: float = 300.0) -> Path:
    """Write the report page (see the module docstring); returns its path."""
    esc = html.escape
    out: list[str] = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>{esc(title)}</title>",
        "<style>body{font-family:sans-serif;max-width:1400px;margin:1em auto;padding:0 1em;color:#222}"
        "code,pre{background:#f4f4f4;padding:2px 4px}pre{padding:8px;overflow-x:auto;font-size:12px}"
        "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 8px;text-align:left}"
        ".bad{color:#c00}.ok{color:#080}</style></head><body>",
        f"<h1>{esc(title)}</h1>",
    ]
    seeds = summary.get("seeds") or []
    verdict = "ok" if not summary["failed"] else "bad"
    out.append(
        f"<p>Seeds {esc(' .. '.join(map(str, seeds)))}: <b>{summary['runs']}</b> run, "
        f"<span class='ok'>{summary['ok']} ok</span>, "
        f"<span class='{verdict}'><b>{summary['failed']} failed</b></span>"
        f" (of which {summary.get('errors', 0)} raised, {summary.get('timeouts', 0)} timed out); "
        f"{summary['events']:,} simulated events. Overrides: <code>{esc(str(summary.get('overrides') or {}))}"
        f"</code>{'; backend: ' + esc(backend) if backend else ''}.</p>"
    )
    out.append("<h2>Probe coverage</h2>")
    out.append(_img(_png(_coverage_figure(summary)), "probe coverage"))
    if summary.get("fault_kinds_unreached"):
        out.append("<p class='bad'>Fault kinds no seed reached: "
                   + esc(", ".join(summary["fault_kinds_unreached"])) + "</p>")
    failures = list(summary.get("failures") or [])
    out.append("<h2>Failures by kind</h2>")
    if not failures:
        out.append("<p class='ok'>No seed failed.</p>")
    else:
        kinds: dict[str, list[int]] = {}
        for f in failures:
            for k in _failure_kinds(f):
                kinds.setdefault(k, []).append(int(f["seed"]))
        out.append(_img(_png(_kinds_figure({k: len(v) for k, v in kinds.items()})), "failures by kind"))
        out.append("<table><tr><th>kind</th><th>seeds</th><th>first seeds</th></tr>")
        for k, v in sorted(kinds.items(), key=lambda kv: (-len(kv[1]), kv[0])):
            out.append(f"<tr><td>{esc(k)}</td><td>{len(v)}</td><td>{esc(', '.join(map(str, v[:20])))}"
                       f"{' ...' if len(v) > 20 else ''}</td></tr>")
        out.append("</table>")
        out.append("<h2>Failing seeds</h2>")
        by_seed = {int(r["seed"]): r for r in records if "seed" in r}
        ov = dict(summary.get("overrides") or {})
        for i, f in enumerate(failures):
            seed = int(f["seed"])
            rec = by_seed.get(seed, {})
            out.append(f"<h3 id='seed-{seed}'>seed {seed}: {esc(', '.join(_failure_kinds(f)))}</h3>")
            out.append(f"<p>reproduce on a laptop: <code>{esc(str(f.get('reproduce')))}</code></p>")
            problems = f.get("problems") or []
            if problems:
                out.append("<ul>" + "".join(f"<li>{esc(str(p))}</li>" for p in problems[:5]) + "</ul>")
            if f.get("error"):
                out.append(f"<p class='bad'>{esc(str(f['error']))}</p>")
            if rec.get("traceback"):
                out.append(f"<pre>{esc(str(rec['traceback']))}</pre>")
            if i >= timelines:
                continue
            if f.get("status") in ("timeout", "error"):
                out.append(
                    "<p>no timeline: the run did not finish"
                    + (" within its budget" if f.get("status") == "timeout" else "")
                    + ".</p>"
                )
                continue
            took = float(rec.get("seconds") or 0.0)
            if took > timeline_max_s:  # drawing runs the seed again here: not a 3-hour seed
                out.append(
                    f"<p>no timeline: the seed took {took:.0f} s on its worker (more than {timeline_max_s:g} "
                    f"s); draw it with <code>python -m sim run --seed {seed} --timeline seed.png</code> "
                    "plus the overrides.</p>"
                )
                continue
            b64, note = _timeline(seed, ov)
            out.append(_img(b64, f"timeline of seed {seed}") if b64 else f"<p>{esc(note)}</p>")
        if len(failures) > timelines:
            out.append(
                f"<p>{len(failures) - timelines} more failing seeds have no timeline here (draw one with "
                f"<code>python -m sim run --seed N --timeline seed.png</code> plus the overrides).</p>"
            )
    out.append("</body></html>")
    p = Path(path)
    p.write_text("\n".join(out))
    return p

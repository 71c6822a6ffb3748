"""One run's history drawn as a timeline: ranks against virtual time, the checker's witness marked.

Theory of operation
-------------------
:func:`figure` reads a world's history (:class:`sim.history.Event` entries, nothing else) and
draws two panels sharing the x axis, virtual time in kernel ticks:

* top: the trainer's global step against time (every history entry carries the step it
  happened at), so a restore that rolls the trainer back shows as a drop;
* bottom: one row per rank (a participant ``r<rank>w<worker>`` delivers on its rank's row,
  one tick mark per delivered item, coloured by worker), a ``job`` row on top (checkpoints
  invoked / published / failed, restores, resizes, crashes) and a ``storage`` row at the
  bottom (the storage nemesis: I/O errors, torn writes, read corruption, stale listings,
  unflushed writes lost at a crash, bit rot).  A crash of the whole job is a red line across
  both panels, a restore a green dashed one, a planned resize a purple dotted one; shaded
  bands are the job's incarnations, labelled with their rank count.

Each witness of the checker (:class:`sim.history.Problem`) is marked as Jepsen's timelines mark
an anomaly: a magenta line at the ``step ok`` entry of its global step (the last one with that
number: the one left in the trainer's timeline), a star on the step curve, a star on the row
of the rank that delivered the witness's lane there, and a label with the kind, lane and step.
The legend sits outside the axes, right of the data.  :func:`draw_seed` runs a seed again
(:func:`sim.runs.run_seed_world`; the same seed gives the same run) and writes its PNG.

What may not live here: judging a run (sim.history, sim.checker); this module only draws.
"""

from __future__ import annotations

import io
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sim.history import Event, Problem

__all__ = ["draw", "draw_seed", "figure", "png_bytes"]

_PART = re.compile(r"^r(\d+)w(\d+)$")
#: storage-nemesis faults (first element of a ``fault`` entry's detail) -> (marker, colour, legend label)
_STORAGE = {
    "io-error": ("v", "#8c564b", "I/O error"),
    "torn-write": ("v", "#d62728", "torn write"),
    "read-corruption": ("P", "#e377c2", "read corruption"),
    "stale-listing": ("s", "#7f7f7f", "stale listing"),
    "lost-unflushed": ("o", "#bcbd22", "unflushed writes lost"),
    "bit-rot": ("*", "#17becf", "bit rot"),
}
_WORKER_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2")


def _rank_rows(history: Sequence[Event]) -> int:
    n = 0
    for e in history:
        m = _PART.match(e.process)
        if m:
            n = max(n, int(m.group(1)) + 1)
        elif e.kind == "start" and isinstance(e.detail, int):
            n = max(n, e.detail)
        elif (
            e.kind == "fault" and isinstance(e.detail, tuple) and e.detail[:1] in (("crash-rank",), ("slow",))
        ):
            n = max(n, int(e.detail[1]) + 1)
    return max(n, 1)


def _witness_at(history: Sequence[Event], w: Problem) -> tuple[int, int, int | None]:
    """(time, step, rank or None) where a witness is marked: its step's last ``step ok`` entry."""
    end = history[-1].time if history else 0
    if w.step is None:
        return end, history[-1].step if history else 0, None
    at = None
    if w.kind == "bad-restore":  # the restore that accepted the wrong state (its record is the generation)
        at = next((e for e in history if e.kind == "restore" and e.type == "ok" and e.step == w.step
                   and isinstance(e.extra, dict) and e.extra.get("generation") == w.record), None)
    if at is None:
        at = next(
            (e for e in reversed(history) if e.kind == "step" and e.type == "ok" and e.step == w.step), None
        )
    if at is None:
        return end, w.step, None
    rank = None
    if w.lane is not None:
        for e in reversed(history):
            if (
                e.time <= at.time
                and e.kind == "deliver"
                and isinstance(e.detail, tuple)
                and e.detail[0] == w.lane
            ):
                m = _PART.match(e.process)
                rank = int(m.group(1)) if m else None
                break
    return at.time, w.step, rank


def figure(history: Sequence[Event], *, seed: int | None = None, witnesses: Sequence[Problem] = (),
           title: str | None = None, max_witnesses: int = 3) -> Any:
    """The timeline as a matplotlib Figure (see the module docstring)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    ranks = _rank_rows(history)
    job_y, storage_y = -1, ranks
    height = min(13.0, 3.2 + 0.28 * (ranks + 2))
    fig, (top, bot) = plt.subplots(2, 1, sharex=True, figsize=(13, height),
                                   gridspec_kw={"height_ratios": [1.0, max(1.2, 0.28 * (ranks + 2))]})
    end = max((e.time for e in history), default=1) or 1
    handles: dict[str, Any] = {}

    def mark(ax: Any, x: Any, y: Any, label: str, **kw: Any) -> None:
        h = ax.scatter(x, y, label=label, zorder=3, **kw)
        handles.setdefault(label, h)

    def vline(x: int, label: str, **kw: Any) -> None:
        for ax in (top, bot):
            h = ax.axvline(x, **kw)
        handles.setdefault(label, h)

    # incarnations: shaded bands labelled with the rank count
    starts = [(e.time, int(e.detail)) for e in history if e.kind == "start" and e.type == "ok"]
    for i, (t0, dp) in enumerate(starts):
        t1 = starts[i + 1][0] if i + 1 < len(starts) else end
        if i % 2:
            for ax in (top, bot):
                ax.axvspan(t0, t1, color="#000000", alpha=0.05, lw=0)
        if t1 - t0 > 0.06 * end or i == len(starts) - 1:  # a label per band wide enough to hold one
            bot.text(t0 + 0.003 * end, storage_y + 0.62, f"{dp} rank{'s' if dp != 1 else ''}", fontsize=7,
                     color="#555555", va="bottom")
    # top: the trainer's global step against time
    xs = [e.time for e in history]
    ys = [e.step for e in history]
    top.step(xs, ys, where="post", color="#333333", lw=1.2)
    handles.setdefault("trainer's global step", Line2D([], [], color="#333333", lw=1.2))
    # deliveries, by worker
    by_worker: dict[int, tuple[list[int], list[int]]] = {}
    for e in history:
        m = _PART.match(e.process)
        if e.kind == "deliver" and m:
            xs_w, ys_w = by_worker.setdefault(int(m.group(2)), ([], []))
            xs_w.append(e.time)
            ys_w.append(int(m.group(1)))
    for w, (xw, yw) in sorted(by_worker.items()):
        mark(bot, xw, yw, f"item delivered (worker {w})", marker="|", s=60, linewidths=0.9,
             color=_WORKER_COLOURS[w % len(_WORKER_COLOURS)], alpha=0.7, rasterized=True)
    # job and nemesis entries
    for e in history:
        d = e.detail
        if e.kind == "checkpoint":
            if e.type == "invoke":
                mark(bot, e.time, job_y, "checkpoint started", marker="s", s=26, facecolors="none",
                     edgecolors="#1f77b4", linewidths=0.8)
            elif e.type == "ok":
                mark(bot, e.time, job_y, "checkpoint published", marker="s", s=20, color="#1f77b4")
            elif e.type == "fail":
                mark(bot, e.time, job_y, "checkpoint failed", marker="x", s=30, color="#1f77b4")
            else:
                mark(bot, e.time, job_y, "checkpoint outcome unknown", marker="s", s=26, color="#aec7e8")
        elif e.kind == "restore":
            if e.type == "ok":
                vline(e.time, "restore", color="#2ca02c", ls="--", lw=1.0, alpha=0.8)
                mark(bot, e.time, job_y, "restore", marker="^", s=40, color="#2ca02c")
            else:
                mark(bot, e.time, job_y, "restore refused / crashed", marker="x", s=40, color="#2ca02c")
        elif e.kind == "crash":
            vline(e.time, "job crash", color="#d62728", lw=1.2, alpha=0.8)
        elif e.kind == "resize":
            vline(e.time, "planned resize", color="#9467bd", ls=":", lw=1.5)
            mark(bot, e.time, job_y, "planned resize", marker="D", s=26, color="#9467bd")
        elif e.kind == "fault" and isinstance(d, tuple) and d:
            what = str(d[0])
            if what == "crash-rank":
                mark(bot, e.time, int(d[1]), "rank crash", marker="X", s=70, color="#d62728")
            elif what == "slow":
                mark(bot, e.time, int(d[1]), "slow rank (from here)", marker=">", s=40, color="#ff7f0e")
            elif what.startswith("crash"):
                mark(bot, e.time, job_y, "job crash", marker="X", s=70, color="#d62728")
            elif what in _STORAGE:
                m_, c_, lab = _STORAGE[what]
                mark(bot, e.time, storage_y, lab, marker=m_, s=45, color=c_)
        elif e.kind == "end":
            vline(e.time, f"end ({d})", color="#000000", lw=1.0)
    # the checker's witnesses
    for i, wit in enumerate(list(witnesses)[:max_witnesses]):
        x, step, rank = _witness_at(history, wit)
        label = (
            f"witness: {wit.kind}" + (f", lane {wit.lane}" if wit.lane is not None else "") + f", step {step}"
        )
        vline(x, "checker's witness", color="#e600e6", lw=2.2, alpha=0.9)
        top.scatter([x], [step], marker="*", s=260, color="#e600e6", edgecolors="black", zorder=5)
        top.annotate(label, (x, step), xytext=(12, 30 + 20 * i), textcoords="offset points", fontsize=9,
                     color="#a000a0", arrowprops={"arrowstyle": "-", "color": "#e600e6", "lw": 0.8},
                     bbox={"boxstyle": "round", "fc": "white", "ec": "#e600e6", "alpha": 0.9}, zorder=6)
        if rank is not None:
            bot.scatter([x], [rank], marker="*", s=260, color="#e600e6", edgecolors="black", zorder=5)
    top.set_ylabel("global step")
    top.grid(True, axis="y", alpha=0.3)
    bot.set_ylim(storage_y + 0.7, job_y - 0.7)
    bot.set_yticks(
        [job_y, *range(ranks), storage_y],
        ["job", *(f"rank {r}" for r in range(ranks)), "storage"],
        fontsize=8 if ranks > 16 else 9,
    )
    bot.set_ylabel("rank")
    bot.set_xlabel("virtual time (kernel ticks)")
    bot.set_xlim(-end * 0.01, end * 1.01)
    verdict = "" if not witnesses else f"; {len(witnesses)} problem(s), first: {witnesses[0].kind}"
    fig.suptitle(title or f"seed {seed}: {len([e for e in history if e.kind == 'step' and e.type == 'ok'])} "
                 f"steps taken{verdict}", fontsize=11)
    fig.legend(list(handles.values()), list(handles), loc="upper left", bbox_to_anchor=(0.805, 0.93),
               fontsize=8, frameon=False)
    top.set_ylim(bottom=-0.5, top=max(ys, default=1) * 1.1 + 8 * max(1, min(len(witnesses), max_witnesses)))
    fig.subplots_adjust(left=0.07, right=0.8, top=0.92, bottom=0.5 / height + 0.04, hspace=0.08)
    return fig


def png_bytes(history: Sequence[Event], **kw: Any) -> bytes:
    """The timeline as PNG bytes (the report embeds them)."""
    import matplotlib.pyplot as plt

    fig = figure(history, **kw)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return buf.getvalue()


def draw(history: Sequence[Event], path: Path | str, **kw: Any) -> Path:
    out = Path(path)
    out.write_bytes(png_bytes(history, **kw))
    return out


def draw_seed(seed: int, overrides: Mapping[str, Any], path: Path | str) -> Path:
    """Run ``seed`` again (deterministic) and draw its timeline to ``path`` (PNG)."""
    from sim.runs import run_seed_world

    r, world = run_seed_world(seed, **dict(overrides))
    verdict = "ok" if r.ok else f"FAILED ({len(r.problems)} problem(s), first: " \
        f"{r.witnesses[0].kind if r.witnesses else 'see the problems'})"
    title = (f"seed {seed}: {verdict}; {r.steps} global steps, {r.crashes} crashes, {r.restores} restores; "
             f"{r.config['lanes']} lanes, {r.config['workers']} worker(s) per rank")
    return draw(world.history, path, seed=seed, witnesses=r.witnesses, title=title)

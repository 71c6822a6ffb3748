"""Writes notebooks/eviction_timing.ipynb and notebooks/flush_tradeoffs.ipynb (without outputs).

The notebooks are generated so that their code stays reviewable as plain Python; every number
they show comes from :mod:`sim.analysis`.  Regenerate, then execute (stores outputs)::

    python3 notebooks/build_notebooks.py
    ZEPHON_NB_SIZE=full python3 -m jupyter nbconvert --to notebook --execute --inplace notebooks/*.ipynb
      (or: python3 notebooks/build_notebooks.py --execute full)

The size parameter ``ZEPHON_NB_SIZE`` is ``ci`` (default: minutes, what CI runs) or ``full``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = Path(__file__).resolve().parent

SETUP = '''\
import math
import os
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

root = Path.cwd()
while not (root / "sim" / "analysis.py").exists() and root != root.parent:
    root = root.parent
sys.path.insert(0, str(root))

import matplotlib.pyplot as plt  # noqa: E402

from sim import analysis as an  # noqa: E402

plt.rcParams.update({"figure.dpi": 60, "figure.figsize": (9, 3.6), "savefig.dpi": 60})
SIZE = os.environ.get("ZEPHON_NB_SIZE", "ci")
assert SIZE in ("ci", "full"), f"ZEPHON_NB_SIZE must be ci or full, not {SIZE!r}"

def progress(label, every=0.1):
    """A progress callback: one line per 10% (long cells)."""
    marks = {}
    def cb(i, n):
        pct = int(10 * i / n)
        if pct not in marks and (i == n or i / n >= pct / 10):
            marks[pct] = True
            print(f"{label}: {i:,}/{n:,}", flush=True)
    return cb

print("size:", SIZE)'''

SETUP_FLUSH = SETUP.replace("import math\n", "").replace("import statistics\n", "").replace(
    "from dataclasses import replace\n", "")


def eviction_timing() -> nbformat.NotebookNode:
    cells = [
        new_markdown_cell(
            "# Eviction timing: inflight sets, checkpoint size, replay and drift between lanes\n\n"
            "Pipeline: synthetic corpus (web 0.6 / code 0.3 / books 0.1, `exhausted_policy=\"repeat\"`) -> "
            "crc32 token ids -> first-fit `pack_sequences(256, num_bins=4)` -> `shuffle(64)` -> "
            "`ensure_mixture()` -> `batch(4)`, 2 lanes, `chunk_size=32`, `flush_every_k_chunks=2` "
            "(`sim.analysis.AnalysisConfig()`).  Every number comes from `sim.analysis`, which drives the "
            "real zephon_ref engine step by step and only reads its state; a *step* is one delivered batch.\n\n"
            "Size: `ZEPHON_NB_SIZE=ci` (default, what CI executes) or `full` (the stored outputs; >= 100,000 "
            "steps in the long runs)."),
        new_code_cell(SETUP),
        new_code_cell(
            "CFG = an.AnalysisConfig()\n"
            "N = {\"ci\": dict(trace=300, long=3000, ckpt_every=150, drift=4096, drift_every=64, seeds=(0, 1)),\n"
            "     \"full\": dict(trace=600, long=100_000, ckpt_every=2000, drift=131_072, drift_every=1024,\n"
            "                  seeds=(0, 1, 2))}[SIZE]\n"
            "N"),
        new_markdown_cell("## 1. The inflight set per lane over time\n\n"
                          "Chunks entering (admitted) and leaving (evicted), epoch boundaries and cursor-pinning "
                          "moments, for the epoch-evicting pipeline and for a monotone one (token ids + batch "
                          "only, watermark eviction)."),
        new_code_cell(
            "tr = an.trace(CFG, N['trace'])\n"
            "mono = an.trace(replace(CFG, plan='monotone'), N['trace'])\n"
            "fig, axes = plt.subplots(1, 2, sharey=True, figsize=(11, 3.6))\n"
            "for lane in tr.lanes:\n"
            "    steps = [s.step for s in tr.samples if s.lane == lane]\n"
            "    axes[0].step(steps, tr.lane_series(lane, 'inflight'), where='post', label=f'lane {lane}')\n"
            "    pins = [s.step for s in tr.samples if s.lane == lane and s.pinned]\n"
            "    axes[0].plot(pins, [0.3 + lane * 0.2] * len(pins), '|', ms=12, label=f'lane {lane} cursor pinned')\n"
            "for lane in mono.lanes:\n"
            "    steps = [s.step for s in mono.samples if s.lane == lane]\n"
            "    axes[1].step(steps, mono.lane_series(lane, 'inflight'), where='post', label=f'lane {lane}')\n"
            "axes[0].set_title(f'epoch eviction (K={CFG.k})')\n"
            "axes[1].set_title('monotone eviction (watermark)')\n"
            "for ax in axes:\n"
            "    ax.set_xlabel('step')\n"
            "    ax.legend(fontsize=7)\n"
            "axes[0].set_ylabel('inflight chunks')\n"
            "plt.show()\n"
            "groups = {}\n"
            "for s, lane, c in tr.left:\n"
            "    groups.setdefault((s, lane), []).append(c)\n"
            "sizes = sorted({len(v) for v in groups.values()})\n"
            "pinned = sum(s.pinned for s in tr.samples)\n"
            "print(f'chunks entered {len(tr.entered)}, left {len(tr.left)}; eviction events {len(groups)}, '\n"
            "      f'chunks per event {sizes}; lane-steps with the cursor pinning an epoch: {pinned}')\n"
            "peak = {lane: max(tr.lane_series(lane, 'inflight')) for lane in tr.lanes}\n"
            "mono_peak = {lane: max(mono.lane_series(lane, 'inflight')) for lane in mono.lanes}\n"
            "print('epoch plan: max inflight per lane', peak, '| monotone plan:', mono_peak)\n"
            "assert all(n % CFG.k == 0 for n in sizes)  # epochs leave whole\n"
            "assert max(mono_peak.values()) <= 3"),
        new_markdown_cell(
            "**Conclusion.** With epoch eviction chunks leave only in whole epochs (every eviction "
            "event removes a multiple of K chunks: here always exactly K), so a lane's inflight set is "
            "a staircase that never drops below one epoch.  Cursor pinning did not occur in these "
            "steps: it needs the cursor's epoch to be complete at a delivery, and the first record "
            "after the flush releases it.  The monotone plan's watermark keeps at most 3 chunks per "
            "lane at any moment.  The epoch plan's peaks are set by how far a lane's output runs ahead "
            "of its round-robin turn (section 3), not by K alone."),
        new_markdown_cell("## 2. Checkpoint size and restore cost against steps\n\n"
                          "A checkpoint every `ckpt_every` steps: encoded bytes and the replay it implies "
                          "(records of the inflight chunks: *predicted*).  At a handful of steps the state is "
                          "restored into a fresh pipeline and the records that actually re-enter the pipeline "
                          "before each lane reaches a new chunk are counted (*measured*); the next 8 batches must "
                          "equal the uninterrupted run's."),
        new_code_cell(
            "keep = sorted({N['long'] // 8, N['long'] // 4, N['long'] // 2, 3 * N['long'] // 4, N['long']})\n"
            "t0 = time.perf_counter()\n"
            "long = an.trace(CFG, N['long'], checkpoint_every=N['ckpt_every'], keep_states=keep,\n"
            "                sample_every=max(1, N['long'] // 2000), progress=progress('trace'))\n"
            "follow = dict(long.followups)\n"
            "restores = [an.measure_restore(CFG, st, s, want=follow[s]) for s, st in long.states]\n"
            "print(f'{time.perf_counter() - t0:.0f} s')\n"
            "fig, ax = plt.subplots(1, 2, figsize=(11, 3.6))\n"
            "cs = [c.step for c in long.checkpoints]\n"
            "ax[0].plot(cs, [c.nbytes for c in long.checkpoints], '.-')\n"
            "ax[0].set_ylabel('checkpoint bytes')\n"
            "ax[1].plot(cs, [c.records for c in long.checkpoints], '.-', label='predicted replay (records)')\n"
            "ax[1].plot([r.step for r in restores], [r.replayed_records for r in restores], 'rx', ms=10,\n"
            "           label='measured replay after restore')\n"
            "for a in ax:\n"
            "    a.set_xlabel('step')\n"
            "ax[1].legend(fontsize=7)\n"
            "plt.show()\n"
            "print('step      predicted chunks/records   measured chunks/records   next 8 equal   restore s')\n"
            "for r in restores:\n"
            "    print(f'{r.step:>8,}  {r.predicted_chunks:>8} / {r.predicted_records:<8}      '\n"
            "          f'{r.replayed_chunks:>8} / {r.replayed_records:<8}      {r.next_items_equal!s:>5}   {r.seconds:.3f}')\n"
            "assert all((r.predicted_chunks, r.predicted_records) == (r.replayed_chunks, r.replayed_records)\n"
            "           and r.next_items_equal for r in restores)\n"
            "b = [c.nbytes for c in long.checkpoints]\n"
            "half = len(b) // 2\n"
            "print(f'checkpoint bytes: first half mean {sum(b[:half]) / half:,.0f}, second half mean '\n"
            "      f'{sum(b[half:]) / (len(b) - half):,.0f}, max {max(b):,}')"),
        new_markdown_cell(
            "**Conclusion.** Predicted replay equals measured replay at every restored step (chunks and "
            "records, asserted above and in `tests/notebooks/test_analysis.py`), and every restore delivers "
            "exactly the batches the uninterrupted run delivered.  Checkpoint bytes and replay are "
            "proportional to the inflight records, so they follow the inflight set of the lane that is "
            "ahead: they are not flat in steps -- compare the two halves printed above (the stored full-size "
            "run) and section 3."),
        new_markdown_cell("## 3. Inflight drift between lanes over a long run\n\n"
                          "Default (zephon-conformant) admission: round robin over the lanes, one sample each.  "
                          "The option: back-pressure, admitting only for the lane whose turn delivery is waiting "
                          "on (`Engine.admit(lane=...)`, off by default).  Several seeds; the largest inflight "
                          "set of any lane so far, against steps, on log-log axes with sqrt and linear guides."),
        new_code_cell(
            "drift = {}\n"
            "walls = {}\n"
            "for seed in N['seeds']:\n"
            "    for bp in (False, True):\n"
            "        t0 = time.perf_counter()\n"
            "        drift[(seed, bp)] = an.drift_run(replace(CFG, seed=seed, backpressure=bp), N['drift'],\n"
            "                                         sample_every=N['drift_every'],\n"
            "                                         progress=progress(f'seed {seed} backpressure={bp}', 0.25))\n"
            "        walls[(seed, bp)] = time.perf_counter() - t0\n"
            "fig, ax = plt.subplots(1, 2, figsize=(11, 3.8))\n"
            "for (seed, bp), pts in drift.items():\n"
            "    st = [p.step for p in pts]\n"
            "    ax[0].plot(st, [max(p.inflight) - min(p.inflight) for p in pts], lw=0.8,\n"
            "               color='tab:red' if bp else 'tab:blue', alpha=0.7,\n"
            "               label=('back-pressure' if bp else 'default') if seed == N['seeds'][0] else None)\n"
            "    ax[1].loglog(st, [p.max_inflight_so_far for p in pts], color='tab:red' if bp else 'tab:blue', lw=0.8)\n"
            "x = [p.step for p in drift[(N['seeds'][0], False)]]\n"

            "ax[1].loglog(x, [4 * math.sqrt(s / x[0]) for s in x], 'k--', lw=0.7, label='~ sqrt(steps)')\n"
            "ax[1].loglog(x, [4 * s / x[0] for s in x], 'k:', lw=0.7, label='~ steps')\n"
            "ax[0].set_title('inflight spread between lanes (chunks)')\n"
            "ax[1].set_title('largest inflight set of any lane so far')\n"
            "for a in ax:\n"
            "    a.set_xlabel('step')\n"
            "    a.legend(fontsize=7)\n"
            "plt.show()\n"
            "\n"
            "\n"
            "def at(pts, s):\n"
            "    return max(p.max_inflight_so_far for p in pts if p.step <= s)\n"
            "\n"
            "\n"
            "marks = [m for m in (1024, 4096, 16384, 65536, 131072) if m <= N['drift']]\n"
            "print('largest inflight chunks of one lane so far, per seed (default | back-pressure)')\n"
            "print('step    ' + '  '.join(f'{m:>8,}' for m in marks))\n"
            "for seed in N['seeds']:\n"
            "    for bp in (False, True):\n"
            "        print(f'seed {seed} {\"bp\" if bp else \"  \"} ' + '  '.join(f'{at(drift[(seed, bp)], m):>8}' for m in marks))\n"
            "for bp in (False, True):\n"
            "    means = [statistics.mean(at(drift[(s, bp)], m) for s in N['seeds']) for m in marks]\n"
            "    i = len(marks) // 2 if len(marks) >= 3 else 0\n"
            "    slope = (math.log(means[-1]) - math.log(means[i])) / (math.log(marks[-1]) - math.log(marks[i]))\n"
            "    print(f\"{'back-pressure' if bp else 'default      '}: mean over seeds {[round(v, 1) for v in means]}, \"\n"
            "          f'log-log slope over the second half {slope:.2f}, wall {statistics.mean(walls[(s, bp)] for s in N[\"seeds\"]):.1f} s/run, '\n"
            "          f'largest spread of admitted chunks between lanes {max(drift[(s, bp)][-1].max_spread_so_far for s in N[\"seeds\"])}')\n"
            "bp_max = max(at(drift[(s, True)], N['drift']) for s in N['seeds'])\n"
            "df_max = max(at(drift[(s, False)], N['drift']) for s in N['seeds'])\n"
            "print(f'back-pressure bound: max inflight {bp_max} chunks (K={CFG.k}); default: {df_max}')\n"
            "assert bp_max <= 2 * CFG.k < df_max"),
        new_markdown_cell("DRIFT_CONCLUSION"),
        new_markdown_cell("## 4. Where a crash lands inside an epoch\n\n"
                          "For every checkpoint of section 2: the replay it implies against the phase of lane 0's "
                          "delivery inside its flush epoch (0 = just after a flush, 1 = just before the next)."),
        new_code_cell(
            "fig, ax = plt.subplots(figsize=(6, 3.4))\n"
            "ph = [c.phase[0] for c in long.checkpoints]\n"
            "ax.scatter(ph, [c.records for c in long.checkpoints], s=10)\n"
            "ax.set_xlabel('phase of lane 0 inside its epoch')\n"
            "ax.set_ylabel('records replayed (all lanes)')\n"
            "plt.show()\n"
            "lo = [c.records for c in long.checkpoints if c.phase[0] < 0.5]\n"
            "hi = [c.records for c in long.checkpoints if c.phase[0] >= 0.5]\n"
            "print(f'checkpoints in the first half of an epoch: {len(lo)}, mean replay {sum(lo) / max(1, len(lo)):,.0f} records; '\n"
            "      f'second half: {len(hi)}, mean replay {sum(hi) / max(1, len(hi)):,.0f} records')\n"
            "print(f'smallest replay {min(c.records for c in long.checkpoints):,} records = one epoch per lane '\n"
            "      f'({CFG.k} chunks x {CFG.chunk_size} x {CFG.lanes} lanes = {CFG.k * CFG.chunk_size * CFG.lanes})')\n"
            "assert min(c.records for c in long.checkpoints) >= CFG.k * CFG.chunk_size * CFG.lanes // 2"),
        new_markdown_cell(
            "**Conclusion.** Where a crash lands inside an epoch matters little: checkpoints in the "
            "second half of an epoch replay only slightly more on average than those in the first half "
            "(printed above).  The floor is two epochs per lane (the open one and the one being "
            "drained: the smallest replay, 256 records, is twice the 128-record 'one epoch per lane' "
            "unit printed above).  What moves the replay is the lane that is ahead of its round-robin "
            "turn (section 3), whose whole backlog of epochs stays inflight.  Choose K with "
            "`flush_tradeoffs.ipynb`."),
        new_markdown_cell("RECOMMEND_EVICTION"),
    ]
    return new_notebook(cells=cells, metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                              "language": "python"}})


def flush_tradeoffs() -> nbformat.NotebookNode:
    cells = [
        new_markdown_cell(
            "# Flush trade-offs: `flush_every_k_chunks` and `chunk_size`\n\n"
            "Same pipeline as `eviction_timing.ipynb` (pack + shuffle + ensure_mixture + batch, 2 lanes, "
            "repeat policy), same seed in every arm.  Swept: K in 0 (refused on a reordering plan), 1, 2, 4, "
            "8, 16, 32, 64 and two chunk sizes.  Measured per arm by `sim.analysis.flush_arm`: packer padding "
            "fraction, shuffle quality (mean displacement and Spearman rank correlation of delivery order "
            "against source order, per lane), mixture deviation from the target per window of 64 records "
            "(total-variation distance of token shares), replay (records of the inflight chunks at a "
            "checkpoint every 8 steps), peak inflight and checkpoint bytes.\n\n"
            "Size: `ZEPHON_NB_SIZE=ci` (default, CI) or `full` (stored outputs)."),
        new_code_cell(SETUP_FLUSH),
        new_code_cell(
            "CFG = an.AnalysisConfig()\n"
            "KS = [0, 1, 2, 4, 8, 16, 32, 64]\n"
            "N = {\"ci\": dict(items=150, chunk_sizes=(16, 32)), \"full\": dict(items=4000, chunk_sizes=(16, 64))}[SIZE]\n"
            "t0 = time.perf_counter()\n"
            "arms = an.flush_sweep(CFG, KS, N['chunk_sizes'], N['items'], progress=lambda s: print(s, flush=True))\n"
            "print(f'{time.perf_counter() - t0:.0f} s')\n"
            "refused = [a for a in arms if isinstance(a, str)]\n"
            "res = [a for a in arms if not isinstance(a, str)]\n"
            "for r in refused:\n"
            "    print(r)\n"
            "print(f\"{'K':>3} {'chunk':>5} {'padding':>8} {'displ.':>7} {'spearman':>8} {'mix dev':>8} \"\n"
            "      f\"{'replay mean':>11} {'replay max':>10} {'peak chunks':>11} {'peak recs':>9} {'ckpt B max':>10}\")\n"
            "for r in res:\n"
            "    print(f'{r.k:>3} {r.chunk_size:>5} {r.padding:>8.4f} {r.displacement:>7.2f} {r.spearman:>8.4f} '\n"
            "          f'{r.mixture_dev:>8.4f} {r.replay_mean:>11,.0f} {r.replay_max:>10,} {r.peak_inflight:>11} '\n"
            "          f'{r.peak_inflight_records:>9,} {r.ckpt_bytes_max:>10,}')\n"
            "assert len(refused) == len(N['chunk_sizes']) and all('k=0' in r for r in refused)"),
        new_code_cell(
            "def series(cs, field):\n"
            "    rows = [r for r in res if r.chunk_size == cs]\n"
            "    return [r.k for r in rows], [getattr(r, field) for r in rows]\n"
            "fields = [('padding', 'padding fraction'), ('displacement', 'mean displacement (records)'),\n"
            "          ('spearman', 'rank correlation vs source order'), ('mixture_dev', 'mixture deviation (TV, per window)'),\n"
            "          ('replay_max', 'replay at checkpoint, max (records)'), ('peak_inflight_records', 'peak inflight (records, one lane)'),\n"
            "          ('ckpt_bytes_max', 'checkpoint bytes, max')]\n"
            "fig, axes = plt.subplots(2, 4, figsize=(14, 6))\n"
            "for ax, (f, title) in zip(axes.flat, fields, strict=False):\n"
            "    for cs in N['chunk_sizes']:\n"
            "        ks, ys = series(cs, f)\n"
            "        ax.plot(ks, ys, 'o-', label=f'chunk_size {cs}')\n"
            "    ax.set_xscale('log', base=2)\n"
            "    ax.set_title(title, fontsize=9)\n"
            "    ax.set_xlabel('flush_every_k_chunks')\n"
            "axes.flat[0].legend(fontsize=7)\n"
            "axes.flat[-1].axis('off')\n"
            "plt.tight_layout()\n"
            "plt.show()"),
        new_code_cell(
            "for cs in N['chunk_sizes']:\n"
            "    rows = {r.k: r for r in res if r.chunk_size == cs}\n"
            "    a, b = rows[1], rows[64]\n"
            "    print(f'chunk_size {cs}: K 1 -> 64: padding {a.padding:.4f} -> {b.padding:.4f}, displacement '\n"
            "          f'{a.displacement:.1f} -> {b.displacement:.1f}, spearman {a.spearman:.4f} -> {b.spearman:.4f}, '\n"
            "          f'mixture dev {a.mixture_dev:.4f} -> {b.mixture_dev:.4f}, replay max {a.replay_max:,} -> {b.replay_max:,}, '\n"
            "          f'peak inflight {a.peak_inflight_records:,} -> {b.peak_inflight_records:,} records, '\n"
            "          f'ckpt {a.ckpt_bytes_max:,} -> {b.ckpt_bytes_max:,} B')\n"
            "    assert b.padding < a.padding and b.displacement > a.displacement\n"
            "    assert b.replay_max > a.replay_max and b.peak_inflight_records > a.peak_inflight_records"),
        new_markdown_cell("FLUSH_CONCLUSION"),
        new_markdown_cell("## Recommended settings for three workloads\n\n"
                          "Each recommendation is computed from the sweep above by a stated rule (so it moves "
                          "with the numbers):\n\n"
                          "* **A. Preemptible pretraining fleet** (restarts several times a day; the replay on "
                          "restart is the cost): the largest K whose worst replay is within 4x of K=1's, at "
                          "the larger chunk size;\n"
                          "* **B. Long stable run, quality-sensitive (curated SFT mixture)**: the knee: the "
                          "smallest K that gets 80% of the achievable gain (K=1 to the best arm) in padding "
                          "and in shuffle displacement, at the larger chunk size;\n"
                          "* **C. Many lanes on a memory-tight host** (64+ lanes per process, inflight memory "
                          "and checkpoint bytes multiply by lanes): the smallest chunk size, and the largest K "
                          "whose peak inflight stays within 2x of K=1's."),
        new_code_cell(
            "big, small = max(N['chunk_sizes']), min(N['chunk_sizes'])\n"
            "\n"
            "\n"
            "def arm(cs, k):\n"
            "    return next(r for r in res if r.chunk_size == cs and r.k == k)\n"
            "\n"
            "\n"
            "ks = [k for k in KS if k > 0]\n"
            "A = max(k for k in ks if arm(big, k).replay_max <= 4 * arm(big, 1).replay_max)\n"
            "def gain(field, k, better):\n"
            "    vals = [getattr(arm(big, j), field) for j in ks]\n"
            "    best = better(vals)\n"
            "    base = getattr(arm(big, 1), field)\n"
            "    return 1.0 if best == base else (getattr(arm(big, k), field) - base) / (best - base)\n"
            "\n"
            "\n"
            "knee = [k for k in ks if gain('padding', k, min) >= 0.8 and gain('displacement', k, max) >= 0.8]\n"
            "B = min(knee) if knee else max(ks, key=lambda k: gain('padding', k, min) + gain('displacement', k, max))\n"
            "C = max(k for k in ks if arm(small, k).peak_inflight_records <= 2 * arm(small, 1).peak_inflight_records)\n"
            "for name, cs, k in (('A preemptible pretraining', big, A), ('B long quality-sensitive run', big, B),\n"
            "                    ('C many lanes, memory-tight', small, C)):\n"
            "    r = arm(cs, k)\n"
            "    print(f'{name:30s}: chunk_size={cs}, flush_every_k_chunks={k}  (padding {r.padding:.4f}, '\n"
            "          f'displacement {r.displacement:.1f}, mixture dev {r.mixture_dev:.4f}, replay max {r.replay_max:,} '\n"
            "          f'records, peak inflight {r.peak_inflight_records:,} records, ckpt max {r.ckpt_bytes_max:,} B)')"),
        new_markdown_cell("RECOMMEND_FLUSH"),
    ]
    return new_notebook(cells=cells, metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                              "language": "python"}})


TEXT: dict[str, str] = {}
TEXT_FILE = HERE / "conclusions.md"


def _texts() -> dict[str, str]:
    """Conclusions written after reading the full-size outputs, kept in conclusions.md by key."""
    out: dict[str, str] = {}
    if TEXT_FILE.exists():
        key = None
        for line in TEXT_FILE.read_text().splitlines():
            if line.startswith("## ") and line[3:].strip().isupper():
                key = line[3:].strip()
                out[key] = ""
            elif key is not None:
                out[key] += line + "\n"
    return {k: v.strip() for k, v in out.items()}


def _fill(nb: nbformat.NotebookNode, texts: dict[str, str]) -> None:
    """Put the written conclusions into their cells (keyed by metadata, so refilling works)."""
    for cell in nb.cells:
        if cell.cell_type != "markdown":
            continue
        key = cell.metadata.get("conclusion")
        if key is None and cell.source.strip().isupper() and "_" in cell.source:
            key = cell.metadata["conclusion"] = cell.source.strip()
        if key is not None and key in texts:
            cell.source = texts[key]


def build() -> list[Path]:
    texts = _texts()
    paths = []
    for name, nb in (("eviction_timing", eviction_timing()), ("flush_tradeoffs", flush_tradeoffs())):
        _fill(nb, texts)
        path = HERE / f"{name}.ipynb"
        nbformat.write(nb, path)
        paths.append(path)
    return paths


def refill() -> None:
    """Refill the conclusions of the committed (executed) notebooks, keeping code and outputs."""
    texts = _texts()
    for name in ("eviction_timing", "flush_tradeoffs"):
        path = HERE / f"{name}.ipynb"
        nb = nbformat.read(path, as_version=4)
        _fill(nb, texts)
        nbformat.write(nb, path)


def execute(paths: list[Path], size: str, timeout: int = 3600) -> None:
    import os

    from nbclient import NotebookClient

    os.environ["ZEPHON_NB_SIZE"] = size
    for path in paths:
        nb = nbformat.read(path, as_version=4)
        NotebookClient(nb, timeout=timeout, kernel_name="python3",
                       resources={"metadata": {"path": str(HERE)}}).execute()
        nbformat.write(nb, path)
        print(f"executed {path.name} at size {size}")


if __name__ == "__main__":
    if sys.argv[1:] == ["--refill"]:
        refill()
        raise SystemExit(0)
    built = build()
    if len(sys.argv) > 2 and sys.argv[1] == "--execute":
        execute(built, sys.argv[2])

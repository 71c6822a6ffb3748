"""Writes notebooks/eviction_timing.ipynb and notebooks/flush_tradeoffs.ipynb, executes them, and
generates notebooks/conclusions.md from their outputs.

The notebooks are generated so that their code stays reviewable as plain Python; every number
they show comes from :mod:`sim.analysis`, and every conclusion is *printed by the notebook* from
the numbers it just measured (a code cell that prints a ``## KEY`` block), so a conclusion cannot
say more than its output shows.  ``conclusions.md`` is those printed blocks, extracted from the
executed notebooks (:func:`conclusions_from`); tests/notebooks checks that it matches the
committed outputs.

    python3 notebooks/build_notebooks.py                     # write both notebooks (no outputs)
    python3 notebooks/build_notebooks.py --execute full      # write, execute at full size, store
                                                             # outputs, regenerate conclusions.md
    python3 notebooks/build_notebooks.py --conclusions       # regenerate conclusions.md only

``ZEPHON_NB_SIZE`` is ``ci`` (default: small, what CI executes: about a minute) or ``full``
(opt-in: tens of minutes on 2 cores; what the committed outputs and conclusions.md show).
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = Path(__file__).resolve().parent
NAMES = ("eviction_timing", "flush_tradeoffs")
MARK = "## "  # a printed conclusion block starts with "## KEY" (KEY in capitals) and ends at "## END"

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
from sim.invariants import inflight_bound  # noqa: E402

# readable as printed: 100 dpi, labelled axes with units, legends outside the plotting area
plt.rcParams.update({"figure.dpi": 100, "savefig.dpi": 100, "figure.figsize": (10, 4), "font.size": 9,
                     "axes.grid": True, "grid.alpha": 0.3})
SIZE = os.environ.get("ZEPHON_NB_SIZE", "ci")
assert SIZE in ("ci", "full"), f"ZEPHON_NB_SIZE must be ci or full, not {SIZE!r}"
POLICIES = ("demand", "round_robin")
COLOR = {"demand": "tab:green", "round_robin": "tab:red"}


def legend_out(ax):
    """The legend to the right of the axes, off the data."""
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, borderaxespad=0.0)


def progress(label):
    """A progress callback: one line per 25% (long cells)."""
    marks = set()
    def cb(i, n):
        q = 4 * i // n
        if q not in marks:
            marks.add(q)
            print(f"{label}: {i:,}/{n:,}", flush=True)
    return cb


def conclusion(key, lines):
    """Print a conclusion block; build_notebooks.py copies these blocks into conclusions.md."""
    print(f"## {key}\\n")
    print("\\n".join(lines))
    print("\\n## END")


print("size:", SIZE)'''


SETUP_EVICTION = SETUP.replace("import math\n", "").replace("import time\n", "")
SETUP_FLUSH = SETUP.replace("import math\n", "").replace(
    "from sim.invariants import inflight_bound  # noqa: E402\n", "")


def code(src: str) -> nbformat.NotebookNode:
    return new_code_cell(src.strip("\n"))


def eviction_timing() -> nbformat.NotebookNode:
    cells = [
        new_markdown_cell(
            "# Eviction timing: inflight sets, checkpoint size and replay under both feeding policies\n\n"
            "Pipeline (`sim.analysis.AnalysisConfig()`): synthetic corpus (web 0.6 / code 0.3 / books 0.1, "
            '`exhausted_policy="repeat"`) -> crc32 token ids -> first-fit `pack_sequences(256, num_bins=4)` '
            "-> `shuffle(64)` -> `ensure_mixture()` -> `batch(4)`, 2 lanes, `chunk_size=32`, "
            "`flush_every_k_chunks=2`, inline runner.  Two feeding policies (an execution setting, "
            "`Pipeline.options(feeding=...)`): **demand** (zephon_ref's default: a lane is fed only when the "
            "tail multiplexer waits on it) and **round_robin** (zephon 0.2.0's: one sample per lane in "
            "turn).  Both deliver the same stream.  Every number comes from `sim.analysis`, which drives the "
            "real engine and only reads its state; a *step* is one delivered batch.  The conclusions are "
            "printed by the code cells from the numbers above them (and copied into `conclusions.md`).\n\n"
            "Size: `ZEPHON_NB_SIZE=ci` (default, what CI executes) or `full` (the stored outputs)."
        ),
        code(SETUP_EVICTION),
        code("""
CFG = an.AnalysisConfig()
BOUND = inflight_bound(k=CFG.k, monotone=False, depth_samples=0, min_chunk=CFG.chunk_size)
N = {"ci": dict(trace=200, long=600, ckpt_every=100, drift=1024, drift_every=64, seeds=tuple(range(10))),
     "full": dict(trace=600, long=10_000, ckpt_every=250, drift=16_384, drift_every=256,
                  seeds=tuple(range(10)))}[SIZE]
print(N, "| inflight bound under demand feeding (sim.invariants.inflight_bound):", BOUND, "chunks")"""),
        new_markdown_cell(
            "## 1. The inflight set per lane over time\n\n"
            "Chunks admitted and not yet evicted, per lane, after every delivered batch (seed 0)."
        ),
        code("""
tr = {f: an.trace(replace(CFG, feeding=f), N["trace"]) for f in POLICIES}
fig, axes = plt.subplots(1, 2, sharey=True)
for ax, f in zip(axes, POLICIES, strict=True):
    for lane in tr[f].lanes:
        steps = [s.step for s in tr[f].samples if s.lane == lane]
        ax.step(steps, tr[f].lane_series(lane, "inflight"), where="post", label=f"lane {lane}")
    ax.axhline(BOUND, color="k", ls="--", lw=0.8, label="bound (demand)")
    ax.set_title(f"feeding={f}")
    ax.set_xlabel("step (delivered batches)")
axes[0].set_ylabel("inflight chunks (per lane)")
legend_out(axes[1])
plt.tight_layout()
plt.show()
peak1 = {f: max(max(tr[f].lane_series(lane, "inflight")) for lane in tr[f].lanes) for f in POLICIES}
sizes = {f: sorted({len([c for s2, l2, c in tr[f].left if (s2, l2) == (s, lane)])
                    for s, lane, _ in tr[f].left})
         for f in POLICIES}
for f in POLICIES:
    print(f"{f:12s}: largest inflight set of a lane in {N['trace']:,} steps: {peak1[f]} chunks; "
          f"chunks per eviction event {sizes[f]}")
assert peak1["demand"] <= BOUND
assert all(n % CFG.k == 0 for f in POLICIES for n in sizes[f])  # epochs leave whole"""),
        new_markdown_cell(
            "## 2. Checkpoint size and restore cost against steps\n\n"
            "A checkpoint every `ckpt_every` steps: encoded bytes and the replay it implies (records "
            "of the inflight chunks: *predicted*).  At three steps the state is restored into a fresh "
            "pipeline **of the other policy**, the records that re-enter the pipeline before each lane "
            "reaches a new chunk are counted (*measured*), and the next 8 batches must equal the "
            "uninterrupted run's."
        ),
        code("""
keep = sorted({N["long"] // 4, N["long"] // 2, N["long"]})
other = {"demand": "round_robin", "round_robin": "demand"}
long, restores = {}, {}
for f in POLICIES:
    long[f] = an.trace(replace(CFG, feeding=f), N["long"], checkpoint_every=N["ckpt_every"], keep_states=keep,
                       sample_every=max(1, N["long"] // 2000), progress=progress(f"trace {f}"))
    follow = dict(long[f].followups)
    restores[f] = [an.measure_restore(replace(CFG, feeding=other[f]), st, s, want=follow[s])
                   for s, st in long[f].states]
fig, ax = plt.subplots(1, 2)
for f in POLICIES:
    cs = [c.step for c in long[f].checkpoints]
    ax[0].plot(cs, [c.nbytes for c in long[f].checkpoints], ".-", color=COLOR[f], label=f"{f}")
    ax[1].plot(cs, [c.records for c in long[f].checkpoints], ".-", color=COLOR[f], label=f"{f}: predicted")
    ax[1].plot([r.step for r in restores[f]], [r.replayed_records for r in restores[f]], "x", ms=10,
               color="k",
               label=f"{f}: measured after restore" if f == "demand" else "measured after restore")
ax[0].set_ylabel("checkpoint size (bytes)")
ax[1].set_ylabel("replay on restore (records)")
for a in ax:
    a.set_xlabel("step (delivered batches)")
legend_out(ax[1])
plt.tight_layout()
plt.show()
print("policy        step   predicted chunks/records   measured chunks/records   next 8 equal   restore s")
for f in POLICIES:
    for r in restores[f]:
        print(f"{f:12s} {r.step:>7,}  {r.predicted_chunks:>8} / {r.predicted_records:<8}      "
              f"{r.replayed_chunks:>8} / {r.replayed_records:<8}      "
              f"{r.next_items_equal!s:>5}   {r.seconds:.3f}")
assert all((r.predicted_chunks, r.predicted_records) == (r.replayed_chunks, r.replayed_records)
           and r.next_items_equal for f in POLICIES for r in restores[f])
first_last = {}
for f in POLICIES:
    b = [c.nbytes for c in long[f].checkpoints]
    rec = [c.records for c in long[f].checkpoints]
    first_last[f] = (b[0], b[-1], max(b), rec[0], rec[-1], max(rec))
    print(f"{f:12s}: checkpoint bytes first {b[0]:,}, last {b[-1]:,}, max {max(b):,}; "
          f"predicted replay first {rec[0]:,}, last {rec[-1]:,}, max {max(rec):,} records")"""),
        new_markdown_cell(
            "## 3. Inflight growth over a long run, 10 seeds\n\n"
            "Each seed is a fresh corpus and source seed.  After every `drift_every` steps: the "
            "inflight chunks of the lane holding the most at that step.  Lines: the median over "
            "seeds; bands: the range over seeds.  The slope is fitted (least squares on log-log "
            "axes) over every measured point of each seed."
        ),
        code("""
drift = {}
for f in POLICIES:
    for seed in N["seeds"]:
        drift[(f, seed)] = an.drift_run(replace(CFG, seed=seed, feeding=f), N["drift"],
                                        sample_every=N["drift_every"])
    print(f"{f}: {len(N['seeds'])} seeds x {N['drift']:,} steps done", flush=True)
fig, ax = plt.subplots(1, 2)
slopes, worst = {}, {}
for f in POLICIES:
    runs = [drift[(f, s)] for s in N["seeds"]]
    steps = [p.step for p in runs[0]]
    per_step = list(zip(*[[max(p.inflight) for p in pts] for pts in runs], strict=True))
    med = [statistics.median(v) for v in per_step]
    for a in ax:
        a.fill_between(steps, [min(v) for v in per_step], [max(v) for v in per_step], color=COLOR[f],
                       alpha=0.25, label=f"{f}: range over {len(runs)} seeds")
        a.plot(steps, med, color=COLOR[f], lw=1.2, label=f"{f}: median")
    slopes[f] = [an.loglog_slope([(p.step, max(p.inflight)) for p in pts]) for pts in runs]
    worst[f] = [max(p.max_inflight_so_far for p in pts) for pts in runs]
ax[1].set_xscale("log")
ax[1].set_yscale("log")
ax[0].set_title("linear axes")
ax[1].set_title("log-log axes")
for a in ax:
    a.set_xlabel("step (delivered batches)")
    a.set_ylabel("inflight chunks, fullest lane")
legend_out(ax[1])
plt.tight_layout()
plt.show()
print("seed  " + "  ".join(f"{f:>26s}" for f in POLICIES))
for i, seed in enumerate(N["seeds"]):
    print(f"{seed:>4}  " + "  ".join(f"worst {worst[f][i]:>4} chunks, slope {slopes[f][i]:>5.2f}"
                                     for f in POLICIES))
stats = {f: (statistics.mean(slopes[f]), statistics.pstdev(slopes[f]), min(worst[f]),
             statistics.median(worst[f]), max(worst[f])) for f in POLICIES}
for f in POLICIES:
    m, sd, lo, md, hi = stats[f]
    print(f"{f:12s}: log-log slope {m:.2f} +- {sd:.2f} (mean +- sd over seeds); worst inflight of any lane "
          f"over the run: min {lo}, median {md}, max {hi} chunks")
assert max(worst["demand"]) <= BOUND < min(worst["round_robin"])"""),
        new_markdown_cell(
            "## 4. Where a checkpoint lands inside an epoch\n\n"
            "For every checkpoint of section 2: the replay it implies against the phase of lane 0's "
            "delivery inside its flush epoch (0 = just after a flush, 1 = just before the next)."
        ),
        code("""
fig, ax = plt.subplots(figsize=(8, 3.6))
phase = {}
for f in POLICIES:
    ph = [c.phase[0] for c in long[f].checkpoints]
    rec = [c.records for c in long[f].checkpoints]
    ax.scatter(ph, rec, s=10, color=COLOR[f], label=f)
    lo = [r for p, r in zip(ph, rec, strict=True) if p < 0.5]
    hi = [r for p, r in zip(ph, rec, strict=True) if p >= 0.5]
    phase[f] = (statistics.mean(lo) if lo else 0.0, statistics.mean(hi) if hi else 0.0, len(lo), len(hi))
    print(f"{f:12s}: mean replay {phase[f][0]:,.0f} records in the first half of an epoch ({phase[f][2]} "
          f"checkpoints), {phase[f][1]:,.0f} in the second half ({phase[f][3]})")
ax.set_xlabel("phase of lane 0 inside its epoch (fraction of K chunks)")
ax.set_ylabel("replay (records, all lanes)")
legend_out(ax)
plt.tight_layout()
plt.show()"""),
        code("""
d_m, d_sd, d_lo, d_md, d_hi = stats["demand"]
r_m, r_sd, r_lo, r_md, r_hi = stats["round_robin"]
fb, fr = first_last["demand"], first_last["round_robin"]
conclusion("DRIFT_CONCLUSION", [
    f"**Inflight growth ({len(N['seeds'])} seeds x {N['drift']:,} steps, 2 lanes, K = {CFG.k}).**  Under "
    "round-robin feeding (zephon 0.2.0's) the fullest lane's inflight set grows with the run: log-log slope "
    f"{r_m:.2f} +- {r_sd:.2f} over seeds (fitted over every measured point), and the worst lane over the run "
    f"held {r_lo} to {r_hi} chunks (median {r_md}).  Under demand feeding (zephon_ref's default) it does not "
    f"grow: slope {d_m:.2f} +- {d_sd:.2f}, worst {d_lo} to {d_hi} chunks (median {d_md}), within the bound "
    f"of {BOUND} chunks (sim.invariants.inflight_bound, K + ceil(W / c) with W = 0 for the inline runner) in "
    "every seed.",
    "",
    "*Why round robin grows.*  Both lanes are fed the same number of samples, but a lane's packed output per "
    "sample depends on the documents it drew; the tail multiplexer takes one batch per lane in turn, so the "
    "lane that produced more waits with its surplus, and every chunk it came from stays inflight.  The "
    "surplus is a running sum of zero-mean differences: a random walk.  Demand feeding feeds a lane only "
    "when the tail waits on it, so no surplus builds up.",
    "",
    f"*Checkpoints and replay* (section 2, {N['long']:,} steps): under demand feeding the checkpoint was "
    f"{fb[0]:,} bytes at the first checkpoint and {fb[1]:,} at the last (max {fb[2]:,}), the predicted "
    f"replay {fb[3]:,} and {fb[4]:,} records (max {fb[5]:,}); under round robin {fr[0]:,} and {fr[1]:,} "
    f"bytes (max {fr[2]:,}), replay {fr[3]:,} and {fr[4]:,} records (max {fr[5]:,}).  Predicted replay "
    "equalled measured replay at every restore, and every checkpoint restored under the other policy "
    "delivered the uninterrupted run's next batches.",
    "",
    "*Phase* (section 4): under demand feeding a checkpoint in the first half of an epoch replays "
    f"{phase['demand'][0]:,.0f} records on average, in the second half {phase['demand'][1]:,.0f}; under "
    f"round robin {phase['round_robin'][0]:,.0f} and {phase['round_robin'][1]:,.0f}.",
])"""),
        code("""
conclusion("RECOMMEND_EVICTION", [
    f"**Recommendation.**  Keep the default, `feeding=\\"demand\\"`: it bounds each lane's inflight set at "
    f"{BOUND} chunks here (K = {CFG.k}) however long the run, which is what keeps checkpoints and restore "
    f"replay flat (seed 000's bounded recovery), and it delivers the same stream as round robin.  Choose "
    f"K with `flush_tradeoffs.ipynb`.  Use `feeding=\\"round_robin\\"` only to reproduce zephon 0.2.0's "
    f"inflight sets (its worst lane here reached {r_hi} chunks in {N['drift']:,} steps).",
])"""),
    ]
    return new_notebook(cells=cells, metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                              "language": "python"}})


def flush_tradeoffs() -> nbformat.NotebookNode:
    cells = [
        new_markdown_cell(
            "# Flush trade-offs: `flush_every_k_chunks` and `chunk_size`, over 5 seeds\n\n"
            "Same pipeline as `eviction_timing.ipynb` (pack + shuffle + ensure_mixture + batch, 2 lanes, "
            "repeat policy, demand feeding).  Swept: K in 0 (refused on a reordering plan), 1, 2, 4, 8, 16, "
            "32, 64 and two chunk sizes, each arm over 5 seeds (corpus and source seed).  Measured per arm "
            "by `sim.analysis.flush_arm`: packer padding fraction, shuffle quality (mean displacement and "
            "Spearman rank correlation of delivery order against source order, per lane), mixture deviation "
            "from the target per window of 64 records (total-variation distance of token shares), replay "
            "(records of the inflight chunks at a checkpoint every 8 steps), peak inflight and checkpoint "
            "bytes.  Points are means over seeds, error bars one standard deviation.  The conclusions are "
            "printed by the code cells from these numbers (and copied into `conclusions.md`).\n\n"
            "Size: `ZEPHON_NB_SIZE=ci` (default, CI) or `full` (stored outputs)."
        ),
        code(SETUP_FLUSH),
        code("""
CFG = an.AnalysisConfig()
KS = [0, 1, 2, 4, 8, 16, 32, 64]
SEEDS = tuple(range(5))
N = {"ci": dict(items=80, chunk_sizes=(16, 32)), "full": dict(items=2000, chunk_sizes=(16, 64))}[SIZE]
t0 = time.perf_counter()
arms = {}
refused = []
for seed in SEEDS:
    for a in an.flush_sweep(replace(CFG, seed=seed), KS, N["chunk_sizes"], N["items"]):
        if isinstance(a, str):
            refused.append(a)
        else:
            arms[(a.chunk_size, a.k, seed)] = a
    print(f"seed {seed} done", flush=True)
print(f"{time.perf_counter() - t0:.0f} s")
print(refused[0])
FIELDS = ["padding", "displacement", "spearman", "mixture_dev", "replay_max", "peak_inflight_records",
          "ckpt_bytes_max"]
ks = [k for k in KS if k > 0]


def mean_sd(cs, k, field):
    vals = [getattr(arms[(cs, k, s)], field) for s in SEEDS]
    return statistics.mean(vals), statistics.pstdev(vals)


print(f"{'K':>3} {'chunk':>5} " + " ".join(f"{f:>22s}" for f in FIELDS))
for cs in N["chunk_sizes"]:
    for k in ks:
        print(f"{k:>3} {cs:>5} " + " ".join(f"{mean_sd(cs, k, f)[0]:>12.4g} +-{mean_sd(cs, k, f)[1]:>8.2g}"
                                            for f in FIELDS))
assert len(refused) == len(N["chunk_sizes"]) * len(SEEDS) and all("k=0" in r for r in refused)"""),
        code("""
TITLES = {"padding": "padding (fraction of capacity)", "displacement": "mean displacement (records)",
          "spearman": "rank correlation vs source order", "mixture_dev": "mixture deviation (TV distance)",
          "replay_max": "worst replay (records)",
          "peak_inflight_records": "peak inflight (records, one lane)",
          "ckpt_bytes_max": "largest checkpoint (bytes)"}
fig, axes = plt.subplots(2, 4, figsize=(14, 6.5))
for ax, f in zip(axes.flat, FIELDS, strict=False):  # 7 fields, 8 panels
    for cs in N["chunk_sizes"]:
        ms = [mean_sd(cs, k, f) for k in ks]
        ax.errorbar(ks, [m for m, _ in ms], yerr=[sd for _, sd in ms], fmt="o-", capsize=3, ms=4,
                    label=f"chunk_size {cs}")
    ax.set_xscale("log", base=2)
    ax.set_title(TITLES[f], fontsize=9)
    ax.set_xlabel("flush_every_k_chunks (chunks)")
    ax.set_ylabel(TITLES[f].split(" (")[-1].rstrip(")") if "(" in TITLES[f] else "rho")
handles, labels = axes.flat[0].get_legend_handles_labels()
axes.flat[-1].axis("off")
axes.flat[-1].legend(handles, labels, loc="center", title=f"mean +- sd over {len(SEEDS)} seeds")
plt.tight_layout()
plt.show()"""),
        new_markdown_cell(
            "### Does a finding hold across seeds and run length?\n\n"
            'Each direction K = 1 -> 64 is counted per seed; the earlier finding "mixture deviation '
            'gets worse at K >= 32" is tested per seed at the full run length and at a quarter of '
            "it (larger chunk size)."
        ),
        code('''
def holds(cs, field, up):
    """Seeds in which field moved in the stated direction from K=1 to K=64."""
    return sum((getattr(arms[(cs, 64, s)], field) > getattr(arms[(cs, 1, s)], field)) == up for s in SEEDS)


direction = {"padding": False, "displacement": True, "replay_max": True, "peak_inflight_records": True,
             "ckpt_bytes_max": True}
for cs in N["chunk_sizes"]:
    for f, up in direction.items():
        print(f"chunk_size {cs}: {f} {'rises' if up else 'falls'} from K=1 to K=64 in {holds(cs, f, up)} of "
              f"{len(SEEDS)} seeds")
big, small = max(N["chunk_sizes"]), min(N["chunk_sizes"])
short = N["items"] // 4
mix = {}
for length in (N["items"], short):
    worse = 0
    for s in SEEDS:
        if length == N["items"]:
            dev = {k: arms[(big, k, s)].mixture_dev for k in (8, 16, 32, 64)}
        else:
            dev = {k: an.flush_arm(replace(CFG, seed=s, k=k, chunk_size=big), length).mixture_dev
                   for k in (8, 16, 32, 64)}
        worse += min(dev[32], dev[64]) > max(dev[8], dev[16])
    mix[length] = worse
    print(f"{length:,} items, chunk_size {big}: mixture deviation at K=32 and 64 above K=8 and 16 in "
          f"{worse} of {len(SEEDS)} seeds")'''),
        code("""
def gain(field, k, better):
    vals = [mean_sd(big, j, field)[0] for j in ks]
    best, base = better(vals), mean_sd(big, 1, field)[0]
    return 1.0 if best == base else (mean_sd(big, k, field)[0] - base) / (best - base)


A = max(k for k in ks if mean_sd(big, k, "replay_max")[0] <= 4 * mean_sd(big, 1, "replay_max")[0])
knee = [k for k in ks if gain("padding", k, min) >= 0.8 and gain("displacement", k, max) >= 0.8]
B = min(knee) if knee else max(ks, key=lambda k: gain("padding", k, min) + gain("displacement", k, max))
C = max(k for k in ks
        if mean_sd(small, k, "peak_inflight_records")[0] <= 2 * mean_sd(small, 1, "peak_inflight_records")[0])
rec = {}
for name, cs, k in (("A", big, A), ("B", big, B), ("C", small, C)):
    rec[name] = (cs, k, *(mean_sd(cs, k, f)[0] for f in FIELDS))
    print(f"{name}: chunk_size={cs}, flush_every_k_chunks={k}: " + ", ".join(
        f"{f} {mean_sd(cs, k, f)[0]:.4g}" for f in FIELDS))"""),
        code("""
def m(cs, k, f):
    return mean_sd(cs, k, f)[0]


lines = [f"**Flush trade-offs** ({N['items']:,} batches per arm, {len(SEEDS)} seeds, means over seeds).  "
         "A larger `flush_every_k_chunks` buys less padding and more local shuffling, and pays for it in "
         "replay, memory and checkpoint bytes:", ""]
for cs in N["chunk_sizes"]:
    lines.append(
        f"* chunk_size {cs}: padding {m(cs, 1, 'padding'):.3f} (K = 1) -> {m(cs, 8, 'padding'):.3f} (K = 8) "
        f"-> {m(cs, 64, 'padding'):.3f} (K = 64), falling in {holds(cs, 'padding', False)} of {len(SEEDS)} "
        f"seeds; displacement {m(cs, 1, 'displacement'):.1f} -> {m(cs, 64, 'displacement'):.1f} records "
        f"({holds(cs, 'displacement', True)} of {len(SEEDS)}); worst replay {m(cs, 1, 'replay_max'):,.0f} -> "
        f"{m(cs, 64, 'replay_max'):,.0f} records ({holds(cs, 'replay_max', True)} of {len(SEEDS)}); largest "
        f"checkpoint {m(cs, 1, 'ckpt_bytes_max'):,.0f} -> {m(cs, 64, 'ckpt_bytes_max'):,.0f} bytes; rank "
        f"correlation {m(cs, 1, 'spearman'):.4f} -> {m(cs, 64, 'spearman'):.4f}.")
held = all(v == len(SEEDS) for v in mix.values())
lines += ["", (f"*Mixture deviation at large K*: at chunk_size {big} the deviation at K = 32 and 64 exceeded "
               f"K = 8 and 16 in {mix[N['items']]} of {len(SEEDS)} seeds at {N['items']:,} batches and in "
               f"{mix[short]} of {len(SEEDS)} at {short:,}; "
               + ("the finding holds across these seeds and lengths." if held else
                  "the earlier finding \\"mixture deviation gets worse at K >= 32\\" does not hold across "
                  "seeds and run lengths and is withdrawn."))]
conclusion("FLUSH_CONCLUSION", lines)
names = {"A": "Preemptible pretraining fleet (the largest K whose worst replay is within 4x of K = 1's)",
         "B": "Long stable, quality-sensitive run (the smallest K reaching 80% of the padding and shuffling "
              "gain)",
         "C": "Many lanes on a memory-tight host (smallest chunk size; the largest K whose peak inflight is "
              "within 2x of K = 1's)"}
conclusion("RECOMMEND_FLUSH", [
    f"* **{names[n]}:** `chunk_size={rec[n][0]}, flush_every_k_chunks={rec[n][1]}`: padding {rec[n][2]:.3f}, "
    f"displacement {rec[n][3]:.1f}, worst replay {rec[n][6]:,.0f} records, peak inflight "
    f"{rec[n][7]:,.0f} records, largest checkpoint {rec[n][8]:,.0f} bytes (means over {len(SEEDS)} seeds)."
    for n in ("A", "B", "C")])"""),
    ]
    return new_notebook(cells=cells, metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                              "language": "python"}})


def build() -> list[Path]:
    paths = []
    for name, nb in zip(NAMES, (eviction_timing(), flush_tradeoffs()), strict=True):
        path = HERE / f"{name}.ipynb"
        nbformat.write(nb, path)
        paths.append(path)
    return paths


def execute(paths: list[Path], size: str, timeout: int = 7200) -> None:
    import os

    from nbclient import NotebookClient

    os.environ["ZEPHON_NB_SIZE"] = size
    for path in paths:
        nb = nbformat.read(path, as_version=4)
        NotebookClient(nb, timeout=timeout, kernel_name="python3",
                       resources={"metadata": {"path": str(HERE)}}).execute()
        nbformat.write(nb, path)
        print(f"executed {path.name} at size {size}")


def printed(nb: nbformat.NotebookNode) -> str:
    """Everything the notebook's code cells printed (stream outputs), in order."""
    return "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
                   if o.get("output_type") == "stream")


def conclusions_from(notebooks: dict[str, nbformat.NotebookNode]) -> str:
    """conclusions.md: the ``## KEY`` ... ``## END`` blocks the executed notebooks printed."""
    out = [
        "# Conclusions of the notebooks (generated)",
        "",
        "Generated by `python3 notebooks/build_notebooks.py --conclusions` from the printed outputs of the "
        "executed notebooks (each block below is printed by a notebook cell from the numbers it measured; do "
        "not edit by hand).",
        "",
    ]
    for name in NAMES:
        text = printed(notebooks[name])
        size = next(
            (line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("size:")), "?"
        )
        out += [f"<!-- {name}.ipynb, size {size} -->", ""]
        block: list[str] | None = None
        for line in text.splitlines():
            if line.startswith(MARK) and line[len(MARK):].strip() == "END":
                if block is not None:
                    out += [*block, ""]
                block = None
            elif line.startswith(MARK) and line[len(MARK):].strip().replace("_", "").isupper():
                block = [line]
            elif block is not None:
                block.append(line)
    return "\n".join(out).rstrip("\n") + "\n"


def write_conclusions() -> Path:
    nbs = {name: nbformat.read(HERE / f"{name}.ipynb", as_version=4) for name in NAMES}
    path = HERE / "conclusions.md"
    path.write_text(conclusions_from(nbs))
    return path


if __name__ == "__main__":
    if sys.argv[1:] == ["--conclusions"]:
        print(write_conclusions())
        raise SystemExit(0)
    built = build()
    if len(sys.argv) > 2 and sys.argv[1] == "--execute":
        execute(built, sys.argv[2])
        print(write_conclusions())

"""Where the whole-pipeline lane-scaling row loses time: the cyclic collector (issue 22).

A diagnostic, not a benchmark (no ``results()``): it runs the pipeline of ``bench_source.py``'s
``pipeline_lane_scaling`` row (tokenize -> pack_sequences(512, 8 bins) -> shuffle(1024) ->
batch(8), 80,000 documents, inline runner) at 1 and at 64 lanes, each run in a fresh process,
and prints per lane count:

* ``cpu``: process CPU seconds of the delivery loop and docs per CPU-second, with the collector
  on and (a second process) with ``gc.disable()`` in the child, so the ratio 64/1 shows with and
  without the collector's share;
* ``gc``: collections per generation and the CPU seconds spent in them (``gc.callbacks``);
* ``examined``: container objects the collections walked (the sizes of the generations each
  collection covered, summed; a third process, since counting them costs time itself), and
  the most tracked objects seen at once, sampled every 50 batches, with the types that make
  up the excess over the start and where the buffered records were at that moment (tail
  multiplexer, shuffle reservoirs, inflight chunks).

What it showed (2 shared cores, Python 3.11, 80,000 documents): the collector takes about 0.2 s
at 1 lane and 0.9-1.0 s at 64; the ratio is 0.66-0.74 with it and 0.85-0.91 without (the load
of the shared machine moves both).  At 64 lanes about 5,400 packed records (27,000 documents)
are buffered at once, each a floor of about 31 tracked objects under the public record types
(record, meta, tags, contributor tuple, payload dict and list, and per document a
ContributorRef, a SampleCursor, a payload dict and two token lists), plus the SampleIds of the
inflight chunks; the full collections walk 1.1 million objects at 64 lanes against 0.14
million at 1.  The buffering is the semantics: a lane's streaming shuffle releases nothing
until it holds 64 records, then one record per two pushed, and the rest at the flush every 8
chunks, and strict round robin holds each lane's output for 63 other turns.

With ``--faster-ops`` (the row's configuration; issue 31, 3 rounds, load 3-4 on 2 cores): the
collector takes 0.24 s at 1 lane and 1.10 s at 64 (gen2 7x 0.79 s walking 1.18 million objects);
the ratio is 0.71 with it and 0.91 without.  The interned ids keep the token lists cheap to walk,
not free: emitting the same records with tuples for the two token fields (a measurement only; the
records must hold lists) cut the 64-lane collector time from 0.93-1.08 s to 0.54-0.73 s; the rest
is the records, cursors and dicts.  Speeding up the common path lowers this ratio (the gap is the
64-lane collector time, added to both), so it is not the way to the goal.

Run: python3 bench/gc_lane_scaling.py [--docs N] [--lanes 1,64] [--rounds R] [--faster-ops]
"""

from __future__ import annotations

import argparse
import collections
import gc
import json
import os
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def build(lanes: int, ndocs: int, faster_ops: bool = False) -> Any:
    """The pipeline of bench_source.py's pipeline_lane_scaling row (the row runs it with
    ``faster_ops=True``; the default here is the plain semantics)."""
    from zephon_ref import Pipeline
    from zephon_ref.synthetic import synthetic_corpus
    from zephon_ref.work import StaticMixtureWorkSource

    web, code = int(ndocs * 0.6), int(ndocs * 0.3)
    corpus = synthetic_corpus(layout={"web": (web // 2, web - web // 2), "code": (code,),
                                      "books": (ndocs - web - code,)}, seed=0, mean_log_words=4.0)
    src = StaticMixtureWorkSource(list(corpus.datasets), {"web": 0.6, "code": 0.3, "books": 0.1},
                                  chunk_size=64, seed=0)
    return (Pipeline(src).tokenize(field="text", max_length=512, truncation=True)
            .pack_sequences(512, num_bins=8).shuffle(1024, seed=0).batch(8)
            .options(runner="inline", canonical_replicas=lanes, faster_ops=faster_ops))


def where(p: Any) -> dict[str, int]:
    """Records in the tail multiplexer and the shuffle reservoirs, and inflight chunks (internals)."""
    from zephon_ref.types import SampleBatch

    try:
        e = p._engine
        mux = sum(len(x.records) if isinstance(x, SampleBatch) else 1
                  for q in e._mux._bufs.values() for x in q)
        res = sum(len(st.reservoir) for s in e.stages for st in getattr(s.acc, "_lanes", {}).values()
                  if hasattr(st, "reservoir"))
        return {"mux_records": mux, "reservoir_records": res,
                "inflight_chunks": sum(len(s.inflight) for s in e.streams.values())}
    except AttributeError:  # the engine's internals moved: leave this column out
        return {}


def child(mode: str, lanes: int, ndocs: int, faster_ops: bool) -> dict[str, Any]:
    warnings.simplefilter("ignore")
    p = build(lanes, ndocs, faster_ops)
    gens = [[0, 0.0, 0] for _ in range(3)]  # collections, CPU seconds, objects examined
    t0 = [0.0]

    def timed(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            t0[0] = time.process_time()
        else:
            g = gens[info["generation"]]
            g[0] += 1
            g[1] += time.process_time() - t0[0]

    def examined(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            g = info["generation"]
            gens[g][0] += 1
            gens[g][2] += sum(len(gc.get_objects(generation=i)) for i in range(g + 1))

    gc.collect()
    base = collections.Counter(type(o).__name__ for o in gc.get_objects())
    peak: tuple[int, collections.Counter[str], dict[str, int], int] = (0, collections.Counter(), {}, 0)
    if mode == "off":
        gc.disable()
    gc.callbacks.append(examined if mode == "examine" else timed)
    c0 = time.process_time()
    docs = 0
    for i, batch in enumerate(p):
        for rec in batch.records:
            docs += len(rec.payload["packed_samples"])
        if mode == "examine" and i % 50 == 0:
            objs = gc.get_objects()
            if len(objs) > peak[0]:
                peak = (len(objs), collections.Counter(type(o).__name__ for o in objs), where(p), i)
            del objs
    cpu = time.process_time() - c0
    gc.callbacks.clear()
    out: dict[str, Any] = {"lanes": lanes, "docs": docs, "cpu": cpu, "gens": gens}
    if mode == "examine":
        excess = peak[1] - base
        out.update(peak_tracked=peak[0], start_tracked=sum(base.values()), peak_batch=peak[3],
                   peak_where=peak[2], peak_types=excess.most_common(10))
    return out


def run(mode: str, lanes: int, ndocs: int, faster_ops: bool) -> dict[str, Any]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    argv = [sys.executable, __file__, "_child", mode, str(lanes), str(ndocs), str(int(faster_ops))]
    got = subprocess.run(argv, env=env, capture_output=True, text=True, check=True)
    result: dict[str, Any] = json.loads(got.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=80_000)
    ap.add_argument("--lanes", default="1,64", help="two lane counts, the first is the baseline")
    ap.add_argument("--rounds", type=int, default=1, help="timed runs per lane count and mode (median)")
    ap.add_argument("--faster-ops", action="store_true",
                    help="options(faster_ops=True), as bench_source.py's row runs it (default: plain)")
    args = ap.parse_args()
    lane_counts = [int(x) for x in args.lanes.split(",")]
    rate: dict[tuple[str, int], float] = {}
    for mode in ("on", "off"):
        runs: dict[int, list[dict[str, Any]]] = {n: [] for n in lane_counts}
        for _ in range(args.rounds):
            for n in lane_counts:  # alternating
                runs[n].append(run(mode, n, args.docs, args.faster_ops))
        for n in lane_counts:
            rs = runs[n]
            rate[mode, n] = statistics.median(r["docs"] / r["cpu"] for r in rs)
            gens = " ".join(f"gen{g} {statistics.median(r['gens'][g][0] for r in rs):.0f}x "
                            f"{statistics.median(r['gens'][g][1] for r in rs):.3f}s" for g in range(3))
            print(f"gc {mode:3s} {n:3d} lane(s): {rs[0]['docs']:,} docs, "
                  f"cpu {statistics.median(r['cpu'] for r in rs):.2f} s, {rate[mode, n]:,.0f} docs/CPU-s"
                  + (f"; collections {gens}" if mode == "on" else ""))
    one, many = lane_counts[0], lane_counts[-1]
    print(f"ratio {many}/{one}: {rate['on', many] / rate['on', one]:.3f} with the collector, "
          f"{rate['off', many] / rate['off', one]:.3f} without")
    for n in lane_counts:
        r = run("examine", n, args.docs, args.faster_ops)
        walked = " ".join(f"gen{g} {r['gens'][g][0]}x {r['gens'][g][2] / 1e3:,.0f}k" for g in range(3))
        total = sum(x[2] for x in r["gens"]) / 1e3
        print(f"{n:3d} lane(s): objects examined {walked} (total {total:,.0f}k); tracked at peak "
              f"{r['peak_tracked']:,} (start {r['start_tracked']:,}, batch {r['peak_batch']}); "
              f"{r['peak_where']}")
        print("    excess at peak: " + ", ".join(f"{t} {c:,}" for t, c in r["peak_types"]))


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "_child":
        print(json.dumps(child(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "1")))
    else:
        main()

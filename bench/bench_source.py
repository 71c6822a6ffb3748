"""Source-layer benchmark: zephon_ref against zephon 0.2.0, side by side in one run.

1. Chunks per second of one lane's StaticMixtureWorkSource on the same config
   (3 datasets, within-shard + block shuffle, 4 lanes, chunk_size 1024): each
   implementation alternates, 3 rounds, median reported, and the ratio.
2. State-restore time at global chunk 10 and at global chunk 1,000,000 (a real run
   to that point with chunk_size 1), zephon_ref only: the restore must not grow
   with progress.
3. Lane scaling, zephon_ref only: documents per second when 1 lane reads N chunks
   against 64 lanes reading N/64 chunks each (the same documents in total), side
   by side, as a ratio (goal >= 0.8: a lane skips, without building them, the
   chunks other lanes own), at chunk_size 1024 and at zephon's default 16384; and the
   time to the first chunk of the last lane at canonical_replicas 1,000 and 10,000.  The
   lane clones share one ``ChunkWalk``, as an engine's lanes do.
4. Whole-pipeline lane scaling (issue 22), zephon_ref only: tokenize -> pack -> shuffle ->
   batch over 80,000 documents (``--quick``: 20,000), inline runner, 1 lane against 64 lanes,
   each run in a fresh process; documents per CPU-second (process time, so the load of a
   shared machine weighs less), median of 3 alternating pairs, and each run's peak RSS.
   Goal: 64/1 >= 0.8.  It plugs in :class:`zephon_ref.fast.ops.FastOps` (``faster_ops=True``): its
   tokenize interns token ids, without which 64 lanes' reservoirs make the collector walk every
   buffered token (bench/gc_lane_scaling.py shows it on the plain semantics).

Run: python3 bench/bench_source.py [--quick] [--only lanes|pipeline]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from properties.sources import SourceConfig, build_source, zephon_available  # noqa: E402

THROUGHPUT = SourceConfig(
    {"web": (40_000, 25_000, 35_000), "code": (18_000, 12_000), "books": (6_000, 4_000, 2_000, 3_000)},
    {"web": 0.6, "code": 0.3, "books": 0.1}, 4,
    {"chunk_size": 1024, "seed": 1, "shuffle_within_shard": True, "shuffle_block_size": 4096,
     "exhausted_policy": "repeat"},
)


def chunks_per_second(impl: str, n_chunks: int) -> float:
    src = build_source(impl, THROUGHPUT)
    lane = src.clone_for_lane(1, THROUGHPUT.canonical_replicas)
    t0 = time.perf_counter()
    for _ in range(n_chunks):
        ch = lane.next_chunk()
        assert ch is not None
        for _ in ch:  # the engine reads every chunk in offset order
            pass
    return n_chunks / (time.perf_counter() - t0)


def restore_seconds(at_chunk: int) -> tuple[float, int]:
    from zephon_ref.work import Dataset, InMemoryShard, StaticMixtureWorkSource

    dsets = [Dataset.from_dict("a", {0: InMemoryShard([0] * 50_000), 1: InMemoryShard([0] * 30_000)}),
             Dataset.from_dict("b", {0: InMemoryShard([0] * 20_000)})]
    mk = lambda: StaticMixtureWorkSource(dsets, {"a": 0.7, "b": 0.3}, chunk_size=1, seed=3,  # noqa: E731
                                         shuffle_within_shard=True, shuffle_block_size=1000,
                                         exhausted_policy="repeat")
    lane = mk().clone_for_lane(0, 1)
    for _ in range(at_chunk):
        lane.next_chunk()
    state = lane.state_dict()
    expected = [lane.next_chunk() for _ in range(5)]
    times = []
    for _ in range(5):
        fresh = mk().clone_for_lane(0, 1)
        t0 = time.perf_counter()
        fresh.load_state_dict(state)
        first = fresh.next_chunk()
        times.append(time.perf_counter() - t0)
        assert [first] + [fresh.next_chunk() for _ in range(4)] == expected
    return statistics.median(times), state["global_chunk_index"]


LANES = {
    "plain": SourceConfig(
        {"web": (40_000, 25_000, 35_000), "code": (18_000, 12_000), "books": (6_000, 4_000, 2_000, 3_000)},
        {"web": 0.6, "code": 0.3, "books": 0.1}, 1,
        {"chunk_size": 1024, "seed": 1, "shuffle_within_shard": True, "exhausted_policy": "repeat"}),
    "blocks": SourceConfig(
        {"web": (40_000, 25_000, 35_000), "code": (18_000, 12_000), "books": (6_000, 4_000, 2_000, 3_000)},
        {"web": 0.6, "code": 0.3, "books": 0.1}, 1,
        {"chunk_size": 1024, "seed": 1, "shuffle_within_shard": True, "shuffle_block_size": 4096,
         "exhausted_policy": "repeat"}),
}


LANES_BIG_CHUNK = SourceConfig(  # zephon's default chunk_size
    {
        "web": (400_000, 250_000, 350_000),
        "code": (180_000, 120_000),
        "books": (60_000, 40_000, 20_000, 30_000),
    },
    {"web": 0.6, "code": 0.3, "books": 0.1},
    1,
    {"chunk_size": 16384, "seed": 1, "shuffle_within_shard": True, "exhausted_policy": "repeat"},
)


def docs_per_second(cfg: SourceConfig, lanes: int, total_chunks: int) -> float:
    """Documents/s of ``lanes`` lane clones that together read ``total_chunks`` chunks."""
    src = build_source("zephon_ref", cfg)
    from zephon_ref.fast.walk import ChunkWalk

    per_lane = total_chunks // lanes
    docs = 0
    t0 = time.perf_counter()
    walk = ChunkWalk()  # shared by the clones, as an engine's lanes share one
    clones = [src.clone_for_lane(lane, lanes) for lane in range(lanes)]
    for clone in clones:
        clone.share_walk(walk)
    for _ in range(per_lane):
        for clone in clones:  # round robin over the lanes, as the engine's tail multiplexer reads them
            ch = clone.next_chunk()
            assert ch is not None
            for _ in ch:  # the engine reads every chunk in offset order
                docs += 1
    return docs / (time.perf_counter() - t0)


def first_chunk_seconds(cfg: SourceConfig, canonical_replicas: int) -> float:
    from zephon_ref.fast.walk import ChunkWalk

    src = build_source("zephon_ref", cfg)
    t0 = time.perf_counter()
    clone = src.clone_for_lane(canonical_replicas - 1, canonical_replicas)
    clone.share_walk(ChunkWalk())
    ch = clone.next_chunk()
    assert ch is not None
    next(iter(ch))
    return time.perf_counter() - t0


def lane_scaling(quick: bool) -> None:
    total = 320 if quick else 960
    print(f"== lane scaling (zephon_ref): {total} chunks of 1024 in total, read by 1 lane and by 64 lanes")
    for name, cfg in LANES.items():
        one, many = [], []
        for _ in range(3):  # alternate, median of 3
            one.append(docs_per_second(cfg, 1, total))
            many.append(docs_per_second(cfg, 64, total))
        r1, r64 = statistics.median(one), statistics.median(many)
        print(
            f"  {name:7s} 1 lane {r1:10.0f} docs/s   64 lanes {r64:10.0f} docs/s   "
            f"ratio 64/1 = {r64 / r1:.2f}"
        )
    big = 64 if quick else 128
    one, many = [], []
    for _ in range(3):  # alternate, median of 3
        one.append(docs_per_second(LANES_BIG_CHUNK, 1, big))
        many.append(docs_per_second(LANES_BIG_CHUNK, 64, big))
    r1, r64 = statistics.median(one), statistics.median(many)
    print(f"  chunk_size 16384, {big} chunks: 1 lane {r1:10.0f} docs/s   64 lanes {r64:10.0f} docs/s   "
          f"ratio 64/1 = {r64 / r1:.2f}")
    for name, cfg in LANES.items():
        for canon in (1_000, 10_000):
            print(f"  {name:7s} canonical_replicas={canon:>6,}: first chunk of the last lane in "
                  f"{first_chunk_seconds(cfg, canon):.3f} s")


PIPELINE_DOCS = 80_000
PIPELINE_DOCS_QUICK = 20_000


def _pipeline_child(lanes: int, ndocs: int) -> None:
    """One run of the lane-scaling pipeline in this (fresh) process; prints JSON."""
    import resource
    import warnings

    from zephon_ref import Pipeline
    from zephon_ref.synthetic import synthetic_corpus
    from zephon_ref.work import StaticMixtureWorkSource

    warnings.simplefilter("ignore")
    web, code = int(ndocs * 0.6), int(ndocs * 0.3)
    corpus = synthetic_corpus(layout={"web": (web // 2, web - web // 2), "code": (code,),
                                      "books": (ndocs - web - code,)}, seed=0, mean_log_words=4.0)
    src = StaticMixtureWorkSource(list(corpus.datasets), {"web": 0.6, "code": 0.3, "books": 0.1},
                                  chunk_size=64, seed=0)
    p = (Pipeline(src).tokenize(field="text", max_length=512, truncation=True).pack_sequences(512, num_bins=8)
         .shuffle(1024, seed=0).batch(8).options(runner="inline", canonical_replicas=lanes, faster_ops=True))
    c0 = time.process_time()
    docs = 0
    for batch in p:  # FastOps plugged in: interned token ids keep 64 reservoirs cheap to collect
        for rec in batch.records:
            docs += len(rec.payload["packed_samples"])
    cpu = time.process_time() - c0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"lanes": lanes, "docs": docs, "cpu": cpu, "rss_mb": rss}))


def pipeline_run(lanes: int, ndocs: int) -> dict[str, float]:
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join([root, env.get("PYTHONPATH", "")])
    out = subprocess.run([sys.executable, __file__, "_pipeline", str(lanes), str(ndocs)], env=env,
                         capture_output=True, text=True, check=True)
    got: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return got


def pipeline_lane_scaling(quick: bool) -> dict[str, object]:
    """The whole-pipeline row: docs per CPU-second, 64 lanes over 1 lane (fresh processes, alternating)."""
    ndocs = PIPELINE_DOCS_QUICK if quick else PIPELINE_DOCS
    one, many = [], []
    for _ in range(3):
        one.append(pipeline_run(1, ndocs))
        many.append(pipeline_run(64, ndocs))
    r1 = statistics.median(r["docs"] / r["cpu"] for r in one)
    r64 = statistics.median(r["docs"] / r["cpu"] for r in many)
    rss1, rss64 = max(r["rss_mb"] for r in one), max(r["rss_mb"] for r in many)
    return {
        "name": f"pipeline lane scaling: tokenize->pack->shuffle->batch, {ndocs:,} docs, inline, "
        "64 lanes vs 1",
        "ours": r64,
        "theirs": r1,
        "vs": "the same pipeline on 1 lane",
        "unit": "docs/CPU-s",
        "ratio": r64 / r1,
        "note": f"zephon_ref with zephon_ref.fast.ops.FastOps plugged in (options(faster_ops=True): interned "
        "token ids); fresh "
        "process per run, median of 3 alternating pairs; peak RSS "
        f"{rss1:.0f} MiB (1 lane) vs {rss64:.0f} MiB (64 lanes); goal >= 0.8",
    }


def results(*, quick: bool = True) -> list[dict[str, object]]:
    """Rows for ``python -m bench``: the same measurements as the script, fewer rounds."""
    rows: list[dict[str, object]] = []
    n = 150 if quick else 600
    rounds = 3
    if zephon_available():
        ours, theirs = [], []
        for _ in range(rounds):  # alternate
            ours.append(chunks_per_second("zephon_ref", n))
            theirs.append(chunks_per_second("zephon", n))
        a, b = statistics.median(ours), statistics.median(theirs)
        rows.append(
            {
                "name": "source: one lane of 4, chunk_size 1024, zephon_ref vs zephon 0.2.0",
                "ours": a,
                "theirs": b,
                "vs": "zephon 0.2.0",
                "unit": "chunks/s",
                "ratio": a / b,
                "note": f"{n} chunks, median of {rounds} alternating rounds; chunk-for-chunk equality is "
                "tested in tests/conformance",
            }
        )
    else:
        rows.append({"name": "source: zephon_ref vs zephon 0.2.0", "ours": chunks_per_second("zephon_ref", n),
                     "theirs": None, "unit": "chunks/s", "ratio": None,
                     "note": "zephon not installed (the conformance extra): no comparison"})
    far = 100_000 if quick else 1_000_000
    near_s, _ = restore_seconds(10)
    far_s, g = restore_seconds(far)
    rows.append({"name": f"source state restore at chunk {g:,} vs chunk 10", "ours": far_s * 1e3,
                 "theirs": near_s * 1e3, "vs": "the same restore at chunk 10", "unit": "ms",
                 "ratio": far_s / near_s,
                 "note": "zephon_ref only; median of 5; the next 5 chunks checked equal (goal: ratio ~1)"})
    total = 320 if quick else 960
    one = statistics.median(docs_per_second(LANES["plain"], 1, total) for _ in range(3))
    many = statistics.median(docs_per_second(LANES["plain"], 64, total) for _ in range(3))
    rows.append(
        {
            "name": "source lane scaling: 64 lanes vs 1 lane, same documents",
            "ours": many,
            "theirs": one,
            "vs": "the same documents on 1 lane",
            "unit": "docs/s",
            "ratio": many / one,
            "note": f"zephon_ref only, {total} chunks of 1024 in total (goal >= 0.8)",
        }
    )
    rows.append(pipeline_lane_scaling(quick))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="smaller runs (for a smoke check)")
    ap.add_argument("--only", choices=["lanes", "pipeline"], help="run one section only")
    args = ap.parse_args()
    if args.only == "lanes":
        lane_scaling(args.quick)
        return
    if args.only == "pipeline":
        row = pipeline_lane_scaling(args.quick)
        print(
            f"== {row['name']}\n  1 lane {row['theirs']:.0f} docs/CPU-s   "
            f"64 lanes {row['ours']:.0f} docs/CPU-s   "
            f"ratio 64/1 = {row['ratio']:.2f}   ({row['note']})"
        )
        return
    n = 150 if args.quick else 600
    print(f"== source throughput: one lane of {THROUGHPUT.canonical_replicas}, chunk_size 1024, {n} chunks")
    impls = ["zephon_ref"] + (["zephon"] if zephon_available() else [])
    res: dict[str, list[float]] = {i: [] for i in impls}
    for _ in range(3):
        for impl in impls:
            res[impl].append(chunks_per_second(impl, n))
    for impl in impls:
        print(f"  {impl:10s} {statistics.median(res[impl]):9.1f} chunks/s  (rounds: "
              + ", ".join(f"{x:.1f}" for x in res[impl]) + ")")
    if "zephon" in res:
        print(
            "  ratio zephon_ref / zephon = "
            f"{statistics.median(res['zephon_ref']) / statistics.median(res['zephon']):.2f}x"
        )
    print("== state restore to first chunk (zephon_ref), median of 5")
    far = 100_000 if args.quick else 1_000_000
    for at in (10, far):
        t0 = time.perf_counter()
        secs, g = restore_seconds(at)
        print(
            f"  at global chunk {g:>9,}: {secs * 1e3:7.2f} ms   "
            f"(reaching it took {time.perf_counter() - t0:.1f} s)"
        )
    lane_scaling(args.quick)
    row = pipeline_lane_scaling(args.quick)
    print(f"== {row['name']}\n  ratio 64/1 = {row['ratio']:.2f}   ({row['note']})")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "_pipeline":
        _pipeline_child(int(sys.argv[2]), int(sys.argv[3]))
    else:
        main()

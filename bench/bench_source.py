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
   time to the first chunk of the last lane at canonical_replicas 1,000 and 10,000.

Run: python3 bench/bench_source.py [--quick] [--only lanes]
"""

from __future__ import annotations

import argparse
import statistics
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
    {"web": (400_000, 250_000, 350_000), "code": (180_000, 120_000), "books": (60_000, 40_000, 20_000, 30_000)},
    {"web": 0.6, "code": 0.3, "books": 0.1}, 1,
    {"chunk_size": 16384, "seed": 1, "shuffle_within_shard": True, "exhausted_policy": "repeat"})


def docs_per_second(cfg: SourceConfig, lanes: int, total_chunks: int) -> float:
    """Documents/s of ``lanes`` lane clones that together read ``total_chunks`` chunks."""
    src = build_source("zephon_ref", cfg)
    per_lane = total_chunks // lanes
    docs = 0
    t0 = time.perf_counter()
    clones = [src.clone_for_lane(lane, lanes) for lane in range(lanes)]
    for _ in range(per_lane):
        for clone in clones:  # round robin over the lanes, as the engine's tail multiplexer reads them
            ch = clone.next_chunk()
            assert ch is not None
            for _ in ch:  # the engine reads every chunk in offset order
                docs += 1
    return docs / (time.perf_counter() - t0)


def first_chunk_seconds(cfg: SourceConfig, canonical_replicas: int) -> float:
    src = build_source("zephon_ref", cfg)
    t0 = time.perf_counter()
    clone = src.clone_for_lane(canonical_replicas - 1, canonical_replicas)
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
        print(f"  {name:7s} 1 lane {r1:10.0f} docs/s   64 lanes {r64:10.0f} docs/s   ratio 64/1 = {r64 / r1:.2f}")
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
        rows.append({"name": "source: one lane of 4, chunk_size 1024, zephon_ref vs zephon 0.2.0",
                     "ours": a, "theirs": b, "vs": "zephon 0.2.0", "unit": "chunks/s", "ratio": a / b,
                     "note": f"{n} chunks, median of {rounds} alternating rounds; chunk-for-chunk equality is "
                             "tested in tests/conformance"})
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
    rows.append({"name": "source lane scaling: 64 lanes vs 1 lane, same documents", "ours": many, "theirs": one,
                 "vs": "the same documents on 1 lane", "unit": "docs/s", "ratio": many / one,
                 "note": f"zephon_ref only, {total} chunks of 1024 in total (goal >= 0.8)"})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="smaller runs (for a smoke check)")
    ap.add_argument("--only", choices=["lanes"], help="run one section only")
    args = ap.parse_args()
    if args.only == "lanes":
        lane_scaling(args.quick)
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
        print(f"  ratio zephon_ref / zephon = {statistics.median(res['zephon_ref']) / statistics.median(res['zephon']):.2f}x")
    print("== state restore to first chunk (zephon_ref), median of 5")
    far = 100_000 if args.quick else 1_000_000
    for at in (10, far):
        t0 = time.perf_counter()
        secs, g = restore_seconds(at)
        print(f"  at global chunk {g:>9,}: {secs * 1e3:7.2f} ms   (reaching it took {time.perf_counter() - t0:.1f} s)")
    lane_scaling(args.quick)


if __name__ == "__main__":
    main()

"""The plain codec against the fast codec, side by side: pack, encode and decode of real engine states.

usage: PYTHONPATH=. python3 bench/bench_codec.py [--rounds 5] [--quick]

zephon_ref.codec is the plain definition of the checkpoint bytes (one uniform recursion);
zephon_ref.fast.codec.FastCodec computes the same bytes faster and is what the benchmarks that
encode big states plug in (bench_checkpoint_store's save rows, bench_aggregation, sim.scale).  This
measures what it buys, on the states it was measured on when it lived inside the codec: the 8
participants' states of ``sim.cluster.topology_states(3, canonical_replicas=64, world_size=8)``
(about 54 KB packed together) and their merge at 512 lanes.  Each round times plain then fast
(alternating which goes first) in process time, over enough repetitions for about 0.1 s; the rows
give the median of the rounds, the note the range of the per-round ratio and the load average
before and after.  The bytes (and decoded values) are checked equal first; nothing about speed is
asserted.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _states() -> dict[str, list[Any]]:
    from sim.cluster import topology_states
    from zephon_ref.coordination.merge import merge

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        eight = [s for _, s in sorted(topology_states(3, canonical_replicas=64, world_size=8).items())]
        big = [s for _, s in sorted(topology_states(3, canonical_replicas=512, world_size=8).items())]
        merged = merge(big, warn_mid_window=False)
    return {"8 states, 64 lanes": eight, "merged state, 512 lanes": [merged]}


def _cpu(fn: Callable[[], Any], reps: int) -> float:
    t0 = time.process_time()  # clock-ok: benchmark timing only
    for _ in range(reps):
        fn()
    return (time.process_time() - t0) / reps  # clock-ok


def _calls(c: Any, states: list[Any], blobs: list[bytes]) -> dict[str, Callable[[], Any]]:
    """The three operations of codec ``c`` over every state (or every state's encoding)."""
    return {"pack": lambda: [c.pack(s) for s in states], "encode": lambda: [c.encode(s) for s in states],
            "decode": lambda: [c.decode(b) for b in blobs]}


def _load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def measure(rounds: int) -> list[dict[str, Any]]:
    """One dict per (states, operation): plain and fast seconds per call (medians), per-round ratios."""
    from zephon_ref import codec
    from zephon_ref.fast.codec import FastCodec

    fast = FastCodec()
    out = []
    for label, states in _states().items():
        blobs = [codec.encode(s) for s in states]
        # what is measured must be equal first
        assert [fast.encode(s) for s in states] == blobs
        assert all(fast.pack(s) == codec.pack(s) for s in states)
        assert [repr(fast.decode(b)) for b in blobs] == [repr(codec.decode(b)) for b in blobs]
        packed = sum(len(codec.pack(s)) for s in states)
        plain_calls, fast_calls = _calls(codec, states, blobs), _calls(fast, states, blobs)
        for op, plain_fn in plain_calls.items():
            fast_fn = fast_calls[op]
            reps = max(1, int(0.1 / max(_cpu(plain_fn, 1), 1e-4)))
            load0 = _load()
            plain_t: list[float] = []
            fast_t: list[float] = []
            for r in range(rounds):
                pair = [(plain_fn, plain_t), (fast_fn, fast_t)]
                for fn, acc in (pair if r % 2 == 0 else pair[::-1]):
                    acc.append(_cpu(fn, reps))
            ratios = [p / f for p, f in zip(plain_t, fast_t, strict=True)]
            out.append({"states": label, "op": op, "bytes": packed, "reps": reps, "rounds": rounds,
                        "plain_s": statistics.median(plain_t), "fast_s": statistics.median(fast_t),
                        "ratio_median": statistics.median(ratios), "ratio_min": min(ratios),
                        "ratio_max": max(ratios), "load": f"{load0} -> {_load()}"})
    return out


def results(*, quick: bool = True) -> list[dict[str, object]]:
    """Rows for ``python -m bench``: plain codec time over FastCodec time, per operation."""
    rows: list[dict[str, object]] = []
    for m in measure(3 if quick else 5):
        rows.append({
            "name": f"codec {m['op']}, {m['states']}: plain codec vs FastCodec",
            "ours": round(m["plain_s"] * 1e3, 2),
            "theirs": round(m["fast_s"] * 1e3, 2),
            "vs": "zephon_ref.fast.codec.FastCodec (same bytes, checked)",
            "unit": "ms CPU per call",
            "ratio": round(m["ratio_median"], 2),
            "note": f"{m['bytes']:,} B packed; {m['rounds']} rounds x {m['reps']} reps, process time; "
                    f"ratio range {m['ratio_min']:.2f}-{m['ratio_max']:.2f}; load {m['load']}",
        })
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    print(f"plain zephon_ref.codec vs zephon_ref.fast.codec.FastCodec (bytes checked equal), process time, "
          f"{args.rounds} rounds, cpus={os.cpu_count()}")
    print(f"{'states':<26} {'op':<7} {'plain ms':>9} {'fast ms':>9} {'plain/fast':>10} {'range':>11}  load")
    for m in measure(args.rounds):
        print(f"{m['states']:<26} {m['op']:<7} {m['plain_s'] * 1e3:>9.2f} {m['fast_s'] * 1e3:>9.2f} "
              f"{m['ratio_median']:>10.2f} {m['ratio_min']:>5.2f}-{m['ratio_max']:<5.2f}  {m['load']}")


if __name__ == "__main__":
    main()

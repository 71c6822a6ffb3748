"""Save/load time of the durable checkpoint store against checkpoint size.

usage: PYTHONPATH=. python bench/bench_checkpoint_store.py [--repeat 3] [--dir /tmp/x]

Prints one row per (lanes, items delivered) with the on-disk size and the
median save and load (full validation) times.  The states are real engine
states: a ``lanes``-lane pipeline (properties.pipelines) iterated ``items``
items, then ``checkpoint()``.  Measurements only: no
assertions; timings never feed back into any decision.

Save is measured twice, side by side: with the plain codec (``store.save``'s default,
zephon_ref.codec) and with the fast codec plugged in (``store.save(..., codec=FastCodec())``,
zephon_ref.fast.codec: the same files, checked byte for byte), in process time, alternating which
goes first; the save-codec rows and the table's ``fast save`` column say which is which.  Load
always uses the plain codec.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from properties.pipelines import PipelineConfig, build_pipeline
from zephon_ref.checkpoint import store
from zephon_ref.fast.codec import FastCodec

SIZES = [(4, 16), (16, 64), (64, 256), (256, 1024), (512, 1024)]


def engine_state(lanes: int, items: int) -> dict[str, Any]:
    cfg = PipelineConfig(
        chain=[],
        layout={"web": (600, 400), "code": (300, 200), "books": (150,)},
        options={"runner": "inline", "canonical_replicas": lanes},
        source_kwargs={"chunk_size": 4, "seed": lanes},
    )
    p = build_pipeline("zephon_ref", cfg)
    it = iter(p)
    for _ in range(items):
        next(it)
    state: dict[str, Any] = p.checkpoint()
    return state


def _load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def save_codecs(state: dict[str, Any], base: Path, rounds: int = 3) -> tuple[list[float], list[float]]:
    """Process seconds of ``store.save`` with the plain codec and with FastCodec, ``rounds`` each,
    alternating; the files of the two saves are checked equal, byte for byte."""
    plain_t: list[float] = []
    fast_t: list[float] = []
    for r in range(rounds):
        for fast in ((False, True) if r % 2 == 0 else (True, False)):
            d = base / f"codec-{'fast' if fast else 'plain'}-{r}"
            t0 = time.process_time()  # clock-ok: benchmark timing only
            if fast:
                store.save(state, d, codec=FastCodec())
            else:
                store.save(state, d)
            (fast_t if fast else plain_t).append(time.process_time() - t0)  # clock-ok
        a, b = (base / f"codec-{k}-{r}" for k in ("plain", "fast"))
        if {p.name: p.read_bytes() for p in a.iterdir()} != {p.name: p.read_bytes() for p in b.iterdir()}:
            raise AssertionError("store.save wrote other files with FastCodec than with the plain codec")
        shutil.rmtree(a)
        shutil.rmtree(b)
    return plain_t, fast_t


def results(*, quick: bool = True) -> list[dict[str, object]]:
    """Rows for ``python -m bench``: load (full validation) time against checkpoint size.

    The ratio compares the largest state with the smallest: bytes grow with lanes, and the
    ratio of load times says whether load time follows bytes."""
    sizes = SIZES[:3] if quick else SIZES
    base = Path(tempfile.mkdtemp(prefix="zref-bench-"))
    rows: list[dict[str, object]] = []
    try:
        measured = []
        for lanes, items in sizes:
            state = engine_state(lanes, items)
            loads, saves, nbytes = [], [], 0
            for r in range(3):
                d = base / f"l{lanes}-r{r}"
                t0 = time.perf_counter()  # clock-ok: benchmark timing only
                store.save(state, d)
                t1 = time.perf_counter()  # clock-ok
                out = store.load(d)
                t2 = time.perf_counter()  # clock-ok
                assert out == state
                saves.append(t1 - t0)
                loads.append(t2 - t1)
                nbytes = sum(p.stat().st_size for p in d.iterdir())
                shutil.rmtree(d)
            measured.append((lanes, items, nbytes, statistics.median(saves), statistics.median(loads)))
            load0 = _load()
            plain_t, fast_t = save_codecs(state, base)
            ratios = [p / f for p, f in zip(plain_t, fast_t, strict=True)]
            rows.append(
                {
                    "name": f"checkpoint store: save, {lanes} lanes after {items} items, "
                            "plain codec vs FastCodec",
                    "ours": round(statistics.median(plain_t) * 1e3, 1),
                    "theirs": round(statistics.median(fast_t) * 1e3, 1),
                    "vs": "the same save with zephon_ref.fast.codec.FastCodec (same files, checked)",
                    "unit": "ms CPU",
                    "ratio": round(statistics.median(ratios), 2),
                    "note": f"3 rounds alternating, process time; ratio range {min(ratios):.2f}-"
                            f"{max(ratios):.2f}; load {load0} -> {_load()}",
                }
            )
        for lanes, items, nbytes, s, ld in measured:
            rows.append(
                {
                    "name": f"checkpoint store: save / load, {lanes} lanes after {items} items",
                    "ours": ld * 1e3,
                    "theirs": s * 1e3,
                    "vs": "the same store's save time",
                    "unit": "ms (load / save)",
                    "ratio": ld / s,
                    "note": f"{nbytes:,} B on disk; load validates fully and equals the saved state",
                }
            )
        (l0, _, b0, _, ld0), (l1, _, b1, _, ld1) = measured[0], measured[-1]
        rows.append(
            {
                "name": f"checkpoint store: load time, {l1} lanes vs {l0} lanes",
                "ours": ld1 * 1e3,
                "theirs": ld0 * 1e3,
                "vs": f"the same load at {l0} lanes",
                "unit": "ms",
                "ratio": ld1 / ld0,
                "note": f"bytes grow {b1 / b0:.1f}x ({b0:,} -> {b1:,} B); zephon_ref only",
            }
        )
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dir", default=None)
    args = ap.parse_args()
    base = Path(args.dir or tempfile.mkdtemp(prefix="zref-bench-"))
    print("save: plain zephon_ref.codec (store.save's default); fast save: FastCodec plugged in "
          "(process time, same files checked); load: plain codec")
    print(
        f"{'lanes':>6} {'items':>6} {'files':>5} {'bytes':>11} {'save ms':>9} {'load ms':>9} "
        f"{'MB/s load':>9} {'cpu save ms':>11} {'fast save':>9}"
    )
    for lanes, items in SIZES:
        state = engine_state(lanes, items)
        saves, loads = [], []
        nbytes = nfiles = 0
        for r in range(args.repeat):
            d = base / f"l{lanes}-r{r}"
            t0 = time.perf_counter()  # clock-ok: benchmark timing only
            store.save(state, d)
            t1 = time.perf_counter()  # clock-ok
            out = store.load(d)
            t2 = time.perf_counter()  # clock-ok
            assert out == state
            saves.append(t1 - t0)
            loads.append(t2 - t1)
            files = list(d.iterdir())
            nfiles, nbytes = len(files), sum(p.stat().st_size for p in files)
            shutil.rmtree(d)
        s_ms, l_ms = statistics.median(saves) * 1e3, statistics.median(loads) * 1e3
        plain_t, fast_t = save_codecs(state, base, max(3, args.repeat))
        print(
            f"{lanes:>6} {items:>6} {nfiles:>5} {nbytes:>11,} {s_ms:>9.1f} {l_ms:>9.1f} "
            f"{nbytes / 1e6 / (l_ms / 1e3):>9.1f} {statistics.median(plain_t) * 1e3:>11.1f} "
            f"{statistics.median(fast_t) * 1e3:>9.1f}"
        )
    if args.dir is None:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()

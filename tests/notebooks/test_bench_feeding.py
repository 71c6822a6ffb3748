"""bench/bench_feeding.py in its smallest mode: the rows it reports are well formed, both policies
deliver the same stream, the default's worst inflight stays within the bound, and a fresh-process
restore delivers the uninterrupted run's next item.  (The 100,000-item run is not for CI.)"""

from __future__ import annotations

from bench import bench_feeding as bf
from bench.__main__ import KEYS
from sim.invariants import inflight_bound


def test_the_quick_bench_rows() -> None:
    rows = bf.measure(quick=True, lanes=(2,), items=300, reps=1, progress=False)
    assert all(set(r) == set(KEYS) for r in rows)
    by = {str(r["name"]): r for r in rows}
    demand = by["2 lanes zephon_ref demand: worst inflight chunks at 3 / 30 / 300 items"]
    assert int(demand["ours"]) <= inflight_bound(k=2, monotone=False, depth_samples=0, min_chunk=32)
    assert "identical" in str(demand["note"])
    rr = by["2 lanes zephon_ref round_robin: worst inflight chunks at 3 / 30 / 300 items"]
    assert int(rr["ours"]) > int(demand["ours"])  # round robin grows already at 300 items
    restores = [r for name, r in by.items() if "restore-to-first-item" in name]
    assert len(restores) == 2 and all("checked equal" in str(r["note"]) for r in restores)
    docs = by["2 lanes: docs/s, demand over round-robin feeding"]
    assert "streams identical" in str(docs["note"]) and float(docs["ratio"]) > 0

"""Torch-path benchmark: batches/s through a torch DataLoader against iterating the pipeline directly.

The demo pipeline (``zephon_ref.demo.build_demo_pipeline``: tokenize -> first-fit pack ->
shuffle -> ensure_mixture -> batch(4), 4 lanes, 94 batches), measured side by side in one run:

* ``direct``: ``for batch in pipeline`` in this process (the reference);
* ``to_torch_dataset`` through ``DataLoader(batch_size=None, num_workers=N)`` for N in 0, 2, 4;
* ``to_stateful_dataset`` (each batch stamped with its worker's engine state, consumed through
  ``dataset.track(loader)``) for N in 0, 2, 4; the state_dict() at the end is read too.

Every loader's output is checked equal to the direct run's: the same batches lane by lane
(cursor keys and tokens), and for N = 0 the same sequence.  A row whose output differs says
so in its note instead of a ratio.  Times include the DataLoader's worker start-up (a
fresh loader per pass, as a training epoch would).  Nothing asserts a speed.

Run: ``python3 bench/bench_torch.py [--quick]`` (quick: 1 round; full: median of 3).
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import sys
import time
import warnings
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from zephon_ref.demo import build_demo_pipeline  # noqa: E402

SEED = 0


def _view(batch: Any) -> tuple[int, str]:
    h = hashlib.blake2b(digest_size=10)
    for rec in batch.records:
        h.update(repr(rec.meta.cursor.as_key()).encode())
        for seg in rec.payload["packed_samples"]:
            h.update(repr(list(seg["input_ids"])).encode())
    return int(batch.lane_ids[0]), h.hexdigest()


def _per_lane(views: list[tuple[int, str]]) -> dict[int, list[str]]:
    out: dict[int, list[str]] = defaultdict(list)
    for lane, digest in views:
        out[lane].append(digest)
    return dict(out)


def _direct() -> list[tuple[int, str]]:
    return [_view(b) for b in build_demo_pipeline(SEED)]


def _plain(n: int) -> Callable[[], list[tuple[int, str]]]:
    def go() -> list[tuple[int, str]]:
        from torch.utils.data import DataLoader

        from zephon_ref.torch import to_torch_dataset

        ds = to_torch_dataset(build_demo_pipeline(SEED))
        return [_view(b) for b in DataLoader(ds, batch_size=None, num_workers=n)]

    return go


def _stateful(n: int) -> Callable[[], list[tuple[int, str]]]:
    def go() -> list[tuple[int, str]]:
        from torch.utils.data import DataLoader

        from zephon_ref.torch import to_stateful_dataset

        ds = to_stateful_dataset(build_demo_pipeline(SEED))
        out = [_view(b) for b in ds.track(DataLoader(ds, batch_size=None, num_workers=n))]
        ds.state_dict()
        return out

    return go


def _time(fn: Callable[[], list[tuple[int, str]]], rounds: int) -> tuple[float, list[tuple[int, str]]]:
    """(median seconds, output of the last round)."""
    times = []
    out: list[tuple[int, str]] = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def results(*, quick: bool = True) -> list[dict[str, object]]:
    """One row per (dataset kind, num_workers): batches/s through the loader vs the direct pipeline."""
    rounds = 1 if quick else 3
    rows: list[dict[str, object]] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch's advice when workers exceed cores
        for kind, make in (("to_torch_dataset", _plain), ("to_stateful_dataset", _stateful)):
            for n in (0, 2, 4):
                # side by side: the direct run right before each loader run, same rounds
                t_direct, want = _time(_direct, rounds)
                t_loader, got = _time(make(n), rounds)
                same = _per_lane(got) == _per_lane(want) and (n > 0 or got == want)
                ours, theirs = len(got) / t_loader, len(want) / t_direct
                note = (f"{len(want)} batches, demo pipeline seed {SEED}; output "
                        + ("equal to the direct run per lane" + (" and in order" if n == 0 else "")
                           if same else "DIFFERS from the direct run")
                        + f"; median of {rounds} round(s) incl. worker start-up; shared 2-core VM, noisy")
                rows.append(
                    {
                        "name": f"{kind} DataLoader(num_workers={n}) vs pipeline direct, demo, batches/s",
                        "ours": round(ours, 1),
                        "theirs": round(theirs, 1),
                        "vs": "the same pipeline iterated directly",
                        "unit": "batches/s",
                        "ratio": round(ours / theirs, 3) if same else None,
                        "note": note,
                    }
                )
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--quick", action="store_true", help="1 round instead of the median of 3")
    args = ap.parse_args(argv)
    try:
        import torch  # noqa: F401
    except ImportError:
        print("bench_torch: torch not importable: skipped")
        return 0
    rows = results(quick=args.quick)
    print(f"{'name':<92} {'ours':>9} {'theirs':>9} {'ratio':>7}  note")
    for r in rows:
        ratio = "-" if r["ratio"] is None else f"{r['ratio']:.3f}"
        print(f"{r['name']!s:<92} {r['ours']!s:>9} {r['theirs']!s:>9} {ratio:>7}  {r['note']}")
    return 0 if all(r["ratio"] is not None for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())

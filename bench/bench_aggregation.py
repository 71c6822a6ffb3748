"""Aggregation round time against number of processes, and merged-state size against lanes.

usage: python bench/bench_aggregation.py [--rounds 5] [--procs 2,4,8] [--lanes 8,64,512,4096]

Round time: N real processes (one per rank, two canonical lanes each: C = 2N)
run ``--rounds`` consecutive aggregation rounds over the directory backend and
over a torch TCPStore on 127.0.0.1; the table reports the leader's median and
max round time (from its aggregate() call to its return, i.e. including the
wait for every ack).  Polling interval 10 ms.  Merged size: 8 ranks, real
states (a small packing pipeline cut after a few items, see sim.cluster); bytes
of the msgpack+zstd encoding of merge(states) and the merge time.  Prints tables only; nothing is asserted.
``results()`` gives the same measurements as rows for ``python -m bench``.

The codec: every round runs with the fast codec plugged in (``aggregate_round(...,
codec=FastCodec())``, zephon_ref.fast.codec: the plain codec's bytes, checked by
properties.fast_codec), and the merged state is encoded with it; the notes and the table headers
say so.  The merged-state rows also time encoding the merged state with the plain codec and with
FastCodec side by side (process time, 3 rounds alternating, bytes checked equal).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def child(args: dict[str, object]) -> None:
    warnings.simplefilter("ignore")
    from sim.cluster import topology_states
    from zephon_ref.coordination import aggregate_round, open_backend
    from zephon_ref.fast.codec import FastCodec

    n = int(args["world_size"])  # type: ignore[call-overload]
    rank = int(args["rank"])  # type: ignore[call-overload]
    state = topology_states(7, canonical_replicas=2 * n, world_size=n)[(rank, 0)]
    backend = open_backend(str(args["backend"]), timeout_s=60.0)
    connect = getattr(backend, "connect", None)
    if callable(connect):
        connect()
    ready = Path(str(args["sync"]))
    (ready / f"ready{rank}").touch()
    while len(list(ready.glob("ready*"))) < n:
        time.sleep(0.005)
    times = []
    for _ in range(int(args["rounds"])):  # type: ignore[call-overload]
        t0 = time.perf_counter()
        res = aggregate_round(
            state,
            backend=backend,
            rank=rank,
            world_size=n,
            run_id="bench",
            timeout_s=60.0,
            poll_s=0.01,
            codec=FastCodec(),  # the plain codec's bytes, faster (see the module docstring)
        )
        times.append(time.perf_counter() - t0)
        state["last_round_id"] = res.round_id
    print(json.dumps({"rank": rank, "times": times}), flush=True)


def round_times(kind: str, n: int, rounds: int) -> list[float]:
    with tempfile.TemporaryDirectory() as tmp:
        master = None
        if kind == "directory":
            spec = str(Path(tmp) / "agg")
        else:
            from datetime import timedelta

            import torch.distributed as dist

            master = dist.TCPStore(
                "127.0.0.1",
                0,
                is_master=True,
                wait_for_workers=False,
                timeout=timedelta(seconds=60),
            )
            spec = f"torch://127.0.0.1:{master.port}"
        sync = Path(tmp) / "sync"
        sync.mkdir()
        procs = []
        for rank in range(n):
            a = {
                "backend": spec,
                "rank": rank,
                "world_size": n,
                "rounds": rounds,
                "sync": str(sync),
            }
            procs.append(
                subprocess.Popen(
                    [sys.executable, __file__, "--child", json.dumps(a)],
                    stdout=subprocess.PIPE,
                    text=True,
                    env=dict(os.environ, PYTHONPATH=str(ROOT)),
                )
            )
        outs = [json.loads(p.communicate(timeout=600)[0].strip().splitlines()[-1]) for p in procs]
        del master
        return list(next(o for o in outs if o["rank"] == 0)["times"])


def _kinds() -> list[str]:
    kinds = ["directory"]
    try:
        import torch.distributed  # noqa: F401

        kinds.append("tcpstore")
    except ImportError:
        pass
    return kinds


def _merged_size(lanes: int) -> tuple[int, float]:
    """Bytes of the encoded merge of 8 ranks' real states over ``lanes`` lanes (FastCodec, the
    plain codec's bytes), and the merge seconds."""
    from sim.cluster import topology_states
    from zephon_ref.coordination.merge import merge
    from zephon_ref.fast.codec import FastCodec

    states = list(topology_states(3, canonical_replicas=lanes, world_size=8).values())
    t0 = time.perf_counter()
    merged = merge(states, warn_mid_window=False)
    dt = time.perf_counter() - t0
    return len(FastCodec().encode(merged)), dt


def _encode_times(lanes: int, rounds: int = 3) -> tuple[float, float, float, float]:
    """Process seconds of encoding the 8-rank merge over ``lanes`` lanes with the plain codec and
    with FastCodec (medians of ``rounds``, alternating), and the plain/fast ratio's range."""
    from sim.cluster import topology_states
    from zephon_ref import codec
    from zephon_ref.coordination.merge import merge
    from zephon_ref.fast.codec import FastCodec

    fast = FastCodec()
    states = list(topology_states(3, canonical_replicas=lanes, world_size=8).values())
    merged = merge(states, warn_mid_window=False)
    if fast.encode(merged) != codec.encode(merged):
        raise AssertionError("FastCodec's bytes differ from the plain codec's")
    times: dict[bool, list[float]] = {True: [], False: []}
    for r in range(rounds):
        for is_fast in ((False, True) if r % 2 == 0 else (True, False)):
            enc = fast.encode if is_fast else codec.encode
            t0 = time.process_time()
            enc(merged)
            times[is_fast].append(time.process_time() - t0)
    ratios = [p / f for p, f in zip(times[False], times[True], strict=True)]
    return statistics.median(times[False]), statistics.median(times[True]), min(ratios), max(ratios)


def results(*, quick: bool = True) -> list[dict[str, object]]:
    """Rows for ``python -m bench``: round time per backend against the directory backend, and
    the merged state's bytes per lane (the same merge, measured, no peer to compare with)."""
    warnings.simplefilter("ignore")
    rounds, procs = (3, (2, 4)) if quick else (5, (2, 4, 8))
    rows: list[dict[str, object]] = []
    kinds = _kinds()
    for n in procs:
        med = {kind: statistics.median(round_times(kind, n, rounds)) * 1e3 for kind in kinds}
        for kind in kinds:
            rows.append(
                {
                    "name": f"aggregation round, {kind} backend, {n} processes (C = {2 * n}), leader median",
                    "ours": round(med[kind], 1),
                    "theirs": round(med["directory"], 1) if kind != "directory" else None,
                    "vs": "directory backend" if kind != "directory" else None,
                    "unit": "ms",
                    "ratio": round(med[kind] / med["directory"], 2) if kind != "directory" else None,
                    "note": f"{rounds} rounds, real processes, poll 10 ms, FastCodec plugged in",
                }
            )
    if "tcpstore" not in kinds:
        rows.append(
            {
                "name": "aggregation round, tcpstore backend",
                "ours": None,
                "theirs": None,
                "unit": "ms",
                "ratio": None,
                "note": "not measured: torch is not importable (the torch extra)",
            }
        )
    small, _ = _merged_size(8)
    for lanes in ((512,) if quick else (512, 4096)):
        size, dt = _merged_size(lanes)
        plain_s, fast_s, lo, hi = _encode_times(lanes)
        load = "/".join(f"{x:.1f}" for x in os.getloadavg())
        rows.append(
            {
                "name": f"merged state, 8 ranks, {lanes} lanes, bytes per lane (vs 8 lanes)",
                "ours": round(size / lanes),
                "theirs": round(small / 8),
                "vs": "the same merge at 8 lanes",
                "unit": "B/lane",
                "ratio": round((size / lanes) / (small / 8), 2),
                "note": f"msgpack+zstd of merge() (FastCodec: the plain codec's bytes); merge "
                        f"{dt * 1e3:.0f} ms; 3 inflight chunks/lane; encode CPU plain {plain_s * 1e3:.1f} ms "
                        f"vs FastCodec {fast_s * 1e3:.1f} ms (plain/fast {lo:.2f}-{hi:.2f}, 3 rounds; "
                        f"load {load})",
            }
        )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--child")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--procs", default="2,4,8")
    ap.add_argument("--lanes", default="8,64,512,4096")
    opts = ap.parse_args()
    if opts.child:
        child(json.loads(opts.child))
        return
    warnings.simplefilter("ignore")
    kinds = _kinds()
    if "tcpstore" not in kinds:
        print("(torch not importable: TCPStore rows skipped)")
    print(
        f"Aggregation round time (leader, {opts.rounds} rounds, C = 2 x processes, poll 10 ms, "
        f"FastCodec plugged in), cpus={os.cpu_count()}"
    )
    print(f"{'backend':<10} {'procs':>5} {'median ms':>10} {'max ms':>8}")
    for kind in kinds:
        for n in (int(x) for x in opts.procs.split(",")):
            ts = round_times(kind, n, opts.rounds)
            print(f"{kind:<10} {n:>5} {statistics.median(ts) * 1e3:>10.1f} {max(ts) * 1e3:>8.1f}")

    print()
    print("Merged-state size (8 ranks, 3 inflight chunks/lane, msgpack+zstd); encode CPU ms, plain codec and "
          "FastCodec (same bytes, checked), medians of 3 alternating")
    print(f"{'lanes':>6} {'encoded KiB':>12} {'bytes/lane':>11} {'merge ms':>9} {'plain enc':>9} "
          f"{'fast enc':>9}")
    for c in (int(x) for x in opts.lanes.split(",")):
        size, dt = _merged_size(c)
        plain_s, fast_s, _, _ = _encode_times(c)
        print(f"{c:>6} {size / 1024:>12.1f} {size / c:>11.0f} {dt * 1e3:>9.1f} {plain_s * 1e3:>9.1f} "
              f"{fast_s * 1e3:>9.1f}")


if __name__ == "__main__":
    main()

"""Requests per save/load and save/load time over object storage, side by side with local files.

usage: PYTHONPATH=. python3 bench/bench_s3.py [--quick]

Starts moto's S3 server on 127.0.0.1 (the ``dev`` extra installs ``moto[server]``)
and points an :class:`~zephon_ref.checkpoint.s3.S3Storage` at it.

* Requests: every HTTP request of one save (the second into a prefix: the probe
  is done once per process and reported on its own row) and of one load of the
  newest generation, counted by operation with a botocore ``before-send`` hook
  (retries would count too; there are none on loopback).  ``theirs`` is the goal
  of issue 14: one PUT per shard plus one for the manifest per save, one LIST per
  load.  Checked: the loaded state equals the saved one.
* Time: median save and load (full validation) of real engine states of growing
  size (the states of bench_checkpoint_store.py), through the local S3 server
  and into a local directory, in the same run.
  Checked: both loads equal the saved state.  A loopback moto server costs a few
  milliseconds of Python per request; a real endpoint costs network round trips
  instead, so the ratio says little about a cloud bucket (see docs/s3.md).
Measurements only: nothing asserts a speed.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench.bench_checkpoint_store import engine_state
from zephon_ref.checkpoint import s3, store

LANES_QUICK = (1, 4, 16)
LANES_FULL = (1, 4, 16, 64, 256)
SIZES_QUICK = ((4, 16), (16, 64), (64, 256))
SIZES_FULL = ((4, 16), (16, 64), (64, 256), (256, 1024))


def _server() -> tuple[Any, str]:
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    return server, f"http://{host}:{port}"


class _Counter:
    def __init__(self, storage: s3.S3Storage) -> None:
        self.ops: Counter[str] = Counter()
        storage.client.meta.events.register("before-send.s3", self._sent)

    def _sent(self, event_name: str = "", **_: Any) -> None:
        op = event_name.rsplit(".", 1)[-1]
        self.ops[{"ListObjectsV2": "LIST", "PutObject": "PUT", "GetObject": "GET"}.get(op, op)] += 1

    def take(self) -> Counter[str]:
        out, self.ops = self.ops, Counter()
        return out


def _fmt(ops: Counter[str]) -> str:
    return " ".join(f"{k}={v}" for k, v in sorted(ops.items()))


def results(*, quick: bool = True) -> list[dict[str, object]]:
    try:
        import boto3
    except ImportError:  # pragma: no cover - the dev extra installs it
        return [{"name": "s3 benchmarks", "ours": 0, "theirs": None, "unit": "-", "ratio": None,
                 "note": "skipped: boto3/moto not installed (pip install zephon-ref[dev])"}]
    server, endpoint = _server()
    saved_env = {
        k: os.environ.get(k) for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION")
    }
    os.environ.update(
        AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", AWS_DEFAULT_REGION="us-east-1"
    )
    rows: list[dict[str, object]] = []
    try:
        boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket="zr-bench")
        st = s3.S3Storage("zr-bench", endpoint_url=endpoint)
        count = _Counter(st)
        st.ensure_conditional_writes()
        rows.append({"name": "requests of the conditional-write probe (once per process and endpoint)",
                     "ours": sum(count.take().values()), "theirs": None, "unit": "requests", "ratio": None,
                     "note": "PUT, PUT (must answer 412), DELETE"})
        for lanes in LANES_QUICK if quick else LANES_FULL:
            state = engine_state(lanes, 2 * lanes)
            url = f"s3://zr-bench/req/l{lanes}"
            store.save(state, url, storage=st)
            count.take()
            store.save(state, url, storage=st)
            save_ops = count.take()
            loaded = store.load(url, storage=st)
            load_ops = count.take()
            assert loaded == state
            goal_puts = lanes + 2  # universal shard + one per lane + manifest
            rows.append(
                {
                    "name": f"requests per save, {lanes} lanes",
                    "ours": sum(save_ops.values()),
                    "theirs": goal_puts,
                    "vs": "the goal (fewest requests)",
                    "unit": "requests",
                    "ratio": sum(save_ops.values()) / goal_puts,
                    "note": f"{_fmt(save_ops)}; goal: PUT={goal_puts}; the two LISTs pick the generation "
                    "and check for a newer manifest before publishing",
                }
            )
            rows.append({"name": f"requests per load, {lanes} lanes", "ours": sum(load_ops.values()),
                         "theirs": 1 + 1 + lanes + 1, "vs": "the goal (fewest requests)", "unit": "requests",
                         "ratio": sum(load_ops.values()) / (lanes + 3),
                         "note": f"{_fmt(load_ops)}; goal: LIST=1 plus one GET per manifest and shard; "
                                 "loaded state == saved state"})
        repeat = 3 if quick else 5
        with tempfile.TemporaryDirectory(prefix="zr-bench-s3-") as tmp:
            for lanes, items in SIZES_QUICK if quick else SIZES_FULL:
                state = engine_state(lanes, items)
                times: dict[str, list[float]] = {"s3 save": [], "s3 load": [], "fs save": [], "fs load": []}
                nbytes = 0
                for r in range(repeat):
                    url = f"s3://zr-bench/t/l{lanes}-{r}"
                    local = Path(tmp) / f"l{lanes}-{r}"
                    t0 = time.perf_counter()
                    store.save(state, url, storage=st)
                    t1 = time.perf_counter()
                    got_s3 = store.load(url, storage=st)
                    t2 = time.perf_counter()
                    store.save(state, local)
                    t3 = time.perf_counter()
                    got_fs = store.load(local)
                    t4 = time.perf_counter()
                    assert got_s3 == got_fs == state
                    times["s3 save"].append(t1 - t0)
                    times["s3 load"].append(t2 - t1)
                    times["fs save"].append(t3 - t2)
                    times["fs load"].append(t4 - t3)
                    nbytes = sum(p.stat().st_size for p in local.iterdir())
                for kind in ("save", "load"):
                    ours = statistics.median(times[f"s3 {kind}"]) * 1e3
                    theirs = statistics.median(times[f"fs {kind}"]) * 1e3
                    rows.append(
                        {
                            "name": f"{kind} ms, s3 (loopback moto) vs local files, {lanes} lanes, "
                            f"{nbytes:,} bytes",
                            "ours": round(ours, 2),
                            "theirs": round(theirs, 2),
                            "vs": "local files (POSIX store)",
                            "unit": "ms",
                            "ratio": ours / theirs,
                            "note": f"median of {repeat}; both loads == the saved state; 2-core shared VM, "
                            "moto is Python on loopback, not a cloud endpoint",
                        }
                    )
    finally:
        server.stop()
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    rows = results(quick=args.quick)
    print(f"{'name':<84} {'ours':>10} {'theirs':>10} {'unit':>9} {'ratio':>7}  note")
    for r in rows:
        ratio = "-" if r["ratio"] is None else f"{r['ratio']:.2f}"
        theirs = "-" if r["theirs"] is None else str(r["theirs"])
        print(f"{r['name']!s:<84} {r['ours']!s:>10} {theirs:>10} {r['unit']!s:>9} {ratio:>7}  {r['note']}")


if __name__ == "__main__":
    main()

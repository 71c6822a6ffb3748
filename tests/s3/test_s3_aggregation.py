"""The aggregation round over object storage (aggregate_dir="s3://..."): real
processes against the loopback S3 server, zephon's capped back-off, the 90 s floor."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
import warnings
from pathlib import Path
from typing import Any

import pytest

from sim.cluster import topology_states
from zephon_ref import codec
from zephon_ref.coordination import aggregate_round, open_backend
from zephon_ref.coordination.driver import _object_store, round_timing
from zephon_ref.coordination.merge import merge
from zephon_ref.coordination.objectstore import Backoff, ObjectStoreBackend
from zephon_ref.errors import ConfigError

boto3 = pytest.importorskip("boto3")

ROOT = Path(__file__).resolve().parents[2]
# The aggregation participant script the directory-backend tests run (a script, not an import).
PARTICIPANT = ROOT / "tests" / "coordination" / "_child.py"


def _digest(states: dict[Any, dict[str, Any]]) -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return hashlib.sha256(codec.encode(merge(list(states.values())))).hexdigest()


def test_backoff_follows_zephons_cloud_schedule() -> None:
    b = Backoff()
    waits = [b.next_wait(5.0) for _ in range(9)]
    assert waits[:6] == [0.5, 0.75, 1.125, 1.6875, 2.53125, 3.796875]
    assert waits[6:] == [5.0, 5.0, 5.0]  # capped
    assert b.next_wait(0.2) == 0.2  # never longer than the machine allows (its deadline)
    b.reset()
    assert b.next_wait(5.0) == 0.5
    with pytest.raises(ConfigError):
        Backoff(start=0.0)


def test_object_store_rounds_get_the_cloud_timing() -> None:
    assert round_timing(True, 2_000, 50) == (90_000, 5_000)  # floored at 90 s, polls up to the cap
    assert round_timing(True, 180_000, 50) == (180_000, 5_000)
    assert round_timing(False, 2_000, 50) == (2_000, 50)  # directories and KV stores unchanged
    assert _object_store("s3://bucket/agg") and _object_store("S3://bucket/agg")
    assert not _object_store("/tmp/agg") and not _object_store("torch://") and not _object_store("s3:x")


def test_open_backend_takes_s3_urls(bucket: str) -> None:
    b = open_backend(f"s3://{bucket}/agg")
    assert isinstance(b, ObjectStoreBackend)
    assert b.put_if_absent("ns/a.x", b"1") and not b.put_if_absent("ns/a.x", b"2")
    b.put("ns/a.y", b"3")
    b.put("ns/a.y", b"4")
    assert b.get("ns/a.x") == b"1" and b.get("ns/a.y") == b"4" and b.get("ns/none") is None
    assert b.list("ns/a.") == ["ns/a.x", "ns/a.y"]
    b.delete("ns/a.x")
    assert b.list("ns/a.") == ["ns/a.y"]
    for bad in ("s3://", "s3://Bad_Bucket/x", "gs://bucket/x"):
        with pytest.raises(ConfigError):
            open_backend(bad)


def test_round_in_threads_polls_with_backoff(bucket: str) -> None:
    states = topology_states(3, canonical_replicas=8, world_size=2)
    backends = {r: ObjectStoreBackend(f"s3://{bucket}/agg") for r in (0, 1)}
    results: dict[int, Any] = {}

    def run(rank: int) -> None:
        results[rank] = aggregate_round(states[(rank, 0)], backend=backends[rank], rank=rank, world_size=2,
                                        run_id="thr", timeout_s=1.0, warn_mid_window=False)

    threads = [threading.Thread(target=run, args=(r,)) for r in (1, 0)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert set(results) == {0, 1}
    assert results[0].merged == results[1].merged and results[0].round_id == results[1].round_id
    assert hashlib.sha256(codec.encode(results[0].merged)).hexdigest() == _digest(states)
    waits = [w for b in backends.values() for w in b.backoff.waits]
    assert waits and all(0 <= w <= 5.0 for w in waits)
    # Every wait is a step of the schedule (or cut short by the deadline, which 90 s never reaches here).
    steps = {round(0.5 * 1.5**i, 6) for i in range(6)} | {5.0}
    assert {round(w, 6) for w in waits} <= steps, waits


def _spawn(args: dict[str, Any]) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.Popen([sys.executable, str(PARTICIPANT), json.dumps(args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=str(ROOT))


def _result(p: subprocess.Popen[str]) -> dict[str, Any]:
    out, err = p.communicate(timeout=150)
    final = [json.loads(x) for x in out.splitlines() if x.startswith("{") and "started" not in x]
    assert final, f"no result (rc={p.returncode}): {err[-2000:]}"
    out_: dict[str, Any] = final[-1]
    return out_


@pytest.mark.parametrize("ws", [2, 4])
def test_round_between_processes_over_s3(bucket: str, ws: int) -> None:
    url = f"s3://{bucket}/agg"
    procs = [_spawn({"backend": url, "run_id": "run", "timeout_s": 20.0, "seed": ws, "c": 8, "rank": r,
                     "worker": 0, "world_size": ws, "workers": 1}) for r in range(ws)]
    outs = [_result(p) for p in procs]
    assert all(o["ok"] for o in outs), outs
    want = _digest(topology_states(ws, canonical_replicas=8, world_size=ws))
    assert {o["digest"] for o in outs} == {want}
    assert len({o["round_id"] for o in outs}) == 1
    # As on the directory backend: only the closed-round marker is left in the namespace.
    listed = boto3.client("s3").list_objects_v2(Bucket=bucket, Prefix="agg/run-0/").get("Contents", [])
    assert [o["Key"] for o in listed] == [f"agg/run-0/{outs[0]['round_id']}.outcome"]


@pytest.mark.slow
def test_rank_that_never_calls_is_named_after_the_90_s_floor(bucket: str) -> None:
    """As on the directory backend, with the cloud timing: asked for 2 s, the round waits
    the 90 s floor, then the leader names the missing rank and its lanes in a failure
    notice that the followers read."""
    url = f"s3://{bucket}/agg"
    procs = [_spawn({"backend": url, "run_id": "run", "timeout_s": 2.0, "seed": 1, "c": 8, "rank": r,
                     "worker": 0, "world_size": 4, "workers": 1}) for r in (0, 1, 3)]
    lead, *fols = [_result(p) for p in procs]
    assert not lead["ok"] and lead["type"] == "AggregationTimeout"
    assert lead["missing_ranks"] == [2] and lead["missing_lanes"] == [4, 5]
    for f in fols:
        assert not f["ok"]
        assert (f["type"] == "LeaderFailed" and "missing ranks [2]" in f["msg"]) or f[
            "waiting_for"
        ] == "outcome"

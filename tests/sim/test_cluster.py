"""The executor's Ray backend against a local Ray instance (ray.init(num_cpus=2), one for the whole
module): the same summary and fingerprints as a local sweep, a worker process killed from outside
mid-sweep loses no seed, a budget is a timeout, an exception a failing seed.  Needs the cluster
extra (pip install -e '.[cluster]'); without Ray every test here is skipped, saying so."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip(
    "ray", reason="the cluster extra is not installed (pip install -e '.[cluster]'): Ray tests skip"
)

from properties.campaigns import CODE_ROOTS, conformance_tasks, run_campaign  # noqa: E402
from sim import chaos  # noqa: E402
from sim.executor import InlineBackend, RayBackend, Task, run_tasks  # noqa: E402
from sim.sweep import run_sweep, summarise, tasks_for  # noqa: E402

# one Ray instance for the module: under `pytest -n 2 --dist loadgroup` these run on one xdist worker
pytestmark = [pytest.mark.cluster, pytest.mark.xdist_group("ray")]

SEEDS = list(range(8))  # default seeds: the sweep's real mix of sizes


@pytest.fixture(scope="module")
def ray_backend() -> Iterator[RayBackend]:
    be = RayBackend(None, num_cpus=2, object_store_memory=200 * 2**20, code_roots=CODE_ROOTS)
    try:
        yield be
    finally:
        be.close()
    import ray

    assert not ray.is_initialized()


@pytest.fixture(scope="module")
def reference() -> dict[str, Any]:
    summary, _ = run_sweep(SEEDS, {}, backend=InlineBackend())
    return summary


def test_a_ray_sweep_gives_the_local_summary_and_fingerprints(
    ray_backend: RayBackend, reference: dict[str, Any], tmp_path: Path
) -> None:
    summary, records = run_sweep(SEEDS, {}, backend=ray_backend, jsonl=tmp_path / "s.jsonl")
    assert summary == reference
    assert summary["fingerprints"] and all(summary["fingerprints"].values())
    assert sorted(r["seed"] for r in records) == SEEDS


def test_a_worker_killed_mid_sweep_loses_no_seed(ray_backend: RayBackend, reference: dict[str, Any],
                                                 tmp_path: Path) -> None:
    """A thread of this test SIGKILLs the Ray worker process running the first seed to start, while
    the sweep runs; Ray runs that seed again and the summary equals the undisturbed one."""
    trace = tmp_path / "trace"
    trace.mkdir()
    tasks = [Task(t.key, chaos.announced, (str(trace), t.key, 1.0, t.fn, t.args), t.meta)
             for t in tasks_for(SEEDS, {})]
    killed: list[str] = []

    def killer() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            started = sorted(trace.iterdir())
            if started:
                victim = started[0]
                os.kill(int(victim.read_text()), signal.SIGKILL)
                killed.append(victim.name)
                return
            time.sleep(0.05)

    t = threading.Thread(target=killer)
    t.start()
    records = run_tasks(tasks, ray_backend, retries=3)
    t.join()
    assert killed, "no worker was killed"
    key = killed[0].rsplit(".", 1)[0]
    attempts = [p for p in trace.iterdir() if p.name.rsplit(".", 1)[0] == key]
    assert len(attempts) >= 2, (
        f"the killed seed {key} did not run again: {sorted(p.name for p in trace.iterdir())}"
    )
    assert summarise(records, SEEDS, {}) == reference


def test_budget_and_exception_on_ray(ray_backend: RayBackend) -> None:
    tasks = [Task("slow", chaos.sleeps, (60.0,), {"seed": 1}), *tasks_for([2], {"faults": "meteor"})]
    t0 = time.monotonic()
    recs = {r["task"]: r for r in run_tasks(tasks, ray_backend, budget_s=1.0)}
    assert time.monotonic() - t0 < 30
    assert recs["slow"]["status"] == "timeout" and recs["slow"]["ok"] is False
    err = recs["seed:2"]
    assert err["status"] == "error" and "ValueError" in err["error"] and "derive_config" in err["traceback"]
    assert err["reproduce"] == "python -m sim run --seed 2 --faults meteor"


def test_a_conformance_campaign_on_ray_equals_the_local_one(ray_backend: RayBackend) -> None:
    tasks = conformance_tasks("inline", 4, 2, seed=5, only=["resume at cuts"])
    here, _ = run_campaign("conformance", tasks, {}, backend=InlineBackend())
    there, _ = run_campaign("conformance", tasks, {}, backend=ray_backend)
    assert there == here and here["ok"] and here["properties"]["resume at cuts"]["examples"] >= 4

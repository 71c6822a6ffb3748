"""``zephon_ref.observability`` against zephon 0.2.0's ``zephon.observability``.

zephon_ref collects no timings, so these types are never filled by a run; code written for zephon
still builds and aggregates them.  ``ZEPHON_REF_OBSERVABILITY_CASES`` generated cases (default 60;
one ``random.Random`` each) drive both libraries' summaries with the same random deltas, merges and
clones and compare every field, every derived number (averages, ratios, ``has_samples``,
``success_rate``, ``compute_wait_ratios``) and every record (``to_records`` / ``to_dict``); the
configuration objects and enums are compared value by value.
"""

from __future__ import annotations

import dataclasses
import os
import random
from enum import Enum
from typing import Any

import pytest

zephon = pytest.importorskip("zephon", reason="zephon 0.2.0 (the conformance extra) is not installed")

import zephon.observability as Z  # noqa: E402
import zephon.observability.stats as ZS  # noqa: E402

import zephon_ref.observability as R  # noqa: E402
import zephon_ref.observability.stats as RS  # noqa: E402
from zephon_ref.errors import ZephonRefError  # noqa: E402

pytestmark = pytest.mark.conformance

CASES = int(os.environ.get("ZEPHON_REF_OBSERVABILITY_CASES", "60"))


def view(x: Any) -> Any:
    """An implementation-neutral view: dataclasses as (class name, fields), enums as values."""
    if isinstance(x, Enum):
        return x.value
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return (type(x).__name__, {f.name: view(getattr(x, f.name)) for f in dataclasses.fields(x)})
    if isinstance(x, dict):
        return {k: view(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [view(v) for v in x]
    return x


def derived(x: Any) -> dict[str, Any]:
    """Every public property and argument-free query of a summary or totals object."""
    out: dict[str, Any] = {}
    for name in ("avg_group_ns", "avg_resolve_ns", "avg_open_ns", "avg_read_ns", "avg_close_ns",
                 "cache_hit_ratio", "success_rate", "avg_processing_ns", "produced_elements",
                 "total_processing_ns", "total_wait_ns"):
        if hasattr(type(x), name) and isinstance(getattr(type(x), name), property):
            out[name] = getattr(x, name)
    has = getattr(x, "has_samples", None)
    if has is not None:
        out["has_samples"] = has() if callable(has) else has
    if hasattr(x, "iter_stages"):
        out["iter_stages"] = [view(s) for s in x.iter_stages()]
    if hasattr(x, "iter_nodes"):
        out["iter_nodes"] = [view(n) for n in x.iter_nodes()]
    if hasattr(x, "to_dict"):
        out["to_dict"] = x.to_dict()
    return out


def header(r: random.Random, lib: Any) -> dict[str, Any]:
    mode = r.choice(["off", "stages", "nodes"])
    return {"plan_id": r.choice([None, "p", "q"]), "reporting_interval_s": r.choice([None, 1.0, 2.5]),
            "tracking_mode": lib.ExecutionTrackingMode(mode)}


def fetch_delta(r: random.Random, lib: Any) -> Any:
    counts = [r.choice([0, r.randint(0, 50)]) for _ in range(10)]
    return lib.FetchTimingDelta(r.randint(0, 2), r.randint(0, 2), r.randint(0, 2), *counts)


def node_delta(r: random.Random, lib: Any) -> Any:
    opt = [r.choice([None, r.randint(0, 40)]) for _ in range(3)]
    sums = [r.choice([0, r.randint(0, 60)]) for _ in range(6)]
    where = (r.randint(0, 2), r.randint(0, 2), r.choice(["s0", "s1"]), r.choice(["a", "b"]))
    return lib.NodeMetricsDelta(*where, *sums, *opt)


def prefetch_delta(r: random.Random, lib: Any) -> Any:
    return lib.PrefetchTimingDelta(r.randint(0, 2), *[r.choice([0, r.randint(0, 9)]) for _ in range(4)])


KINDS = {"fetch": ("FetchTimingSummary", fetch_delta), "node": ("PipelineSummary", node_delta),
         "prefetch": ("PrefetchTimingSummary", prefetch_delta)}


def run_case(seed: int, lib: Any) -> list[Any]:
    """A log of everything observable while a random script of applies, merges, clones and queries
    runs on ``lib``'s classes (the same script for both: one seeded generator per call)."""
    r = random.Random(seed)
    kind = list(KINDS)[seed % 3]
    cls_name, make = KINDS[kind]
    cls = getattr(lib, cls_name)
    a, b = cls(**header(r, lib)), cls(**header(r, lib))
    log: list[Any] = []
    for _ in range(r.randint(0, 12)):
        step = r.random()
        if step < 0.6:
            r.choice([a, b]).apply(make(r, lib))
        elif step < 0.75:
            a.merge(b)
        elif step < 0.85:
            c = a.clone()
            log.append(("clone equal", view(c) == view(a), c is a))
            c.apply(make(r, lib))
            log.append(("clone independent", view(a)))
        elif kind == "node":
            a.compute_wait_ratios()
        log.append(view(a))
        log.append(derived(a))
        for s in getattr(a, "stages", {}).values():
            log.append(derived(s))
            for t in [getattr(s, "totals", None), *getattr(s, "shard_totals", {}).values(),
                      *getattr(s, "nodes", {}).values()]:
                if t is not None:
                    log.append(derived(t))
    if kind == "fetch":
        names = {0: "zero", 2: "two"}
        log += [a.to_records(), a.to_records(names), a.to_records(include_shards=False)]
    elif kind == "node":
        log.append(a.to_records())
    return log


@pytest.mark.parametrize("seed", range(CASES))
def test_summaries_aggregate_like_zephons(seed: int) -> None:
    theirs, ours = run_case(seed, Z_ALL), run_case(seed, R_ALL)
    for i, (w, g) in enumerate(zip(theirs, ours, strict=True)):
        assert g == w, f"seed {seed} step {i}"


class _All:
    def __init__(self, *mods: Any) -> None:
        self.mods = mods

    def __getattr__(self, name: str) -> Any:
        for m in self.mods:
            if hasattr(m, name):
                return getattr(m, name)
        raise AttributeError(name)


Z_ALL, R_ALL = _All(Z, ZS), _All(R, RS)


def test_the_cases_reach_every_kind_and_nonzero_ratios() -> None:
    logs = [run_case(s, R_ALL) for s in range(min(CASES, 30))]
    ratios = [d.get("cache_hit_ratio", 0) for log in logs for d in log if isinstance(d, dict)]
    assert any(0 < x < 1 for x in ratios)
    assert any(isinstance(d, dict) and d.get("has_samples") for log in logs for d in log)


def test_enums_and_sink_config_are_zephons() -> None:
    for name in ("ExecutionTrackingMode", "MetricsSinkMode"):
        z, o = getattr(Z, name), getattr(R, name)
        assert [(m.name, m.value) for m in o] == [(m.name, m.value) for m in z]
        for v in (None, *[m.value for m in z]):
            assert o.from_value(v).value == z.from_value(v).value
        for bad in ("NODES", "x", 3):
            with pytest.raises(ValueError):
                z.from_value(bad)
            with pytest.raises(ValueError):
                o.from_value(bad)
    for m in Z.ExecutionTrackingMode:
        o = R.ExecutionTrackingMode(m.value)
        assert (o.collects_stages, o.collects_nodes) == (m.collects_stages, m.collects_nodes)
    for m in Z.MetricsSinkMode:
        o = R.MetricsSinkMode(m.value)
        assert (o.includes_statsd(), o.includes_logs()) == (m.includes_statsd(), m.includes_logs())
        zc = Z.MetricsSinkConfig(mode=m, default_tags={"b": "2"})
        oc = R.MetricsSinkConfig(mode=o, default_tags={"b": "2"})
        assert view(oc) == view(zc)
        assert (oc.should_emit_statsd(), oc.should_log()) == (zc.should_emit_statsd(), zc.should_log())
        extra = {"b": "3", "a": "1"}
        assert view(oc.with_additional_tags(extra)) == view(zc.with_additional_tags(extra))
    assert view(R.MTPQueueStats(1, 2, 3, 4)) == view(Z.MTPQueueStats(1, 2, 3, 4))


@pytest.mark.parametrize("kw", [{"mode": "statsd"}, {"statsd_port": "x"}, {"statsd_port": 0},
                                {"max_batch_size": 0}, {"flush_interval_s": -1.0}, {"namespace": 3},
                                {"default_tags": None}, {"json_logs": 1}])
def test_sink_config_values_are_checked_at_construction(kw: dict[str, Any]) -> None:
    """zephon stores these unchecked (a str mode fails with AttributeError); zephon_ref refuses them
    with a typed error naming the field (docs/divergences.md D-98)."""
    with pytest.raises(ZephonRefError, match=next(iter(kw))) as info:
        R.MetricsSinkConfig(**kw)
    assert isinstance(info.value, (TypeError, ValueError))

"""One seeded simulator run from one integer: configuration, world, checker, coverage probes.

Theory of operation
-------------------
:func:`derive_config` turns a seed into a run's whole configuration (workload shape,
topology, checkpoint cadence, which faults are on and how often) by drawing from a
:class:`~sim.choices.SeededChoices` of ``derive_seed(seed, "sim.run/config")``: named
substreams, so adding a new knob never changes the values drawn for another.  Overrides
(``ranks=``, ``workers=``, ``lanes=``, ``steps=``, ``faults=`` ...) replace derived
values after the draw.  The engine knobs of the workload (packing algorithm, streaming or
block shuffle, batch ``drop_last``, the lane mapping) come from their own substream
``sim.run/knobs``, so drawing them left every earlier value where it was; each knob has a
coverage probe (:data:`KNOB_PROBES`) that a sweep counts.  The result is a plain JSON-able
dict; :func:`world_config` and :func:`workload_of` turn it into a
:class:`~sim.world.WorldConfig` and a :class:`~sim.workloads.Workload`.

:func:`run_seed` builds the world with ``SeededChoices(seed)``, runs it, and checks it:
the history checker (:func:`sim.history.check_history`) against an uninterrupted
single-rank run of the same workload (cached per workload), and, when the run drained
the data, the lineage checker (:func:`sim.checker.check_lineage`) on the items the
trainer consumed and the tombstones of its timeline (:attr:`sim.world.World.tombstones`:
observed through the engine's ``on_tombstone`` hook, rolled back with restores), so an
offset closed by nothing, or twice (two records, two tombstones, or one of each), fails
the run with a witness naming the offset and its closers.  With ``drop_last=True`` each lane's
partial last batch is dropped by configuration, with no tombstone: exactly the offsets an
uninterrupted run loses (:func:`reference_lost`) are excused, and only when the run lost exactly
those.  Every cut's inflight chunks are checked against :func:`sim.invariants.inflight_bound`
(:attr:`sim.world.World.inflight_problems`).  ``mid_step`` (an int, 1 in N
deliveries; 0: never) sets ``mid_step_checkpoint``, the rate of checkpoint cuts inside a
global step, which the seed otherwise draws (off in a quarter of the runs).  It returns
a frozen :class:`RunResult`; its ``fingerprint`` is a sha256 of the kernel trace, the
decisions and the history, so the same seed gives the same fingerprint in any process.

What may not live here: pipeline logic, and anything from ``properties``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import gc
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, fields
from typing import Any

from sim.checker import LaneLineage, LineageReport, admitted_from_source, check_lineage, records_of
from sim.choices import SeededChoices
from sim.history import Problem, check_history
from sim.invariants import Step
from sim.workloads import Workload, item_view, record_view, records_view
from sim.world import PROBES, World, WorldConfig, _closing_keys, check_run, reference_steps
from zephon_ref.seeding import derive_seed

__all__ = ["FAULTS", "FIXED_KNOBS", "KNOB_PROBES", "RunResult", "complete_records", "derive_config",
           "excuse_lost", "knob_probes", "reference_for", "reference_lost", "run_seed", "run_seed_world",
           "undelivered_lost", "world_config", "workload_of"]

#: Fault kinds a run may switch on (``faults=`` takes a comma list of these, "all" or "none").
FAULTS: tuple[str, ...] = (
    "crash",
    "rank_crash",
    "resize",
    "slow",
    "round_crash",
    "storage_crash",
    "io_error",
    "read_corruption",
    "stale_listing",
    "latency_spike",
    "bit_rot",
)

_RATIOS: dict[str, tuple[tuple[int, int], ...]] = {
    "crash": ((1, 400), (1, 1500)),
    "rank_crash": ((1, 500), (1, 2000)),
    "resize": ((1, 8), (1, 20)),
    "slow": ((1, 3), (1, 2)),
    "round_crash": ((1, 30), (1, 100)),
    "storage_crash": ((1, 40), (1, 150)),
    "io_error": ((1, 60), (1, 200)),
    "read_corruption": ((1, 20), (1, 80)),
    "stale_listing": ((1, 4), (1, 10)),
    "latency_spike": ((1, 20), (1, 60)),
    "bit_rot": ((1, 2), (1, 1)),
}
Offset = tuple[int, int]  # (chunk id, chunk offset)
_WORLD_FIELDS = {f.name for f in fields(WorldConfig)}
_RUN_FLAGS = {"lineage", "record_deliveries"}  # run_seed's own switches (the lineage check, delivery entries)
_WORKLOAD_FIELDS = {f.name for f in fields(Workload)}


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def derive_config(seed: int, **overrides: Any) -> dict[str, Any]:
    """The run's configuration as plain data (see the module docstring)."""
    c = SeededChoices(derive_seed(seed, "sim.run/config"))
    lanes = int(overrides.get("lanes", c.choose("config/lanes", (4, 4, 6, 8))))
    uneven = c.chance("config/uneven", 1, 4)
    sizes = list(range(1, lanes + 1)) if uneven else _divisors(lanes)
    ranks = int(overrides.get("ranks", c.choose("config/ranks", sizes)))
    restart = sorted({1, lanes, ranks, c.choose("config/restart-extra", sizes)})
    storage = c.chance("config/storage", 3, 4)
    unrecoverable = storage and c.chance("config/unrecoverable", 1, 16)
    cfg: dict[str, Any] = {
        "seed": seed,
        "lanes": lanes,
        "ranks": ranks,
        "workers": c.choose("config/workers", (1, 1, 2, 3)),
        "steps": c.choose("config/steps", (1000, 1000, 12, 25)),
        "checkpoint_every": c.integer("config/checkpoint-every", 1, 5),
        "restart_ranks": restart,
        "allow_uneven": uneven or any(lanes % r for r in (ranks, *restart)),
        "aggregation": c.chance("config/aggregation", 1, 2),
        "storage": storage,
        "unrecoverable": unrecoverable,
        "max_crashes": c.integer("config/max-crashes", 1, 4),
        "max_latency": c.integer("config/max-latency", 2, 8),
        "microbatch_size": c.choose("config/microbatch", (1, 2)),
        "ensure_mixture": c.chance("config/ensure-mixture", 3, 4),
        "shuffle_seed": c.integer("config/shuffle-seed", 0, 9),
        # checkpoint cuts between two deliveries of a global step (per delivery; off in a quarter of the runs)
        "mid_step_checkpoint": list(c.choose("config/mid-step", ((0, 1), (1, 6), (1, 25), (1, 100)))),
    }
    cfg.update(_knobs(seed, int(cfg["microbatch_size"])))
    faults = [f for f in FAULTS if c.chance(f"config/fault/{f}", 1, 2)]
    spec = overrides.pop("faults", None) if "faults" in overrides else None
    if spec is not None:
        faults = list(FAULTS) if spec == "all" else [] if spec in ("none", "") else \
            [f.strip() for f in str(spec).split(",")]
        bad = [f for f in faults if f not in FAULTS]
        if bad:
            raise ValueError(f"faults: expected a comma list of {FAULTS}, 'all' or 'none', received {bad}")
    for f in FAULTS:
        cfg[f] = list(c.choose(f"config/ratio/{f}", _RATIOS[f])) if f in faults else [0, 1]
    if not storage:
        for f in (
            "storage_crash",
            "io_error",
            "read_corruption",
            "stale_listing",
            "latency_spike",
            "bit_rot",
        ):
            cfg[f] = [0, 1]
    if not cfg["aggregation"]:
        cfg["round_crash"] = [0, 1]
    mid = overrides.pop("mid_step", None)
    if mid is not None:  # a mid-step checkpoint cut once in ``mid`` deliveries (0: never)
        if type(mid) is not int or mid < 0:
            raise ValueError(
                f"mid_step: expected an int >= 0 (a cut once in that many deliveries; 0: never), "
                f"received {mid!r}"
            )
        overrides.setdefault("mid_step_checkpoint", [1, mid] if mid else [0, 1])
    docs = overrides.pop("docs", None)
    if docs is not None:  # a corpus of ``docs`` web documents, half as many code, a quarter as many books
        overrides.setdefault(
            "layout", {"web": (int(docs),), "code": (int(docs) // 2,), "books": (int(docs) // 4,)}
        )
    for k, v in overrides.items():
        if k not in cfg and k not in _WORLD_FIELDS and k not in _WORKLOAD_FIELDS and k not in _RUN_FLAGS:
            raise ValueError(f"override: expected one of {sorted(set(cfg) | _WORLD_FIELDS)}, received {k!r}")
        cfg[k] = (
            list(v) if isinstance(v, tuple) else ({n: list(t) for n, t in v.items()} if k == "layout" else v)
        )
    if cfg["unrecoverable"]:
        cfg["storage"] = True
    cfg["allow_uneven"] = bool(cfg["allow_uneven"]) or any(cfg["lanes"] % r for r in (cfg["ranks"],
                                                                                     *cfg["restart_ranks"]))
    return cfg


#: the engine knobs a run draws, each with the coverage probe a run reaching it counts
#: (issue 20 item 4); "reached" means the knob shaped the run: a mapping only when the job started on
#: several ranks each owning several lanes (where contiguous and interleaved differ), and
#: ``knob_drop_last_dropped`` only when drop_last=True did drop a partial batch
KNOB_PROBES: tuple[str, ...] = (
    "knob_pack_first_fit",
    "knob_pack_best_fit",
    "knob_pack_wrap",
    "knob_shuffle_streaming",
    "knob_shuffle_block",
    "knob_ensure_mixture",
    "knob_no_ensure_mixture",
    "knob_drop_last_true",
    "knob_drop_last_dropped",
    "knob_drop_last_false",
    "knob_mapping_contiguous",
    "knob_mapping_interleaved",
)


#: the engine knobs every run had before they were drawn: ``run_seed(s, **FIXED_KNOBS)`` replays the
#: workload a seed found by an earlier sweep had then (the regression seeds in tests/sim pin them)
FIXED_KNOBS: dict[str, Any] = {
    "pack_algorithm": "first_fit",
    "shuffle_algorithm": "streaming",
    "drop_last": False,
    "mapping_strategy": "contiguous",
    "restart_microbatch": [],
}


def _knobs(seed: int, microbatch: int) -> dict[str, Any]:
    """The engine knobs of the workload, from their own labelled substream (``sim.run/knobs``), so
    the values drawn before these knobs existed (``sim.run/config``) stay what they were; a seed
    that draws today's defaults runs the same world (and fingerprint) as before.

    ``restart_microbatch`` (on in half the runs): the micro-batch sizes a restart or planned resize
    may pick, half, the same and twice the workload's (seed 002: a resume may change the
    per-device micro-batch size; the checker then compares records, :mod:`sim.history`)."""
    k = SeededChoices(derive_seed(seed, "sim.run/knobs"))
    return {
        "pack_algorithm": k.choose("knobs/pack", ("first_fit", "first_fit", "best_fit", "wrap")),
        "shuffle_algorithm": k.choose("knobs/shuffle", ("streaming", "streaming", "block")),
        "drop_last": k.chance("knobs/drop-last", 1, 3),
        "mapping_strategy": k.choose("knobs/mapping", ("contiguous", "interleaved")),
        "restart_microbatch": (sorted({max(1, microbatch // 2), microbatch, 2 * microbatch})
                               if k.chance("knobs/microbatch-change", 1, 2) else []),
    }


def knob_probes(cfg: Mapping[str, Any], *, multi_rank: bool, dropped: bool) -> dict[str, int]:
    """The knob probes (:data:`KNOB_PROBES`) a run of ``cfg`` reached: ``multi_rank`` when the
    mapping decided which lanes a rank owns, ``dropped`` when drop_last dropped records."""
    wl = workload_of(cfg)
    hit = {f"knob_pack_{wl.pack_algorithm}", f"knob_shuffle_{wl.shuffle_algorithm}",
           "knob_ensure_mixture" if wl.ensure_mixture else "knob_no_ensure_mixture",
           "knob_drop_last_true" if wl.drop_last else "knob_drop_last_false"}
    if wl.drop_last and dropped:
        hit.add("knob_drop_last_dropped")
    if multi_rank:
        hit.add(f"knob_mapping_{wl.mapping_strategy}")
    return {k: int(k in hit) for k in KNOB_PROBES}


def workload_of(cfg: Mapping[str, Any]) -> Workload:
    kw: dict[str, Any] = {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in cfg.items()
                          if k in _WORKLOAD_FIELDS}
    kw["canonical_replicas"] = int(cfg["lanes"])
    return Workload(**kw)


def world_config(cfg: Mapping[str, Any]) -> WorldConfig:
    kw: dict[str, Any] = {k: (tuple(v) if isinstance(v, list) else v) for k, v in cfg.items()
                          if k in _WORLD_FIELDS and k != "canonical_replicas"}
    return WorldConfig(canonical_replicas=int(cfg["lanes"]), **kw)


@functools.lru_cache(maxsize=32)
def _reference(key: str, records: bool) -> tuple[Step, ...]:
    return tuple(reference_steps(_WORKLOADS[key].build, view=records_view if records else item_view))


_WORKLOADS: dict[str, Workload] = {}


def reference_for(workload: Workload, *, records: bool = False) -> tuple[Step, ...]:
    """The uninterrupted single-rank run of ``workload`` in global steps (cached per process); with
    ``records`` each item's view is a tuple of per-record views (:func:`sim.workloads.records_view`)."""
    key = repr(workload)
    _WORKLOADS.setdefault(key, workload)
    return _reference(key, records)


@functools.lru_cache(maxsize=32)
def _complete(key: str) -> tuple[dict[int, tuple[str, ...]], dict[int, tuple[tuple[Offset, ...], ...]]]:
    workload = dataclasses.replace(_WORKLOADS[key], microbatch_size=1)
    views: dict[int, list[str]] = {}
    closes: dict[int, list[tuple[Offset, ...]]] = {}
    engine = workload.build().engine()
    while not engine.finished:
        x = engine.deliver()
        if x is None:
            engine.step()
            continue
        for r in records_of([x]):
            if r.meta.tombstone or r.meta.is_sentinel:
                continue  # pragma: no cover - the engine delivers data records only
            lane = int(r.meta.lane_id)
            views.setdefault(lane, []).append(repr(record_view(r)[0]))
            closes.setdefault(lane, []).append(tuple(sorted((c, o) for _, c, o in _closing_keys(r))))
    return ({lane: tuple(v) for lane, v in views.items()}, {lane: tuple(v) for lane, v in closes.items()})


def complete_records(workload: Workload) -> dict[int, tuple[str, ...]]:
    """Every lane's complete record stream (per-record views, :func:`sim.workloads.records_view`'s
    unit): an uninterrupted run of ``workload`` at micro-batch 1, which drops no partial batch.
    The unit a run whose micro-batch size changes is checked in (cached per process)."""
    key = repr(workload)
    _WORKLOADS.setdefault(key, workload)
    return _complete(key)[0]


def undelivered_lost(workload: Workload, delivered: dict[int, int]) -> dict[int, tuple[tuple[int, int], ...]]:
    """Per lane, the offsets that only the records after the first ``delivered[lane]`` of its
    complete stream close: what a drained run that delivered that many records and dropped the
    rest (its last partial batch under drop_last) loses.  The drop_last excuse of a run whose
    micro-batch size changed (the uninterrupted run's own losses are those of another size)."""
    key = repr(workload)
    _WORKLOADS.setdefault(key, workload)
    closes = _complete(key)[1]
    out = {}
    for lane, per_record in sorted(closes.items()):
        lost = sorted(k for keys in per_record[delivered.get(lane, 0):] for k in keys)
        if lost:
            out[lane] = tuple(lost)
    return out


@functools.lru_cache(maxsize=32)
def _reference_lost(key: str) -> dict[int, tuple[tuple[int, int], ...]]:
    workload = _WORKLOADS[key]
    items: list[Any] = []
    tombs: list[Any] = []
    engine = workload.build().engine(on_tombstone=tombs.append)
    while not engine.finished:
        x = engine.deliver()
        if x is not None:
            items.append(x)
            continue
        engine.step()
    lanes = range(workload.canonical_replicas)
    lin = check_lineage(
        admitted_from_source(workload.source(), lanes, workload.canonical_replicas), items, tombs
    )
    assert all(not (v.duplicated or v.unexpected) for v in lin.lanes.values()), lin.describe(limit=3)
    return {lane: v.lost for lane, v in sorted(lin.lanes.items()) if v.lost}


def reference_lost(workload: Workload) -> dict[int, tuple[tuple[int, int], ...]]:
    """Per lane, the offsets an uninterrupted single-rank run of ``workload`` closes by nothing:
    empty unless ``drop_last=True`` dropped a partial batch, which it does by configuration (cached
    per process).  A run must lose exactly these, whatever its faults and restores."""
    key = repr(workload)
    _WORKLOADS.setdefault(key, workload)
    return _reference_lost(key)


@dataclass(frozen=True, slots=True)
class RunResult:
    """One checked run: its configuration, fingerprint, verdict, probes and counts."""

    seed: int
    config: dict[str, Any]
    fingerprint: str
    ok: bool
    problems: tuple[str, ...]
    witnesses: tuple[Problem, ...]
    probes: dict[str, int]
    events: int
    steps: int
    restores: int
    crashes: int
    history: int
    lineage: str  # "ok", "n/a (...)" or the failing lanes

    def summary(self) -> dict[str, Any]:
        return {"seed": self.seed, "ok": self.ok, "fingerprint": self.fingerprint, "events": self.events,
                "steps": self.steps, "restores": self.restores, "crashes": self.crashes,
                "history": self.history, "lineage": self.lineage,
                "probes": {k: v for k, v in sorted(self.probes.items()) if v},
                "problems": list(self.problems[:5])}


#: how much rarer the cyclic collector's full passes are during a run (see :func:`relaxed_gc`)
GC_FULL_PASS_FACTOR = 100


@contextlib.contextmanager
def relaxed_gc(factor: int = GC_FULL_PASS_FACTOR) -> Iterator[None]:
    """Make the cyclic collector's full (generation 2) passes ``factor`` times rarer while a run lasts.

    A long run keeps its history, the consumed stream and the reference run alive, so every full
    pass walks more objects than the last: on an 8-rank x 64-lane run, the CPU time per 50 global
    steps grew from 4.5 s to 7.7 s over 400 steps with the default thresholds and from 3.6 s to
    4.3 s with this (the rest of the growth follows the inflight chunks, which checkpoints copy).
    Only when collections run changes, never what a run computes (nothing in the data path
    depends on the collector); the previous thresholds come back afterwards, also on an error.
    """
    before = gc.get_threshold()
    gc.set_threshold(before[0], before[1], before[2] * factor)
    try:
        yield
    finally:
        gc.set_threshold(*before)


def run_seed(seed: int, **overrides: Any) -> RunResult:
    """Derive the configuration from ``seed`` (plus ``overrides``), run the world, check it."""
    with relaxed_gc():
        return _run_seed(seed, **overrides)[0]


def run_seed_world(seed: int, **overrides: Any) -> tuple[RunResult, World]:
    """:func:`run_seed`, and the world it ran (its history is what :mod:`sim.timeline` draws)."""
    with relaxed_gc():
        return _run_seed(seed, **overrides)


def _run_seed(seed: int, **overrides: Any) -> tuple[RunResult, World]:
    cfg = derive_config(seed, **overrides)
    workload = workload_of(cfg)
    wcfg = world_config(cfg)
    # a run whose micro-batch size may change is checked record by record (sim.history)
    by_record = bool(wcfg.restart_microbatch)
    lineage_wanted = bool(cfg.get("lineage", True))
    # the record packed and no kernel trace kept: a long run's memory would grow by both (the fingerprint
    # is the same either way)
    world = World(
        wcfg,
        workload.build,
        SeededChoices(seed, compact=True),
        view=records_view if by_record else item_view,
        keep_items=lineage_wanted,
        record_deliveries=bool(cfg.get("record_deliveries", True)),
        keep_trace=False,
    )
    world.run()
    if by_record:
        report = check_history(world.history, reference_for(workload, records=True), seed=seed,
                               records=complete_records(workload), drop_last=workload.drop_last)
    else:
        report = check_run(world.history, reference_for(workload), seed=seed)
    problems = list(report.problems)
    problems += [f"seed {seed}: bounded inflight: {p}" for p in world.inflight_problems]
    witnesses = list(report.witnesses)
    if not lineage_wanted:
        lineage = "n/a (off)"
    elif world.refused or not world.probes.get("end_of_data"):
        lineage = "n/a (the run stopped before the end of data)"
    else:
        admitted = admitted_from_source(
            workload.source(), range(wcfg.canonical_replicas), wcfg.canonical_replicas
        )
        delivered = [x for step in world.consumed_raw for x in step]
        # the timeline's tombstones (World.tombstones: rolled back with restores, the replay filter's
        # re-closings of already-consumed records left out), so an offset closed twice is flagged
        lin = check_lineage(admitted, delivered, world.tombstones)
        expected_lost = reference_lost(workload) if workload.drop_last else {}
        if workload.drop_last and by_record:
            # the run's last partial batch has the size of its last incarnation, cut from where that
            # one started: it loses what it did not deliver of the complete streams (the history
            # check holds each lane's shortfall under the last micro-batch size)
            counts: dict[int, int] = {}
            for r in records_of(delivered):
                counts[int(r.meta.lane_id)] = counts.get(int(r.meta.lane_id), 0) + 1
            expected_lost = undelivered_lost(workload, counts)
        if expected_lost:
            # drop_last=True drops each lane's partial last batch: exactly the uninterrupted run's losses
            # are excused, and only where the run lost exactly those (anything else is still a problem)
            lin = excuse_lost(lin, expected_lost)
        lineage = "ok" if lin.ok else lin.describe(limit=3)
        if not lin.ok:
            problems.append(f"seed {seed}: lineage: {lineage}")
            bad = next(v for _, v in sorted(lin.lanes.items()) if not v.ok)
            # the minimal witness: an offset closed twice with its closers, else a lost or unexpected one
            record: Any = bad.closers[0] if bad.closers else (bad.lost or bad.unexpected)[0]
            witnesses.append(Problem("lineage", problems[-1], seed, None, bad.lane, record))
    if world.expect_refusal and not world.refused:
        problems.append(
            f"seed {seed}: unrecoverable mode: every generation was damaged but restore did not refuse"
        )
    probes = {k: world.probes.get(k, 0) for k in PROBES}
    probes.update(knob_probes(cfg, multi_rank=1 < int(cfg["ranks"]) < int(cfg["lanes"]),
                              dropped=bool(workload.drop_last and reference_lost(workload))))
    return RunResult(seed, cfg, world.fingerprint(), not problems, tuple(problems), tuple(witnesses), probes,
                     world.kernel.events_run, world.step, report.restores, world.crashes, len(world.history),
                     lineage), world


def excuse_lost(report: LineageReport, expected: Mapping[int, tuple[tuple[int, int], ...]]) -> LineageReport:
    """``report`` with each lane's lost offsets cleared where they are exactly ``expected[lane]``."""
    lanes = dict(report.lanes)
    for lane, v in report.lanes.items():
        if v.lost and tuple(v.lost) == tuple(expected.get(lane, ())):
            lanes[lane] = LaneLineage(v.lane, v.admitted, (), v.duplicated, v.unexpected, v.closers)
    return LineageReport(lanes, report.graph)


def config_json(cfg: Mapping[str, Any]) -> str:
    return json.dumps(dict(cfg), sort_keys=True, separators=(",", ":"))

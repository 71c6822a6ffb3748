"""Seed 002: execution settings never change the data, so zephon_ref accepts every one zephon 0.2.0 does.

For every execution setting zephon 0.2.0 accepts (each ``options()`` key and the methods
``prefetch``, ``fetch``, ``fetch_parallelism``, ``enable_observability``, ``validate``,
``preflight_tokenizers`` and the snapshot methods):

* the stream with it equals the stream without it, record for record (``item_view``);
* it does not enter the data fingerprint: a checkpoint taken without it restores into a
  pipeline with it (and the other way round) and the continuation is the uninterrupted tail;
* a bad value raises a subclass of the builtin zephon 0.2.0 raises for it, and the refusal
  changes nothing; with zephon installed the same value is run through zephon and its
  exception is checked against the same builtin (skipped without zephon).

docs/options.md has one line per setting; a test keeps it complete.
"""

from __future__ import annotations

import dataclasses
import re
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import zephon_ref
from properties.pipelines import PipelineConfig, build_pipeline, item_view
from properties.sources import zephon_available
from zephon_ref.errors import ZephonRefError
from zephon_ref.settings import EXEC_DEFAULTS

ROOT = Path(__file__).resolve().parents[2]
OPTIONS_DOC = ROOT / "docs" / "options.md"

#: a chain whose order matters (shuffle, then batch) over the default three-component corpus
CFG = PipelineConfig([("shuffle", {"buffer_size": 8, "seed": 3}), ("batch", {"microbatch_size": 2})])


def _zephon_object(path: str, name: str) -> Any:
    """An instance of one of zephon's option classes (None without zephon)."""
    if not zephon_available():
        return None
    import importlib

    return getattr(importlib.import_module(path), name)()


#: options() settings, each with a value other than its default (zephon_ref's extensions ``feeding``
#: and ``faster_ops`` too; the aggregation backends are read only with several participants, so one
#: rank writes nothing).  Topology keys (world_size, global_rank, dp_degree, dp_group_id,
#: mapping_strategy) decide which lanes a participant owns and are checked elsewhere;
#: ``deterministic=False`` relaxes the ordering guarantee by definition (seed 002) and is not an
#: execution setting of this kind.
OPTION_VALUES: list[tuple[str, Any]] = [
    ("runner", "process"), ("runner", "remote"), ("runner", "threads"), ("runner", "auto"), ("runner", None),
    ("runner", ""),
    ("run_id", "job-7"), ("per_stage_runner", {0: "threads"}), ("mp_context", "fork"),
    ("worker_allocation", "global"), ("worker_allocation", "per_stage_fixed"), ("max_workers", 2),
    ("max_workers", 0), ("deterministic", True), ("prefetch_batches", 0), ("prefetch_batches", 3),
    ("default_stage_prefetch", 2), ("per_stage_prefetch", {0: 2, 1: 0}), ("op_queue_capacity", 1),
    ("op_queue_capacity", 0), ("ipc_transport", "pipe"), ("ipc_buffer_bytes", 1024),
    ("io_options", {"cache": {"limit_bytes": "50gb"}}), ("io_options", None),
    ("allow_latency_flush_in_deterministic", False), ("shutdown_mode", "hard"), ("auto_validation", "off"),
    ("auto_validation", "WARN"), ("mtp_mode", True), ("mtp_buffer", 0), ("mtp_buffer", 5),
    ("mtp_buffer_bytes", 1 << 20), ("mtp_prefetch", 0), ("mtp_auto_checkpoint", False),
    ("shm_enabled", False), ("shm_coalesce", False), ("shm_min_item_bytes", 0),
    ("shm_min_new_allocation_bytes", 0), ("shm_min_forward_bytes", 0), ("shm_compact_above_ratio", None),
    ("shm_compact_above_ratio", 1.5), ("shm_compact_min_savings_bytes", 0), ("shm_max_coalesced_bytes", None),
    ("max_worker_retries", 0), ("aggregate_dir", "/nonexistent/zephon_ref_agg"), ("aggregate_store", "torch://"),
    ("aggregate_timeout_s", 5.0), ("aggregate_serializer", "json"),
    ("aggregate_compressor", "none"), ("execution_tracking", "nodes"), ("feeding", "round_robin"),
    ("faster_ops", True),
]
if zephon_available():
    OPTION_VALUES += [("mixture_config", _zephon_object("zephon.work.base", "MixtureReadConfig")),
                      ("metrics_sink_config", _zephon_object("zephon.observability", "MetricsSinkConfig"))]
    from zephon.io import StoreOptions as _ZStore

    OPTION_VALUES.append(("io_options", _ZStore()))
    from zephon.observability import ExecutionTrackingMode as _Mode

    OPTION_VALUES.append(("execution_tracking", _Mode.STAGES))

#: every setting a framework sets, at once (issue 30's list)
FRAMEWORK_BUNDLE = {"runner": "process", "mtp_mode": True, "io_options": {"cache": {"enabled": False}},
                    "prefetch_batches": 0, "max_workers": 8, "op_queue_capacity": 4}

Setting = Callable[[Any], Any]

#: execution settings outside options(): (name, apply to a built pipeline)
METHOD_SETTINGS: list[tuple[str, Setting]] = [
    ("prefetch()", lambda p: p.prefetch()),
    ("prefetch(64, 2, placement='remote')", lambda p: p.prefetch(64, 2, placement="remote")),
    ("prefetch(buffer_size=1, parallelism=None)", lambda p: p.prefetch(buffer_size=1, parallelism=None)),
    ("fetch()", lambda p: p.fetch()),
    ("fetch(2, 8)", lambda p: p.fetch(2, 8)),
    ("fetch(max_batch=1)", lambda p: p.fetch(max_batch=1)),
    ("fetch(3).fetch(1)", lambda p: p.fetch(3).fetch(1)),
    ("fetch_parallelism(4)", lambda p: p.fetch_parallelism(4)),
    ("fetch_parallelism(None, 16)", lambda p: p.fetch_parallelism(None, 16)),
    ("materialize()", lambda p: p.materialize()),
    ("materialize('local', 2).materialize()", lambda p: p.materialize("local", 2).materialize()),
    ("is_indexable", lambda p: (p.is_indexable, p)[1]),
    ("enable_observability()", lambda p: p.enable_observability()),
    ("enable_observability('stages', sink=None)", lambda p: p.enable_observability("stages", sink=None)),
    ("enable_observability('off')", lambda p: p.enable_observability("off")),
    ("validate()", lambda p: (p.validate(), p)[1]),
    ("validate(strict=True)", lambda p: (p.validate(strict=True), p)[1]),
    ("preflight_tokenizers()", lambda p: (p.preflight_tokenizers(), p)[1]),
    ("preflight_tokenizers(strict=False)", lambda p: (p.preflight_tokenizers(strict=False), p)[1]),
    ("snapshots", lambda p: (p.inflight_summary(), p.metrics_snapshot(), p.fetch_timing_snapshot(),
                             p.prefetch_timing_snapshot(), p.mtp_queue_stats(), p)[-1]),
    ("framework bundle", lambda p: p.options(**FRAMEWORK_BUNDLE).prefetch(256, 4).fetch(8, 64)),
]

SETTINGS: list[tuple[str, Setting]] = [
    (f"options({k}={v!r})", lambda p, k=k, v=v: p.options(**{k: v})) for k, v in OPTION_VALUES
] + METHOD_SETTINGS


def _pipeline() -> Any:
    return build_pipeline("zephon_ref", CFG)


def _stream(p: Any) -> list[Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return [item_view(x) for x in p]


BASELINE = _stream(_pipeline())


def test_the_baseline_is_a_real_stream() -> None:
    # the comparison below would hold trivially on an empty stream
    assert len(BASELINE) >= 40
    assert len({v[0][0] for v in BASELINE}) == 2  # both lanes deliver


@pytest.mark.parametrize("name, apply", SETTINGS, ids=[n for n, _ in SETTINGS])
def test_the_stream_with_a_setting_equals_the_stream_without_it(name: str, apply: Setting) -> None:
    p = _pipeline()
    assert apply(p) is p  # the fluent builder returns the pipeline
    assert _stream(p) == BASELINE


@pytest.mark.parametrize("name, apply", SETTINGS, ids=[n for n, _ in SETTINGS])
def test_a_setting_is_not_in_the_fingerprint_and_checkpoints_cross(name: str, apply: Setting) -> None:
    plain, tuned = _pipeline(), apply(_pipeline())
    assert tuned.fingerprint() == plain.fingerprint()
    cut = 7
    for src, dst in ((plain, tuned), (tuned, _pipeline())):
        it = iter(src)
        head = [item_view(next(it)) for _ in range(cut)]
        state = src.checkpoint()
        it.close()
        dst = apply(_pipeline()) if dst is tuned else dst
        dst.restore(state)
        assert head + _stream(dst) == BASELINE


def test_settings_may_change_between_runs_of_one_pipeline() -> None:
    # execution settings are read when a run starts; a pipeline with progress (here a pending
    # restore of its own checkpoint) still takes them
    p = _pipeline()
    it = iter(p)
    head = [item_view(next(it)) for _ in range(5)]
    state = p.checkpoint()
    it.close()
    p.restore(state)
    p.options(runner="threads", max_workers=2, mtp_mode=True).prefetch(8).fetch(2)
    assert head + _stream(p) == BASELINE


# -- bad values --------------------------------------------------------------------------------

#: (setting, bad value, the builtin zephon 0.2.0 raises, the runner zephon checks it under, or None
#: where zephon accepts the value or raises no builtin of its own: then only zephon_ref's refusal is
#: checked, docs/divergences.md "Execution settings")
BAD_OPTIONS: list[tuple[str, Any, type[BaseException], str | None]] = [
    ("runner", "ray", ValueError, "inline"), ("runner", "Threads", ValueError, "inline"),
    ("runner", 1.5, ValueError, "inline"),
    ("max_workers", "x", TypeError, "inline"), ("max_workers", [1], TypeError, "inline"),
    ("prefetch_batches", "x", TypeError, "inline"), ("prefetch_batches", {}, TypeError, "inline"),
    ("default_stage_prefetch", "x", TypeError, "inline"), ("op_queue_capacity", "x", TypeError, "threads"),
    ("io_options", 0, TypeError, "inline"), ("io_options", "x", TypeError, "inline"),
    ("io_options", [1], TypeError, "inline"), ("io_options", True, TypeError, "inline"),
    ("auto_validation", "x", ValueError, "inline"), ("auto_validation", None, ValueError, "inline"),
    ("mp_context", "x", ValueError, "threads"),
    ("worker_allocation", "autotune", NotImplementedError, "threads"),
    ("shm_enabled", 0, ValueError, "inline"), ("shm_enabled", None, ValueError, "inline"),
    ("shm_coalesce", "x", ValueError, "threads"),
    ("shm_min_item_bytes", -1, ValueError, "inline"), ("shm_min_item_bytes", "x", ValueError, "inline"),
    ("shm_min_new_allocation_bytes", 1.5, ValueError, "threads"),
    ("shm_min_forward_bytes", None, ValueError, "threads"),
    ("shm_compact_above_ratio", 0, ValueError, "threads"),
    ("shm_compact_above_ratio", "x", ValueError, "threads"),
    ("shm_compact_min_savings_bytes", -1, ValueError, "threads"),
    ("shm_max_coalesced_bytes", 0, ValueError, "threads"),
    ("aggregate_serializer", "x", ValueError, "inline"),
    ("aggregate_compressor", "gzip", ValueError, "threads"),
    ("mtp_buffer", "x", TypeError, None),  # zephon: TypeError, but only inside its MTP subprocess start
    ("ipc_transport", "x", ValueError, None),  # zephon: ValueError under the process runner only
    ("ipc_buffer_bytes", "x", TypeError, None),  # zephon: TypeError under the process runner only
    ("max_worker_retries", "x", ValueError, None),  # zephon: ValueError under the process runner only
    # zephon raises AttributeError from inside its engine (no builtin to match): TypeError here
    ("per_stage_runner", "x", TypeError, None), ("per_stage_prefetch", 3, TypeError, None),
    ("execution_tracking", "x", ValueError, None),
    # zephon accepts these and gives them no meaning; zephon_ref refuses (stricter)
    ("prefetch_batches", -1, ValueError, None), ("op_queue_capacity", 1.5, TypeError, None),
    ("mtp_mode", "x", TypeError, None), ("mtp_auto_checkpoint", None, TypeError, None),
    ("allow_latency_flush_in_deterministic", 1, TypeError, None), ("shutdown_mode", "soft", ValueError, None),
    ("worker_allocation", "x", ValueError, None), ("mixture_config", "x", TypeError, None),
    ("metrics_sink_config", 3, TypeError, None), ("mtp_buffer_bytes", -1, ValueError, None),
    # refused by zephon_ref before this change already (kept)
    ("run_id", 0, TypeError, None), ("deterministic", "x", TypeError, None),
    # zephon_ref's own settings (zephon warns that it does not know the key)
    ("faster_ops", 1, TypeError, None), ("faster_ops", "yes", TypeError, None),
]


def _zephon_raises(apply: Setting, runner: str) -> BaseException | None:
    """Run ``apply`` on zephon's build of CFG under ``runner`` and two items; what it raised."""
    p = build_pipeline("zephon", CFG, runner=runner)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            apply(p)
            it = iter(p)
            next(it)
            next(it)
    except Exception as e:
        return e
    return None


@pytest.mark.parametrize("key, value, builtin, zrunner", BAD_OPTIONS,
                         ids=[f"{k}={v!r}" for k, v, _, _ in BAD_OPTIONS])
def test_a_bad_option_raises_zephons_builtin_and_changes_nothing(key: str, value: Any,
                                                                  builtin: type[BaseException],
                                                                  zrunner: str | None) -> None:
    p = _pipeline()
    before = p.runtime_options()
    with pytest.raises(builtin) as info:
        p.options(**{key: value})
    assert isinstance(info.value, ZephonRefError)
    assert key in str(info.value)  # the message names the setting
    assert p.runtime_options() == before
    assert _stream(p) == BASELINE
    if zrunner is not None and zephon_available():
        got = _zephon_raises(lambda z: z.options(**{key: value}), zrunner)
        assert isinstance(got, builtin), f"zephon raised {got!r} for {key}={value!r}"


#: (call, the builtin, whether zephon raises it too)
BAD_METHODS: list[tuple[str, Setting, type[BaseException], bool]] = [
    ("prefetch(buffer_size=0)", lambda p: p.prefetch(buffer_size=0), ValueError, True),
    ("prefetch(buffer_size=-1)", lambda p: p.prefetch(buffer_size=-1), ValueError, True),
    ("prefetch(buffer_size='x')", lambda p: p.prefetch(buffer_size="x"), TypeError, True),
    ("prefetch(buffer_size=None)", lambda p: p.prefetch(buffer_size=None), TypeError, True),
    ("prefetch(parallelism='x')", lambda p: p.prefetch(parallelism="x"), TypeError, True),
    ("prefetch twice", lambda p: p.prefetch().prefetch(), RuntimeError, True),
    ("fetch(parallelism=0)", lambda p: p.fetch(parallelism=0), ValueError, True),
    ("fetch(max_batch=-1)", lambda p: p.fetch(max_batch=-1), ValueError, True),
    ("fetch(parallelism='x')", lambda p: p.fetch(parallelism="x"), TypeError, True),
    ("fetch(max_batch='x')", lambda p: p.fetch(max_batch="x"), TypeError, True),
    ("fetch_parallelism(0)", lambda p: p.fetch_parallelism(0), ValueError, True),
    ("fetch_parallelism('x')", lambda p: p.fetch_parallelism("x"), TypeError, True),
    ("enable_observability('x')", lambda p: p.enable_observability("x"), ValueError, True),
    ("enable_observability(0)", lambda p: p.enable_observability(0), ValueError, True),
    ("materialize(placement=0)", lambda p: p.materialize(placement=0), TypeError, False),
    ("materialize(parallelism=0)", lambda p: p.materialize(parallelism=0), ValueError, False),
    # zephon accepts these (no meaning); zephon_ref refuses (stricter)
    ("prefetch(parallelism=0)", lambda p: p.prefetch(parallelism=0), ValueError, False),
    ("prefetch(placement=0)", lambda p: p.prefetch(placement=0), TypeError, False),
    ("fetch(parallelism=1.5)", lambda p: p.fetch(parallelism=1.5), TypeError, False),
]


@pytest.mark.parametrize("name, call, builtin, zephon_too", BAD_METHODS, ids=[n for n, *_ in BAD_METHODS])
def test_a_bad_method_argument_raises_zephons_builtin_and_changes_nothing(
        name: str, call: Setting, builtin: type[BaseException], zephon_too: bool) -> None:
    p = _pipeline()
    before = (p._prefetch if "twice" not in name else None, p._fetch, p.runtime_options())
    with pytest.raises(builtin) as info:
        call(p)
    assert isinstance(info.value, ZephonRefError)
    if "twice" not in name:
        assert (p._prefetch, p._fetch, p.runtime_options()) == before
    assert _stream(p) == BASELINE
    if zephon_too and zephon_available():
        got = _zephon_raises(call, "inline")
        assert isinstance(got, builtin), f"zephon raised {got!r} for {name}"


def test_settings_are_refused_mid_iteration_and_the_run_goes_on() -> None:
    p = _pipeline()
    it = iter(p)
    head = [item_view(next(it))]
    for call in (lambda: p.prefetch(), lambda: p.fetch(2), lambda: p.enable_observability(),
                 lambda: p.options(mtp_mode=True)):
        with pytest.raises(RuntimeError):
            call()
    assert head + [item_view(x) for x in it] == BASELINE


# -- what the methods return ---------------------------------------------------------------------

def test_validation_reports_have_zephons_shape_and_catch_a_nondeterministic_user_op() -> None:
    from zephon_ref.ops import BaseOp, OpTraits
    from zephon_ref.types import SampleMeta, SampleRecord
    from zephon_ref.validation import ValidationError

    report = _pipeline().validate()
    assert report.ok and report.issues == [] and report.errors == [] and report.warnings == []
    assert "ok" in report.format()
    assert _pipeline().preflight_tokenizers().ok

    class Counting(BaseOp):
        """A user op that keeps state across calls (zephon's validation flags it)."""

        def __init__(self) -> None:
            super().__init__()
            self.calls = 0

        def traits(self) -> OpTraits:
            return OpTraits(preserves_cursor_order=True)

        def process_many(self, elems: list[Any]) -> list[Any]:
            self.calls += 1
            return [dataclasses.replace(e, payload={"n": self.calls}) for e in elems]

        def validation_samples(self) -> list[SampleRecord]:
            meta = SampleMeta(sample_id=(0, 0, 0), lane_id=0, chunk_id=0)
            return [SampleRecord(meta=meta, payload={"n": 0})]

    p = build_pipeline("zephon_ref", PipelineConfig([])).add_op(Counting())
    bad = p.validate()
    assert not bad.ok and [i.code for i in bad.errors] == ["process_many_not_deterministic"]
    with pytest.raises(ValidationError) as info:
        p.validate(strict=True)
    assert isinstance(info.value, RuntimeError) and info.value.report.errors == bad.errors


def test_inflight_summary_counts_owned_lanes_and_snapshots_are_none() -> None:
    p = _pipeline()
    assert p.inflight_summary() == {}  # before a run, as zephon
    it = iter(p)
    next(it)
    summary = p.inflight_summary()
    assert sorted(summary) == [0, 1] and all(isinstance(n, int) and n >= 0 for n in summary.values())
    assert sum(summary.values()) >= 1
    it.close()
    p.enable_observability()  # zephon_ref collects no timings (docs/options.md): None even now
    assert (p.metrics_snapshot(), p.fetch_timing_snapshot(), p.prefetch_timing_snapshot(),
            p.mtp_queue_stats()) == (None, None, None, None)


def test_is_indexable_follows_zephons_definition() -> None:
    from zephon_ref.work.base import WorkSource

    class Indexed(WorkSource):  # a source that says it supports indexing, nothing else
        def supports_indexing(self) -> bool:
            return True

    plain = build_pipeline("zephon_ref", PipelineConfig([]))
    assert plain.is_indexable is False  # StaticMixtureWorkSource does not support indexing (as zephon's)
    p = build_pipeline("zephon_ref", PipelineConfig([]))
    p._source = Indexed.__new__(Indexed)
    assert p.is_indexable is True  # map_transform only: every op indexable
    assert p.materialize().is_indexable is False  # zephon's Materialize is not indexable
    if zephon_available():
        z = build_pipeline("zephon", PipelineConfig([]))
        assert z.is_indexable is False and z.materialize().is_indexable is False


def test_io_options_merge_as_zephons_do() -> None:
    p = _pipeline().options(io_options={"cache": {"enabled": False}}).options(io_options={"arrow": {}})
    assert p.runtime_options()["io_options"] == {"cache": {"enabled": False}, "arrow": {}}
    p.options(io_options=None)  # None leaves them as they are
    assert p.runtime_options()["io_options"] == {"cache": {"enabled": False}, "arrow": {}}


# -- completeness --------------------------------------------------------------------------------

@pytest.mark.skipif(not zephon_available(), reason="needs zephon 0.2.0 (the conformance extra)")
def test_every_runtime_option_of_zephon_is_accepted_with_its_default() -> None:
    from zephon.options import RuntimeOptions

    fields = {f.name: f for f in dataclasses.fields(RuntimeOptions)}
    missing = sorted(set(fields) - set(EXEC_DEFAULTS) - {"canonical_replicas", "flush_every_k_chunks"})
    assert missing == []
    opts = RuntimeOptions()
    # a default zephon_ref holds by another representation (see zephon_ref.settings)
    other = {"mp_context", "io_options", "execution_tracking"}
    for name in sorted(set(fields) & set(EXEC_DEFAULTS) - other):
        assert EXEC_DEFAULTS[name] == getattr(opts, name), name
    assert EXEC_DEFAULTS["execution_tracking"] == opts.execution_tracking.value


def test_runtime_options_mirror_zephons_and_apply_through_options() -> None:
    from zephon_ref.options import RuntimeOptions

    opts = RuntimeOptions(runner="process", mtp_mode=True, prefetch_batches=0, canonical_replicas=2)
    p = _pipeline().options(**vars(opts))
    assert {k: p.runtime_options()[k] for k in ("runner", "mtp_mode", "prefetch_batches")} == \
        {"runner": "process", "mtp_mode": True, "prefetch_batches": 0}
    assert _stream(p) == BASELINE
    defaults = vars(RuntimeOptions())
    # one default per key: the record's equals what options() starts from, or (three keys) is the
    # object zephon's record holds for it, which options() takes as the same setting
    from zephon_ref.io.options import StoreOptions
    from zephon_ref.observability import ExecutionTrackingMode

    held = {"mp_context": None, "io_options": None, "execution_tracking": "off"}
    assert defaults["io_options"] == StoreOptions() and defaults["mp_context"].get_start_method() == "spawn"
    assert defaults["execution_tracking"] is ExecutionTrackingMode.OFF
    assert all(defaults[k] == EXEC_DEFAULTS[k] for k in defaults if k in EXEC_DEFAULTS and k not in held)
    assert all(EXEC_DEFAULTS[k] == v for k, v in held.items())
    execution = {k: v for k, v in defaults.items() if k not in ("canonical_replicas", "flush_every_k_chunks")}
    assert _stream(_pipeline().options(**execution)) == BASELINE  # zephon's held objects are accepted
    ours_only = {"feeding", "faster_ops"}  # zephon_ref's extensions
    assert set(defaults) == set(EXEC_DEFAULTS) - ours_only | {"canonical_replicas", "flush_every_k_chunks"}
    if zephon_available():
        import dataclasses

        from zephon.options import RuntimeOptions as Theirs

        assert [f.name for f in dataclasses.fields(Theirs)] == list(defaults)


#: the zephon.Pipeline methods this test owns: the execution, validation and monitoring surface
EXECUTION_METHODS = ("prefetch", "fetch", "fetch_parallelism", "validate", "preflight_tokenizers",
                     "enable_observability", "inflight_summary", "metrics_snapshot", "fetch_timing_snapshot",
                     "prefetch_timing_snapshot", "mtp_queue_stats", "materialize", "options")


@pytest.mark.skipif(not zephon_available(), reason="needs zephon 0.2.0 (the conformance extra)")
@pytest.mark.parametrize("name", EXECUTION_METHODS)
def test_execution_methods_have_zephons_signature(name: str) -> None:
    import inspect

    import zephon

    ours = inspect.signature(getattr(zephon_ref.Pipeline, name))
    theirs = inspect.signature(getattr(zephon.Pipeline, name))
    assert [(p.name, p.kind, p.default) for p in ours.parameters.values()] == \
        [(p.name, p.kind, p.default if not hasattr(p.default, "value") else p.default.value)
         for p in theirs.parameters.values()]


def test_docs_options_has_a_line_per_setting() -> None:
    text = OPTIONS_DOC.read_text()
    rows = set(re.findall(r"^\| `([a-z_]+)`", text, flags=re.M))
    assert set(EXEC_DEFAULTS) - rows == set()
    assert set(EXECUTION_METHODS) - {"options"} - {r.rstrip("()") for r in rows} == set()


@pytest.mark.parametrize(("io_options", "builtin"), [
    ({"cache": {"limit_bytes": "5x"}}, ValueError),
    ({"cache": "x"}, TypeError),
    ({"metadata_cache_entries": -1}, ValueError),
])
def test_bad_io_options_are_refused_at_the_call_as_zephon_does(io_options: Any, builtin: type) -> None:
    p = _pipeline()
    before = p.fingerprint()
    with pytest.raises(builtin) as info:
        p.options(io_options=io_options)
    assert isinstance(info.value, ZephonRefError) and "io_options" in str(info.value)
    assert p.fingerprint() == before and p._options["io_options"] is None  # changed nothing
    if zephon_available():
        import zephon

        zp = zephon.Pipeline(zephon.StaticMixtureWorkSource(
            [zephon.Dataset.from_dict("a", {0: zephon.InMemoryShard(rows=[{"x": 1}])})], {"a": 1.0},
            chunk_size=1))
        with pytest.raises(builtin):
            zp.options(io_options=io_options)

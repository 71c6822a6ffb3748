"""Feeding policies (``options(feeding="demand"|"round_robin")``) never change the data.

Over drawn configurations and every runner: the delivered stream is the same under both
policies; a checkpoint written under either restores under the other and continues the
uninterrupted run exactly; under the default (demand) the inline runner's checkpoints are the
same bytes in every run, and so are the threads runner's (its consumer admits from what came
back, never from timing); the feeding policy is not part of the fingerprint; and the inflight
bound (sim.invariants.inflight_bound) holds at every checkpoint of a demand-fed run.
"""

from __future__ import annotations

import copy
import warnings
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from properties import invariants as inv
from properties.pipelines import PipelineConfig, build_pipeline, item_view
from properties.profiles import examples
from properties.strategies import execution_settings, pipeline_configs

POLICIES = ("demand", "round_robin")


def _run(cfg: PipelineConfig, **options: Any) -> tuple[list[Any], list[Any]]:
    """Item views and the checkpoint after each item (``cks[i]``: after ``i`` items)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p = build_pipeline("zephon_ref", cfg, **options)
        items, cks = [], [p.checkpoint()]
        for x in p:
            items.append(item_view(x))
            cks.append(p.checkpoint())
    return items, cks


def _resume(cfg: PipelineConfig, state: Any, **options: Any) -> list[Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        q = build_pipeline("zephon_ref", cfg, **options)
        q.restore(copy.deepcopy(state))
        return [item_view(x) for x in q]


@settings(max_examples=examples(25))
@given(cfg=pipeline_configs(), execution=execution_settings(), data=st.data())
def test_both_policies_deliver_the_same_stream_and_restore_each_other(cfg: PipelineConfig,
                                                                       execution: dict[str, Any],
                                                                       data: st.DataObject) -> None:
    runs = {f: _run(cfg, **execution, feeding=f) for f in POLICIES}
    ref = runs["demand"][0]
    assert (
        inv.settings_invariance_problems({f"{f} {execution}": items for f, (items, _) in runs.items()}) == []
    )
    cut = data.draw(st.integers(0, len(ref)), label="cut")
    for written, read in (("demand", "round_robin"), ("round_robin", "demand")):
        state = runs[written][1][cut]
        problems = inv.resume_problems(ref, _resume(cfg, state, **execution, feeding=read), cut=cut)
        assert not problems, f"written under {written}, restored under {read}: {problems[0]}"
    if execution.get("runner") == "threads":  # inline's is checked below, with the default options
        problems = inv.checkpoint_bytes_problems({
            "run 1": _encode(runs["demand"][1][cut]),
            "run 2": _encode(_run(cfg, **execution)[1][cut]),
        })
        assert not problems, f"threads runner, demand feeding, after {cut} items: {problems[0]}"


def _encode(state: Any) -> bytes:
    from zephon_ref import codec

    return codec.encode(state)


@settings(max_examples=examples(25))
@given(cfg=pipeline_configs())
def test_default_checkpoints_are_the_same_bytes_and_bounded(cfg: PipelineConfig) -> None:
    assert inv.check_checkpoint_bytes(cfg) == []  # demand feeding is the default
    assert inv.check_bounded_inflight(cfg) == []
    assert inv.check_bounded_inflight(cfg, runner="threads", queue_size=3) == []


def test_feeding_is_an_execution_setting_outside_the_fingerprint() -> None:
    from zephon_ref.errors import ConfigError

    cfg = PipelineConfig([("shuffle", {"buffer_size": 4, "seed": 1})],
                         options={"runner": "inline", "canonical_replicas": 2, "flush_every_k_chunks": 1})
    a, b = (build_pipeline("zephon_ref", cfg, feeding=f) for f in POLICIES)
    assert a.fingerprint() == b.fingerprint()
    assert (
        a.runtime_options()["feeding"]
        == "demand"
        == build_pipeline("zephon_ref", cfg).runtime_options()["feeding"]
    )
    try:
        a.options(feeding="lazy")
    except ConfigError as exc:
        assert "feeding" in str(exc) and "'lazy'" in str(exc)
    else:
        raise AssertionError("options(feeding='lazy') must be refused")
    assert a.runtime_options()["feeding"] == "demand"  # the refusal changed nothing


def test_round_robin_feeding_exceeds_the_bound_that_demand_feeding_keeps() -> None:
    """The check can fail: the same configuration, fed round robin, breaks the demand bound."""
    from sim.analysis import AnalysisConfig
    from sim.analysis import build_pipeline as study

    for feeding, holds in (("demand", True), ("round_robin", False)):
        p = study(AnalysisConfig(lanes=2, feeding=feeding))
        bound = inv.inflight_bound(k=2, monotone=False, depth_samples=0, min_chunk=32)
        worst = 0
        for i, _ in enumerate(p):
            counts, _smallest = inv.inflight_observation(p.checkpoint())
            worst = max(worst, *counts.values())
            if i == 600:
                break
        assert (worst <= bound) == holds, (feeding, worst, bound)


def _map_batch_cfg(chain: list[tuple[str, dict[str, Any]]], *, size: int, chunk: int,
                   k: int | None = 1) -> PipelineConfig:
    options: dict[str, Any] = {"runner": "inline", "canonical_replicas": 1}
    if k is not None:
        options["flush_every_k_chunks"] = k
    return PipelineConfig(chain, layout={"web": (size,)}, weights={"web": 1.0},
                          source_kwargs={"chunk_size": chunk, "seed": 0}, options=options)


def test_map_batch_after_a_stalled_batch_keeps_the_bound() -> None:
    """Minimal config of the finding that kept map_batch out of the end-to-end draws: an epoch's
    complete micro-batches must not wait in map_batch while ``batch(drop_last=True)`` stalls that
    epoch's flush sentinel (a counting buffer there held them until the next chunk was admitted:
    2 chunks at checkpoint 0 where K=1 allows 1).  The monotone form (K=0, no sentinel at all): a
    map_batch buffer of 64 micro-batches held 128 records, 32 chunks of 4 where the bound is 17."""
    from properties.generator import _batch_identity

    stalled = _map_batch_cfg([("shuffle", {"buffer_size": 2, "seed": 0}), ("batch", {"microbatch_size": 2}),
                              ("map_batch", {"transform_fn": _batch_identity})], size=10, chunk=3)
    monotone = _map_batch_cfg([("batch", {"microbatch_size": 2}),
                               ("map_batch", {"transform_fn": _batch_identity})], size=400, chunk=4, k=None)
    for cfg in (stalled, monotone):
        assert inv.check_bounded_inflight(cfg) == []
        assert inv.check_bounded_inflight(cfg, runner="threads", queue_size=3) == []


def test_map_batch_inflight_does_not_grow_with_a_run_of_empty_chunks() -> None:
    """Why the bound is not widened to admit the case: behind a stalled batch, map_batch held the
    epoch until the chunks that complete the stalled micro-batch were admitted, and how many those
    are depends on the data.  A dense chunk 0 (5 records, batch(4): one left over), then chunks
    1..gap whose records a filter drops: the worst lane held 1 + gap + 1 chunks at a checkpoint
    (2, 4, 7, 12 for gap 0, 2, 5, 10) where batch alone holds 1.  K=1 bounds it at 1 now."""
    import zlib

    from properties.generator import _batch_identity
    from properties.pipelines import build_pipeline

    def key(payload: Any) -> int:
        return zlib.crc32(repr(payload).encode())

    shuffle = ("shuffle", {"buffer_size": 2, "seed": 0})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plain = build_pipeline("zephon_ref", _map_batch_cfg([shuffle, ("batch", {"microbatch_size": 1})],
                                                            size=120, chunk=5))
        chunk_of = {key(x.records[0].payload): x.records[0].meta.chunk_id for x in plain}
        for gap in (0, 5):
            def drop(payload: Any, gap: int = gap) -> Any:
                return None if 1 <= chunk_of[key(payload)] <= gap else payload

            cfg = _map_batch_cfg([("map_transform", {"transform_fn": drop}), shuffle,
                                  ("batch", {"microbatch_size": 4}),
                                  ("map_batch", {"transform_fn": _batch_identity})], size=120, chunk=5)
            p = build_pipeline("zephon_ref", cfg)
            worst = 0
            for _ in p:
                counts, _smallest = inv.inflight_observation(p.checkpoint())
                worst = max(worst, *counts.values())
            assert worst == 1, f"{gap} empty chunks after a dense one: a lane held {worst} chunks, K=1"

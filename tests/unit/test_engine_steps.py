"""The steppable engine: any order of admit / run_stage / deliver steps delivers the stream
that iter() delivers, and a checkpoint between any two steps resumes exactly."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from properties.pipelines import PipelineConfig, build_pipeline, item_view
from sim.steps import runnable, take

_SMALL = {"web": (24, 12), "code": (12,), "books": (8,)}
CONFIGS = {
    "pack+shuffle+mix+batch": PipelineConfig(
        chain=[("pack_sequences", {"max_length": 48, "algorithm": "first_fit", "num_bins": 4}),
               ("shuffle", {"buffer_size": 8, "seed": 3}),
               ("ensure_mixture", {"mixture": {"web": 0.6, "code": 0.3, "books": 0.1}}),
               ("batch", {"microbatch_size": 2})],
        layout=_SMALL, source_kwargs={"chunk_size": 8, "seed": 1},
        options={"runner": "inline", "canonical_replicas": 3, "flush_every_k_chunks": 2}),
    "monotone": PipelineConfig(chain=[("batch", {"microbatch_size": 3})], layout=_SMALL,
                               source_kwargs={"chunk_size": 8, "seed": 2},
                               options={"runner": "inline", "canonical_replicas": 2}),
}
_REFERENCE: dict[str, list[Any]] = {}


def reference(name: str) -> list[Any]:
    if name not in _REFERENCE:
        _REFERENCE[name] = [item_view(x) for x in build_pipeline("zephon_ref", CONFIGS[name])]
    return _REFERENCE[name]


def drive(engine: Any, data: st.DataObject, *, limit: int | None = None) -> list[Any]:
    """Run drawn steps until the run ends (or ``limit`` items were delivered)."""
    out: list[Any] = []
    engine.check()
    while not engine.finished and (limit is None or len(out) < limit):
        steps = runnable(engine)
        assert steps, "a run that is not finished always has a step it can take"
        x = take(engine, data.draw(st.sampled_from(steps)))
        if x is not None:
            out.append(item_view(x))
        engine.check()  # every engine and lane invariant, after every step
    return out


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(name=st.sampled_from(sorted(CONFIGS)), data=st.data())
def test_any_step_order_delivers_the_inline_stream(name: str, data: st.DataObject) -> None:
    p = build_pipeline("zephon_ref", CONFIGS[name])
    assert drive(p.engine(), data) == reference(name)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(name=st.sampled_from(sorted(CONFIGS)), data=st.data())
def test_a_checkpoint_between_any_two_steps_resumes_exactly(name: str, data: st.DataObject) -> None:
    ref = reference(name)
    cut = data.draw(st.integers(0, len(ref)))
    p = build_pipeline("zephon_ref", CONFIGS[name])
    engine = p.engine()
    head = drive(engine, data, limit=cut)
    # run a few more non-delivering steps ahead, as the threads runner would
    for _ in range(data.draw(st.integers(0, 20))):
        steps = [s for s in runnable(engine) if s != "deliver"]
        if not steps:
            break
        take(engine, data.draw(st.sampled_from(steps)))
        engine.check()
    ck = p.checkpoint()
    q = build_pipeline("zephon_ref", CONFIGS[name]).restore(ck)
    restored = q.engine()
    restored.check()  # a restored engine holds every invariant before its first step
    assert head + drive(restored, data) == ref


def test_steps_reject_a_second_start() -> None:
    from zephon_ref.errors import StateMismatchError

    engine = build_pipeline("zephon_ref", CONFIGS["monotone"]).engine()
    try:
        engine.start()
    except StateMismatchError:
        return
    raise AssertionError("a started engine must refuse to start again")


def test_world_and_runtime_options_describe_the_lanes_iter_runs_and_change_nothing() -> None:
    cfg = CONFIGS["pack+shuffle+mix+batch"]
    p = build_pipeline("zephon_ref", cfg, world_size=3, global_rank=1, dp_degree=3, aggregate_dir="/unused")
    w = p.world()
    assert (w.world_size, w.canonical_replicas) == (3, 3)
    opts = p.runtime_options()
    assert opts["global_rank"] == 1 and opts["canonical_replicas"] == 3
    opts["global_rank"] = 0  # a copy: the pipeline keeps its own
    assert p.runtime_options()["global_rank"] == 1
    it = iter(p)
    first = next(it)
    it.close()
    assert sorted({r.meta.lane_id for r in first.records}) == list(w.group_lanes) == [1]


def test_the_invariant_check_fails_on_a_broken_field() -> None:
    import pytest

    engine = build_pipeline("zephon_ref", CONFIGS["pack+shuffle+mix+batch"]).engine()
    data_steps = 0
    while engine.streams[engine.lanes[0]].next_cid == 0 and data_steps < 10_000:
        engine.admit()
        data_steps += 1
    engine.check()
    stream = engine.streams[engine.lanes[0]]
    stream.next_cid += 1  # a chunk id skipped
    with pytest.raises(AssertionError):
        engine.check()
    stream.next_cid -= 1
    engine.check()
    stream.boundaries.append(stream.next_cid + 1)  # a boundary past the admitted chunks
    with pytest.raises(AssertionError):
        engine.check()

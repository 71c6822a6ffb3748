"""sim.lockstep on its own (without the properties binding): its default view and lane grouping."""

from __future__ import annotations

import functools
import warnings

from properties.pipelines import PipelineConfig, build_pipeline
from sim.lockstep import cursor_view, lane_streams, merged_checkpoint, participants, run_lockstep

CFG = PipelineConfig(
    [("pack_sequences", {"max_length": 128, "num_bins": 2}), ("batch", {"microbatch_size": 2})],
    layout={"web": (30, 20), "code": (15,)},
    weights={"web": 0.7, "code": 0.3},
    source_kwargs={"chunk_size": 8, "seed": 2},
    options={"runner": "inline", "canonical_replicas": 4},
)


def test_ranks_in_lockstep_deliver_each_lane_as_one_process_does() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        single: dict[int, list[object]] = {}
        for item in build_pipeline("zephon_ref", CFG):
            v = cursor_view(item)
            single.setdefault(v[0][0], []).append(v)
        pipes = participants(functools.partial(build_pipeline, "zephon_ref", CFG), 2, workers=2)
        steps, _ = run_lockstep(pipes)
    assert len(pipes) == 4 and steps
    assert lane_streams(steps) == single
    assert all(
        len({view[0][0] for _, view in step}) == len(step) for step in steps
    )  # one item per lane a step


def test_a_mid_run_merge_resumes_every_lane() -> None:
    build = functools.partial(build_pipeline, "zephon_ref", CFG)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        whole, _ = run_lockstep(participants(build, 2))
        pipes = participants(build, 2)
        head, _ = run_lockstep(pipes, steps=3)
        state = merged_checkpoint(pipes)
        tail, _ = run_lockstep(participants(build, 1, state=state))
    want, got = lane_streams(whole), lane_streams(head)
    for lane, views in lane_streams(tail).items():
        got.setdefault(lane, []).extend(views)
    assert got == want

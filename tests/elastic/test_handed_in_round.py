"""Pipeline.checkpoint(aggregate=...): the aggregation round is handed in, so a simulator can
run it on virtual time; the pipeline itself does no I/O and no clock for it."""

from __future__ import annotations

from typing import Any

from properties.pipelines import PipelineConfig, build_pipeline, item_view
from properties.topology import participants, run_lockstep
from zephon_ref import state as schema
from zephon_ref.coordination.merge import merge

CFG = PipelineConfig(
    chain=[("pack_sequences", {"max_length": 48, "algorithm": "first_fit", "num_bins": 4}),
           ("shuffle", {"buffer_size": 8, "seed": 3}), ("batch", {"microbatch_size": 2})],
    layout={"web": (24, 12), "code": (12,), "books": (8,)}, source_kwargs={"chunk_size": 8, "seed": 1},
    options={"runner": "inline", "canonical_replicas": 4, "flush_every_k_chunks": 2})


def test_every_participant_runs_the_round_it_is_handed_and_the_merge_resumes_exactly() -> None:
    whole = [item_view(x) for x in build_pipeline("zephon_ref", CFG)]
    pipes = participants(CFG, dp_degree=2)
    steps, iters = run_lockstep(pipes, steps=3)
    locals_ = [p.local_state() for p in pipes]
    calls: list[tuple[int, int]] = []

    def make_round(rank: int) -> Any:
        def aggregate(local: dict[str, Any], world: Any) -> tuple[dict[str, Any], Any]:
            calls.append((rank, world.global_rank))
            assert local == locals_[rank]  # the participant hands in exactly its local state
            return merge(locals_, warn_mid_window=False), "round-1"
        return aggregate

    merged = [p.checkpoint(aggregate=make_round(r)) for r, p in enumerate(pipes)]
    assert calls == [(0, 0), (1, 1)]
    assert merged[0] == merged[1]
    merged[0]["replay_cursors"].clear()  # each caller owns its copy
    assert merged[1]["replay_cursors"]
    schema.verify_integrity(merged[1])  # sealed: every input verified
    for it in iters:
        it.close()
    delivered = sum(len(s) for s in steps)
    rest = [item_view(x) for x in build_pipeline("zephon_ref", CFG).restore(merged[1])]
    # the single-rank resume delivers every lane's remainder: nothing lost, nothing repeated
    assert sorted(map(repr, rest)) == sorted(map(repr, _without(whole, [v for s in steps for _, v in s])))
    assert len(rest) == len(whole) - delivered


def _without(whole: list[Any], taken: list[Any]) -> list[Any]:
    left = list(whole)
    for v in taken:
        left.remove(v)
    return left

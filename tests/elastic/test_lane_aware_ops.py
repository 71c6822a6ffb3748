"""Every operator that holds per-record state is lane-aware (seed 002): a lane's stream is the
one it would have alone, on every topology, and after a resume on another topology.

The engine hands an operator lane-pure micro-batches while lanes run, but at the end of the
stream every upstream operator flushes all its lanes into one micro-batch; with one lane per
rank that batch holds one lane, with three lanes per rank it holds three.  An operator whose
output for lane L depends on the rest of such a batch (zephon 0.2.0's
``pack_sequences(shuffle_strategy="random")`` seeds one shuffle from the whole batch) gives L
a different stream on 1 rank than on 3.  Each chain below runs with canonical_replicas=3 on
every (dp_degree, workers) that divides the lanes, and per-lane streams must be identical.
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest

from properties.pipelines import (
    MIXTURE_GROUPING_MINIMAL,
    RANDOM_PACK_MINIMAL,
    PipelineConfig,
    build_pipeline,
    checkpoints_at_every_cut,
    item_view,
)
from properties.topology import lane_streams, merged_checkpoint, participants, run_lockstep
from zephon_ref.codec import decode, encode
from zephon_ref.types import SampleRecord

LAYOUT = {"web": (23, 14), "code": (12,), "books": (7,)}
RANDOM_PACK = (
    "pack_sequences",
    {"max_length": 256, "num_bins": 2, "shuffle_strategy": "random", "shuffle_seed": 4},
)


def _hold_three(state: list[SampleRecord], recs: list[SampleRecord]) -> tuple[list[SampleRecord], list[Any]]:
    """A push whose output depends on how records are grouped into pushes (per lane)."""
    return state + recs, []


def _reverse(state: list[SampleRecord]) -> list[SampleRecord]:
    return state[::-1]


STATEFUL = (
    "stateful_transform",
    {
        "name": "hold3",
        "init_state": list,
        "push": _hold_three,
        "flush": _reverse,
        "should_flush": lambda s: len(s) >= 3,
        "preserves_cursor_order": False,
    },
)

CHAINS: dict[str, list[tuple[str, dict[str, Any]]]] = {
    "pack_random_first_fit": [RANDOM_PACK],
    "pack_random_best_fit_batch": [
        ("pack_sequences", {**RANDOM_PACK[1], "algorithm": "best_fit"}),
        ("batch", {"microbatch_size": 2}),
    ],
    "pack_random_wrap": [
        ("pack_sequences", {"max_length": 64, "algorithm": "wrap", "shuffle_strategy": "random"})
    ],
    "pack_random_then_block_shuffle": [
        RANDOM_PACK,
        ("shuffle", {"buffer_size": 3, "seed": 1, "algorithm": "block"}),
    ],
    "pack_length": [("pack_sequences", {"max_length": 256, "num_bins": 3, "shuffle_strategy": "length"})],
    "shuffle_streaming": [("shuffle", {"buffer_size": 5, "seed": 3})],
    "shuffle_block_warmup": [
        ("shuffle", {"buffer_size": 9, "seed": 3, "algorithm": "block_warmup"}),
        ("batch", {"microbatch_size": 3, "drop_last": False}),
    ],
    "stateful_transform": [STATEFUL, ("batch", {"microbatch_size": 2})],
    "ensure_mixture": [("ensure_mixture", {"max_buffer_size": 6})],
    # the packers issue 30 added: a candidate pool per (lane, component), flat rows per (lane, group)
    "pack_best_fit_wrap_full": [
        ("pack_sequences", {"max_length": 96, "algorithm": "best_fit_wrap", "candidate_pool_size": 3,
                            "max_candidate_age": 4, "max_sequences_per_bin": 3, "homogeneity": "full"}),
    ],
    "pack_flat_best_fit_group": [
        ("pack_flat", {"max_length": 128, "num_bins": 2, "algorithm": "best_fit", "pad_token_id": 0,
                       "homogeneity": "group", "groups": {"g": ["web", "code"]}}),
        ("batch", {"microbatch_size": 2}),
    ],
    "pack_flat_best_fit_wrap_random": [
        ("pack_flat", {"max_length": 64, "algorithm": "best_fit_wrap", "candidate_pool_size": 2,
                       "pad_token_id": 1, "shuffle_strategy": "random", "shuffle_seed": 5}),
    ],
}
TOPOLOGIES = [(1, 2), (1, 3), (3, 1)]  # (dp_degree, workers) against (1, 1)


def cfg(chain: str, k: int | None) -> PipelineConfig:
    return PipelineConfig(CHAINS[chain], layout=LAYOUT, source_kwargs={"chunk_size": 4, "seed": 11},
                          options={"runner": "inline", "canonical_replicas": 3, "flush_every_k_chunks": k})


def streams(c: PipelineConfig, dp: int, workers: int) -> dict[int, list[Any]]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        steps, _ = run_lockstep(participants(c, dp, workers))
    return lane_streams(steps)


@pytest.mark.parametrize("k", [None, 2])
@pytest.mark.parametrize("chain", sorted(CHAINS))
def test_per_lane_streams_do_not_depend_on_the_other_lanes(chain: str, k: int | None) -> None:
    c = cfg(chain, k)
    alone = streams(c, 1, 1)
    assert sum(map(len, alone.values())) >= 6, "the config must deliver something per lane"
    for dp, workers in TOPOLOGIES:
        got = streams(c, dp, workers)
        for lane in sorted(alone):
            assert got.get(lane) == alone[lane], (
                f"{chain}: lane {lane} differs at dp_degree={dp} workers={workers}"
            )


@pytest.mark.parametrize("before,after", [(1, 3), (3, 1)])
def test_random_packing_resumed_on_another_topology_continues_every_lane(before: int, after: int) -> None:
    c = cfg("pack_random_first_fit", None)  # no flush sentinels: every lane's leftovers meet at the end
    want = streams(c, 1, 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        first = participants(c, before)
        head, _ = run_lockstep(first, steps=3)
        state = merged_checkpoint(first)
        tail, _ = run_lockstep(participants(c, after, state=decode(encode(state))))
    assert lane_streams(head + tail) == want


@pytest.mark.parametrize("before,after", [(1, 3), (3, 1)])
@pytest.mark.parametrize("chain", ["pack_best_fit_wrap_full", "pack_flat_best_fit_group",
                                   "pack_flat_best_fit_wrap_random"])
def test_the_new_packers_resumed_on_another_topology_continue_every_lane(chain: str, before: int,
                                                                         after: int) -> None:
    c = cfg(chain, 2)
    want = streams(c, 1, 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        first = participants(c, before)
        head, _ = run_lockstep(first, steps=4)
        state = merged_checkpoint(first)
        tail, _ = run_lockstep(participants(c, after, state=decode(encode(state))))
    assert lane_streams(head + tail) == want


@pytest.mark.parametrize("chain", ["pack_best_fit_wrap_full", "pack_flat_best_fit_group"])
def test_the_new_packers_resume_at_every_cut(chain: str) -> None:
    assert _resume_every_cut(cfg(chain, 2)) >= 6


def _resume_every_cut(c: PipelineConfig) -> int:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        items, cks = checkpoints_at_every_cut("zephon_ref", c)
        for i, ck in enumerate(cks):
            q = build_pipeline("zephon_ref", c)
            q.restore(decode(encode(ck)))
            assert [item_view(x) for x in q] == items[i:], f"cut before item {i} of {len(items)}"
    return len(items)


def test_minimal_random_packing_config_resumes_at_every_cut() -> None:
    """zephon 0.2.0 fails cuts 2-5 of this config (tests/conformance/test_ops_conformance.py)."""
    assert _resume_every_cut(RANDOM_PACK_MINIMAL) >= 5


def test_minimal_random_packing_config_is_the_same_on_one_and_two_ranks() -> None:
    alone = streams(RANDOM_PACK_MINIMAL, 1, 1)
    assert alone == streams(RANDOM_PACK_MINIMAL, 2, 1)
    assert alone == streams(RANDOM_PACK_MINIMAL, 1, 2)


def test_minimal_mixture_grouping_config_is_the_same_on_every_topology() -> None:
    """A lane's records in a mixed micro-batch are pushed together unless its own sentinel falls
    between them (zephon 0.2.0 splits at any lane's sentinel, and its lanes 1 and 2 differ
    between 1 and 4 ranks here: tests/conformance/test_zephon_checkpoints.py)."""
    alone = streams(MIXTURE_GROUPING_MINIMAL, 1, 1)
    assert sum(map(len, alone.values())) >= 10
    for dp, workers in [(2, 1), (4, 1), (1, 2), (2, 2)]:
        assert streams(MIXTURE_GROUPING_MINIMAL, dp, workers) == alone, (dp, workers)


def test_minimal_mixture_grouping_config_resumes_at_every_cut() -> None:
    assert _resume_every_cut(MIXTURE_GROUPING_MINIMAL) >= 10


def test_a_sentinel_splits_only_its_own_lanes_push() -> None:
    """The rule itself: in [A1, B-flush, A2, B1] lane A's records reach the operator in one call."""
    from zephon_ref.engine.stage import OpStage
    from zephon_ref.ops.base import BaseOp, CountingAccumulator, OpTraits
    from zephon_ref.types import SampleMeta, flush_sentinel

    calls: list[list[tuple[int, int]]] = []

    class Spy(CountingAccumulator[SampleRecord]):
        def push_many(self, elems: Any) -> Any:
            calls.append([(e.meta.lane_id, e.meta.chunk_offset) for e in elems])
            return super().push_many(elems)

    class Op(BaseOp):
        def accumulator(self, *, deterministic: bool, ctx: dict[str, Any]) -> Any:
            return Spy(100)

        def traits(self) -> OpTraits:
            return OpTraits()

        def process_many(self, elems: list[Any]) -> list[Any]:
            return elems

    def rec(lane: int, off: int) -> SampleRecord:
        return SampleRecord(SampleMeta((0, 0, off), lane, 0, off, {0: 1}), {"x": off})

    st = OpStage("spy", Op(), deterministic=True, ctx={})
    st.enqueue([rec(0, 1), flush_sentinel(1, 1), rec(0, 2), rec(1, 3)])
    assert calls == [[(0, 1), (0, 2), (1, 3)]]
    calls.clear()
    st.enqueue([rec(0, 4), rec(1, 5), flush_sentinel(0, 1), rec(0, 6)])
    assert calls == [[(0, 4)], [(1, 5), (0, 6)]]


@pytest.mark.parametrize("runner", ["threads", "process"])
def test_the_new_packers_deliver_the_same_stream_under_every_runner(runner: str) -> None:
    """Seed 002: the runner is an execution setting (a pool per (lane, group), flat numpy rows)."""
    c = PipelineConfig(
        [("pack_flat", {"max_length": 64, "algorithm": "best_fit_wrap", "candidate_pool_size": 3,
                        "pad_token_id": 0, "homogeneity": "group", "groups": {"g": ["web", "books"]}}),
         ("batch", {"microbatch_size": 2})],
        layout=LAYOUT, source_kwargs={"chunk_size": 4, "seed": 11},
        options={"runner": "inline", "canonical_replicas": 3, "flush_every_k_chunks": 2})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = [item_view(x) for x in build_pipeline("zephon_ref", c)]
        got = [item_view(x) for x in build_pipeline("zephon_ref", c, runner=runner)]
    assert got == want and len(want) >= 6

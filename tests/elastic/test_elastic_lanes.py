"""Elastic determinism: the same lanes, the same per-lane streams and global steps, on any
topology with the same canonical_replicas; and resume on a different topology continues
every lane exactly (seed 002, notes 3.1, 3.9, 4.1)."""

from __future__ import annotations

import itertools
import threading
import warnings

import pytest

from properties.pipelines import PipelineConfig, build_pipeline, item_view
from properties.topology import lane_streams, merged_checkpoint, participants, run_lockstep
from zephon_ref.errors import StateMismatchError

LAYOUT = {"web": (30, 22), "code": (16,), "books": (9,)}
CHAIN = [("pack_sequences", {"max_length": 160, "num_bins": 2}), ("shuffle", {"buffer_size": 4, "seed": 2}),
         ("batch", {"microbatch_size": 1})]


def cfg(c: int) -> PipelineConfig:
    return PipelineConfig(
        CHAIN,
        layout=LAYOUT,
        source_kwargs={"chunk_size": 3, "seed": 7, "exhausted_policy": "repeat", "max_repeats": 2},
        options={"runner": "inline", "canonical_replicas": c, "flush_every_k_chunks": 2},
    )


def truth(c: int) -> tuple[list, dict]:
    steps, _ = run_lockstep([build_pipeline("zephon_ref", cfg(c))])
    flat = [v for s in steps for _, v in s]
    return flat, lane_streams(steps)


def global_steps_of(flat: list, c: int) -> list[set]:
    """The single-rank stream cut into global steps of C deliveries (lanes round-robin)."""
    return [{(v[0][0], v[0][1]) for v in flat[i:i + c]} for i in range(0, len(flat) - c + 1, c)]


def factorisations(c: int) -> list[tuple[int, int]]:
    return [(d, w) for d in range(1, c + 1) for w in range(1, c + 1) if c % d == 0 and d * w <= c]


CASES = [
    (c, d, w) for c in (1, 2, 4, 8, 12) for d, w in factorisations(c) if (c <= 8 or d * w in (c, c // 2, 1))
]


@pytest.mark.parametrize("c,d,w", CASES, ids=[f"C{c}-D{d}-W{w}" for c, d, w in CASES])
def test_every_factorisation_gives_the_same_lanes_and_global_steps(c: int, d: int, w: int) -> None:
    flat, want = truth(c)
    steps, _ = run_lockstep(participants(cfg(c), d, w))
    got = lane_streams(steps)
    assert got == want, "every lane's stream must be identical on every topology"
    seen = [(v[0][0], v[0][1]) for s in steps for _, v in s]
    assert len(seen) == len(set(seen)) == len(flat), "nothing skipped or repeated"
    if d * w == c:  # one lane per participant: a global step is one item from each
        full_steps = [{(v[0][0], v[0][1]) for _, v in s} for s in steps if len(s) == c]
        assert full_steps == global_steps_of(flat, c)[:len(full_steps)]


REMAPS = [(8, 2, 4), (8, 8, 2), (8, 4, 1), (8, 1, 8), (15, 3, 5), (8, 3, 5)]


@pytest.mark.parametrize("c,before,after", REMAPS, ids=[f"C{c}-{a}to{b}" for c, a, b in REMAPS])
@pytest.mark.parametrize("mapping", ["contiguous", "interleaved"])
def test_resume_on_another_topology_continues_every_lane(
    c: int, before: int, after: int, mapping: str
) -> None:
    _, want = truth(c)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # C not divisible by dp_degree warns
        first = participants(cfg(c), before, mapping=mapping)
        head, _ = run_lockstep(first, steps=7)
        state = merged_checkpoint(first)
        tail, _ = run_lockstep(participants(cfg(c), after, mapping="contiguous", state=state))
    got = lane_streams(head + tail)
    assert got == want


def test_checkpoint_at_a_global_step_boundary_keeps_the_interleaving() -> None:
    c = 8
    flat, _ = truth(c)
    first = participants(cfg(c), 8)  # one lane per rank: every lockstep step is a global step boundary
    head, _ = run_lockstep(first, steps=5)
    state = merged_checkpoint(first)
    assert len(set(state["lane_emitted"].values())) == 1, "a step boundary: every lane delivered alike"
    single = build_pipeline("zephon_ref", cfg(c))
    single.restore(state)
    rest = [item_view(x) for x in single]
    head_flat = [v for s in head for _, v in sorted(s, key=lambda iv: iv[1][0][0])]
    assert head_flat + rest == flat, "resumed on one rank, the global interleaving is the uninterrupted one"


def test_other_canonical_replicas_is_refused() -> None:
    first = participants(cfg(4), 2)
    run_lockstep(first, steps=2)
    state = merged_checkpoint(first)
    with pytest.raises(StateMismatchError, match="canonical_replicas"):
        build_pipeline("zephon_ref", cfg(8)).restore(state)


def test_aggregation_round_over_a_directory_between_threads(tmp_path) -> None:
    c = 4
    _, want = truth(c)
    ranks = [build_pipeline("zephon_ref", cfg(c), world_size=2, global_rank=r, aggregate_dir=str(tmp_path),
                            aggregate_timeout_s=20) for r in range(2)]
    head, _ = run_lockstep(ranks, steps=6)
    out: list = [None, None]

    def ck(i: int) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            out[i] = ranks[i].checkpoint()

    threads = [threading.Thread(target=ck, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert out[0] == out[1] and sorted(out[0]["inflight"]) == list(range(c))
    tail, _ = run_lockstep(participants(cfg(c), 4, state=out[0]))
    assert lane_streams(head + tail) == want


def test_mapping_strategies_own_disjoint_lanes() -> None:
    for c, d in itertools.product((4, 7, 12), (1, 2, 3)):
        for mapping in ("contiguous", "interleaved"):
            owned = [p._world_of(p._options).owned_lanes for p in participants(cfg(c), d, mapping=mapping)]
            assert sorted(sum(owned, [])) == list(range(c))

"""Resume equivalence: a checkpoint taken before any delivered item, restored into a fresh
Pipeline (after a msgpack+zstd round trip), continues with exactly the uninterrupted tail.

Each operator alone and the full chain, 1 and 3 lanes: every cut point, including before
the first item, on flush boundaries, inside epochs and at the end of the stream.  Then
generated chains with several successive restores (cuts right after a restore), and the
threads runner against the inline one.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from properties.pipelines import PipelineConfig, build_pipeline, item_view
from zephon_ref.codec import decode, encode

SMALL = {"web": (14, 9), "code": (8,), "books": (5,)}
SRC = {"chunk_size": 6, "seed": 3, "shuffle_within_shard": True}
CHAINS = {
    "map": [],
    "batch": [("batch", {"microbatch_size": 3})],
    "pack_first_fit": [("pack_sequences", {"max_length": 160, "num_bins": 3})],
    "pack_best_fit": [
        ("pack_sequences", {"max_length": 160, "num_bins": 2, "algorithm": "best_fit"}),
        ("batch", {"microbatch_size": 2}),
    ],
    "pack_wrap": [("pack_sequences", {"max_length": 64, "algorithm": "wrap"})],
    "shuffle_streaming": [("shuffle", {"buffer_size": 7, "seed": 5})],
    "shuffle_block": [
        ("shuffle", {"buffer_size": 5, "seed": 5, "algorithm": "block"}),
        ("batch", {"microbatch_size": 2}),
    ],
    "ensure_mixture": [("ensure_mixture", {"max_buffer_size": 12})],
    "full": [
        ("pack_sequences", {"max_length": 160, "num_bins": 3}),
        ("shuffle", {"buffer_size": 4, "seed": 2}),
        ("ensure_mixture", {}),
        ("batch", {"microbatch_size": 2}),
    ],
}


MONOTONE = {"map", "batch"}


def cfg_for(chain: str, lanes: int, k: int | None = 2, **src: object) -> PipelineConfig:
    k = None if chain in MONOTONE else k
    return PipelineConfig(
        CHAINS[chain],
        layout=SMALL,
        source_kwargs={**SRC, **src},
        options={"runner": "inline", "canonical_replicas": lanes, "flush_every_k_chunks": k},
    )


def build(cfg: PipelineConfig, **over: object):
    return build_pipeline("zephon_ref", cfg, **over)


def run_with_checkpoints(cfg: PipelineConfig):
    p = build(cfg)
    cks, items = [p.checkpoint()], []
    for x in p:
        items.append(item_view(x))
        cks.append(p.checkpoint())
    cks.append(p.checkpoint())  # after the stream ended, not just after the last item
    return items, cks


def resumed(cfg: PipelineConfig, state: dict, **over: object) -> list:
    p = build(cfg, **over)
    p.restore(decode(encode(state)))
    return [item_view(x) for x in p]


@pytest.mark.parametrize("lanes", [1, 3])
@pytest.mark.parametrize("chain", sorted(CHAINS))
def test_every_cut_resumes_to_the_uninterrupted_tail(chain: str, lanes: int) -> None:
    cfg = cfg_for(chain, lanes)
    items, cks = run_with_checkpoints(cfg)
    assert len(items) >= 4, "the config must deliver something to cut"
    for i, ck in enumerate(cks):
        assert resumed(cfg, ck) == items[i:], f"cut before item {i} of {len(items)} ({chain}, {lanes} lanes)"
    assert cks[-1]["inflight"] == {lane: {} for lane in range(lanes)}, "end of stream leaves nothing inflight"


def test_cuts_on_and_around_flush_boundaries_with_repeating_reshuffled_epochs() -> None:
    cfg = cfg_for("full", 2, k=1, exhausted_policy="repeat", max_repeats=1)
    items, cks = run_with_checkpoints(cfg)
    on_boundary = [i for i, ck in enumerate(cks) if any(ck["epoch_boundaries"].values())]
    assert on_boundary, "K=1 records a boundary after every chunk"
    epochs = {ck["lane_ws_state"][0]["cursor_states"]["web"]["epoch"] for ck in cks}
    assert epochs == {0, 1}, "the run must cross a reshuffled dataset epoch"
    for i, ck in enumerate(cks):
        assert resumed(cfg, ck) == items[i:]


@pytest.mark.parametrize("chain", ["full", "shuffle_streaming", "batch"])
def test_checkpoint_right_after_restore_and_chained_restores(chain: str) -> None:
    cfg = cfg_for(chain, 3)
    items, cks = run_with_checkpoints(cfg)
    cut = len(items) // 3
    p = build(cfg)
    p.restore(cks[cut])
    assert p.checkpoint() == cks[cut], "a checkpoint before iterating returns the pending state"
    it = iter(p)
    got = [item_view(next(it)) for _ in range(len(items) // 3)]
    again = p.checkpoint()
    assert again["checkpoint_reload_count"] == cks[cut]["checkpoint_reload_count"] + 1
    rest = resumed(cfg, again)
    assert got + rest == items[cut:]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(sorted(set(CHAINS) - {"full"})), min_size=1, max_size=3, unique=True)
       .filter(lambda parts: sum(p.startswith("pack") for p in parts) <= 1), st.integers(1, 4),
       st.integers(1, 3), st.lists(st.integers(0, 40), min_size=1, max_size=3), st.integers(0, 2**16))
def test_generated_chains_survive_successive_restores(parts, lanes, k, cuts, seed) -> None:
    chain = [step for name in parts for step in CHAINS[name] if step[0] != "batch"] + [
        ("batch", {"microbatch_size": 2})
    ]
    cfg = PipelineConfig(chain, layout=SMALL, source_kwargs={**SRC, "seed": seed},
                         options={"runner": "inline", "canonical_replicas": lanes, "flush_every_k_chunks": k})
    full = [item_view(x) for x in build(cfg)]
    delivered: list = []
    state = None
    for cut in cuts:
        p = build(cfg)
        if state is not None:
            p.restore(decode(encode(state)))
        it = iter(p)
        for _ in range(cut):
            x = next(it, None)
            if x is None:
                break
            delivered.append(item_view(x))
        state = p.checkpoint()
    p = build(cfg)
    p.restore(state)
    delivered += [item_view(x) for x in p]
    assert delivered == full


@pytest.mark.parametrize("chain", ["full", "pack_first_fit", "ensure_mixture", "shuffle_block"])
def test_threads_runner_equals_inline(chain: str) -> None:
    cfg = cfg_for(chain, 3)
    inline = [item_view(x) for x in build(cfg)]
    for workers, q in ((1, 1), (3, 2), (4, 16)):
        assert [
            item_view(x) for x in build(cfg, runner="threads", max_workers=workers, op_queue_capacity=q)
        ] == inline


def test_threads_checkpoint_resumes_inline_and_back() -> None:
    cfg = cfg_for("full", 3)
    items, _ = run_with_checkpoints(cfg)
    p = build(cfg, runner="threads")
    it = iter(p)
    head = [item_view(next(it)) for _ in range(5)]
    state = p.checkpoint()  # the source ran ahead: more chunks inflight, same resume point
    assert head + resumed(cfg, state) == items

"""Fabricated engine-state-like dicts for tests, benchmarks and the simulator.

Theory of operation
-------------------
:func:`fabricate_engine_state` builds a dict shaped like zephon 0.2.0's
``EngineStateV2`` in the single-participant fast path (notes 5.1, 5.3, 5.4): int
lane and cid keys, inflight WorkChunk states listing SampleIds, replay cursors
as ``(cid, offset, lineage, sample_id)`` tuples, epoch boundaries, per-lane
StaticMixture states with numpy-PCG64-like 128-bit RNG states, rr keys of the
form ``"worker/active:lanes"``.  All randomness comes from the ``random.Random``
the caller passes (seeded, or Hypothesis' ``st.randoms()``), so the same seed
gives the same dict.  It is a stand-in until the engine produces real states;
it makes no claim that the values are mutually consistent as engine state.

What may not live here: anything the store or codec depends on.
"""

from __future__ import annotations

import random
from typing import Any

from zephon_ref.types import SampleId

__all__ = ["fabricate_engine_state"]


def _pcg64_state(rnd: random.Random) -> dict[str, Any]:
    return {
        "bit_generator": "PCG64",
        "state": {"state": rnd.getrandbits(128), "inc": rnd.getrandbits(128) | 1},
        "has_uint32": rnd.randrange(2),
        "uinteger": rnd.getrandbits(32),
    }


def _work_chunk(rnd: random.Random, names: list[str], samples: int) -> dict[str, Any]:
    comps = []
    for ds, name in enumerate(names):
        k = rnd.randrange(0, samples + 1)
        comps.append(
            [name, [[ds, rnd.randrange(64), rnd.randrange(1 << 40)] for _ in range(k)]]
        )
    total = sum(len(c[1]) for c in comps)
    weights = [rnd.randrange(1, 100) for _ in names]
    return {
        "version": 3,
        "seed": rnd.choice([None, rnd.getrandbits(63)]),
        "components": comps,
        "component_order": list(names),
        "total_samples": total,
        "source_exhausted": sorted(rnd.sample(names, rnd.randrange(len(names) + 1))),
        "target_mixture": rnd.choice(
            [None, {n: w / sum(weights) for n, w in zip(names, weights, strict=False)}]
        ),
    }


def _ws_state(rnd: random.Random, lane: int, c: int, names: list[str], seed: int) -> dict[str, Any]:
    cursor_states = {}
    for name in names:
        pos, ep = rnd.randrange(1 << 20), rnd.randrange(4)
        cs: dict[str, Any] = {"version": 1, "position": pos, "epoch": ep}
        if rnd.random() < 0.8:
            cs["block_rng_snapshot"] = {"rng_state": _pcg64_state(rnd), "block_count": rnd.randrange(100)}
        cursor_states[name] = cs
    return {
        "version": 5,
        "lane_id": lane,
        "canonical_replicas": c,
        "chunk_size_hint": 64,
        "seed": seed,
        "chunk_size": 64,
        "knobs": {"shuffle_shards": True, "shuffle_within_shard": rnd.random() < 0.5},
        "shuffle_block_size_spec": "auto",
        "cursor_block_sizes": {n: rnd.choice([256, 1024, 4096]) for n in names},
        "global_chunk_index": rnd.randrange(1 << 30),
        "weights": {n: float(rnd.randrange(1, 10)) for n in names},
        "component_order": list(names),
        "dataset_ids": list(range(len(names))),
        "cursor_states": cursor_states,
        "cursor_positions": {n: cursor_states[n]["position"] for n in names},
        "cursor_epochs": {n: cursor_states[n]["epoch"] for n in names},
        "exhausted_policy": {n: rnd.choice(["repeat", "stop"]) for n in names},
        "reshuffle_on_repeat": {n: True for n in names},
        "max_repeats": {n: None for n in names},
        "stop_after_passes": None,
        "lane_assignment": "modulo",
        "allocation_mode": "accumulator",
        "accumulators": {n: rnd.random() for n in names},
        "token_deficits": None,
        "token_ratios": None,
    }


def fabricate_engine_state(
    rnd: random.Random,
    *,
    canonical_replicas: int = 4,
    lanes: list[int] | None = None,
    inflight_chunks: int = 3,
    samples_per_component: int = 8,
    components: int = 2,
    fingerprint: str | None = None,
    merged: bool = False,
) -> dict[str, Any]:
    """An EngineStateV2-like dict for ``lanes`` (default: all ``canonical_replicas`` lanes)."""
    c = canonical_replicas
    owned = list(range(c)) if lanes is None else list(lanes)
    names = [f"ds{i}" for i in range(components)]
    seed = rnd.getrandbits(32)
    inflight: dict[int, dict[int, Any]] = {}
    progress: dict[int, dict[str, int]] = {}
    next_cid: dict[int, int] = {}
    ws: dict[int, Any] = {}
    replay: dict[int, Any] = {}
    boundaries: dict[int, list[int]] = {}
    emitted: dict[int, int] = {}
    for lane in owned:
        first = rnd.randrange(0, 1000)
        n = rnd.randrange(0, inflight_chunks + 1)
        inflight[lane] = {
            cid: _work_chunk(rnd, names, samples_per_component) for cid in range(first, first + n)
        }
        progress[lane] = {"chunk_id": first + n - 1 if n else -1, "offset": rnd.randrange(64)}
        next_cid[lane] = first + n
        ws[lane] = _ws_state(rnd, lane, c, names, seed)
        if rnd.random() < 0.8:
            sid = SampleId(rnd.randrange(components), rnd.randrange(64), rnd.randrange(1 << 40))
            lineage = tuple(rnd.randrange(4) for _ in range(rnd.randrange(3)))
            replay[lane] = (first, rnd.randrange(64), lineage, tuple(sid))
        else:
            replay[lane] = None
        if rnd.random() < 0.5:
            boundaries[lane] = sorted(rnd.sample(range(first, first + n + 2), rnd.randrange(1, 3)))
        emitted[lane] = rnd.randrange(1 << 20)
    key = f"0/1:{','.join(str(x) for x in owned)}"
    world: dict[str, Any] = {"canonical_replicas": c, "world_size": 1}
    if not merged:
        world.update(global_rank=0, dp_degree=1, dp_group_id=0, mapping={0: list(owned)})
    state: dict[str, Any] = {
        "version": 2,
        "world": world,
        "inflight": inflight,
        "progress": progress,
        "lane_next_cid": next_cid,
        "lane_ws_state": ws,
        "work_source": None if merged else {"seed": seed, "datasets": list(names)},
        "work_config": None,
        "last_round_id": rnd.choice([None, str(rnd.getrandbits(60))]),
        "checkpoint_reload_count": rnd.randrange(5),
        "rr_next_idx": {key: rnd.randrange(max(1, len(owned)))},
        "replay_cursors": replay,
        "epoch_boundaries": boundaries,
        "lane_emitted": emitted,
    }
    if fingerprint is not None:
        state["fingerprint"] = fingerprint
    return state

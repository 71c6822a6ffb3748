"""Conformance: every lane's chunk sequence equals zephon 0.2.0's, chunk for chunk.

Compared per chunk: components (names, SampleIds, order), the interleaved offset
order, seed, source_exhausted and target_mixture.  Configurations that zephon
refuses must be refused by zephon_ref too (both as ValueError).  Runs whenever the
``conformance`` extra is installed; CI installs it.
"""

from __future__ import annotations

import os
import warnings

import pytest
from hypothesis import HealthCheck, given, settings

from properties.sources import SourceConfig, build_source, lane_chunks, zephon_available
from properties.strategies import source_configs

pytestmark = [
    pytest.mark.conformance,
    pytest.mark.skipif(
        not zephon_available(), reason="zephon 0.2.0 not installed (pip install .[conformance])"
    ),
]

MAX_CHUNKS = 40
EXAMPLES = int(os.environ.get("ZEPHON_REF_CONFORMANCE_EXAMPLES", "220"))


def _build(impl: str, cfg: SourceConfig) -> tuple[object | None, BaseException | None]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return build_source(impl, cfg), None
        except (ValueError, TypeError, RuntimeError) as exc:
            return None, exc


def _lanes(impl: str, src: object, cfg: SourceConfig) -> tuple[list[list[dict]], BaseException | None]:
    out = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for lane in range(cfg.canonical_replicas):
            try:
                out.append(lane_chunks(src, lane, cfg.canonical_replicas, MAX_CHUNKS))
            except (ValueError, RuntimeError) as exc:
                return out, exc
    return out, None


def check_conformance(cfg: SourceConfig) -> None:
    ref, ref_err = _build("zephon_ref", cfg)
    zep, zep_err = _build("zephon", cfg)
    if zep_err is not None:
        assert ref_err is not None, f"zephon refused, zephon_ref accepted: {zep_err!r}\n{cfg.describe()}"
        assert isinstance(ref_err, (type(zep_err).__mro__[0], ValueError))
        return
    z_lanes, z_late = _lanes("zephon", zep, cfg)
    if z_late is not None:
        # zephon refuses an unproducible first chunk only at next_chunk(); zephon_ref at construction
        assert ref_err is not None, (
            f"zephon raised {z_late!r} on iteration; zephon_ref accepted\n{cfg.describe()}"
        )
        assert isinstance(z_late, ValueError) and isinstance(ref_err, ValueError)
        return
    assert ref_err is None, f"zephon_ref refused ({ref_err!r}) what zephon accepts\n{cfg.describe()}"
    r_lanes, r_late = _lanes("zephon_ref", ref, cfg)
    assert r_late is None, repr(r_late)
    for lane, (zl, rl) in enumerate(zip(z_lanes, r_lanes, strict=False)):
        for i, (zc, rc) in enumerate(zip(zl, rl, strict=False)):
            assert rc == zc, (
                f"lane {lane} chunk {i} differs\nzephon:     {zc}\nzephon_ref: {rc}\n{cfg.describe()}"
            )
        assert len(rl) == len(zl), f"lane {lane}: {len(rl)} chunks vs zephon's {len(zl)}\n{cfg.describe()}"


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(source_configs())
def test_lane_chunk_sequences_match_zephon(cfg: SourceConfig) -> None:
    check_conformance(cfg)


TOKEN_EXAMPLES = int(os.environ.get("ZEPHON_REF_TOKEN_CONFORMANCE_EXAMPLES", "120"))


@settings(max_examples=TOKEN_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(source_configs(token_aware=True))
def test_token_aware_lane_chunk_sequences_match_zephon(cfg: SourceConfig) -> None:
    check_conformance(cfg)


FIXED = [
    SourceConfig({"a": (10, 7, 3), "b": (5, 9)}, {"a": 0.7, "b": 0.3}, 3, {"chunk_size": 4, "seed": 5}),
    SourceConfig(
        {"a": (100, 70, 30), "b": (50, 90)},
        {"a": 0.7, "b": 0.3},
        5,
        {
            "chunk_size": 13,
            "seed": 11,
            "shuffle_within_shard": True,
            "shuffle_block_size": "global",
            "stop_after_passes": 3,
        },
    ),
    SourceConfig(
        {"a": (10, 7, 3), "b": (5, 9), "c": (4,)},
        {"a": 2, "b": 1, "c": 0.3},
        2,
        {
            "chunk_size": 5,
            "seed": 7,
            "exhausted_policy": {"a": "stop", "b": "repeat", "c": "redistribute"},
            "reshuffle_on_repeat": False,
        },
    ),
    # long enough that the block shuffle needs several 65,536-sample fills
    SourceConfig(
        {"big": (70000, 50000)},
        {"big": 1.0},
        2,
        {"chunk_size": 4096, "seed": 3, "shuffle_within_shard": True, "shuffle_block_size": 1000},
    ),
    # token-aware: per-dataset pinned ratios, a repeat retry, blocks; and a redistribute tail
    SourceConfig(
        {"a": (100, 70, 30), "b": (50, 90)},
        {"a": 0.7, "b": 0.3},
        3,
        {
            "chunk_size": 13,
            "seed": 11,
            "shuffle_within_shard": True,
            "shuffle_block_size": 20,
            "stop_after_passes": 3,
            "token_estimation": {"primer": {"a": 0.5, "b": 0.1}},
        },
    ),
    SourceConfig(
        {"a": (10, 7, 3), "b": (5, 9), "c": (4,)},
        {"a": 2, "b": 1, "c": 0.3},
        2,
        {
            "chunk_size": 5,
            "seed": 7,
            "exhausted_policy": {"a": "stop", "b": "repeat", "c": "redistribute"},
            "token_estimation": {"primer": 2.0},
        },
    ),
    SourceConfig(
        {"big": (70000, 50000), "small": (3000,)},
        {"big": 1.0, "small": 0.5},
        2,
        {
            "chunk_size": 4096,
            "seed": 3,
            "shuffle_block_size": 1000,
            "exhausted_policy": "repeat",
            "max_repeats": 1,
            "token_estimation": {"primer": {"big": 0.25, "small": 1.5}},
        },
    ),
]


@pytest.mark.parametrize("cfg", FIXED, ids=[f"fixed{i}" for i in range(len(FIXED))])
def test_fixed_configs_match_zephon(cfg: SourceConfig) -> None:
    check_conformance(cfg)


def _zephon_legacy_lane(cfg: SourceConfig, lane: int) -> list[dict]:
    """zephon selects legacy_fixed only from an old checkpoint: rewrite a fresh state into one."""
    from properties.sources import chunk_view, read_chunks

    clone = build_source("zephon", cfg).clone_for_lane(lane, cfg.canonical_replicas)
    state = clone.state_dict()
    state["allocation_mode"] = "legacy_fixed"
    state["accumulators"] = None
    clone.load_state_dict(state)
    return [chunk_view(ch) for ch in read_chunks(clone, MAX_CHUNKS)]


@pytest.mark.parametrize("weights,chunk_size", [({"a": 0.7, "b": 0.3}, 10), ({"a": 5, "b": 1, "c": 1}, 9),
                                                 ({"a": 1, "b": 1, "c": 1}, 4)])
def test_legacy_fixed_quotas_match_zephon(weights: dict, chunk_size: int) -> None:
    layout = {"a": (30, 11), "b": (17,), "c": (9, 9)}
    layout = {k: layout[k] for k in weights}
    cfg = SourceConfig(layout, weights, 2, {"chunk_size": chunk_size, "seed": 4, "exhausted_policy": "repeat",
                                            "max_repeats": 2})
    ref_cfg = SourceConfig(layout, weights, 2, {**cfg.kwargs, "allocation_mode": "legacy_fixed"})
    for lane in range(2):
        ours = lane_chunks(build_source("zephon_ref", ref_cfg), lane, 2, MAX_CHUNKS)
        assert ours == _zephon_legacy_lane(cfg, lane)
        assert ours, "the config must produce chunks"

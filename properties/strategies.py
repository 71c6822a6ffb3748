"""Hypothesis strategies for work-source configurations (shared by tests and notebooks)."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from properties.sources import SourceConfig

__all__ = ["any_source_configs", "source_configs", "token_primers"]


@st.composite
def source_configs(draw: Any, *, max_datasets: int = 4, max_shard: int = 40, max_lanes: int = 16,
                   max_chunk: int = 64, token_aware: bool = False) -> SourceConfig:
    """Small but varied StaticMixtureWorkSource configurations (valid or not).

    ``token_aware=True`` adds a ``token_estimation`` (as literal TokenEstimation
    fields, see :func:`properties.sources.build_source`) with pinned ratios: one
    global ratio, or one per dataset.
    """
    n = draw(st.integers(1, max_datasets))
    names = [f"d{i}" for i in range(n)]
    layout = {
        name: tuple(draw(st.lists(st.integers(0, max_shard), min_size=1, max_size=4)))
        for name in names
    }
    weights = {name: draw(st.sampled_from([1, 2, 3, 5, 0.5, 0.25, 7.0, 0.1])) for name in names}
    kwargs: dict[str, Any] = {
        "chunk_size": draw(st.integers(1, max_chunk)),
        "seed": draw(st.integers(0, 2**32)),
        "shuffle_shards": draw(st.booleans()),
        "shuffle_within_shard": draw(st.booleans()),
        "shuffle_block_size": draw(st.one_of(st.none(), st.integers(1, 50), st.sampled_from(["auto", "global"]))),
        "lane_assignment": draw(st.sampled_from(["permute", "modulo"])),
    }
    mode = draw(st.sampled_from(["default", "policy", "policy_map", "max_repeats", "passes"]))
    if mode == "policy":
        kwargs["exhausted_policy"] = draw(st.sampled_from(["stop", "repeat", "redistribute"]))
    elif mode == "policy_map":
        kwargs["exhausted_policy"] = {nm: draw(st.sampled_from(["stop", "repeat", "redistribute"])) for nm in names}
    elif mode == "max_repeats":
        kwargs["exhausted_policy"] = "repeat"
        kwargs["max_repeats"] = draw(st.integers(0, 3))
    elif mode == "passes":
        kwargs["stop_after_passes"] = draw(st.integers(1, 3))
    if mode != "default" and draw(st.booleans()):
        kwargs["reshuffle_on_repeat"] = draw(st.booleans())
    if token_aware:
        kwargs["token_estimation"] = {"primer": draw(token_primers(names))}
    return SourceConfig(layout, weights, draw(st.integers(1, max_lanes)), kwargs)


_RATIOS = st.sampled_from([0.05, 0.25, 0.3, 1.0, 2.5, 7.0])


def token_primers(names: list[str]) -> st.SearchStrategy[Any]:
    """Pinned tokens/byte primers: a global ratio or a ratio per dataset."""
    return st.one_of(_RATIOS, st.fixed_dictionaries({n: _RATIOS for n in names}))


def any_source_configs(**kw: Any) -> st.SearchStrategy[SourceConfig]:
    """:func:`source_configs` in sample units or (about half the time) token-aware."""
    return st.booleans().flatmap(lambda token: source_configs(token_aware=token, **kw))

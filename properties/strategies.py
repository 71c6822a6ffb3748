"""Hypothesis strategies: work sources, pipelines, topologies, execution settings, cut schedules.

Shared by tests, the stateful machines and notebooks.  Every value is drawn through
Hypothesis (no drawn seed is fed to another generator), so a failure shrinks to the
smallest configuration, topology or schedule that shows it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

from properties.pipelines import PipelineConfig
from properties.sources import SourceConfig

__all__ = [
    "TIERS",
    "allocation_modes",
    "Topology",
    "any_source_configs",
    "cut_schedules",
    "execution_settings",
    "pipeline_configs",
    "source_configs",
    "token_primers",
    "topologies",
    "topology_sequences",
]


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
        "shuffle_block_size": draw(
            st.one_of(st.none(), st.integers(1, 50), st.sampled_from(["auto", "global"]))
        ),
        "lane_assignment": draw(st.sampled_from(["permute", "modulo"])),
    }
    mode = draw(st.sampled_from(["default", "policy", "policy_map", "max_repeats", "passes"]))
    if mode == "policy":
        kwargs["exhausted_policy"] = draw(st.sampled_from(["stop", "repeat", "redistribute"]))
    elif mode == "policy_map":
        kwargs["exhausted_policy"] = {
            nm: draw(st.sampled_from(["stop", "repeat", "redistribute"])) for nm in names
        }
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


# -- pipelines, topologies, execution settings, cut schedules (the property suite's machines) ---------

_NAMES = ("web", "code", "books")


#: the sizes of the two tiers of :func:`pipeline_configs`: shard sizes, shards per dataset, chunk sizes,
#: lanes, flush_every_k_chunks
TIERS: dict[str, tuple[tuple[int, int], tuple[int, int], tuple[int, int], int, tuple[int, int]]] = {
    "small": ((1, 16), (1, 3), (1, 8), 4, (1, 3)),
    # long-range: every dataset holds >= 80 samples, so each of <= 2 lanes gets >= 10 chunks of <= 4
    # samples, and a cut in the first half of a lane's stream has at least two flush epochs
    # (flush_every_k_chunks <= 2 chunks each) after it
    "long": ((40, 50), (2, 2), (2, 4), 2, (1, 2)),
}


def _source_policy(draw: Any, names: tuple[str, ...]) -> dict[str, Any]:
    """An exhaustion policy that ends the stream (the suite's runs deliver everything)."""
    mode = draw(st.sampled_from(["default", "stop", "redistribute", "per_dataset", "max_repeats", "passes"]))
    if mode in ("stop", "redistribute"):
        return {"exhausted_policy": mode}
    if mode == "per_dataset":
        # a repeating dataset ends only when a stopping one does: then one dataset stops
        pol = {n: draw(st.sampled_from(["stop", "redistribute", "repeat"])) for n in names}
        if "repeat" in pol.values() and "stop" not in pol.values():
            pol[names[0]] = "stop"
        out: dict[str, Any] = {"exhausted_policy": pol}
        if "repeat" in pol.values() and draw(st.booleans()):
            out["reshuffle_on_repeat"] = draw(st.booleans())
        return out
    if mode == "max_repeats":
        return {"exhausted_policy": "repeat", "max_repeats": draw(st.integers(0, 2)),
                **({"reshuffle_on_repeat": draw(st.booleans())} if draw(st.booleans()) else {})}
    if mode == "passes":
        return {"stop_after_passes": draw(st.integers(1, 2))}
    return {}


def allocation_modes() -> tuple[str, ...]:
    """The ``allocation_mode`` values the source declares (its state schema's modes) that a caller may
    name: all but ``token_aware``, which passing ``token_estimation`` selects (the source refuses it
    by name)."""
    from zephon_ref.work import static_mixture

    return tuple(m for m in static_mixture._MODES if m != "token_aware")


def _legacy_refuses(source_kwargs: dict[str, Any], weights: dict[str, float], names: tuple[str, ...]) -> bool:
    """Whether ``allocation_mode="legacy_fixed"`` is refused for this source, as its validation says:
    a ``redistribute`` dataset, or a dataset whose share of a chunk is under one sample."""
    pol = source_kwargs.get("exhausted_policy")
    policies = pol.values() if isinstance(pol, dict) else [pol]
    total = sum(weights[n] for n in names)
    return "redistribute" in policies or any(source_kwargs["chunk_size"] * weights[n] / total < 1.0
                                             for n in names)


@st.composite
def pipeline_configs(draw: Any, *, max_lanes: int | None = None, max_shard: int | None = None,
                     token_aware: bool | None = None, random_packing: bool = True,
                     tier: str = "small") -> PipelineConfig:
    """Valid pipelines with every knob drawn: 1-3 datasets of uneven shards, a source in sample units or
    (``token_aware``, drawn when None) with pinned token ratios, the source's routing, shuffling and
    exhaustion knobs (always a stream that ends), and an operator chain drawn from the API
    (:func:`pipeline_chains`: every data method of the builder and every value class of every knob
    its config declares, but :data:`END_TO_END_SKIPS` / :data:`END_TO_END_EXCLUDED`);
    ``canonical_replicas`` and ``flush_every_k_chunks``.  ``random_packing=False`` leaves out
    ``shuffle_strategy="random"`` packing (zephon 0.2.0 diverges there; see docs/divergences.md).
    ``tier="long"`` draws bigger corpora (:data:`TIERS`): every lane gets many chunks, which
    long-range bugs (a restored epoch-boundary counter, say) need.  Every value is drawn, so a
    failure shrinks to the smallest configuration that shows it."""
    (lo, tier_shard), (shards_lo, shards_hi), (chunk_lo, chunk_hi), tier_lanes, (k_lo, k_hi) = TIERS[tier]
    max_shard = tier_shard if max_shard is None else max_shard
    max_lanes = tier_lanes if max_lanes is None else max_lanes
    n = draw(st.integers(1, 3))
    names = _NAMES[:n]
    chunk = draw(st.integers(chunk_lo, chunk_hi))
    layout = {name: tuple(draw(st.lists(st.integers(lo, max_shard), min_size=shards_lo, max_size=shards_hi)))
              for name in names}
    # every dataset holds at least a chunk's worth, so the allocation never asks more than exists
    layout = {name: sizes if sum(sizes) >= chunk else sizes + (chunk,) for name, sizes in layout.items()}
    weights = {name: float(draw(st.sampled_from([1, 2, 3]))) for name in names}
    source_kwargs: dict[str, Any] = {"chunk_size": chunk, "seed": draw(st.integers(0, 7))}
    if draw(st.booleans()):  # the source's own knobs (their defaults otherwise)
        source_kwargs["lane_assignment"] = draw(st.sampled_from(["permute", "modulo"]))
        source_kwargs["shuffle_shards"] = draw(st.booleans())
        source_kwargs["shuffle_within_shard"] = draw(st.booleans())
        source_kwargs["shuffle_block_size"] = draw(st.one_of(st.none(), st.integers(1, 12),
                                                             st.sampled_from(["auto", "global"])))
    source_kwargs.update(_source_policy(draw, names))
    if token_aware if token_aware is not None else draw(st.booleans()):
        ratio = st.sampled_from([0.3, 1.0, 2.5])  # moderate: extreme ratios repeat small datasets for long
        from zephon_ref.work import TokenEstimation  # build_pipeline converts it for zephon

        source_kwargs["token_estimation"] = TokenEstimation(
            primer=draw(st.one_of(ratio, st.fixed_dictionaries({name: ratio for name in names})))
        )
    else:
        mode = draw(st.sampled_from(allocation_modes()))
        if mode != "accumulator" or draw(st.booleans()):  # the default, also named at times
            if mode == "legacy_fixed" and _legacy_refuses(source_kwargs, weights, names):
                mode = "accumulator"
            source_kwargs["allocation_mode"] = mode  # a zephon_ref keyword (divergence D-22)
    chain = draw(pipeline_chains(names, token_aware="token_estimation" in source_kwargs,
                                 random_packing=random_packing, source_kwargs=source_kwargs, layout=layout,
                                 weights=weights))
    reorders = any(m != "batch" for m, _ in chain)
    options: dict[str, Any] = {"runner": "inline", "canonical_replicas": draw(st.integers(1, max_lanes))}
    if reorders:
        options["flush_every_k_chunks"] = draw(st.integers(k_lo, k_hi))
    return PipelineConfig(chain=chain, layout=layout, weights=weights, source_kwargs=source_kwargs,
                          options=options, corpus_seed=draw(st.integers(0, 3)))


#: builder methods the end-to-end pipelines do not draw, each with its reason (the operator row draws
#: every method: properties.op_units)
END_TO_END_SKIPS: dict[str, str] = {
    "tokenize": "the suite's pipelines tokenize ahead of the chain (build_pipeline's "
                "map_transform(crc_tokens), the lineage row's token model): records reaching the chain "
                "hold input_ids and no text, so a tokenize in the chain has no field to read; tokenizing "
                "in place of that map would need the lineage model to name each split child's token "
                "offset (split_long_samples names a child by its index, not its start in tokens); the "
                "operator row draws it",
    "stateful_transform": "its drawn fan-out names a child by its index (spawn_child), while the lineage "
                          "row's model reads a record's last lineage element as its start in tokens "
                          "(wrap's fragments); a packer after the fan-out nests a second level the model "
                          "cannot place; the operator row draws it (exactly-once closure, flush resets)",
    "decode_text": "it reads bytes fields, and the suite's corpora reach the chain as crc token lists "
                   "(the lineage model knows each sample's tokens from its str text): no field for it to "
                   "decode; the operator row draws it over bytes payloads "
                   "(properties.op_units.bytes_payloads)",
    "expand_chat": "the suite's corpora hold no conversations (a sample's tokens are its text's crc "
                   "tokens); the operator row draws it over chat payloads "
                   "(properties.op_units.chat_payloads)",
    "tokenize_chat": "the suite's corpora hold no conversations, and the lineage row's model knows tokens"
                     " through the crc tokenizer map only; the operator row draws it with the tiny "
                     "offline HF tokenizer (properties.hf_tokenizer.tiny_tokenizer)",
    "pack_flat": "its row is one flat token list: the normal form (sim.workloads.record_view) keeps its "
                 "input_ids without the segment boundaries (positions are dropped, and "
                 "emit_positions=False has none), so the lineage row cannot give a contributor its "
                 "tokens; the operator row draws it",
}
#: value classes the end-to-end pipelines do not draw, with the reason (the operator row draws them)
END_TO_END_EXCLUDED: dict[str, dict[str, tuple[str, ...]]] = {
    # a pack's payload is one token tuple per contributor in the lineage row's model
    # numpy_array / torch_tensor join numpy / torch payloads only (a typed refusal for the suite's token
    # lists; tests/conformance/test_tensor_payloads.py packs tensors)
    "pack_sequences": {"pack_payloads": ("callable", "'numpy_array'", "'torch_tensor'"),
                       # first/best fit refuse an oversized record at run time: an error, not a stream
                       "drop_oversized": ("False",),
                       },
}
#: (method, knob, value class) rows the end-to-end pipelines never draw, though their classes are not
#: excluded, each with its reason: tests/properties/test_generator_coverage.py requires each to stay
#: undrawn (a stale entry fails)
END_TO_END_UNDRAWN: dict[tuple[str, str, str], str] = {}
#: (method, knob) pairs the end-to-end pipelines draw in some derandomized sequences and not in others
#: (not checked either way), each with its reason
END_TO_END_RARELY_DRAWN: dict[tuple[str, str], str] = {}
#: where a method sits in an end-to-end chain (a method not named here: before batch, by name)
CHAIN_ORDER = ("map_transform", "pack_sequences", "shuffle", "ensure_mixture")


@st.composite
def pipeline_chains(draw: Any, names: tuple[str, ...], *, token_aware: bool, random_packing: bool = True,
                    source_kwargs: dict[str, Any] | None = None, layout: Any = None,
                    weights: Any = None) -> list[tuple[str, dict[str, Any]]]:
    """An operator chain drawn from the API (:mod:`properties.generator`): a subset of the data
    methods (without :data:`END_TO_END_SKIPS`), each call drawn knob by knob and checked by the
    builder on a small source of the same datasets; ``batch`` last, then ``map_batch`` (drawn only after
    a batch)."""
    from properties import generator as gen

    table = gen.api()
    methods = [m for m in gen.drawn_methods() if m not in END_TO_END_SKIPS]
    rank = {m: i for i, m in enumerate(CHAIN_ORDER)}
    # batch last but for map_batch, which runs after it (and only with it)
    methods.sort(key=lambda m: (m == "map_batch", m == "batch", rank.get(m, len(rank)), m))
    probe = PipelineConfig(chain=[], layout={n: (4,) for n in names}, weights={n: 1.0 for n in names},
                           source_kwargs={"chunk_size": 1, "seed": 0,
                                          **({"token_estimation": source_kwargs["token_estimation"]}
                                             if token_aware and source_kwargs else {})})

    def make() -> Any:
        from properties.pipelines import work_source
        from zephon_ref.pipeline import Pipeline

        return Pipeline(work_source(probe))

    validate = gen.refused_by_builder(make)
    chain: list[tuple[str, dict[str, Any]]] = []
    for m in methods:
        if not draw(st.booleans()) or (m == "map_batch" and not any(c == "batch" for c, _ in chain)):
            continue
        exclude = dict(END_TO_END_EXCLUDED.get(m, {}))
        if m == "pack_sequences" and not random_packing:
            exclude["shuffle_strategy"] = ("'random'",)
        chain.append(draw(gen.op_call(table[m], ctx={"components": names}, validate=validate,
                                      exclude=exclude, mode_aware=True)))
    return chain


@dataclass(frozen=True, slots=True)
class Topology:
    """Where a pipeline's lanes run: ``dp_degree`` ranks of ``workers`` DataLoader workers each."""

    dp_degree: int = 1
    workers: int = 1
    mapping: str = "contiguous"


def topologies(canonical_replicas: int, *, max_workers: int = 3) -> st.SearchStrategy[Topology]:
    """A valid topology for ``canonical_replicas`` lanes (dp_degree <= canonical_replicas)."""
    return st.builds(
        Topology,
        dp_degree=st.integers(1, canonical_replicas),
        workers=st.integers(1, max_workers),
        mapping=st.sampled_from(["contiguous", "interleaved"]),
    )


def topology_sequences(canonical_replicas: int, *, max_size: int = 4) -> st.SearchStrategy[list[Topology]]:
    """A job's life: the topologies it runs under, one after another (a remap between each)."""
    return st.lists(topologies(canonical_replicas), min_size=1, max_size=max_size)


def execution_settings() -> st.SearchStrategy[dict[str, Any]]:
    """Pipeline options that must never change data: runner, workers, queue sizes."""
    return st.one_of(
        st.just({"runner": "inline"}),
        st.fixed_dictionaries({"runner": st.just("threads"), "max_workers": st.integers(1, 3),
                               "op_queue_capacity": st.integers(1, 8)}),
    )


def cut_schedules(n_items: int, *, max_cuts: int = 4) -> st.SearchStrategy[list[int]]:
    """Sorted distinct positions in ``0..n_items`` at which to checkpoint and restore."""
    return st.lists(st.integers(0, n_items), min_size=1, max_size=max_cuts, unique=True).map(sorted)

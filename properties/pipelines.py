"""Pipeline configurations as plain data, built for either implementation, and record views.

A :class:`PipelineConfig` names a small corpus, a source and an operator chain
(``[(builder method, kwargs), ...]``); :func:`build_pipeline` builds it with
zephon_ref or zephon, so the same literal drives resume tests, conformance tests
and notebooks.  :func:`item_view` is what conformance compares: per record the
lane, cursor key, contributors with ``is_last_child`` and the token payload.
"""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from properties.normal_form import item_view

__all__ = ["RANDOM_PACK_MINIMAL", "PipelineConfig", "build_pipeline", "crc_tokens", "item_view", "per_lane",
           "work_source"]


def crc_tokens(row: Mapping[str, Any]) -> dict[str, Any]:
    """A deterministic tokenizer (crc32 of whitespace words), the same for both libraries."""
    return {"input_ids": [zlib.crc32(w.encode()) % 1000 + 10 for w in str(row["text"]).split()][:200]}


@dataclass(frozen=True)
class PipelineConfig:
    chain: Sequence[tuple[str, Mapping[str, Any]]]
    layout: Mapping[str, tuple[int, ...]] = field(default_factory=lambda: {"web": (60, 40), "code": (30, 20),
                                                                            "books": (15,)})
    weights: Mapping[str, float] = field(default_factory=lambda: {"web": 0.6, "code": 0.3, "books": 0.1})
    source_kwargs: Mapping[str, Any] = field(default_factory=lambda: {"chunk_size": 16, "seed": 1})
    options: Mapping[str, Any] = field(default_factory=lambda: {"runner": "inline", "canonical_replicas": 2})
    corpus_seed: int = 0

    def describe(self) -> str:
        return (f"PipelineConfig(chain={list(self.chain)!r}, layout={dict(self.layout)!r}, "
                f"weights={dict(self.weights)!r}, source_kwargs={dict(self.source_kwargs)!r}, "
                f"options={dict(self.options)!r}, corpus_seed={self.corpus_seed!r})")


def work_source(cfg: PipelineConfig, impl: str = "zephon_ref") -> Any:
    """The (template) work source of ``cfg`` built with ``impl``'s own classes: the synthetic corpus
    of ``cfg.corpus_seed`` / ``cfg.layout`` as in-memory shards and a StaticMixtureWorkSource."""
    import zephon_ref.work as ref_work
    from zephon_ref.synthetic import synthetic_corpus

    if impl == "zephon":
        import zephon as lib

        mod: Any = lib
    elif impl == "zephon_ref":
        mod = ref_work
    else:
        raise ValueError(f"implementation: expected 'zephon_ref' or 'zephon', received {impl!r}")
    corpus = synthetic_corpus(seed=cfg.corpus_seed, layout=cfg.layout)
    dsets = []
    for d in corpus.datasets:
        shards = {int(s): mod.InMemoryShard([d.get(int(s), i) for i in range(int(n))])
                  for s, n in zip(d.ids().tolist(), d.counts().tolist(), strict=True)}
        dsets.append(mod.Dataset.from_dict(d.name, shards))
    source_kwargs = dict(cfg.source_kwargs)
    te = source_kwargs.get("token_estimation")
    if te is not None and not isinstance(te, Mapping) and dataclasses.is_dataclass(te):
        te = {f.name: getattr(te, f.name) for f in dataclasses.fields(te)}  # a zephon_ref TokenEstimation
    if isinstance(te, Mapping):  # TokenEstimation fields, built with impl's own class
        if impl == "zephon":
            from zephon.work import TokenEstimation
        else:
            from zephon_ref.work import TokenEstimation  # type: ignore[assignment]
        source_kwargs["token_estimation"] = TokenEstimation(**te)
    if impl == "zephon" and source_kwargs.get("allocation_mode") == "accumulator":
        del source_kwargs["allocation_mode"]  # zephon's only mode on a fresh source (divergence D-22)
    src = mod.StaticMixtureWorkSource(dsets, dict(cfg.weights), **source_kwargs)
    if impl == "zephon" and te is not None:
        src.prime()  # zephon pins its ratios in prime(); zephon_ref pins them at construction
    return src


def build_pipeline(impl: str, cfg: PipelineConfig, **option_overrides: Any) -> Any:
    """``cfg`` built with ``impl`` ("zephon_ref" or "zephon"): its work source, the crc tokenizer,
    then the chain, with ``option_overrides`` over ``cfg.options``."""
    src = work_source(cfg, impl)
    if impl == "zephon":
        from zephon import Pipeline
    else:
        from zephon_ref.pipeline import Pipeline  # type: ignore[assignment]
    p = Pipeline(src).map_transform(crc_tokens)
    for method, kwargs in cfg.chain:
        getattr(p, method)(**dict(kwargs))
    return p.options(**{**dict(cfg.options), **option_overrides})


def per_lane(items: Sequence[Any]) -> dict[int, list[list[tuple[Any, ...]]]]:
    lanes: dict[int, list[list[tuple[Any, ...]]]] = {}
    for it in items:
        v = item_view(it)
        lanes.setdefault(v[0][0], []).append(v)
    return lanes


#: The smallest configuration found where zephon 0.2.0's ``shuffle_strategy="random"`` packing
#: depends on the other lanes of a micro-batch: zephon's own resume fails at cuts 2-5 of 7 items,
#: and its per-lane streams differ between 1 and 2 ranks (docs/divergences.md, Operators (session 7)).
RANDOM_PACK_MINIMAL = PipelineConfig(
    [
        (
            "pack_sequences",
            {"max_length": 32, "algorithm": "first_fit", "num_bins": 1, "shuffle_strategy": "random"},
        )
    ],
    layout={"web": (12,)},
    weights={"web": 1.0},
    source_kwargs={"chunk_size": 2, "seed": 0},
    options={"runner": "inline", "canonical_replicas": 2, "flush_every_k_chunks": 2},
    corpus_seed=10,
)


#: The smallest configuration found where an operator whose output depends on how a lane's records
#: are grouped into ``push_many`` calls (``ensure_mixture``) gives a lane another stream when another
#: lane's sentinel falls between its records in a mixed micro-batch (zephon 0.2.0 pushes every
#: collected element at any lane's sentinel): zephon's lanes 1 and 2 differ between 1 and 4 ranks,
#: and its own resume at cut 8 differs from its uninterrupted run (docs/divergences.md, Engine).
MIXTURE_GROUPING_MINIMAL = PipelineConfig(
    [("pack_sequences", {"max_length": 96, "num_bins": 3, "algorithm": "best_fit"}), ("ensure_mixture", {}),
     ("batch", {"microbatch_size": 3})],
    layout={"web": (40, 25), "code": (20, 12), "books": (10,)},
    source_kwargs={"chunk_size": 5, "seed": 213, "shuffle_block_size": 16},
    options={"runner": "inline", "canonical_replicas": 4, "flush_every_k_chunks": 3},
)


def real_state(source_seed: int, *, canonical_replicas: int, items: int, chunk_size: int = 8,
               corpus_seed: int = 0) -> dict[str, Any]:
    """A real engine state: an operator-free zephon_ref pipeline of ``canonical_replicas``
    lanes (source seed ``source_seed``) iterated ``items`` items, then ``checkpoint()``."""
    cfg = PipelineConfig(
        chain=[],
        options={"runner": "inline", "canonical_replicas": canonical_replicas},
        source_kwargs={"chunk_size": chunk_size, "seed": source_seed},
        corpus_seed=corpus_seed,
    )
    p = build_pipeline("zephon_ref", cfg)
    it = iter(p)
    for _ in range(items):
        next(it)
    state: dict[str, Any] = p.checkpoint()
    it.close()
    return state


def checkpoints_at_every_cut(impl: str, cfg: PipelineConfig) -> tuple[list[Any], list[Any]]:
    """One uninterrupted run of ``cfg``: its item views and a checkpoint before every item and
    after the last (``cks[i]`` resumes at ``items[i:]``)."""
    p = build_pipeline(impl, cfg)
    cks, items = [p.checkpoint()], []
    for x in p:
        items.append(item_view(x))
        cks.append(p.checkpoint())
    return items, cks


def checkpoint_after(impl: str, cfg: PipelineConfig, cut: int) -> Any:
    """A copy of the checkpoint of ``cfg`` (built by ``impl``) after ``cut`` delivered items,
    warnings silenced (the conformance tests that resume both libraries at a cut)."""
    import copy
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p = build_pipeline(impl, cfg)
        it = iter(p)
        for _ in range(cut):
            next(it)
        return copy.deepcopy(p.checkpoint())

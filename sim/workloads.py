"""The simulator's pipeline workloads, built from zephon_ref's public API only.

Theory of operation
-------------------
A :class:`Workload` is plain data: a synthetic corpus layout, mixture weights, the
source's chunk size and seed, and the operator settings of a packing + shuffle +
ensure_mixture + batch chain (the chain the property suite's ``build_pipeline`` builds
from a ``PipelineConfig``; sim must not import ``properties``, so it is mirrored here
with the same tokenizer rule: crc32 of whitespace words).  :meth:`Workload.build` is the
``build(**topology)`` callable :class:`~sim.world.World` wants: each call returns a fresh
:class:`~zephon_ref.pipeline.Pipeline` with the topology options applied.

:func:`item_view` is the normal form the checker compares: per record of a delivered
item its lane, cursor key, contributors (with ``is_last_child``) and token payload,
as a string (so it hashes and sorts the same in every process).  :func:`records_view` is the same,
one string per record, for a run whose micro-batch size changes (the checker then compares
records, not batches); ``build(microbatch_size=...)`` builds the workload with another size.

What may not live here: any pipeline logic (only public builder methods are called).
"""

from __future__ import annotations

import functools
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Workload", "crc_tokens", "item_view", "record_view", "records_view"]


def crc_tokens(row: Mapping[str, Any]) -> dict[str, Any]:
    """A deterministic tokenizer: crc32 of whitespace words (never ``hash()``)."""
    return {"input_ids": [zlib.crc32(w.encode()) % 1000 + 10 for w in str(row["text"]).split()][:200]}


@functools.lru_cache(maxsize=8)
def _datasets(corpus_seed: int, layout: tuple[tuple[str, tuple[int, ...]], ...]) -> tuple[Any, ...]:
    """The corpus's datasets, built once per process: a pipeline only reads them (a run builds
    one pipeline per rank and incarnation, and synthesising the corpus each time dominated)."""
    from zephon_ref.synthetic import synthetic_corpus
    from zephon_ref.work import Dataset, InMemoryShard

    corpus = synthetic_corpus(seed=corpus_seed, layout=dict(layout))
    dsets = []
    for d in corpus.datasets:
        shards = {int(s): InMemoryShard([d.get(int(s), i) for i in range(int(n))])
                  for s, n in zip(d.ids().tolist(), d.counts().tolist(), strict=True)}
        dsets.append(Dataset.from_dict(d.name, shards))
    return tuple(dsets)


def _layout() -> dict[str, tuple[int, ...]]:
    return {"web": (200, 150), "code": (150,), "books": (80,)}


@dataclass(frozen=True, slots=True)
class Workload:
    """A packing + shuffle + ensure_mixture + batch pipeline over a synthetic corpus.

    Every engine knob of the chain is a field (:func:`sim.runs.derive_config` draws them): the
    packing algorithm, streaming or block shuffle, ensure_mixture on or off, batch ``drop_last``
    both ways, and the lane mapping (contiguous or interleaved) the ranks use."""

    canonical_replicas: int = 4
    layout: Mapping[str, tuple[int, ...]] = field(default_factory=_layout)
    weights: Mapping[str, float] = field(default_factory=lambda: {"web": 0.6, "code": 0.3, "books": 0.1})
    chunk_size: int = 8
    source_seed: int = 1
    corpus_seed: int = 0
    max_length: int = 48
    num_bins: int = 4
    shuffle_buffer: int = 8
    shuffle_seed: int = 3
    ensure_mixture: bool = True
    microbatch_size: int = 2
    flush_every_k_chunks: int = 2
    pack_algorithm: str = "first_fit"  # first_fit | best_fit | wrap (wrap takes no num_bins)
    shuffle_algorithm: str = "streaming"  # streaming | block
    drop_last: bool = False  # True: each lane's partial last batch is dropped, by configuration
    mapping_strategy: str = "contiguous"  # contiguous | interleaved: which lanes each rank owns

    def source(self) -> Any:
        """A fresh work source of this workload (the one :meth:`build` wraps)."""
        from zephon_ref.work import StaticMixtureWorkSource

        # the corpus is synthesised once per process (_datasets): a run builds one pipeline per
        # rank and incarnation, 64 ranks x 4 incarnations of a 512-lane run spent 54 s here
        layout = tuple((name, tuple(int(n) for n in sizes)) for name, sizes in self.layout.items())
        dsets = list(_datasets(self.corpus_seed, layout))
        return StaticMixtureWorkSource(
            dsets, dict(self.weights), chunk_size=self.chunk_size, seed=self.source_seed
        )

    def build(self, *, microbatch_size: int | None = None, **topology: Any) -> Any:
        """A fresh pipeline of this workload with the topology options (world_size, ...) applied;
        ``microbatch_size`` replaces the workload's own (a restart that changes the per-device
        micro-batch size, seed 002: the lanes' record streams stay the same)."""
        from zephon_ref.pipeline import Pipeline

        p = Pipeline(self.source()).map_transform(crc_tokens)
        if self.pack_algorithm == "wrap":
            p.pack_sequences(self.max_length, algorithm="wrap")
        else:
            p.pack_sequences(self.max_length, algorithm=self.pack_algorithm, num_bins=self.num_bins)
        p.shuffle(self.shuffle_buffer, seed=self.shuffle_seed, algorithm=self.shuffle_algorithm)
        if self.ensure_mixture:
            p.ensure_mixture()
        # drop_last=True drops each lane's partial last batch with no tombstone: the run's lineage
        # check then expects exactly the offsets the uninterrupted run loses (sim.runs)
        size = self.microbatch_size if microbatch_size is None else microbatch_size
        p.batch(size, drop_last=self.drop_last)
        options = {"runner": "inline", "canonical_replicas": self.canonical_replicas,
                   "flush_every_k_chunks": self.flush_every_k_chunks, **topology}
        if "world_size" in topology:  # the workload's mapping wins over the world's default
            options["mapping_strategy"] = self.mapping_strategy
        return p.options(**options)


def record_view(item: Any) -> list[tuple[Any, ...]]:
    """Lane, cursor key, contributors and token payload of every record of ``item`` (the
    normal form the simulator and the property suite compare; properties re-exports it)."""
    recs = item.records if hasattr(item, "records") else (item,)
    out = []
    for r in recs:
        m = r.meta
        refs = tuple(
            (tuple(ref.cursor.as_key()[:3]) + (tuple(ref.cursor.sample_id),), bool(ref.is_last_child))
            for ref in m.contribution_refs()
        )
        pl = r.payload
        if isinstance(pl, dict) and "packed_samples" in pl:
            packed = pl["packed_samples"]
            pl = (
                tuple(tuple(s["input_ids"]) for s in packed)
                if isinstance(packed, list) and all(isinstance(s, dict) and "input_ids" in s for s in packed)
                else repr(packed)
            )
        elif isinstance(pl, dict):
            pl = tuple(pl.get("input_ids", ()))
        out.append((m.lane_id, (m.chunk_id, m.chunk_offset, tuple(m.lineage), tuple(m.sample_id)), refs, pl))
    return out


def item_view(item: Any) -> str:
    """:func:`record_view` as one string."""
    return repr(record_view(item))


def records_view(item: Any) -> tuple[str, ...]:
    """:func:`record_view` one string per record: the normal form of a run whose micro-batch size
    may change (the checker then compares the lanes record by record, :mod:`sim.history`)."""
    return tuple(repr(r) for r in record_view(item))

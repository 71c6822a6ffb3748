"""Work-source configurations, a builder for either implementation, and per-lane streams.

A :class:`SourceConfig` is plain data (layout, weights, knobs), so Hypothesis can
generate it, a failing example prints as a literal, and both implementations are
built from the very same values.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "IMPLEMENTATIONS",
    "SourceConfig",
    "build_source",
    "chunk_view",
    "lane_chunks",
    "read_chunks",
    "zephon_available",
]

IMPLEMENTATIONS = ("zephon_ref", "zephon")


def zephon_available() -> bool:
    try:
        import zephon  # noqa: F401
    except ImportError:
        return False
    return True


@dataclass(frozen=True)
class SourceConfig:
    """Everything that defines a StaticMixtureWorkSource, as literals."""

    layout: Mapping[str, tuple[int, ...]]  # dataset name -> shard sizes
    weights: Mapping[str, float]
    canonical_replicas: int = 1
    kwargs: Mapping[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        return (f"SourceConfig(layout={dict(self.layout)!r}, weights={dict(self.weights)!r}, "
                f"canonical_replicas={self.canonical_replicas}, kwargs={dict(self.kwargs)!r})")


def _rows(name: str, sid: int, n: int) -> list[dict[str, Any]]:
    # text lengths vary by shard and row, so token-aware costs differ between shards
    return [
        {"id": f"{name}/{sid}/{i}", "text": "x" * ((7 * sid + 3 * len(name) + i % 5) % 29)} for i in range(n)
    ]


def build_source(impl: str, cfg: SourceConfig) -> Any:
    """The unbound (template) work source of ``impl`` for ``cfg``."""
    if impl == "zephon_ref":
        from zephon_ref.work import Dataset, InMemoryShard, StaticMixtureWorkSource
    elif impl == "zephon":
        from zephon import Dataset, InMemoryShard, StaticMixtureWorkSource  # type: ignore[no-redef]
    else:
        raise ValueError(f"implementation: expected one of {IMPLEMENTATIONS}, received {impl!r}")
    datasets = [
        Dataset.from_dict(name, {sid: InMemoryShard(_rows(name, sid, n)) for sid, n in enumerate(sizes)})
        for name, sizes in cfg.layout.items()
    ]
    kwargs = dict(cfg.kwargs)
    te = kwargs.get("token_estimation")
    if isinstance(te, Mapping):  # literal TokenEstimation fields, built with impl's own class
        if impl == "zephon_ref":
            from zephon_ref.work import TokenEstimation
        else:
            from zephon.work import TokenEstimation  # type: ignore[no-redef]
        kwargs["token_estimation"] = TokenEstimation(**te)
    src = StaticMixtureWorkSource(datasets, dict(cfg.weights), **kwargs)
    if impl == "zephon" and te is not None:
        src.prime()  # zephon measures or pins its ratios in prime(); zephon_ref pins them at construction
    return src


def chunk_view(chunk: Any) -> dict[str, Any]:
    """An implementation-neutral view of a chunk: what conformance compares."""
    return {
        "components": [
            (name, [tuple(int(x) for x in sid) for sid in ids]) for name, ids in chunk.components.items()
        ],
        "order": [(tuple(int(x) for x in sid), name) for sid, name in chunk],
        "seed": chunk.seed,
        "source_exhausted": tuple(chunk.source_exhausted),
        "target_mixture": None if chunk.target_mixture is None else dict(chunk.target_mixture),
    }


def read_chunks(clone: Any, max_chunks: int) -> list[Any]:
    """Up to ``max_chunks`` chunks of a lane clone (stops early at the end of the stream)."""
    out = []
    for _ in range(max_chunks):
        ch = clone.next_chunk()
        if ch is None:
            break
        out.append(ch)
    return out


def lane_chunks(source: Any, lane: int, canonical_replicas: int, max_chunks: int) -> list[dict[str, Any]]:
    """Up to ``max_chunks`` chunk views of one lane of ``source``."""
    return [chunk_view(ch) for ch in read_chunks(source.clone_for_lane(lane, canonical_replicas), max_chunks)]

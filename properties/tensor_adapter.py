"""The property-suite adapter for the tensor implementation (zephon_ref.torch.tensor).

``ADAPTER`` follows the protocol of :mod:`properties.adapters`: ``unsupported(cfg)``
names the refused knob (the tensor implementation's own refusal: at build time, or, by a
bounded dry run, one it raises while running),
``build`` returns a run delivering items in :func:`properties.pipelines.item_view`'s
normal form, and checkpoints are the tensor implementation's own format (opaque
to the suite; ``build(state=...)`` also accepts the reference's engine state).  Features: none (no durable directory format, and execution
settings such as the runner never reach its data path: it accepts and ignores them).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from properties.pipelines import PipelineConfig, crc_tokens, item_view

__all__ = ["ADAPTER", "DRY_RUN_ITEMS", "TensorAdapter", "TensorRun", "tensor_pipeline"]

#: items a dry run delivers looking for a refusal that only the data reveals (sources may be endless)
DRY_RUN_ITEMS = 2000


def _source(cfg: PipelineConfig) -> Any:
    import zephon_ref.work as W

    corpus = W.synthetic_corpus(seed=cfg.corpus_seed, layout=cfg.layout)
    dsets = []
    for d in corpus.datasets:
        shards = {int(s): W.InMemoryShard([d.get(int(s), i) for i in range(int(n))])
                  for s, n in zip(d.ids().tolist(), d.counts().tolist(), strict=True)}
        dsets.append(W.Dataset.from_dict(d.name, shards))
    return W.StaticMixtureWorkSource(dsets, dict(cfg.weights), **dict(cfg.source_kwargs))


def tensor_pipeline(cfg: PipelineConfig, **option_overrides: Any) -> Any:
    """``cfg`` built with the tensor implementation (the same source and crc tokenizer as
    :func:`properties.pipelines.build_pipeline`)."""
    from zephon_ref.torch.tensor import TensorPipeline

    chain = [("map_transform", {"fn": crc_tokens}), *((m, dict(kw)) for m, kw in cfg.chain)]
    return TensorPipeline(_source(cfg), chain, {**dict(cfg.options), **option_overrides})


class TensorRun:
    def __init__(self, pipeline: Any) -> None:
        self.pipeline = pipeline
        self._it: Iterator[Any] | None = None

    def deliver(self, n: int) -> list[Any]:
        if self._it is None:
            self._it = iter(self.pipeline)
        out = []
        for _ in range(n):
            x = next(self._it, None)
            if x is None:
                break
            out.append(item_view(self.pipeline.records(x)))
        return out

    def checkpoint(self) -> Any:
        return self.pipeline.checkpoint()

    def close(self) -> None:
        self._it = None


@dataclass(frozen=True)
class TensorAdapter:
    name: str = "tensor"
    features: frozenset[str] = frozenset()

    def unsupported(self, cfg: PipelineConfig) -> str | None:
        """The refusal at build time, or the one the data leads to while running (a target whose
        component set changes: the tensor implementation raises rather than drift), found by a
        dry run of at most :data:`DRY_RUN_ITEMS` items."""
        from zephon_ref.torch.tensor import UnsupportedKnob

        try:
            p = tensor_pipeline(cfg)
            for i, _ in enumerate(p):
                if i + 1 >= DRY_RUN_ITEMS:
                    break
        except UnsupportedKnob as exc:
            return f"the tensor implementation refuses it: {exc}"
        return None

    def build(self, cfg: PipelineConfig, *, state: Any = None, **execution: Any) -> TensorRun:
        p = tensor_pipeline(cfg, **execution)
        if state is not None:
            p.restore(state)
        return TensorRun(p)

    def save(self, run: Any, directory: Path) -> None:
        raise NotImplementedError("the tensor adapter has no durable format (features exclude 'durable')")

    def load(self, cfg: PipelineConfig, directory: Path) -> TensorRun:
        raise NotImplementedError("the tensor adapter has no durable format (features exclude 'durable')")


ADAPTER = TensorAdapter()

"""The property-suite adapter for the tensor implementation (zephon_ref.fast.tensor): a loader
that is not zephon_ref, plugged in from the suite's configuration alone.

``ADAPTER`` follows the protocol of :mod:`properties.adapters` (docs/properties.md explains it
line by line): ``unsupported(cfg)`` names the refused knob (the tensor implementation's own
refusal: at build time, or, by a bounded dry run, one it raises while running); ``build``
builds the work source of ``cfg`` (:func:`properties.pipelines.work_source`), the suite's
tokenizer and the chain with the tensor implementation's own classes and returns an
:class:`~properties.adapters.IteratorRun` whose items are turned into the normal form
(:mod:`properties.normal_form`) from the tensor implementation's record view.  Checkpoints are
the tensor implementation's own format (opaque to the suite; ``build(state=...)`` also
accepts the reference's engine state).  Features: none (no durable directory format, and
execution settings such as the runner never reach its data path: it accepts and ignores them).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from properties.adapters import IteratorRun
from properties.pipelines import PipelineConfig, crc_tokens, item_view, work_source

__all__ = ["ADAPTER", "DRY_RUN_ITEMS", "TensorAdapter", "tensor_pipeline"]

#: items a dry run delivers looking for a refusal that only the data reveals (sources may be endless)
DRY_RUN_ITEMS = 2000


def tensor_pipeline(cfg: PipelineConfig, **option_overrides: Any) -> Any:
    """``cfg`` built with the tensor implementation (the same source and crc tokenizer as
    :func:`properties.pipelines.build_pipeline`)."""
    from zephon_ref.fast.tensor import TensorPipeline

    chain = [("map_transform", {"fn": crc_tokens}), *((m, dict(kw)) for m, kw in cfg.chain)]
    return TensorPipeline(work_source(cfg), chain, {**dict(cfg.options), **option_overrides})


def _run(pipeline: Any) -> IteratorRun:
    # the tensor pipeline yields its own batches; records(x) gives them as zephon_ref records
    return IteratorRun(pipeline, lambda x: item_view(pipeline.records(x)))


@dataclass(frozen=True)
class TensorAdapter:
    name: str = "tensor"
    features: frozenset[str] = frozenset()

    def unsupported(self, cfg: PipelineConfig) -> str | None:
        """The refusal at build time, or the one the data leads to while running (a target whose
        component set changes: the tensor implementation raises rather than drift), found by a
        dry run of at most :data:`DRY_RUN_ITEMS` items."""
        from zephon_ref.fast.tensor import UnsupportedKnob

        try:
            p = tensor_pipeline(cfg)
            for i, _ in enumerate(p):
                if i + 1 >= DRY_RUN_ITEMS:
                    break
        except UnsupportedKnob as exc:
            return f"the tensor implementation refuses it: {exc}"
        return None

    def build(self, cfg: PipelineConfig, *, state: Any = None, **execution: Any) -> IteratorRun:
        p = tensor_pipeline(cfg, **execution)
        if state is not None:
            p.restore(state)
        return _run(p)

    def save(self, run: Any, directory: Path) -> None:
        raise NotImplementedError("the tensor adapter has no durable format (features exclude 'durable')")

    def load(self, cfg: PipelineConfig, directory: Path) -> IteratorRun:
        raise NotImplementedError("the tensor adapter has no durable format (features exclude 'durable')")

    def participants(self, cfg: PipelineConfig, topology: Any, state: Any) -> list[IteratorRun]:
        raise NotImplementedError("the tensor adapter does not remap (features exclude 'remap')")


ADAPTER = TensorAdapter()

"""The adapter protocol: how the property suite drives any implementation of zephon's semantics.

Theory of operation
-------------------
An implementation plugs into the suite through one small object, an :class:`Adapter`:

* ``unsupported(cfg)`` returns a reason (the suite skips that configuration and says why)
  or None;
* ``build(cfg)`` returns a fresh :class:`Run` of the configuration;
* a run ``deliver(n)``s up to ``n`` items in the canonical normalised form
  (:func:`properties.pipelines.item_view`: lane, cursor key, contributors with
  ``is_last_child``, payload tokens), ``checkpoint()``s into an opaque value the
  suite only stores and hands back, and ``restore(state)``s a fresh run;
* ``features`` names the optional rules the implementation takes part in
  (``"durable"``: save/load/corrupt through a directory; ``"runners"``: switching
  execution settings on restore).

The suite never looks inside a checkpoint.  The adapters here cover zephon_ref with
the inline and threads runners and zephon 0.2.0 (when the ``conformance`` extra is
installed).  docs/properties.md shows an adapter for another implementation.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from properties.pipelines import PipelineConfig, build_pipeline, item_view

__all__ = ["ADAPTERS", "Adapter", "PipelineAdapter", "Run", "adapter"]


class Run(Protocol):
    def deliver(self, n: int) -> list[Any]: ...

    def checkpoint(self) -> Any: ...

    def close(self) -> None: ...


class Adapter(Protocol):
    name: str
    features: frozenset[str]

    def unsupported(self, cfg: PipelineConfig) -> str | None: ...

    def build(self, cfg: PipelineConfig, *, state: Any = None, **execution: Any) -> Run: ...

    def save(self, run: Run, directory: Path) -> None: ...

    def load(self, cfg: PipelineConfig, directory: Path) -> Run: ...


class _PipelineRun:
    """A zephon-API pipeline and its open iterator."""

    def __init__(self, pipeline: Any) -> None:
        self.pipeline = pipeline
        self._it: Iterator[Any] | None = None

    def deliver(self, n: int) -> list[Any]:
        if self._it is None:
            self._it = iter(self.pipeline)
        out = []
        for _ in range(n):
            try:
                out.append(item_view(next(self._it)))
            except StopIteration:
                break
        return out

    def checkpoint(self) -> Any:
        return self.pipeline.checkpoint()

    def close(self) -> None:
        close = getattr(self._it, "close", None)
        if close is not None:
            close()
        self._it = None


@dataclass(frozen=True)
class PipelineAdapter:
    """Any library with zephon's Pipeline API, built through :func:`build_pipeline`."""

    name: str
    impl: str  # "zephon_ref" or "zephon"
    execution: dict[str, Any] = field(default_factory=dict)
    features: frozenset[str] = frozenset()

    def unsupported(self, cfg: PipelineConfig) -> str | None:
        if self.impl == "zephon":
            try:
                import zephon  # noqa: F401
            except ImportError:
                return "zephon 0.2.0 is not installed (pip install -e '.[conformance]')"
        return None

    def build(self, cfg: PipelineConfig, *, state: Any = None, **execution: Any) -> _PipelineRun:
        p = build_pipeline(self.impl, cfg, **{**self.execution, **execution})
        if state is not None:
            p.restore(state)
        return _PipelineRun(p)

    def save(self, run: Run, directory: Path) -> None:
        assert isinstance(run, _PipelineRun) and "durable" in self.features
        run.pipeline.save_checkpoint(directory)

    def load(self, cfg: PipelineConfig, directory: Path) -> _PipelineRun:
        assert "durable" in self.features
        p = build_pipeline(self.impl, cfg, **self.execution)
        p.load_checkpoint(directory)
        return _PipelineRun(p)


ADAPTERS: dict[str, PipelineAdapter] = {
    "inline": PipelineAdapter("inline", "zephon_ref", {"runner": "inline"},
                              frozenset({"durable", "runners"})),
    "threads": PipelineAdapter("threads", "zephon_ref", {"runner": "threads", "max_workers": 2},
                               frozenset({"durable", "runners"})),
    "zephon": PipelineAdapter("zephon", "zephon", {"runner": "inline"}),
}


def adapter(name: str) -> PipelineAdapter:
    if name not in ADAPTERS:
        raise KeyError(f"adapter: expected one of {sorted(ADAPTERS)}, received {name!r}")
    return ADAPTERS[name]

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
  execution settings on restore; ``"remap"``: ``participants(cfg, topology, state)``
  builds one run per (rank, worker) for the remap rule; ``"engine_state"``: a
  checkpoint is an engine-state mapping with ``inflight`` / ``lane_next_cid`` /
  ``replay_cursors`` per lane, which turns on the bounded-inflight and
  eviction-safety invariants; ``"deterministic_checkpoints"``: the checkpoint
  after n delivered items is the same bytes in every run).  A rule whose feature is missing is skipped, and
  :func:`skipped_rules` says why.

The suite never looks inside a checkpoint.  The adapters here cover zephon_ref with
the inline and threads runners and zephon 0.2.0 (when the ``conformance`` extra is
installed).  docs/properties.md shows an adapter for another implementation.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from properties.pipelines import MIXTURE_GROUPING_MINIMAL, PipelineConfig, build_pipeline, item_view

__all__ = ["ADAPTERS", "FEATURES", "Adapter", "PipelineAdapter", "Run", "adapter", "load_adapter", "skipped_rules"]

#: every optional feature, and the rules it turns on
FEATURES = {
    "durable": "save_and_load, corrupt_a_saved_checkpoint",
    "runners": "restore_under_other_execution_settings",
    "remap": "remap (restore under another dp_degree / worker count / mapping)",
    "engine_state": "the bounded-inflight and eviction-safety invariants",
    "deterministic_checkpoints": "checkpoint bytes: the same delivered prefix gives the same checkpoint in every run",
}


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
    #: zephon only: declare the machine's regression configurations that show a known zephon bug
    skip_known_bugs: bool = False

    def unsupported(self, cfg: PipelineConfig) -> str | None:
        if self.impl == "zephon":
            try:
                import zephon  # noqa: F401
            except ImportError:
                return "zephon 0.2.0 is not installed (pip install -e '.[conformance]')"
            if any(kw.get("shuffle_strategy") == "random" for m, kw in cfg.chain if m == "pack_sequences"):
                return ("zephon 0.2.0's random packing depends on the other lanes of a micro-batch "
                        "(docs/divergences.md); its resume is known to differ")
            if self.skip_known_bugs and cfg == MIXTURE_GROUPING_MINIMAL:
                return ("zephon 0.2.0's ensure_mixture sees a lane's records split by other lanes' sentinels "
                        "(docs/divergences.md, Engine); its resume of this configuration is known to differ")
        return None

    def participants(self, cfg: PipelineConfig, topology: Any, state: Any) -> list[_PipelineRun]:
        """One run per (rank, worker) of ``topology``, each restored from ``state``."""
        assert "remap" in self.features and self.impl == "zephon_ref"
        from properties.topology import participants

        return [_PipelineRun(p) for p in participants(cfg, topology.dp_degree, topology.workers,
                                                        mapping=topology.mapping, state=state)]

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


_REF_FEATURES = frozenset({"durable", "runners", "remap", "engine_state"})
ADAPTERS: dict[str, PipelineAdapter] = {
    # the inline runner admits only what delivery needs, so its checkpoint after n items is the same
    # bytes in every run; the threads runner admits ahead on its own threads, so how far it got (the
    # inflight chunks) depends on timing: a valid state, but not a deterministic one
    "inline": PipelineAdapter("inline", "zephon_ref", {"runner": "inline"},
                              _REF_FEATURES | {"deterministic_checkpoints"}),
    "threads": PipelineAdapter("threads", "zephon_ref", {"runner": "threads", "max_workers": 2}, _REF_FEATURES),
    # zephon 0.2.0 takes the same execution options, but its threads runner changes the data
    # (docs/divergences.md), so the plain adapter leaves "runners" out and the machine checks
    # what zephon gets right; "zephon_runners" turns it on to show the difference.
    # (deterministic_checkpoints is claimed for zephon's inline path so that the table shows where
    # it falls short: its inline path prefetches on a thread, see docs/divergences.md)
    "zephon": PipelineAdapter("zephon", "zephon", {"runner": "inline"},
                              frozenset({"engine_state", "deterministic_checkpoints"}), skip_known_bugs=True),
    "zephon_runners": PipelineAdapter("zephon_runners", "zephon", {"runner": "inline"},
                                      frozenset({"engine_state", "runners"})),
}
#: names that resolve to an adapter living in another module (imported only when asked for)
LAZY = {"tensor": "properties.tensor_adapter:ADAPTER"}


def adapter(name: str) -> PipelineAdapter:
    if name not in ADAPTERS:
        raise KeyError(f"adapter: expected one of {sorted(ADAPTERS)}, received {name!r}")
    return ADAPTERS[name]


def load_adapter(name: str) -> Any:
    """An adapter by name (inline, threads, zephon, tensor) or as ``module:attr``; a missing module
    raises ImportError saying which."""
    import importlib

    if name in ADAPTERS:
        return ADAPTERS[name]
    spec = LAZY.get(name, name)
    if ":" not in spec:
        raise ValueError(f"adapter: expected one of {sorted(ADAPTERS) + sorted(LAZY)} or 'module:attr', "
                         f"received {name!r}")
    module, attr = spec.split(":", 1)
    try:
        mod = importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(f"adapter {name!r}: module {module} is not importable ({exc})") from exc
    obj = getattr(mod, attr, None)
    if obj is None:
        raise ImportError(f"adapter {name!r}: module {module} has no attribute {attr!r}")
    return obj() if isinstance(obj, type) else obj


def skipped_rules(adapter: Any) -> dict[str, str]:
    """The machine's optional rules this adapter does not take part in, each with the reason."""
    have = frozenset(getattr(adapter, "features", frozenset()))
    return {rules: f"{getattr(adapter, 'name', adapter)!s} lacks the {feature!r} feature"
            for feature, rules in FEATURES.items() if feature not in have}

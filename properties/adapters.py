"""The adapter protocol: how the property suite drives any implementation of zephon's semantics.

Theory of operation
-------------------
An implementation plugs into the suite through one small object, an :class:`Adapter`:

* ``name`` (shown in the table) and ``features`` (below);
* ``unsupported(cfg)`` returns a reason (the suite skips that configuration and says why)
  or None; a known divergence from zephon_ref is declared here too, with its reason;
* ``build(cfg, *, state=None, **execution)`` returns a fresh :class:`Run` of the
  configuration (a :class:`properties.pipelines.PipelineConfig`: plain data naming the
  corpus, the source's knobs, the operator chain and the options), restored from
  ``state`` (a value an earlier ``run.checkpoint()`` returned) when given, with the
  execution settings ``execution`` (runner, workers, queue sizes) over ``cfg.options``;
* a run ``deliver(n)``s up to ``n`` items, each a list of
  :class:`properties.normal_form.Record` (lane, cursor key, contributors with
  ``is_last_child``, payload tokens: see :mod:`properties.normal_form`; fewer than ``n``
  means the stream ended), ``checkpoint()``s into a value the suite only stores and
  hands back to ``build(state=...)``, and ``close()``s;
* ``save(run, directory)`` / ``load(cfg, directory)`` [``durable``] and
  ``participants(cfg, topology, state)`` [``remap``] complete it.

``features`` names the optional rules the implementation takes part in
(:data:`FEATURES`): ``"durable"``: save/load/corrupt through a directory;
``"runners"``: switching execution settings on restore; ``"remap"``:
``participants(cfg, topology, state)`` builds one run per (rank, worker) of a
:class:`properties.strategies.Topology`, each restored from ``state``;
``"engine_state"``: a checkpoint is an engine-state mapping with ``inflight`` /
``lane_next_cid`` / ``replay_cursors`` per lane, which turns on the bounded-inflight,
eviction-safety and tamper rows and the end-of-data check of the lineage row;
``"deterministic_checkpoints"``: the checkpoint after n delivered items is the same
bytes in every run; ``"tombstones"``: ``observe(cfg)`` returns an uninterrupted run's items
and the tombstones it produced, so the lineage row requires every admitted offset to close
exactly once, with no documented discard to excuse it; ``"shared_walk"``: the implementation is
zephon_ref, whose one speed shortcut (the chunk walk its lanes share) is checked against the
plain walk; ``"operators"``: its operators are zephon_ref's, so the operator unit properties
(:mod:`properties.op_units`) run on them.  A rule whose feature is missing is skipped, and
:func:`skipped_rules` says why.

Apart from the ``engine_state`` rows the suite never looks inside a checkpoint.  The
adapters here cover zephon_ref with the inline and threads runners and zephon 0.2.0
(when the ``conformance`` extra is installed); properties/tensor_adapter.py covers the
tensor implementation, built from the configuration alone (docs/properties.md walks
through it).  :class:`IteratorRun` is the run of any loader that is an iterator plus a
``checkpoint()``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from properties.normal_form import Item
from properties.pipelines import MIXTURE_GROUPING_MINIMAL, PipelineConfig, build_pipeline, item_view

__all__ = [
    "ADAPTERS",
    "FEATURES",
    "Adapter",
    "IteratorRun",
    "PipelineAdapter",
    "Run",
    "adapter",
    "load_adapter",
    "not_an_adapter",
    "skipped_rules",
]

#: every optional feature, and the rules it turns on
FEATURES = {
    "durable": "save_and_load, corrupt_a_saved_checkpoint",
    "runners": "restore_under_other_execution_settings",
    "remap": "remap (restore under another dp_degree / worker count / mapping)",
    "engine_state": "the bounded-inflight and eviction-safety invariants",
    "deterministic_checkpoints": "checkpoint bytes: the same delivered prefix gives the same checkpoint "
    "in every run",
    "tombstones": "the lineage row's exact closure: observe(cfg) shows the tombstones of an uninterrupted "
    "run",
    "shared_walk": "the shared walk row: zephon_ref's shared chunk walk checked against the plain walk "
    "(zephon_ref's own shortcut; no other implementation has it)",
    "fast_ops": "the fast ops row: zephon_ref's faster operators checked against its plain ones "
    "(zephon_ref's own shortcut; no other implementation has it)",
    "fast_codec": "the fast codec row: zephon_ref's faster encoder checked against its plain codec "
    "(zephon_ref's own shortcut; no other implementation has it)",
    "merged_checkpoint": "the cross-lane order row: merged_checkpoint(runs) gives the state of a whole "
    "topology from its participants' runs (with remap: N -> M -> N through global-step boundaries)",
    "torch": "the torch row: torch_dataset(cfg, kind) for each kind of torch_kinds ('loader': "
    "to_torch_dataset() under torchdata's StatefulDataLoader; 'tracked': zephon_ref's track() dataset), "
    "its state at every position of a pass and of a resumed pass, under 0, 1 and 2 workers",
    "aggregation": "the aggregation row: round_machine(state, config) gives the implementation's round "
    "machines, driven through TP/PP peers, missing and late ranks and a failing leader "
    "(properties/aggregation.py)",
    "token_estimation": "the token estimation row: the measured tokens/byte ratios of a token-aware source "
    "(the calibration pass through the pipeline's counting prefix) against a plain definition; the "
    "adapter's impl names a library with zephon's drop-in API (properties/token_census.py)",
    "operators": "the operators row: the operator unit properties (exactly-once closure, flush resets "
    "the lane, no pending data after a flush) over every operator call the API generator draws; the "
    "implementation's operators are zephon_ref's",
}


@runtime_checkable
class Run(Protocol):
    def deliver(self, n: int) -> list[Item]: ...

    def checkpoint(self) -> Any: ...

    def close(self) -> None: ...


@runtime_checkable
class Adapter(Protocol):
    name: str
    features: frozenset[str]

    def unsupported(self, cfg: PipelineConfig) -> str | None: ...

    def build(self, cfg: PipelineConfig, *, state: Any = None, **execution: Any) -> Run: ...

    # -- with the "durable" feature --
    def save(self, run: Run, directory: Path) -> None: ...

    def load(self, cfg: PipelineConfig, directory: Path) -> Run: ...

    # -- with the "remap" feature: one run per (rank, worker) of ``topology``, each restored from ``state``
    def participants(self, cfg: PipelineConfig, topology: Any, state: Any) -> list[Run]: ...

    # -- with the "tombstones" feature: an uninterrupted run's items and the tombstones it produced
    #    (records dropped on purpose, in the normal form: they close offsets without being delivered)
    def observe(self, cfg: PipelineConfig) -> tuple[list[Item], list[Any]]: ...


#: what the suite calls on every adapter (the rest only with a feature)
REQUIRED = ("name", "features", "unsupported", "build")


def not_an_adapter(obj: Any) -> str | None:
    """Why ``obj`` cannot be driven by the suite (the attributes it lacks), or None."""
    missing = [a for a in REQUIRED if not hasattr(obj, a)]
    missing += [
        f"{a} (callable)"
        for a in ("unsupported", "build")
        if hasattr(obj, a) and not callable(getattr(obj, a))
    ]
    if missing:
        return (
            f"expected an adapter with {', '.join(REQUIRED)}, received {type(obj).__name__} "
            f"lacking {', '.join(missing)}"
        )
    return None


class IteratorRun:
    """A loader that iterates and checkpoints: ``deliver(n)`` takes up to ``n`` items of one open
    iterator, each turned into the normal form by ``to_item`` (default: zephon-API items through
    :func:`properties.normal_form.item_view`)."""

    def __init__(self, pipeline: Any, to_item: Callable[[Any], Item] = item_view) -> None:
        self.pipeline = pipeline
        self._to_item = to_item
        self._it: Iterator[Any] | None = None

    def deliver(self, n: int) -> list[Item]:
        if self._it is None:
            self._it = iter(self.pipeline)
        out = []
        for _ in range(n):
            x = next(self._it, None)
            if x is None:
                break
            out.append(self._to_item(x))
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
    #: the exceptions that count as a typed refusal of a bad checkpoint (None: ZephonRefError);
    #: zephon 0.2.0 raises its own ValueError / RuntimeError subclasses
    refusal_errors: tuple[type[BaseException], ...] | None = None

    def unsupported(self, cfg: PipelineConfig) -> str | None:
        if self.impl == "zephon":
            try:
                import zephon  # noqa: F401
            except ImportError:
                return "zephon 0.2.0 is not installed (pip install -e '.[conformance]')"
            if cfg.source_kwargs.get("allocation_mode", "accumulator") != "accumulator":
                return ("allocation_mode is a zephon_ref keyword: zephon 0.2.0 reaches legacy_fixed only by "
                        "restoring a pre-accumulator checkpoint (docs/divergences.md D-22)")
            if any(kw.get("shuffle_strategy") == "random" for m, kw in cfg.chain if m == "pack_sequences"):
                return ("zephon 0.2.0's random packing depends on the other lanes of a micro-batch "
                        "(docs/divergences.md); its resume is known to differ")
            if any(getattr(kw.get("transform_fn"), "builds_new_batch", False) for m, kw in cfg.chain
                   if m == "map_batch"):
                # measured 2026-12-06: batch(1) + map_batch(a new SampleBatch of zephon's own classes) on 2
                # lanes raises AssertionError in zephon's lane round robin before the first item (equal
                # to zephon_ref's stream when the map returns its input)
                return ("zephon 0.2.0's lane round robin refuses a micro-batch map_batch rebuilt "
                        "(AssertionError before the first item)")
            if self.skip_known_bugs and (cfg == MIXTURE_GROUPING_MINIMAL or (
                    any(m == "ensure_mixture" for m, _ in cfg.chain)
                    and int(cfg.options.get("canonical_replicas", 1)) > 1)):
                # e.g. wrap packing, shuffle(2), ensure_mixture() on 3 lanes of a small token-aware source
                # (corpus_seed=2, chunk_size=6, flush_every_k_chunks=2): the stream differs from zephon_ref's,
                # and equals it on 1 or 2 lanes
                return (
                    "zephon 0.2.0's ensure_mixture sees a lane's records split by other lanes' sentinels "
                    "in a mixed micro-batch (docs/divergences.md, Engine): with several lanes its stream "
                    "and its resume can differ"
                )
        return None

    def participants(self, cfg: PipelineConfig, topology: Any, state: Any) -> list[IteratorRun]:
        """One run per (rank, worker) of ``topology``, each restored from ``state``."""
        assert "remap" in self.features and self.impl == "zephon_ref"
        from properties.topology import participants

        return [IteratorRun(p) for p in participants(cfg, topology.dp_degree, topology.workers,
                                                        mapping=topology.mapping, state=state)]

    def merged_checkpoint(self, runs: list[IteratorRun]) -> Any:
        """zephon_ref only [remap]: the state of a whole topology from its participants' runs (each
        one's local state, merged as the aggregation round merges them)."""
        assert "merged_checkpoint" in self.features and self.impl == "zephon_ref"
        from sim.lockstep import merged_checkpoint

        return merged_checkpoint([run.pipeline for run in runs])

    @property
    def torch_kinds(self) -> tuple[str, ...]:
        """[torch] the kinds of torch dataset :meth:`torch_dataset` builds."""
        return ("loader", "tracked") if self.impl == "zephon_ref" else ("loader",)

    def torch_dataset(self, cfg: PipelineConfig, kind: str) -> Any:
        """[torch] a torch dataset of ``cfg``: ``"loader"``, what ``to_torch_dataset()`` returns (its
        StatefulDataLoader protocol); ``"tracked"`` (zephon_ref), the track()-based stateful dataset."""
        assert "torch" in self.features and kind in self.torch_kinds, kind
        p = build_pipeline(self.impl, cfg, **self.execution)
        if kind == "loader":
            return p.to_torch_dataset()
        from zephon_ref.torch import to_stateful_dataset

        return to_stateful_dataset(p)

    def round_machine(self, state: Any, config: Any) -> Any:
        """zephon_ref only [aggregation]: the round machine of one participant (its engine state and
        RoundConfig): the Leader for rank 0 worker 0, a Follower for everybody else."""
        assert "aggregation" in self.features and self.impl == "zephon_ref"
        from zephon_ref.coordination.protocol import machine_for

        return machine_for(state, config, warn_mid_window=False)

    def observe(self, cfg: PipelineConfig) -> tuple[list[Item], list[Any]]:
        """zephon_ref only: one uninterrupted run, stepped like the inline runner through the
        engine's public steps, with the engine's tombstone observer on."""
        assert "tombstones" in self.features and self.impl == "zephon_ref"
        from properties.normal_form import as_record
        from sim.workloads import record_view

        tombs: list[Any] = []
        engine = build_pipeline(self.impl, cfg).engine(on_tombstone=tombs.append)
        items: list[Item] = []
        while True:
            x = engine.deliver()
            if x is not None:
                items.append(item_view(x))
                continue
            if engine.finished:
                break
            engine.step()
        return items, [as_record(v) for t in tombs for v in record_view(t)]

    def build(self, cfg: PipelineConfig, *, state: Any = None, **execution: Any) -> IteratorRun:
        p = build_pipeline(self.impl, cfg, **{**self.execution, **execution})
        if state is not None:
            p.restore(state)
        return IteratorRun(p)

    def save(self, run: Run, directory: Path) -> None:
        assert isinstance(run, IteratorRun) and "durable" in self.features
        run.pipeline.save_checkpoint(directory)

    def load(self, cfg: PipelineConfig, directory: Path) -> IteratorRun:
        assert "durable" in self.features
        p = build_pipeline(self.impl, cfg, **self.execution)
        p.load_checkpoint(directory)
        return IteratorRun(p)


_REF_FEATURES = frozenset({"durable", "runners", "remap", "engine_state", "tombstones", "shared_walk",
                           "fast_ops", "fast_codec", "aggregation", "merged_checkpoint", "torch", "operators",
                           "token_estimation"})
ADAPTERS: dict[str, PipelineAdapter] = {
    # under demand-paced feeding (the default) both runners admit only what delivery asks for (the
    # threads runner's consumer admits, within a window of queue_size messages, from what came back,
    # never from timing), so the checkpoint after n items is the same bytes in every run; under
    # round-robin feeding the threads runner's feeder thread runs ahead, and its checkpoints are valid
    # but timing-dependent
    "inline": PipelineAdapter(
        "inline", "zephon_ref", {"runner": "inline"}, _REF_FEATURES | {"deterministic_checkpoints"}
    ),
    "threads": PipelineAdapter(
        "threads",
        "zephon_ref",
        {"runner": "threads", "max_workers": 2},
        _REF_FEATURES | {"deterministic_checkpoints"},
    ),
    # zephon 0.2.0 takes the same execution options, but its threads runner changes the data
    # (docs/divergences.md), so the plain adapter leaves "runners" out and the machine checks
    # what zephon gets right; "zephon_runners" turns it on to show the difference.
    # (deterministic_checkpoints is claimed for zephon's inline path so that the table shows where
    # it falls short: its inline path prefetches on a thread, see docs/divergences.md)
    "zephon": PipelineAdapter(
        "zephon",
        "zephon",
        {"runner": "inline"},
        frozenset({"engine_state", "deterministic_checkpoints"}),
        skip_known_bugs=True,
        refusal_errors=(ValueError, RuntimeError),
    ),
    "zephon_runners": PipelineAdapter(
        "zephon_runners",
        "zephon",
        {"runner": "inline"},
        frozenset({"engine_state", "runners"}),
        refusal_errors=(ValueError, RuntimeError),
    ),
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
        raise ImportError(f"adapter {name!r}: expected an importable module, received module {module} is not "
                          f"importable ({exc})") from exc
    obj = getattr(mod, attr, None)
    if obj is None:
        raise ImportError(
            f"adapter {name!r}: expected module {module} to have an attribute {attr!r}, received "
            f"a module without it"
        )
    return obj() if isinstance(obj, type) else obj


def skipped_rules(adapter: Any) -> dict[str, str]:
    """The machine's optional rules this adapter does not take part in, each with the reason."""
    have = frozenset(getattr(adapter, "features", frozenset()))
    return {rules: f"{getattr(adapter, 'name', adapter)!s} lacks the {feature!r} feature"
            for feature, rules in FEATURES.items() if feature not in have}

"""The Pipeline: a fluent builder over a work source, iteration, checkpoint() and restore().

Theory of operation
-------------------
``Pipeline(work_source)`` collects operators (each validated at its builder
call) and options.  Options split in two, and only the first kind reaches the
data path:

* **data settings** — the work source's configuration and seed,
  ``canonical_replicas``, the operator chain with its knobs, the batch shape
  and ``flush_every_k_chunks`` — form the *fingerprint* that every checkpoint
  carries and every restore checks;
* **execution settings** — runner, parallelism, queue sizes, feeding policy,
  topology — change speed and memory, never output (with ``deterministic=True``).
  ``feeding="demand"`` (the default) feeds a lane only when delivery waits on it, so
  inflight chunks and checkpoints stay bounded however long the run;
  ``feeding="round_robin"`` is zephon 0.2.0's per-sample round robin
  (:mod:`zephon_ref.engine.core`).

``iter(pipeline)`` builds an :class:`~zephon_ref.engine.core.Engine` (from a
pending restore if there is one) and returns an iterator over delivered items.
From ``iter()`` until that iterator is exhausted, closed or dropped the pipeline
is *running*: ``restore()``, ``options()``, graph changes, ``for_worker()`` and a
second ``iter()`` refuse with ContractError.  Once a run has delivered anything
(or a restore is pending) the pipeline has *progress*: execution settings may
still change (they never touch the state), data and topology settings and the
graph may not.

``checkpoint()`` returns the engine state (:mod:`zephon_ref.state`) as a value
the caller owns: a deep copy, at every call, in every runner.  With several
participants it runs the aggregation round that is handed in (``aggregate=``)
or, by default, the one the ``aggregate_dir`` / ``aggregate_store`` options name
(:func:`zephon_ref.coordination.driver.pipeline_aggregate`); the wall clock
and the I/O of that round live there, not here.  ``restore(state)`` validates
eagerly — the schema (:func:`zephon_ref.state.validate`), canonical replicas,
fingerprint, and a dry-run load of every owned lane against this pipeline's
source configuration and datasets — and refuses with a typed error that leaves
the pipeline exactly as it was; an accepted state is applied at the next
iteration.
"""

from __future__ import annotations

import copy
import os
import warnings
import weakref
from collections.abc import Callable, Generator, Iterator, Mapping
from pathlib import Path
from typing import Any

from zephon_ref import state as schema
from zephon_ref.checkpoint import store as ckpt_store
from zephon_ref.engine.core import FEEDING, Engine
from zephon_ref.engine.world import World
from zephon_ref.errors import (
    ConfigError,
    ConfigTypeError,
    ContractError,
    StateMismatchError,
    expected,
)
from zephon_ref.explain import explain_plan
from zephon_ref.fingerprint import pipeline_fingerprint
from zephon_ref.ops.base import BaseOp, OpTraits, check_parallelism, check_placement
from zephon_ref.ops.batch import Batch
from zephon_ref.ops.ensure_mixture import EnsureMixture
from zephon_ref.ops.map_transform import MapTransform
from zephon_ref.ops.pack import PackSequences
from zephon_ref.ops.shuffle import Shuffle
from zephon_ref.ops.stateful import StatefulTransform
from zephon_ref.ops.tokenize import Tokenize
from zephon_ref.types import SampleRecord
from zephon_ref.work.base import WorkSource
from zephon_ref.work.walk import ChunkWalk

__all__ = ["Aggregate", "Pipeline", "PipelineIterator"]

#: ``aggregate(local_state, world) -> (merged_state, round_id)``: one aggregation round for
#: this participant (every participant calls it at the same step).
Aggregate = Callable[[dict[str, Any], World], tuple[dict[str, Any], Any]]

_EXEC_OPTIONS = {
    "runner": None, "max_workers": None, "deterministic": True, "op_queue_capacity": None,
    "prefetch_batches": None, "run_id": "default_run_id", "world_size": 1, "global_rank": 0,
    "dp_degree": None, "dp_group_id": None, "mapping_strategy": None, "aggregate_dir": None,
    "aggregate_store": None, "aggregate_timeout_s": 180.0, "feeding": "demand",
}
_DATA_OPTIONS = {"canonical_replicas": None, "flush_every_k_chunks": None}
# Settings that decide which lanes this participant owns: fixed once a run has progress too.
_TOPOLOGY_OPTIONS = ("world_size", "global_rank", "dp_degree", "dp_group_id", "mapping_strategy")
_REFUSED = ("shm_min_size", "coalesce_tensors")


class Pipeline:
    """Builder and iterator; method names and keywords follow zephon 0.2.0."""

    def __init__(self, work_source: WorkSource) -> None:
        if not isinstance(work_source, WorkSource):
            raise ConfigTypeError(
                expected("work_source", "a zephon_ref WorkSource", type(work_source).__name__)
            )
        self._source = work_source
        self._ops: list[tuple[str, BaseOp]] = []
        self._options: dict[str, Any] = {**_EXEC_OPTIONS, **_DATA_OPTIONS}
        self._engine: Engine | None = None
        self._pending: dict[str, Any] | schema.ValidatedState | None = None
        self._run: weakref.ref[PipelineIterator] | None = None
        self._warned_k = False
        self._restored_generation: dict[str, int] = {}  # directory -> highest generation restored
        self._worker = (0, 1)  # (worker_id, num_workers) inside a torch DataLoader

    # -- call-order contracts -------------------------------------------------------------------
    @property
    def _iterating(self) -> bool:
        """Whether an iterator from ``iter()`` is open (neither exhausted, closed nor dropped)."""
        run = None if self._run is None else self._run()
        return run is not None and run.open

    def _has_progress(self) -> bool:
        return self._pending is not None or (self._engine is not None and self._engine.started)

    def _refuse_while_running(self, what: str) -> None:
        if self._iterating:
            raise ContractError(
                expected(
                    what,
                    "a pipeline with no open iterator (exhaust, close() or drop it first)",
                    "a call mid-iteration",
                )
            )

    # -- builder ------------------------------------------------------------------------------
    def _add(self, name: str, op: BaseOp) -> Pipeline:
        self._refuse_while_running(f"adding {name}")
        if self._has_progress():
            raise ContractError(expected(f"adding {name}", "a pipeline that has not run (the graph is a data "
                                         "setting)", "a pipeline with progress: build a new one"))
        if any(isinstance(o, Batch) for _, o in self._ops):
            raise ConfigError(expected(f"{name}", "to be added before batch()", "an operator after batch()"))
        names = {n for n, _ in self._ops}
        base, i = name, 1
        while name in names:
            i += 1
            name = f"{base}_{i}"
        self._ops.append((name, op))
        self._engine = None
        return self

    def add_op(self, op: BaseOp, /, *, name: str | None = None, placement: str = "auto") -> Pipeline:
        if not isinstance(op, BaseOp):
            raise ConfigTypeError(expected("add_op op", "a BaseOp instance", type(op).__name__))
        if name is not None and (not isinstance(name, str) or not name):
            raise ConfigTypeError(expected("add_op name", "None or a non-empty str", name))
        traits = op.traits()
        if not isinstance(traits, OpTraits):
            raise ConfigTypeError(expected(f"{type(op).__name__}.traits()", "an OpTraits", traits))
        return self._add(name or type(op).__name__.lower(), op)

    def map_transform(self, transform_fn: Callable[[Any], Any], *, drop_none: bool = True,
                      placement: str = "auto", parallelism: int | None = None) -> Pipeline:
        # None means the default; 0 or a negative count is refused (MapTransform), not read as "default"
        return self._add("map_transform", MapTransform(transform_fn, drop_none=drop_none, placement=placement,
                                                       parallelism=parallelism))

    def stateful_transform(self, name: str, *, init_state: Callable[[], Any], push: Callable[..., Any],
                           flush: Callable[[Any], list[Any]] | None = None,
                           should_flush: Callable[[Any], bool] | None = None,
                           transform: Callable[[list[Any]], list[Any]] | None = None, placement: str = "auto",
                           parallelism: int = 1, indexable: bool = False,
                           preserves_cursor_order: bool = True) -> Pipeline:
        op = StatefulTransform(name, init_state=init_state, push=push, flush=flush, should_flush=should_flush,
                               transform=transform, placement=placement, parallelism=parallelism,
                               indexable=indexable, preserves_cursor_order=preserves_cursor_order)
        return self._add(name, op)

    def tokenize(self, tokenizer: Any = None, tokenizer_id: str | None = None, *, field: str,
                 placement: str = "auto", parallelism: int | None = None, **kwargs: Any) -> Pipeline:
        if not (tokenizer_id is None or (isinstance(tokenizer_id, str) and tokenizer_id == "__fallback__")):
            raise ConfigError(expected("tokenizer_id", "None or '__fallback__' (no downloads in zephon_ref)",
                                       tokenizer_id))
        return self._add(
            "tokenize",
            Tokenize(tokenizer, field=field, placement=placement, parallelism=parallelism, **kwargs),
        )

    def pack_sequences(self, max_length: int, *, placement: str = "auto", parallelism: int | None = None,
                       **kwargs: Any) -> Pipeline:
        return self._add(
            "pack_sequences",
            PackSequences(max_length, placement=placement, parallelism=parallelism, **kwargs),
        )

    def shuffle(
        self,
        buffer_size: int | None = None,
        *,
        seed: int = 0,
        algorithm: str = "streaming",
        warmup_growth: float = 1.5,
        placement: str = "auto",
        parallelism: int | None = None,
    ) -> Pipeline:
        return self._add("shuffle_buffer", Shuffle(buffer_size, seed=seed, algorithm=algorithm,
                                                   warmup_growth=warmup_growth, placement=placement,
                                                   parallelism=parallelism))

    def ensure_mixture(
        self, *, placement: str = "auto", parallelism: int | None = None, **kwargs: Any
    ) -> Pipeline:
        check_placement(placement)
        check_parallelism(parallelism)
        op = EnsureMixture(**kwargs)  # validates its own arguments
        try:
            names = dict(self._source.component_ids())
        except NotImplementedError:  # a custom work source without a vocabulary: nothing to check against
            names = None
        if op.mixture is not None and names is not None:
            ids = set(names.values())
            unknown = [k for k in op.mixture if not (k in names if isinstance(k, str) else k in ids)]
            if unknown:
                raise ConfigError(
                    expected(
                        "ensure_mixture(mixture=...)",
                        f"components of the work source {sorted(names)} (names) or {sorted(ids)} (ids)",
                        f"unknown {unknown}",
                    )
                )
        if getattr(self._source, "allocation_mode", None) == "token_aware" and op.weight_by == "samples":
            raise ConfigError(expected("ensure_mixture(weight_by=...) with a token-aware work source",
                                       "token units ('auto', a field or a callable)", "'samples'"))
        return self._add("ensure_mixture", op)

    def batch(self, microbatch_size: int, *, drop_last: bool = True, placement: str = "auto") -> Pipeline:
        check_placement(placement)
        if any(isinstance(o, Batch) for _, o in self._ops):
            raise ConfigError(expected("batch()", "at most one batch per pipeline", "a second batch()"))
        op = Batch(microbatch_size, drop_last=drop_last)
        return self._add("batch", op)

    def options(self, **hints: Any) -> Pipeline:
        """Set runtime options; unknown keys warn and are ignored (as in zephon).

        Refused while an iterator is open.  Once the pipeline has progress, execution
        settings still apply (to the next iteration; the state is untouched) and a change of
        a data or topology setting is refused: build a new pipeline for another run.
        """
        self._refuse_while_running("options()")
        for key in _REFUSED:
            if key in hints:
                raise ConfigTypeError(expected("options", "no removed shm option", key))
        known = {**_EXEC_OPTIONS, **_DATA_OPTIONS}
        for key in sorted(hints):
            if key not in known:
                warnings.warn(f"options: unknown key {key!r} ignored", UserWarning, stacklevel=2)
        new = {**self._options, **{k: v for k, v in hints.items() if k in known}}
        if self._has_progress():
            fixed = [k for k in (*_DATA_OPTIONS, *_TOPOLOGY_OPTIONS) if new[k] != self._options[k]]
            if fixed:
                raise ContractError(expected(f"options {fixed}", "unchanged once the pipeline has progress "
                                             "(data and topology settings are fixed for a run)", "a change"))
        for key in ("max_workers", "op_queue_capacity", "prefetch_batches"):
            v = new[key]
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise ConfigError(expected(key, "None or an int >= 1", v))
        if not isinstance(new["run_id"], str) or not new["run_id"]:
            raise ConfigTypeError(expected("run_id", "a non-empty str", new["run_id"]))
        runner = new["runner"]
        if runner not in (None, "inline", "threads"):
            raise ConfigError(expected("runner", "None, 'inline' or 'threads'", runner))
        k = new["flush_every_k_chunks"]
        if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 0):
            raise ConfigError(expected("flush_every_k_chunks", "None or an int >= 0", k))
        if new["feeding"] not in FEEDING:
            raise ConfigError(expected("feeding", " or ".join(repr(f) for f in FEEDING), new["feeding"]))
        if not isinstance(new["deterministic"], bool):
            raise ConfigTypeError(expected("deterministic", "a bool", new["deterministic"]))
        world = self._world_of(new)  # validates topology eagerly
        if new["aggregate_dir"] is not None and new["aggregate_store"] is not None:
            raise ConfigError(expected("aggregate_dir / aggregate_store", "at most one of the two",
                                       "both set"))
        if world.world_size > 1 and new["aggregate_dir"] is None and new["aggregate_store"] is None:
            raise ContractError(expected(f"aggregation backend for world_size={world.world_size}",
                                         "aggregate_dir or aggregate_store", "neither"))
        t = new["aggregate_timeout_s"]
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not t > 0:
            raise ConfigError(expected("aggregate_timeout_s", "a number > 0", t))
        changed_data = any(new[k] != self._options[k] for k in (*_DATA_OPTIONS, *_TOPOLOGY_OPTIONS))
        self._options = new
        if changed_data:
            self._engine = None
        return self

    # -- plan ---------------------------------------------------------------------------------
    def world(self) -> World:
        """This pipeline's resolved topology (its rank's DP group, owned lanes, worker split) under
        the current options: the lanes ``iter()`` would run.  A zephon_ref extension (zephon
        resolves it inside the engine only); read-only, it changes nothing."""
        return self._world_of(self._options)

    def runtime_options(self) -> dict[str, Any]:
        """A copy of the options in effect (defaults filled in), as ``options()`` set them."""
        return dict(self._options)

    def _world_of(self, opts: Mapping[str, Any]) -> World:
        worker_id, num_workers = getattr(self, "_worker", (0, 1))
        return World.resolve(world_size=opts["world_size"], global_rank=opts["global_rank"],
                             dp_degree=opts["dp_degree"], dp_group_id=opts["dp_group_id"],
                             canonical_replicas=opts["canonical_replicas"],
                             mapping_strategy=opts["mapping_strategy"], worker_id=worker_id,
                             num_workers=num_workers)

    def to_torch_dataset(self, *, collate: Any = None, device: Any = None) -> Any:
        """A torch IterableDataset over this pipeline (see :mod:`zephon_ref.torch`)."""
        from zephon_ref.torch import to_torch_dataset

        return to_torch_dataset(self, collate=collate, device=device)

    def for_worker(self, worker_id: int, num_workers: int) -> Pipeline:
        """A copy of this pipeline for DataLoader worker ``worker_id`` of ``num_workers``.

        The worker owns the lanes of its DP group at list indices ``i`` with
        ``i mod active == worker_id`` (``active`` = the largest count <= num_workers
        dividing the group's lane count); a worker beyond ``active`` owns none.  A
        pending restore travels with the copy.
        """
        self._refuse_while_running("for_worker()")
        clone = copy.copy(self)
        clone._ops = list(self._ops)
        clone._options = dict(self._options)
        clone._engine = None
        clone._run = None
        clone._pending = copy.deepcopy(self._pending)
        clone._restored_generation = dict(self._restored_generation)
        clone._worker = (worker_id, num_workers)
        clone._world_of(clone._options)  # validates the worker arguments
        return clone

    @property
    def preserves_cursor_order(self) -> bool:
        return all(op.traits().preserves_cursor_order for _, op in self._ops)

    def _resolve_k(self, *, warn: bool = True) -> int:
        k = self._options["flush_every_k_chunks"]
        monotone = self.preserves_cursor_order
        if k is None:
            return 0 if monotone else 8
        if monotone and k > 0:
            if warn and not self._warned_k:
                self._warned_k = True
                warnings.warn(f"flush_every_k_chunks={k} has no effect on a monotone plan (every operator "
                              "preserves cursor order); using 0", UserWarning, stacklevel=3)
            return 0
        if not monotone and k == 0:
            raise ConfigError(
                expected("flush_every_k_chunks", "> 0 for a plan with a reordering operator", 0)
            )
        return int(k)

    def fingerprint(self) -> str:
        """Digest of the data settings: a checkpoint restores only into the same fingerprint
        (:func:`zephon_ref.fingerprint.pipeline_fingerprint`)."""
        return pipeline_fingerprint(self._source, self._ops,
                                    canonical_replicas=self._world_of(self._options).canonical_replicas,
                                    flush_every_k_chunks=self._resolve_k(warn=False))

    def explain(self) -> str:
        """The plan, in zephon's explain() layout (:func:`zephon_ref.explain.explain_plan`)."""
        return explain_plan(self._ops, runner=self._options["runner"] or "threads",
                            preserves_cursor_order=self.preserves_cursor_order)

    # -- iteration ------------------------------------------------------------------------------
    def _pending_state(self) -> dict[str, Any]:
        """An owned copy of the whole pending restore."""
        pending = self._pending
        assert pending is not None
        return pending.state() if isinstance(pending, schema.ValidatedState) else copy.deepcopy(pending)

    def _build_engine(self, state: Mapping[str, Any] | schema.ValidatedState | None, *,
                      on_tombstone: Callable[[SampleRecord], None] | None = None,
                      walk: ChunkWalk | None = None) -> Engine:
        opts = self._options
        if isinstance(state, schema.ValidatedState):  # only the owned lanes' part is read
            state = state.state_for(self._world_of(opts).owned_lanes)
        return Engine(
            source=self._source, ops=self._ops, world=self._world_of(opts), k=self._resolve_k(),
            monotone=self.preserves_cursor_order, fingerprint=self.fingerprint(),
            runner=opts["runner"] or "inline", workers=opts["max_workers"] or 4,
            queue_size=opts["op_queue_capacity"] or 8, deterministic=opts["deterministic"],
            feeding=opts["feeding"], state=state, on_tombstone=on_tombstone, walk=walk,
        )

    def engine(self, *, on_tombstone: Callable[[SampleRecord], None] | None = None,
               walk: ChunkWalk | None = None) -> Engine:
        """A started engine for a run that the caller drives step by step (the simulator).

        It starts from the pending restore if there is one, like ``iter()``; afterwards
        :meth:`checkpoint` reads its state.  The caller calls ``admit()``, ``run_stage(i)``
        and ``deliver()`` in any order (``runnable()`` lists what can run); the delivered
        stream is the one ``iter()`` gives.

        ``on_tombstone`` (off by default; zephon has no such hook): called with every
        tombstone record that reaches the tail, in tail order, on the thread that calls
        ``deliver()``; tombstones are never delivered, so this is how a lineage check
        sees the offsets that dropped records closed.  An observer only: it changes
        nothing the engine does (see :mod:`zephon_ref.engine.core`).

        ``walk``: a :class:`~zephon_ref.work.ChunkWalk` the caller owns and shares among the
        engines it drives from one thread (the simulated world shares one among every rank);
        without it the engine's lanes share one of their own.  It changes no chunk or state.
        """
        if on_tombstone is not None and not callable(on_tombstone):
            raise ConfigTypeError(
                expected(
                    "engine(on_tombstone=...)", "a callable taking a tombstone record, or None", on_tombstone
                )
            )
        self._refuse_while_running("engine()")
        if walk is not None and not isinstance(walk, ChunkWalk):
            raise ConfigTypeError(
                expected("engine(walk=...)", "None or a zephon_ref.work.ChunkWalk", type(walk).__name__)
            )
        engine = self._build_engine(self._pending, on_tombstone=on_tombstone, walk=walk)
        self._pending = None
        self._engine = engine
        engine.start()
        return engine

    def __iter__(self) -> PipelineIterator:
        if self._iterating:
            raise ContractError(
                "pipeline: expected one iteration at a time, received a second concurrent iter()"
            )
        engine = self._build_engine(self._pending)
        self._pending = None
        self._engine = engine
        run = PipelineIterator(engine)
        self._run = weakref.ref(run)
        return run

    # -- checkpoint / restore ---------------------------------------------------------------------
    def checkpoint(self, *, aggregate: Aggregate | None = None) -> dict[str, Any]:
        """The state to resume from: after the last delivered item (or the pending restore).

        With ``world_size > 1`` every rank must call this at the same step (barrier
        first): the ranks run one aggregation round over ``aggregate_dir`` or
        ``aggregate_store`` and each returns the same merged state, covering every lane.
        """
        if self._pending is not None:
            return self._pending_state()
        local = self.local_state()
        engine = self._engine
        assert engine is not None  # local_state() built it
        w = engine.world
        if (w.world_size == 1 and w.active_workers == 1) or not w.owned_lanes:
            return local  # the only participant, or an idle DataLoader worker
        if aggregate is None:
            from zephon_ref.coordination.driver import pipeline_aggregate

            aggregate = pipeline_aggregate(self._options)
        merged, round_id = aggregate(local, w)
        engine.last_round_id = round_id
        return copy.deepcopy(merged)

    def local_state(self) -> dict[str, Any]:
        """This participant's own state (its lanes only; no aggregation round), as an owned copy."""
        if self._pending is not None:
            return self._pending_state()
        engine = self._engine if self._engine is not None else self._build_engine(None)
        self._engine = engine
        out: dict[str, Any] = schema.owned_copy(engine.state_dict())
        return out

    def save_checkpoint(self, directory: str | os.PathLike[str]) -> int:
        """Durably save :meth:`checkpoint` as a new generation in ``directory`` (a path or an
        ``s3://bucket/prefix`` URL); returns it."""
        _check_directory(directory)
        return ckpt_store.save(self.checkpoint(), directory)

    def load_checkpoint(self, directory: str | os.PathLike[str], generation: int | None = None) -> int:
        """Restore the newest (or the given) generation of ``directory``; returns its number.

        Every file is validated first.  A generation older than one this pipeline
        already restored from the same directory is refused (a reset cursor), and
        so is any other bad state; a refusal changes no file and no pipeline state.
        """
        key = _check_directory(directory)
        world = self._world_of(self._options)
        loaded = ckpt_store.load_checkpoint(
            directory, generation, expected_fingerprint=self.fingerprint(),
            expected_canonical_replicas=world.canonical_replicas,
            min_generation=self._restored_generation.get(key, 0),
        )
        self.restore(loaded.state)
        self._restored_generation[key] = loaded.generation
        return loaded.generation

    def restore(self, ckpt: Mapping[str, Any] | schema.ValidatedState) -> Pipeline:
        """Validate ``ckpt`` (zephon's parameter name) now; apply it at the next iteration.  A refusal
        changes nothing.

        A zephon 0.2.0 checkpoint is translated first (:mod:`zephon_ref.compat`) and sealed
        by that translation, which checks it against this pipeline; the same checks follow.

        ``ckpt`` may also be a :class:`zephon_ref.state.ValidatedState`
        (``zephon_ref.state.validated(state)``): the schema and integrity checks it passed
        are not repeated and only this pipeline's lanes are copied, so restoring one merged
        state into many ranks validates it once; the checks against this pipeline
        (canonical_replicas, fingerprint, the dry-run load of the owned lanes) still run.
        """
        self._refuse_while_running("restore()")
        if isinstance(ckpt, schema.ValidatedState):
            self._check_against_pipeline(ckpt.canonical_replicas, ckpt.fingerprint)
            owned = self._world_of(self._options).owned_lanes
            missing = [lane for lane in owned if lane not in set(ckpt.lanes)]
            if missing:  # the same refusal as the engine's load of a state without an owned lane
                raise StateMismatchError(
                    expected(
                        f"checkpoint {schema.REQUIRED_LANE_FIELDS[0]}",
                        f"an entry for owned lane {missing[0]}",
                        f"lanes {list(ckpt.lanes)}",
                    )
                )
            self._build_engine(ckpt)  # dry run of the owned lanes (raises, changing nothing)
            self._pending = ckpt
            self._engine = None
            return self
        from zephon_ref.compat import from_zephon_state, is_zephon_state

        translated = is_zephon_state(ckpt)
        if translated:
            ckpt = from_zephon_state(  # sealed by the translation, which checked it against this pipeline
                ckpt, fingerprint=self.fingerprint(),
                canonical_replicas=self._world_of(self._options).canonical_replicas,
                work_source=self._source, flush_every_k_chunks=self._resolve_k(warn=False))
        schema.validate(ckpt, strict_cursors=not translated)
        schema.verify_integrity(ckpt)
        self._check_against_pipeline(ckpt["world"].get("canonical_replicas"), ckpt.get("fingerprint"))
        private = copy.deepcopy(dict(ckpt))  # detached from the caller's dict
        self._build_engine(private)  # dry run: every owned lane must load (raises, changing nothing)
        self._pending = private
        self._engine = None
        return self

    def _check_against_pipeline(self, c: Any, got_fp: Any) -> None:
        """Refuse a state of another canonical_replicas or another fingerprint."""
        world = self._world_of(self._options)
        if c != world.canonical_replicas:
            raise StateMismatchError(
                expected("checkpoint canonical_replicas", f"{world.canonical_replicas}", c)
                + "; changing canonical_replicas needs a migration"
            )
        fp = self.fingerprint()
        if got_fp != fp:
            raise StateMismatchError(
                expected(
                    "checkpoint fingerprint",
                    f"{fp[:16]}... (this pipeline's data settings)",
                    str(got_fp)[:16] + "...",
                )
                + "; the checkpoint belongs to a pipeline with other data settings"
            )


def _check_directory(directory: Any) -> str:
    """Refuse a bad directory argument; return the key of its restore floor (the
    resolved local path, or the normalised ``s3://bucket/prefix`` URL)."""
    if not isinstance(directory, (str, os.PathLike)) or not os.fspath(directory):
        raise ConfigTypeError(expected("directory", "a non-empty str or os.PathLike", directory))
    if isinstance(directory, str) and "://" in directory:
        from zephon_ref.storage.s3 import location

        return location(directory).url  # ConfigError for another scheme or a malformed URL
    return str(Path(directory).resolve())


class PipelineIterator(Iterator[Any]):
    """The iterator ``iter(pipeline)`` returns: the pipeline is running while it is open."""

    def __init__(self, engine: Engine) -> None:
        self._gen: Generator[Any, None, None] = engine.run()
        self.open = True

    def __next__(self) -> Any:
        if not self.open:
            raise StopIteration
        try:
            return next(self._gen)
        except BaseException:
            self.open = False
            raise

    def close(self) -> None:
        """Stop the run (threads stop too); the pipeline keeps its progress for checkpoint()."""
        self.open = False
        self._gen.close()

    def __del__(self) -> None:
        self.open = False

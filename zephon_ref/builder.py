"""The builder: a pipeline's graph, options, plan, engine, checkpoint and restore, with no machinery.

Theory of operation
-------------------
:class:`Builder` holds a work source, the operators (each validated at its builder
call) and options.  Options split in two, and only the first kind reaches the
data path:

* **data settings** — the work source's configuration and seed,
  ``canonical_replicas``, the operator chain with its knobs, ``drop_last``
  and ``flush_every_k_chunks`` — form the *fingerprint* that every checkpoint
  carries and every restore checks (the micro-batch size shapes data too, but a
  restore may change it: :mod:`zephon_ref.fingerprint`, seed 002);
* **execution settings** — runner, parallelism, queue sizes, feeding policy,
  topology, and every other key of zephon 0.2.0's RuntimeOptions (MTP, IPC, SHM,
  store options: :mod:`zephon_ref.settings`), plus ``prefetch()`` / ``fetch()`` /
  ``enable_observability()`` — change speed and memory, never output (with
  ``deterministic=True``); each is checked at its call as zephon checks it and held,
  and none reaches the engine or the fingerprint (seed 002, docs/options.md).
  ``feeding="demand"`` (the default) feeds a lane only when delivery waits on it, so
  inflight chunks and checkpoints stay bounded however long the run;
  ``feeding="round_robin"`` is zephon 0.2.0's per-sample round robin
  (:mod:`zephon_ref.engine.core`).

This module is semantics (house rule 10): it imports no runner, storage, checkpoint
store, coordination backend, torch path, translator or faster implementation.  What
needs those is the facade, :class:`zephon_ref.pipeline.Pipeline`, which subclasses
this one and enters at four seams: :meth:`Builder._iterate` takes the function that
drives an engine (a runner), :meth:`Builder._default_aggregate` supplies the
aggregation round the options name, :meth:`Builder._shared_walk` a shared chunk walk
(``walk=``) and :meth:`Builder._faster_ops` the faster operators the ``faster_ops``
option asks for (``faster=``).

Lifecycle.  ``engine()`` and ``_iterate(drive)`` build an
:class:`~zephon_ref.engine.core.Engine` (the one a pending restore already built, if
any) and start it.  From then until the iterator is exhausted, closed or dropped the
pipeline is *running*: ``restore()``, ``options()``, graph changes, ``for_worker()`` and
a second iteration refuse with ContractError.  Once a run has delivered anything (or a
restore is pending) the pipeline has *progress*: execution settings may still change
(they are read when an engine starts and never touch the state), data and topology
settings and the graph may not.

``checkpoint()`` returns the engine state (:mod:`zephon_ref.state`) as a value the
caller owns: a deep copy, at every call.  With several participants it runs the
aggregation round that is handed in (``aggregate=``) or the default one.
``restore(state)`` validates once — the schema (:func:`zephon_ref.state.validate`), the
integrity digest, canonical replicas, fingerprint — then loads the owned lanes once,
into the engine the next run uses (the load checks what needs the pipeline: source
configuration, sample ids); a refusal leaves the pipeline exactly as it was.
"""

from __future__ import annotations

import copy
import dataclasses
import warnings
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from zephon_ref import state as schema
from zephon_ref import windows
from zephon_ref.engine.core import FEEDING, Engine
from zephon_ref.engine.plan import k_ignored, resolve_k
from zephon_ref.engine.world import World
from zephon_ref.errors import (
    ConfigError,
    ConfigTypeError,
    ContractError,
    DropTotal,
    StateFormatError,
    StateMismatchError,
    expected,
)
from zephon_ref.fingerprint import pipeline_fingerprint
from zephon_ref.indexable import IndexedView, not_indexable_reason
from zephon_ref.ops.base import BaseOp, FasterOps
from zephon_ref.ops.batch import Batch
from zephon_ref.ops.decode_text import DecodeText
from zephon_ref.ops.ensure_mixture import EnsureMixture
from zephon_ref.ops.expand_chat import ExpandChat
from zephon_ref.ops.functional import resolve_add_op
from zephon_ref.ops.grouping import DomainGroups
from zephon_ref.ops.knobs import check_execution
from zephon_ref.ops.map_batch import MapBatch
from zephon_ref.ops.map_transform import MapTransform
from zephon_ref.ops.pack import PackSequences
from zephon_ref.ops.shuffle import Shuffle
from zephon_ref.ops.stateful import StatefulTransform
from zephon_ref.ops.tokenize import Tokenize
from zephon_ref.ops.tokenize_chat import TokenizeChat
from zephon_ref.settings import (
    EXEC_DEFAULTS,
    check_exec,
    check_fetch,
    check_prefetch,
    check_tracking,
    merge_io_options,
)
from zephon_ref.types import SampleId, SampleMeta, SampleRecord
from zephon_ref.work.base import SharedWalk, WorkSource
from zephon_ref.work.token_estimation import TextCounting

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = ["Aggregate", "Builder", "PipelineIterator"]

#: ``aggregate(local_state, world) -> (merged_state, round_id)``: one aggregation round for
#: this participant (every participant calls it at the same step).
Aggregate = Callable[[dict[str, Any], World], tuple[dict[str, Any], Any]]

_EXEC_OPTIONS = EXEC_DEFAULTS  # every execution setting zephon 0.2.0 accepts (zephon_ref.settings)
_DATA_OPTIONS = {"canonical_replicas": None, "flush_every_k_chunks": None}
# Settings that decide which lanes this participant owns: fixed once a run has progress too.
_TOPOLOGY_OPTIONS = ("world_size", "global_rank", "dp_degree", "dp_group_id", "mapping_strategy")
_REFUSED = ("shm_min_size", "coalesce_tensors")


class Builder:
    """The pipeline's semantics; method names and keywords follow zephon 0.2.0.  Users build
    :class:`zephon_ref.pipeline.Pipeline`, this class's facade."""

    def __init__(self, work_source: WorkSource) -> None:
        if not isinstance(work_source, WorkSource):
            raise ConfigTypeError(
                expected("work_source", "a zephon_ref WorkSource", type(work_source).__name__)
            )
        self._source = work_source
        self._ops: list[tuple[str, BaseOp]] = []
        # the name each op was given, where the plan had to make it unique ("map_transform" twice:
        # the second is "map_transform_2" in state and metrics); explain() prints the given one, as zephon
        self._given_names: dict[str, str] = {}
        self._options: dict[str, Any] = copy.deepcopy({**_EXEC_OPTIONS, **_DATA_OPTIONS})
        #: execution settings outside options(): prefetch(...) as (buffer_size, parallelism,
        #: placement) once called, fetch(...) as (parallelism, max_batch); neither reaches the
        #: engine or the fingerprint
        self._prefetch: tuple[int, int | None, str] | None = None
        self._fetch: tuple[int | None, int | None] = (None, None)
        #: materialize() calls: (placement, parallelism) each; identity here, held for is_indexable
        self._materialize: tuple[tuple[str, int | None], ...] = ()
        #: the engine of the current or next run: unstarted after a restore loaded it, None when
        #: the graph or a data setting changed since
        self._engine: Engine | None = None
        #: the whole restored state while it is pending (checkpoint() returns it until a run starts)
        self._pending: dict[str, Any] | None = None
        self._run: weakref.ref[PipelineIterator] | None = None
        self._warned_k = False
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
    def _add(self, name: str, op: BaseOp) -> Self:
        self._refuse_while_running(f"adding {name}")
        if self._has_progress():
            raise ContractError(expected(f"adding {name}", "a pipeline that has not run (the graph is a data "
                                         "setting)", "a pipeline with progress: build a new one"))
        if any(isinstance(o, Batch) for _, o in self._ops) and not isinstance(op, MapBatch):
            raise ConfigError(expected(f"{name}", "to be added before batch() (after it: map_batch() only)",
                                       "an operator after batch()"))
        names = {n for n, _ in self._ops}
        base, i = name, 1
        while name in names:
            i += 1
            name = f"{base}_{i}"
        if name != base:
            self._given_names = {**self._given_names, name: base}
        self._ops.append((name, op))
        self._engine = None
        return self

    def add_op(self, name_or_op: BaseOp | str, /, *, name: str | None = None,
               process_many: Callable[[list[Any]], Any] | None = None,
               preserves_cursor_order: bool | None = None, calibration_replayable: bool | None = None,
               accumulator: Callable[..., Any] | None = None, process_one: Callable[[Any], Any] | None = None,
               validation_samples: Callable[[], Any] | None = None, parallelism: int | None = None,
               placement: str = "auto", indexable: bool | None = None,
               batch_shape_sensitive: bool | None = None, requires_serial_state: bool | None = None) -> Self:
        """zephon's two forms: ``add_op(op, name=, placement=)`` with a BaseOp instance, or
        ``add_op("name", process_many=..., preserves_cursor_order=..., ...)``, which builds the operator
        (:mod:`zephon_ref.ops.functional`)."""
        keywords = {"process_many": process_many, "preserves_cursor_order": preserves_cursor_order,
                    "calibration_replayable": calibration_replayable, "accumulator": accumulator,
                    "process_one": process_one, "validation_samples": validation_samples,
                    "parallelism": parallelism, "indexable": indexable,
                    "batch_shape_sensitive": batch_shape_sensitive,
                    "requires_serial_state": requires_serial_state}
        op_name, op = resolve_add_op(name_or_op, name=name, placement=placement, keywords=keywords)
        return self._add(op_name, op)

    def map_transform(self, transform_fn: Callable[[Any], Any], *, drop_none: bool = True,
                      placement: str = "auto", parallelism: int | None = None) -> Self:
        # None means the default; 0 or a negative count is refused (MapTransform), not read as "default"
        return self._add("map_transform", MapTransform(transform_fn, drop_none=drop_none, placement=placement,
                                                       parallelism=parallelism))

    def map_batch(self, transform_fn: Callable[[Any], Any], *, drop_none: bool = True,
                  placement: str = "auto", parallelism: int | None = None) -> Self:
        op = MapBatch(transform_fn, drop_none=drop_none, placement=placement, parallelism=parallelism)
        if not any(isinstance(o, Batch) for _, o in self._ops):
            raise ConfigError(expected("map_batch()", "a preceding batch() (it maps micro-batches)",
                                       "no batch() before it"))
        return self._add("map_batch", op)

    def decode_text(self, parallelism: int | None = None, **kwargs: Any) -> Self:
        """``decode_text(fields=("text",), *, encoding="utf-8", errors="strict",
        normalize_newlines=True, lowercase=False, max_batch=128, max_latency_ms=2)``: zephon's
        keywords (:mod:`zephon_ref.ops.decode_text`)."""
        return self._add("decode_text", DecodeText(parallelism=parallelism, **kwargs))

    def expand_chat(self, *, field: str = "messages", placement: str = "auto",
                    parallelism: int | None = None) -> Self:
        return self._add("expand_chat", ExpandChat(field=field, placement=placement, parallelism=parallelism))

    def tokenize_chat(self, tokenizer: Any = None, tokenizer_id: str | None = None, *,
                      eos_token: str | None = None, field: str = "messages", max_length: int | None = None,
                      chat_template: Any = None, apply_chat_template: bool = True,
                      span_source: str = "auto", loss_scope: str | None = None,
                      loss_on_last_turn_only: bool | None = None,
                      chat_template_kwargs: Mapping[str, Any] | None = None, tools_field: str = "tools",
                      enable_thinking_field: str = "enable_thinking", mask_field_out: str = "loss_mask",
                      preserve_upstream_payload: bool = False, placement: str = "auto",
                      parallelism: int | None = None) -> Self:
        """The semantic builder takes a tokenizer *object* and template *text*; loading
        ``tokenizer_id`` and reading a template file are the facade's
        (:class:`zephon_ref.pipeline.Pipeline`)."""
        if tokenizer_id is not None:
            raise ConfigError(expected("tokenizer_id", "None on the semantic builder (zephon_ref.pipeline."
                                       "Pipeline loads a local tokenizer directory)", tokenizer_id))
        if eos_token is not None:
            raise ConfigError(expected("eos_token", "None unless the operator loads tokenizer_id (set "
                                       "the EOS on your tokenizer instead)", eos_token))
        op = TokenizeChat(tokenizer, field=field, max_length=max_length, chat_template=chat_template,
                          apply_chat_template=apply_chat_template, span_source=span_source,
                          loss_scope=loss_scope, loss_on_last_turn_only=loss_on_last_turn_only,
                          chat_template_kwargs=chat_template_kwargs, tools_field=tools_field,
                          enable_thinking_field=enable_thinking_field, mask_field_out=mask_field_out,
                          preserve_upstream_payload=preserve_upstream_payload, placement=placement,
                          parallelism=parallelism)
        return self._add("tokenize_chat", op)

    def stateful_transform(self, name: str, *, init_state: Callable[[], Any], push: Callable[..., Any],
                           flush: Callable[[Any], list[Any]] | None = None,
                           should_flush: Callable[[Any], bool] | None = None,
                           transform: Callable[[list[Any]], list[Any]] | None = None, placement: str = "auto",
                           parallelism: int = 1, indexable: bool = False,
                           preserves_cursor_order: bool = True) -> Self:
        op = StatefulTransform(name, init_state=init_state, push=push, flush=flush, should_flush=should_flush,
                               transform=transform, placement=placement, parallelism=parallelism,
                               indexable=indexable, preserves_cursor_order=preserves_cursor_order)
        return self._add(name, op)

    def tokenize(self, tokenizer: Any = None, tokenizer_id: str | None = None, *, field: str,
                 missing_field: str = "error", add_attention_mask: bool = True, max_length: int | None = None,
                 padding: bool | str = False, truncation: bool = False, return_tensors: str | None = None,
                 split_long_samples: bool = False, use_fast: bool | None = True,
                 preserve_upstream_payload: bool = False, special_tokens: str = "bos_eos",
                 bos_token_id: int | None = None, eos_token_id: int | None = None, placement: str = "auto",
                 parallelism: int | None = None) -> Self:
        if not (tokenizer_id is None or (isinstance(tokenizer_id, str) and tokenizer_id == "__fallback__")):
            raise ConfigError(expected("tokenizer_id", "None or '__fallback__' on the semantic builder "
                                       "(zephon_ref.pipeline.Pipeline loads a local tokenizer directory)",
                                       tokenizer_id))
        op = Tokenize(tokenizer, field=field, missing_field=missing_field,
                      add_attention_mask=add_attention_mask, max_length=max_length, padding=padding,
                      truncation=truncation,
                      return_tensors=return_tensors,
                      split_long_samples=split_long_samples, use_fast=True if use_fast is None else use_fast,
                      preserve_upstream_payload=preserve_upstream_payload, special_tokens=special_tokens,
                      bos_token_id=bos_token_id, eos_token_id=eos_token_id, placement=placement,
                      parallelism=parallelism)
        return self._add("tokenize", op)

    def pack_sequences(
        self,
        max_length: int,
        *,
        num_bins: int | None = None,
        max_sequences_per_bin: int | None = None,
        algorithm: str = "first_fit",
        tokens_field: str = "auto",
        length_fn: Callable[[SampleRecord], int] | None = None,
        drop_oversized: bool | None = None,
        min_sequence_length: int = 1,
        shuffle_strategy: str | None = None,
        shuffle_seed: int | None = None,
        flush_strategy: str = "fifo",
        pack_payloads: str | Callable[[list[Any]], Any] = "keep_list",
        candidate_pool_size: int | None = None,
        max_candidate_age: int | None = None,
        homogeneity: str = "none",
        groups: DomainGroups | Mapping[str, Sequence[str]] | None = None,
        placement: str = "auto",
        parallelism: int | None = None,
    ) -> Self:
        """Pack records into ``{"packed_samples": [...]}`` envelopes (zephon_ref/ops/pack.py)."""
        op = PackSequences(
            max_length, num_bins=num_bins, max_sequences_per_bin=max_sequences_per_bin, algorithm=algorithm,
            tokens_field=tokens_field, length_fn=length_fn, drop_oversized=drop_oversized,
            min_sequence_length=min_sequence_length, shuffle_strategy=shuffle_strategy,
            shuffle_seed=shuffle_seed, flush_strategy=flush_strategy, pack_payloads=pack_payloads,
            candidate_pool_size=candidate_pool_size, max_candidate_age=max_candidate_age,
            homogeneity=homogeneity, groups=self._pack_groups(homogeneity, groups), placement=placement,
            parallelism=parallelism,
        )
        return self._add("pack_sequences", op)

    def pack_flat(
        self,
        max_length: int,
        *,
        num_bins: int | None = None,
        max_sequences_per_bin: int | None = None,
        algorithm: str = "first_fit",
        tokens_field: str = "auto",
        pad_token_id: int | None = None,
        emit_positions: bool = True,
        drop_oversized: bool | None = None,
        min_sequence_length: int = 1,
        shuffle_strategy: str | None = None,
        shuffle_seed: int | None = None,
        flush_strategy: str = "fifo",
        candidate_pool_size: int | None = None,
        max_candidate_age: int | None = None,
        homogeneity: str = "none",
        groups: DomainGroups | Mapping[str, Sequence[str]] | None = None,
        placement: str = "auto",
        parallelism: int | None = None,
    ) -> Self:
        """Pack records into flat rows of ``max_length`` (token field and aligned fields concatenated
        and padded, ``positions`` restarting per segment), ready for ``to_training``."""
        op = PackSequences(
            max_length, num_bins=num_bins, max_sequences_per_bin=max_sequences_per_bin, algorithm=algorithm,
            output="flat", tokens_field=tokens_field, pad_token_id=pad_token_id,
            emit_positions=emit_positions,
            drop_oversized=drop_oversized, min_sequence_length=min_sequence_length,
            shuffle_strategy=shuffle_strategy, shuffle_seed=shuffle_seed, flush_strategy=flush_strategy,
            candidate_pool_size=candidate_pool_size, max_candidate_age=max_candidate_age,
            homogeneity=homogeneity, groups=self._pack_groups(homogeneity, groups), placement=placement,
            parallelism=parallelism,
        )
        return self._add("pack_flat", op)

    def _pack_groups(self, homogeneity: Any,
                     groups: DomainGroups | Mapping[str, Sequence[str]] | None) -> DomainGroups | None:
        """``groups`` as a DomainGroups checked against the source's component names (as zephon does
        at the builder call); a component in no group packs alone, which warns."""
        grouped = isinstance(homogeneity, str) and homogeneity == "group"  # no arbitrary __eq__
        if groups is not None and not grouped:
            raise ConfigError(expected("groups", f"None for homogeneity={homogeneity!r}", groups))
        if groups is None:
            if grouped:
                raise ConfigError(expected("groups", "a DomainGroups or {group: [component, ...]} for "
                                           "homogeneity='group'", None))
            return None
        spec = groups if isinstance(groups, DomainGroups) else DomainGroups(groups)
        try:
            names = sorted(dict(self._source.component_ids()))
        except NotImplementedError:  # a custom work source without a vocabulary: nothing to check against
            return spec
        spec.validate_against(names)
        ungrouped = sorted(set(names) - set(spec.to_member_map()))
        if ungrouped:
            warnings.warn(f"homogeneity='group': components {ungrouped} are in no group and pack as their "
                          "own singleton domains; add them to a group if that was unintended", UserWarning,
                          stacklevel=3)
        return spec

    def shuffle(
        self,
        buffer_size: int | None = None,
        *,
        seed: int = 0,
        algorithm: str = "streaming",
        warmup_growth: float = 1.5,
        placement: str = "auto",
        parallelism: int | None = None,
    ) -> Self:
        return self._add("shuffle_buffer", Shuffle(buffer_size, seed=seed, algorithm=algorithm,
                                                   warmup_growth=warmup_growth, placement=placement,
                                                   parallelism=parallelism))

    def ensure_mixture(
        self, *, placement: str = "auto", parallelism: int | None = None, **kwargs: Any
    ) -> Self:
        check_execution(placement=placement, parallelism=parallelism)
        op = EnsureMixture(parallelism=parallelism, **kwargs)  # validates its own arguments
        try:
            names = dict(self._source.component_ids())
        except NotImplementedError:  # a custom work source without a vocabulary: nothing to check against
            names = None
        if op.config.mixture is not None and names is not None:
            ids = set(names.values())
            unknown = [k for k in op.config.mixture if not (k in names if isinstance(k, str) else k in ids)]
            if unknown:
                raise ConfigError(
                    expected(
                        "ensure_mixture(mixture=...)",
                        f"components of the work source {sorted(names)} (names) or {sorted(ids)} (ids)",
                        f"unknown {unknown}",
                    )
                )
        token_aware = getattr(self._source, "allocation_mode", None) == "token_aware"
        if token_aware and op.config.weight_by == "samples":
            raise ConfigError(expected("ensure_mixture(weight_by=...) with a token-aware work source",
                                       "token units ('auto', a field or a callable)", "'samples'"))
        return self._add("ensure_mixture", op)

    def batch(self, microbatch_size: int, *, drop_last: bool = True, placement: str = "auto") -> Self:
        check_execution(placement=placement)
        if any(isinstance(o, Batch) for _, o in self._ops):
            raise ConfigError(expected("batch()", "at most one batch per pipeline", "a second batch()"))
        op = Batch(microbatch_size, drop_last=drop_last)
        return self._add("batch", op)

    def options(self, **hints: Any) -> Self:
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
            else:
                check_exec(key, hints[key])  # each execution setting as zephon checks it, eagerly
        new = {**self._options, **{k: v for k, v in hints.items() if k in known}}
        if "io_options" in hints:  # merged into the ones already set, as zephon does
            new["io_options"] = merge_io_options(self._options["io_options"], hints["io_options"])
        if "execution_tracking" in hints:
            new["execution_tracking"] = check_tracking("execution_tracking", hints["execution_tracking"])
        if self._has_progress():
            fixed = [k for k in (*_DATA_OPTIONS, *_TOPOLOGY_OPTIONS) if new[k] != self._options[k]]
            if fixed:
                raise ContractError(expected(f"options {fixed}", "unchanged once the pipeline has progress "
                                             "(data and topology settings are fixed for a run)", "a change"))
        if not isinstance(new["run_id"], str) or not new["run_id"]:
            raise ConfigTypeError(expected("run_id", "a non-empty str", new["run_id"]))
        k = new["flush_every_k_chunks"]
        if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 0):
            raise ConfigError(expected("flush_every_k_chunks", "None or an int >= 0", k))
        if new["feeding"] not in FEEDING:
            raise ConfigError(expected("feeding", " or ".join(repr(f) for f in FEEDING), new["feeding"]))
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

    # -- execution settings outside options() -------------------------------------------------
    # Seed 002: these change how zephon runs (its prefetch and fetch operators, its metrics),
    # never the data.  zephon_ref checks them as zephon does and holds them; the engine, the
    # stream and the fingerprint never read them (docs/options.md).
    def prefetch(self, buffer_size: int = 1024, parallelism: int | None = None, *,
                 placement: str = "local") -> Self:
        """zephon's read-ahead operator before fetch (at most one per pipeline, RuntimeError for a
        second call, as in zephon).  An execution setting here: held, the stream is unchanged."""
        self._refuse_while_running("prefetch()")
        check_prefetch(buffer_size, parallelism, placement)
        if self._prefetch is not None:
            raise ContractError(expected("prefetch()", "at most one call per pipeline (as in zephon)",
                                         "a second call"))
        self._prefetch = (buffer_size, parallelism, placement)
        return self

    def fetch(self, parallelism: int | None = None, max_batch: int | None = None) -> Self:
        """zephon's fetch operator's parallelism and micro-batch size (the last call wins, as in
        zephon).  An execution setting here: held, the stream is unchanged."""
        self._refuse_while_running("fetch()")
        check_fetch(parallelism, max_batch)
        self._fetch = (parallelism, max_batch)
        return self

    def fetch_parallelism(self, parallelism: int | None, max_batch: int | None = None) -> Self:
        """The same as :meth:`fetch` (zephon's other name for it)."""
        return self.fetch(parallelism, max_batch)

    def materialize(self, placement: str = "auto", parallelism: int | None = None) -> Self:
        """zephon's Materialize operator: "force evaluation of upstream iterables without altering
        records" (an identity on records, not indexable).  zephon_ref's upstream yields no lazy
        iterables, so it is held as an execution setting: the stream and the fingerprint are
        unchanged; ``is_indexable`` turns False, as in zephon."""
        self._refuse_while_running("materialize()")
        check_execution(placement=placement, parallelism=parallelism)
        self._materialize = (*self._materialize, (placement, parallelism))
        return self

    @property
    def is_indexable(self) -> bool:
        """Whether the plan supports random access, as zephon defines it: every operator indexable
        (no materialize()) and the work source ``supports_indexing()``.  Changes nothing."""
        return not_indexable_reason(self._source, self._ops, materialized=bool(self._materialize)) is None

    def indexed_view(self) -> IndexedView:
        """The semantics of zephon's ``to_indexable_torch_dataset()`` without torch: ``len()`` and
        ``record_at(i)`` (:class:`zephon_ref.indexable.IndexedView`); refused (ContractError, a
        RuntimeError) when the plan is not indexable.  A zephon_ref extension; changes nothing."""
        return IndexedView(self._source, self._ops, materialized=bool(self._materialize))

    def enable_observability(self, tracking: Any = "nodes", *, sink: Any = None) -> Self:
        """Set ``execution_tracking`` (zephon's ExecutionTrackingMode or its value; ValueError for
        another, as in zephon).  ``sink`` is accepted and unused: zephon_ref collects no timings,
        and the snapshot methods return None whatever this says (docs/options.md)."""
        self._refuse_while_running("enable_observability()")
        mode = check_tracking("enable_observability tracking", tracking)
        self._options["execution_tracking"] = mode
        return self

    def dropped(self) -> tuple[DropTotal, ...]:
        """What the current (or last) run of this participant dropped by configuration, per lane,
        operator and cause (:class:`zephon_ref.errors.DropTotal`, sorted; docs/drops.md): counted
        since the run started or was restored, over this participant's lanes; ``()`` before any
        run.  zephon 0.2.0 has no such query (it logs totals); diagnostics only, never state.
        Changes nothing."""
        engine = self._engine
        if engine is None or not engine.started:
            return ()
        return engine.drops.totals()

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

    def for_worker(self, worker_id: int, num_workers: int) -> Self:
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
        clone._worker = (worker_id, num_workers)
        clone._world_of(clone._options)  # validates the worker arguments
        return clone

    @property
    def preserves_cursor_order(self) -> bool:
        return all(op.traits().preserves_cursor_order for _, op in self._ops)

    def _resolve_k(self, *, warn: bool = True) -> int:
        """``flush_every_k_chunks`` as the engine runs it (:func:`zephon_ref.engine.plan.resolve_k`);
        warns once per pipeline when a positive value on a monotone plan is ignored."""
        k, monotone = self._options["flush_every_k_chunks"], self.preserves_cursor_order
        if warn and not self._warned_k and k_ignored(k, monotone=monotone):
            self._warned_k = True
            warnings.warn(f"flush_every_k_chunks={k} has no effect on a monotone plan (every operator "
                          "preserves cursor order); using 0", UserWarning, stacklevel=3)
        return resolve_k(k, monotone=monotone)

    def fingerprint(self) -> str:
        """Digest of the data settings: a checkpoint restores only into the same fingerprint
        (:func:`zephon_ref.fingerprint.pipeline_fingerprint`)."""
        return pipeline_fingerprint(self._source, self._ops,
                                    canonical_replicas=self._world_of(self._options).canonical_replicas,
                                    flush_every_k_chunks=self._resolve_k(warn=False))

    # -- iteration ------------------------------------------------------------------------------
    def _pending_state(self) -> dict[str, Any]:
        """An owned copy of the whole pending restore."""
        assert self._pending is not None
        return copy.deepcopy(self._pending)

    def _build_engine(self, state: Mapping[str, Any] | None) -> Engine:
        """An unstarted engine over this pipeline's data settings, loading ``state``'s owned
        lanes (the one load of a restore).  A token-aware source that measures its ratios is primed
        first (the calibration pass through the first tokenize operator's counter), unless a
        restore brings the checkpoint's ratios: a resume never re-measures."""
        if state is None and self._source.requires_token_priming:
            self._source.prime(count=self._calibration_counter())
        return Engine(
            source=self._source, ops=self._ops, world=self._world_of(self._options), k=self._resolve_k(),
            monotone=self.preserves_cursor_order, fingerprint=self.fingerprint(), state=state,
        )

    def _calibration_counter(self) -> TextCounting | None:
        """The first tokenize operator's calibration counting (zephon counts through the pipeline's
        tokenizer), or None: zephon's defaults (its built-in tokenizer over the likely text field)."""
        for i, (_, op) in enumerate(self._ops):
            counting = getattr(op, "calibration_counting", None)
            if not callable(counting):
                continue
            spec = cast(TextCounting, counting())
            ahead = self._ops[:i]
            stuck = next((name for name, o in ahead if not o.traits().calibration_replayable), None)
            if stuck is not None:
                return dataclasses.replace(spec, unreplayable=stuck)
            if not ahead:
                return spec
            return dataclasses.replace(spec, replay=_calibration_replay([o for _, o in ahead]))
        return None

    def _shared_walk(self) -> SharedWalk | None:
        """The chunk walk an engine's lanes share when the caller gives none: None here (every lane
        clone walks the global chunk order itself, the plain definition); the facade shares a
        :class:`zephon_ref.fast.walk.ChunkWalk` (a seam: the same chunks, faster)."""
        return None

    def _faster_ops(self) -> FasterOps | None:
        """The faster operators an engine runs when the caller gives none: None here (a builder
        runs the plain operators and only holds the ``faster_ops`` option, as it holds ``runner``);
        the facade answers with :class:`zephon_ref.fast.ops.FastOps` when ``faster_ops=True`` (a
        seam: the same records, states and fingerprint, faster)."""
        return None

    def _started_engine(self, *, on_tombstone: Callable[[SampleRecord], None] | None = None,
                        walk: SharedWalk | None = None, faster: FasterOps | None = None) -> Engine:
        """The engine of the next run, started with the execution settings now in effect: the one
        a pending restore loaded, else a fresh one.  ``walk``: the lanes' shared chunk walk
        (default :meth:`_shared_walk`); ``faster``: faster operators (default :meth:`_faster_ops`;
        None there too: the plain ones)."""
        engine = self._engine
        if engine is None or engine.started:
            engine = self._build_engine(self._pending)
        opts = self._options
        engine.start(queue_size=opts["op_queue_capacity"] or 8, deterministic=opts["deterministic"],
                     feeding=opts["feeding"], walk=walk if walk is not None else self._shared_walk(),
                     on_tombstone=on_tombstone, faster=faster if faster is not None else self._faster_ops())
        self._pending = None
        self._engine = engine
        return engine

    def engine(self, *, on_tombstone: Callable[[SampleRecord], None] | None = None,
               walk: SharedWalk | None = None, faster: FasterOps | None = None) -> Engine:
        """A started engine for a run that the caller drives step by step (the simulator).

        It starts from the pending restore if there is one, like iteration; afterwards
        :meth:`checkpoint` reads its state.  The caller calls ``admit()``, ``run_stage(i)``
        and ``deliver()`` in any order (``can_admit()``, ``ready_stages()`` and
        ``can_deliver()`` say what can run; sim/steps.py names the steps); the delivered
        stream is the one iteration gives.

        ``on_tombstone`` (off by default; zephon has no such hook): called with every
        tombstone record that reaches the tail, in tail order, on the thread that calls
        ``deliver()``; tombstones are never delivered, so this is how a lineage check
        sees the offsets that dropped records closed.  An observer only: it changes
        nothing the engine does (see :mod:`zephon_ref.engine.core`).

        ``walk``: a shared chunk walk (:class:`~zephon_ref.work.base.SharedWalk`, e.g.
        :class:`zephon_ref.fast.walk.ChunkWalk`) the caller owns and shares among the engines
        it drives from one thread (the simulated world shares one among every rank).  It
        changes no chunk or state.  ``faster``: faster operators (:class:`~zephon_ref.ops.base.FasterOps`,
        e.g. :class:`zephon_ref.fast.ops.FastOps`; default the ones the ``faster_ops`` option
        plugs in, :meth:`_faster_ops`); they change no record, state or fingerprint.
        """
        if on_tombstone is not None and not callable(on_tombstone):
            raise ConfigTypeError(
                expected(
                    "engine(on_tombstone=...)", "a callable taking a tombstone record, or None", on_tombstone
                )
            )
        self._refuse_while_running("engine()")
        if walk is not None and not isinstance(walk, SharedWalk):
            raise ConfigTypeError(
                expected("engine(walk=...)", "None or a shared chunk walk (zephon_ref.fast.walk.ChunkWalk)",
                         type(walk).__name__)
            )
        if faster is not None and not isinstance(faster, FasterOps):
            raise ConfigTypeError(expected("engine(faster=...)", "None or faster operators "
                                           "(zephon_ref.fast.ops.FastOps)", type(faster).__name__))
        return self._started_engine(on_tombstone=on_tombstone, walk=walk, faster=faster)

    def __iter__(self) -> PipelineIterator:
        """A builder has no runner: iterate a :class:`zephon_ref.pipeline.Pipeline` (the facade)."""
        raise ContractError(expected("iter()", "a zephon_ref.Pipeline (a builder has no runner)",
                                     type(self).__name__))

    def _iterate(self, drive: Callable[[Engine], Iterator[Any]]) -> PipelineIterator:
        """Start the next run and iterate it with ``drive`` (a runner: a started engine -> its
        delivered items).  The facade's ``__iter__`` passes the runner the options name."""
        if self._iterating:
            raise ContractError(
                "pipeline: expected one iteration at a time, received a second concurrent iter()"
            )
        engine = self._started_engine()
        run = PipelineIterator(drive(engine), on_close=engine.drops.close)
        self._run = weakref.ref(run)
        return run

    # -- checkpoint / restore ---------------------------------------------------------------------
    def checkpoint(self, *, aggregate: Aggregate | None = None) -> dict[str, Any]:
        """The state to resume from: after the last delivered item (or the pending restore).

        With several participants (``world_size > 1`` or several DataLoader workers) every one
        must call this at the same step (barrier first): they run one aggregation round,
        ``aggregate`` or :meth:`_default_aggregate`, and each returns the same merged state,
        covering every lane.
        """
        if self._pending is not None:
            return self._pending_state()
        local = self.local_state()
        engine = self._engine
        assert engine is not None  # local_state() built it
        w = engine.world
        if (w.world_size == 1 and w.active_workers == 1) or not w.owned_lanes:
            if w.owned_lanes:  # the whole state (several participants: the round's merge warns)
                windows.warn_if_mid_window(local["lane_emitted"], w.canonical_replicas, stacklevel=2)
            return local  # the only participant, or an idle DataLoader worker
        if aggregate is None:
            aggregate = self._default_aggregate()
        merged, round_id = aggregate(local, w)
        engine.last_round_id = round_id
        return copy.deepcopy(merged)

    def _default_aggregate(self) -> Aggregate:
        """The aggregation round used when ``checkpoint()`` is given none: the semantics have no
        backend, so a builder alone needs ``aggregate=``; the facade answers with the round its
        ``aggregate_dir`` / ``aggregate_store`` options name."""
        raise ContractError(expected("checkpoint() with several participants", "aggregate=<a round>",
                                     "none (a Builder has no aggregation backend; use zephon_ref.Pipeline)"))

    def local_state(self) -> dict[str, Any]:
        """This participant's own state (its lanes only; no aggregation round), as an owned copy."""
        if self._pending is not None:
            return self._pending_state()
        engine = self._engine if self._engine is not None else self._build_engine(None)
        self._engine = engine
        out: dict[str, Any] = copy.deepcopy(engine.state_dict())
        return out

    def restore(self, ckpt: Mapping[str, Any]) -> Self:
        """Validate ``ckpt`` (zephon's parameter name) now; apply it at the next iteration.  A refusal
        changes nothing.

        One validation (schema, integrity, canonical_replicas, fingerprint) and one load of the
        owned lanes, into the engine the next run starts.  A checkpoint of zephon 0.2.0 is
        translated explicitly first (:func:`zephon_ref.compat.from_zephon_state`).
        """
        self._refuse_while_running("restore()")
        if not isinstance(ckpt, Mapping):
            raise StateFormatError(expected("checkpoint", "a mapping (an engine state)", type(ckpt).__name__))
        schema.validate(ckpt)
        schema.verify_integrity(ckpt)
        return self._restore_checked(ckpt)

    def _restore_checked(self, ckpt: Mapping[str, Any]) -> Self:
        """Restore a state whose schema and integrity were already checked (by :meth:`restore`, or
        by the durable store's load, which validates every file it reads)."""
        self._check_against_pipeline(ckpt["world"].get("canonical_replicas"), ckpt.get("fingerprint"))
        private = copy.deepcopy(dict(ckpt))  # detached from the caller's dict
        engine = self._build_engine(private)  # the one load: raises, changing nothing
        self._pending = private
        self._engine = engine
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


def _calibration_replay(ops: list[BaseOp]) -> Callable[[Any, SampleId], list[Any]]:
    """The operators ahead of tokenize applied to one calibration row (zephon replays its
    ``calibration_replayable`` operators so): lane 0, chunk 0, tombstones stripped between them."""
    def replay(payload: Any, sample_id: SampleId) -> list[Any]:
        recs = [SampleRecord(SampleMeta(tuple(sample_id), 0, 0), payload)]  # type: ignore[arg-type]
        for op in ops:
            recs = [r for r in op.process_many(list(recs)) if not r.meta.tombstone]
            if not recs:
                break
        return [r.payload for r in recs]
    return replay


class PipelineIterator(Iterator[Any]):
    """The iterator iteration returns: the pipeline is running while it is open."""

    def __init__(self, deliveries: Iterator[Any], *, on_close: Callable[[], None] | None = None) -> None:
        self._gen = deliveries
        self._on_close = on_close
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
        was_open, self.open = self.open, False
        close = getattr(self._gen, "close", None)
        if close is not None:
            close()
        if was_open and self._on_close is not None:
            self._on_close()  # the run's dropped-data totals (diagnostics)

    def __del__(self) -> None:
        self.open = False

"""The Pipeline: zephon's builder (:class:`zephon_ref.builder.Builder`) wired to the machinery.

Theory of operation
-------------------
Everything a pipeline *means* — its graph, options, fingerprint, engine, checkpoint and
restore — is :class:`~zephon_ref.builder.Builder`, which imports no machinery (house rule
10).  :class:`Pipeline` is the class users build (``zephon.pipeline.Pipeline``'s place): it
adds only what needs the machinery, each entering the builder at one seam:

* iteration: ``iter(pipeline)`` drives the engine with the runner ``options(runner=...)``
  names (:mod:`zephon_ref.runners`: ``inline`` for None / "auto" / "inline" and zephon's
  "process", ``threads`` for "threads" and zephon's "remote"; docs/options.md);
* validation: ``validate()`` and ``preflight_tokenizers()`` (:mod:`zephon_ref.validation`);
* diagnostics that describe a plan or a run and decide nothing: ``explain()``
  (:mod:`zephon_ref.explain`), ``inflight_summary()`` and zephon's snapshot queries (None here);
* the shared chunk walk: every engine's lanes share one
  :class:`~zephon_ref.fast.walk.ChunkWalk` (the same chunks as walking plainly, faster);
* the faster operators, opt-in: ``options(faster_ops=True)`` (a zephon_ref execution setting,
  default False) plugs :class:`zephon_ref.fast.ops.FastOps` in at the engine's ``faster=`` seam
  for every run that starts afterwards, under either runner and after a restore: the same
  items, checkpoints and fingerprint as the plain operators, faster (``tokenize`` with the
  built-in tokenizer); a checkpoint taken with it restores with it or without it;
* aggregation: with several participants ``checkpoint()`` runs the round the
  ``aggregate_dir`` / ``aggregate_store`` options name
  (:func:`zephon_ref.coordination.driver.pipeline_aggregate`);
* the torch path (``to_torch_dataset``) and the durable store (``save_checkpoint`` /
  ``load_checkpoint``, :mod:`zephon_ref.checkpoint.store`).

A zephon 0.2.0 checkpoint is never sniffed here: translate it explicitly with
:func:`zephon_ref.compat.from_zephon_state` and restore the result.

What may not live here: any rule of the semantics (they are the builder's).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from zephon_ref.builder import Aggregate, Builder, PipelineIterator
from zephon_ref.checkpoint import store as ckpt_store
from zephon_ref.engine.core import Engine
from zephon_ref.errors import ConfigError, ConfigTypeError, ZephonRefError, expected
from zephon_ref.explain import explain_plan
from zephon_ref.fast.ops import FastOps
from zephon_ref.fast.walk import ChunkWalk
from zephon_ref.io.options import StoreOptions
from zephon_ref.io.tokenizers import load_tokenizer, read_template
from zephon_ref.ops.base import FasterOps
from zephon_ref.runners import drive
from zephon_ref.validation import ValidationError, ValidationReport, preflight_tokenizers, validate_pipeline
from zephon_ref.work.base import SharedWalk, WorkSource

__all__ = ["Aggregate", "Pipeline", "PipelineIterator"]


class Pipeline(Builder):
    """Builder and iterator; method names and keywords follow zephon 0.2.0."""

    def __init__(self, work_source: WorkSource) -> None:
        super().__init__(work_source)
        self._restored_generation: dict[str, int] = {}  # directory -> highest generation restored

    # -- the seams ------------------------------------------------------------------------------
    def __iter__(self) -> PipelineIterator:
        return self._iterate(self._drive)

    def _drive(self, engine: Engine) -> Iterator[Any]:
        opts = self._options
        # None, "" and "auto" choose the inline runner here, and so does "process" (zephon's worker
        # processes exist for GIL isolation, which an oracle does not need); "threads" and "remote"
        # (zephon's Ray actors) run as threads.  mtp_mode runs the engine in this process.  The
        # stream is the same under every runner (docs/options.md).
        runner = "threads" if opts["runner"] in ("threads", "remote") else "inline"
        return drive(engine, runner=runner, workers=opts["max_workers"] or 4,
                     queue_size=opts["op_queue_capacity"] or 8, deterministic=opts["deterministic"])

    def _shared_walk(self) -> SharedWalk | None:
        return ChunkWalk()

    def _faster_ops(self) -> FasterOps | None:
        # options(faster_ops=True): FastOps at the engine seam (read when a run starts, like runner)
        return FastOps() if self._options["faster_ops"] else None

    def _default_aggregate(self) -> Aggregate:
        from zephon_ref.coordination.driver import pipeline_aggregate

        return pipeline_aggregate(self._options)

    # -- diagnostics (they describe a run, never decide one) ----------------------------------
    def inflight_summary(self) -> dict[int, int]:
        """``{lane: number of inflight chunks}`` of this participant's lanes in the current or last
        run; ``{}`` before any run (as zephon).  The counts depend on feeding and read-ahead (an
        execution matter): they are not zephon's numbers, only its shape.  Changes nothing."""
        engine = self._engine
        if engine is None or not engine.started:
            return {}
        return {lane: len(engine.streams[lane].inflight) for lane in sorted(engine.streams)}

    def metrics_snapshot(self) -> None:
        """zephon's pipeline metrics; None here (no timings are collected; zephon returns None too
        when observability is off)."""
        return None

    def fetch_timing_snapshot(self) -> None:
        """zephon's fetch timings; None here (see :meth:`metrics_snapshot`)."""
        return None

    def prefetch_timing_snapshot(self) -> None:
        """zephon's prefetch timings; None here (see :meth:`metrics_snapshot`)."""
        return None

    def mtp_queue_stats(self) -> None:
        """zephon's MTP queue statistics; None here: no engine subprocess runs (``mtp_mode=True``
        runs in this process; zephon returns None without MTP too)."""
        return None

    def explain(self) -> str:
        """The plan, in zephon's explain() layout (:func:`zephon_ref.explain.explain_plan`), with
        each operator under the name it was given (the plan makes a repeated name unique)."""
        shown = [(self._given_names.get(n, n), op) for n, op in self._ops]
        return explain_plan(shown, runner=self._options["runner"] or "threads",
                            preserves_cursor_order=self.preserves_cursor_order, options=self._options)

    # -- tokenizers from disk (the builder's operators take objects) ---------------------------
    def tokenize(self, tokenizer: Any = None, tokenizer_id: str | None = None, *, field: str,
                 missing_field: str = "error", add_attention_mask: bool = True, max_length: int | None = None,
                 padding: bool | str = False, truncation: bool = False, return_tensors: str | None = None,
                 split_long_samples: bool = False, use_fast: bool | None = True,
                 preserve_upstream_payload: bool = False, special_tokens: str = "bos_eos",
                 bos_token_id: int | None = None, eos_token_id: int | None = None, placement: str = "auto",
                 parallelism: int | None = None) -> Pipeline:
        """zephon's ``tokenize``; ``tokenizer_id`` may name a local tokenizer directory
        (:func:`zephon_ref.io.tokenizers.load_tokenizer`; ``None`` / ``"__fallback__"``: the built-in
        one).  A given ``tokenizer`` object takes precedence, as in zephon."""
        if tokenizer is None and tokenizer_id is not None and not (
                isinstance(tokenizer_id, str) and tokenizer_id == "__fallback__"):
            tokenizer = load_tokenizer(tokenizer_id, use_fast=use_fast)
        super().tokenize(tokenizer, None if tokenizer is not None else tokenizer_id, field=field,
                         missing_field=missing_field, add_attention_mask=add_attention_mask,
                         max_length=max_length, padding=padding, truncation=truncation,
                         return_tensors=return_tensors, split_long_samples=split_long_samples,
                         use_fast=use_fast,
                         preserve_upstream_payload=preserve_upstream_payload, special_tokens=special_tokens,
                         bos_token_id=bos_token_id, eos_token_id=eos_token_id, placement=placement,
                         parallelism=parallelism)
        return self

    def tokenize_chat(self, tokenizer: Any = None, tokenizer_id: str | None = None, *,
                      eos_token: str | None = None, field: str = "messages", max_length: int | None = None,
                      chat_template: str | os.PathLike[str] | None = None, apply_chat_template: bool = True,
                      span_source: str = "auto", loss_scope: str | None = None,
                      loss_on_last_turn_only: bool | None = None,
                      chat_template_kwargs: Mapping[str, Any] | None = None, tools_field: str = "tools",
                      enable_thinking_field: str = "enable_thinking", mask_field_out: str = "loss_mask",
                      preserve_upstream_payload: bool = False, placement: str = "auto",
                      parallelism: int | None = None) -> Pipeline:
        """zephon's ``tokenize_chat``: ``tokenizer_id`` names a local tokenizer directory (loaded with
        ``eos_token`` when given), ``chat_template`` may be a file path (read as UTF-8)."""
        if eos_token is not None and (tokenizer is not None or tokenizer_id is None):
            raise ConfigError(expected("eos_token", "None unless the operator loads tokenizer_id (set "
                                       "the EOS on your tokenizer instead)", eos_token))
        template = read_template(chat_template)
        if tokenizer is None and tokenizer_id is not None:
            tokenizer = load_tokenizer(tokenizer_id, use_fast=True, eos_token=eos_token)
        super().tokenize_chat(tokenizer, field=field, max_length=max_length, chat_template=template,
                              apply_chat_template=apply_chat_template, span_source=span_source,
                              loss_scope=loss_scope, loss_on_last_turn_only=loss_on_last_turn_only,
                              chat_template_kwargs=chat_template_kwargs, tools_field=tools_field,
                              enable_thinking_field=enable_thinking_field, mask_field_out=mask_field_out,
                              preserve_upstream_payload=preserve_upstream_payload, placement=placement,
                              parallelism=parallelism)
        return self

    # -- validation -----------------------------------------------------------------------------
    def options(self, **hints: Any) -> Pipeline:
        """The builder's options; an ``io_options`` dict is read as zephon reads it,
        at the call (sizes, nested caches, ranges: :meth:`zephon_ref.io.options.StoreOptions.from_any`),
        so a bad value is refused before anything changes.  An execution setting: the data never
        depend on it (seed 002)."""
        io = hints.get("io_options")
        if isinstance(io, dict):  # other shapes (a StoreOptions, zephon's too) the builder checks
            try:
                StoreOptions.from_any(io)
            except ZephonRefError as exc:
                raise type(exc)(f"io_options: {exc}") from exc
        super().options(**hints)
        return self

    def validate(self, *, strict: bool = False) -> ValidationReport:
        """zephon's validation report (:func:`zephon_ref.validation.validate_pipeline`); with
        ``strict`` a report with an error raises ValidationError (a RuntimeError).  Changes nothing."""
        report = validate_pipeline(self)
        if strict and not report.ok:
            raise ValidationError(report)
        return report

    def preflight_tokenizers(self, *, strict: bool = True) -> ValidationReport:
        """zephon's tokenizer preflight (:func:`zephon_ref.validation.preflight_tokenizers`)."""
        report = preflight_tokenizers(self)
        if strict and not report.ok:
            raise ValidationError(report)
        return report

    # -- the torch path -------------------------------------------------------------------------
    def to_torch_dataset(self, stateful: bool = True, *, collate: Any = None, device: Any = None) -> Any:
        """A torch IterableDataset over this pipeline (see :mod:`zephon_ref.torch`); stateful (for
        torchdata's StatefulDataLoader) by default, as zephon 0.2.0's."""
        from zephon_ref.torch import to_torch_dataset

        return to_torch_dataset(self, stateful, collate=collate, device=device)

    def to_indexable_torch_dataset(self) -> Any:
        """zephon's map-style torch Dataset over an indexable pipeline (``is_indexable``):
        ``len()`` and ``ds[i]``, a SampleRecord (:mod:`zephon_ref.torch.indexable`)."""
        from zephon_ref.torch.indexable import to_indexable_torch_dataset

        return to_indexable_torch_dataset(self)

    def for_worker(self, worker_id: int, num_workers: int) -> Pipeline:
        clone = super().for_worker(worker_id, num_workers)
        clone._restored_generation = dict(self._restored_generation)
        return clone

    # -- the durable store ----------------------------------------------------------------------
    def save_checkpoint(self, directory: str | os.PathLike[str]) -> int:
        """Durably save :meth:`checkpoint` as a new generation in ``directory`` (a path or an
        ``s3://bucket/prefix`` URL); returns it."""
        _check_directory(directory)
        return ckpt_store.save(self.checkpoint(), directory)

    def load_checkpoint(self, directory: str | os.PathLike[str], generation: int | None = None) -> int:
        """Restore the newest (or the given) generation of ``directory``; returns its number.

        Every file is validated first (the store's load runs the state schema's one validator).
        A generation older than one this pipeline already restored from the same directory is
        refused (a reset cursor), and so is any other bad state; a refusal changes no file and
        no pipeline state.
        """
        self._refuse_while_running("load_checkpoint()")
        key = _check_directory(directory)
        world = self._world_of(self._options)
        loaded = ckpt_store.load_checkpoint(
            directory, generation, expected_fingerprint=self.fingerprint(),
            expected_canonical_replicas=world.canonical_replicas,
            min_generation=self._restored_generation.get(key, 0),
        )
        from zephon_ref import state as schema

        schema.verify_integrity(loaded.state)  # the store validated the schema; not again
        self._restore_checked(loaded.state)
        self._restored_generation[key] = loaded.generation
        return loaded.generation


def _check_directory(directory: Any) -> str:
    """Refuse a bad directory argument; return the key of its restore floor (the
    resolved local path, or the normalised ``s3://bucket/prefix`` URL)."""
    if not isinstance(directory, (str, os.PathLike)) or not os.fspath(directory):
        raise ConfigTypeError(expected("directory", "a non-empty str or os.PathLike", directory))
    if isinstance(directory, str) and "://" in directory:
        from zephon_ref.storage.s3 import location

        return location(directory).url  # ConfigError for another scheme or a malformed URL
    return str(Path(directory).resolve())

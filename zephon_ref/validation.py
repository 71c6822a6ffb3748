"""``Pipeline.validate()`` and ``Pipeline.preflight_tokenizers()``: zephon's reports, zephon_ref's checks.

Theory of operation
-------------------
zephon's validation harness smoke-tests the operators a user adds with ``add_op``, either form (built-in
operators are skipped) and returns a :class:`ValidationReport`; ``strict=True`` raises
:class:`ValidationError` (a RuntimeError) when the report has an error.  zephon_ref keeps the
report's shape (``issues``, ``ok``, ``errors``, ``warnings``, ``format()``) and runs its own
checks, which read a pipeline and change nothing:

* for every user operator that offers ``validation_samples()``: ``process_many`` returns a
  list, and two calls on equal copies of the samples return equal outputs (a stateless,
  deterministic operator; zephon's first check);
* a positive ``flush_every_k_chunks`` on a monotone plan is reported as a warning (it is
  ignored, as zephon ignores it).

``preflight_tokenizers`` has nothing to load here: zephon_ref resolves every tokenizer at the
``tokenize()`` call (and refuses one it cannot resolve there), so a built pipeline's report is
empty.  Neither check ever changes the stream (seed 002).
"""

from __future__ import annotations

import copy
from typing import Any

from zephon_ref.builder import Builder
from zephon_ref.engine.plan import k_ignored
from zephon_ref.errors import Issue, ValidationError, ValidationReport
from zephon_ref.ops.functional import FunctionalOp

__all__ = ["Issue", "ValidationError", "ValidationReport", "preflight_tokenizers", "validate_pipeline"]


def _user_op(op: Any) -> bool:
    # a keyword-form add_op operator is the user's callables in zephon_ref's wrapper
    return isinstance(op, FunctionalOp) or not type(op).__module__.startswith("zephon_ref.")


def validate_pipeline(pipeline: Builder) -> ValidationReport:
    """The report of ``pipeline.validate()`` (see the module docstring); changes nothing."""
    issues: list[Issue] = []
    for name, op in pipeline._ops:
        if not _user_op(op):
            continue
        try:
            samples = op.validation_samples()
        except Exception as e:  # a user hook: report it, never raise from a report
            issues.append(Issue("error", "validation_samples_raised", name, f"{type(e).__name__}: {e}"))
            continue
        if not samples:
            continue
        try:
            first = op.process_many(copy.deepcopy(list(samples)))
            second = op.process_many(copy.deepcopy(list(samples)))
        except Exception as e:
            issues.append(Issue("error", "process_many_raised", name, f"{type(e).__name__}: {e}"))
            continue
        if not isinstance(first, list) or not isinstance(second, list):
            issues.append(Issue("error", "process_many_not_list", name,
                                f"expected a list, received {type(first).__name__}"))
        elif first != second:
            issues.append(Issue("error", "process_many_not_deterministic", name,
                                "two calls on equal samples returned different outputs (state kept "
                                "across calls, or unseeded randomness)"))
    k = pipeline._options["flush_every_k_chunks"]
    if k_ignored(k, monotone=pipeline.preserves_cursor_order):
        issues.append(Issue("warning", "flush_every_k_chunks_ignored", "pipeline",
                            f"flush_every_k_chunks={k} has no effect on a monotone plan (using 0)"))
    return ValidationReport(issues)


def preflight_tokenizers(pipeline: Builder) -> ValidationReport:
    """The report of ``pipeline.preflight_tokenizers()``: empty (every tokenizer was resolved at its
    ``tokenize()`` call); changes nothing."""
    del pipeline
    return ValidationReport([])

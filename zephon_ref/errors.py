"""The error hierarchy of zephon_ref.

Theory of operation
-------------------
Every error that bad input or a broken contract can produce derives from
:class:`ZephonRefError`, and *also* from the builtin a caller written against
``zephon`` 0.2.0 would catch:

* bad configuration or arguments        -> :class:`ConfigError` (``ValueError``)
* wrong type of argument                -> :class:`ConfigTypeError` (``TypeError``)
* a contract violated at run time       -> :class:`ContractError` (``RuntimeError``)
* a checkpoint/state that is malformed  -> :class:`StateFormatError` (``ValueError``)
* a well-formed state that belongs to
  another lane, layout or pipeline      -> :class:`StateMismatchError`
  (both ``ValueError`` and ``RuntimeError``: zephon raises RuntimeError for
  these, the issue tracker asks for ValueError; deriving from both keeps either
  ``except`` clause working).

Messages say what was expected and what was received.  Use :func:`expected` to
build them so every message has the same shape.

Data that a configuration drops (an oversized record under first_fit/best_fit, wrap's
trailing tokens, the partial batch under ``drop_last=True``, strict ensure_mixture's
discards, the work source's leftover) is never dropped silently, and a long run is not
buried in warnings either: every drop point counts into a :class:`DropLedger` (one per run,
owned by the engine), which emits a :class:`DataDroppedWarning` (a ``UserWarning``: filter it,
or make it an error with ``warnings.simplefilter("error", DataDroppedWarning)``) the first
time a lane drops of a kind (``phase="start"``), and one warning per kind with the run's
totals over every lane at its close (``phase="total"``: end of data or the iterator's close).
The counts are queryable at any time (``Pipeline.dropped()``, a tuple of :class:`DropTotal`).
Counting and emitting change no data and no state; docs/drops.md lists every drop point.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "DataDroppedWarning",
    "DropLedger",
    "DropTotal",
    "AggregationError",
    "AggregationTimeout",
    "ConfigError",
    "ConfigNotImplemented",
    "ConfigTypeError",
    "ContractError",
    "Issue",
    "ValidationError",
    "ValidationReport",
    "PayloadError",
    "PayloadTypeError",
    "StateFormatError",
    "StateMismatchError",
    "ZephonRefError",
    "LeaderFailed",
    "expected",
    "ledger_of",
]


class ZephonRefError(Exception):
    """Root of every error zephon_ref raises on purpose."""


class ConfigError(ZephonRefError, ValueError):
    """An argument or configuration value is invalid."""


class ConfigTypeError(ZephonRefError, TypeError):
    """An argument has the wrong type."""


class ConfigNotImplemented(ZephonRefError, NotImplementedError):
    """A configuration value zephon 0.2.0 reserves and refuses with NotImplementedError (a
    RuntimeError): ``options(worker_allocation="autotune")``."""


class ContractError(ZephonRefError, RuntimeError):
    """A run-time contract was violated (by an operator, a source, or the caller)."""


@dataclass(frozen=True, slots=True)
class Issue:
    """One validation finding (zephon's shape): ``severity`` is "error" or "warning"; ``code`` a short
    stable name."""

    severity: str
    code: str
    op_name: str
    message: str
    doc_link: str = "docs/options.md"


@dataclass
class ValidationReport:
    """What a validation found (zephon's shape)."""

    issues: list[Issue] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """No error (warnings allowed)."""
        return not self.errors

    @property
    def errors(self) -> list[Issue]:
        return [i for i in self.issues if i.severity == "error"]

    @property
    def warnings(self) -> list[Issue]:
        return [i for i in self.issues if i.severity == "warning"]

    def format(self) -> str:
        if not self.issues:
            return "ValidationReport: ok (nothing to check or all checks passed)"
        lines = [f"ValidationReport: {len(self.errors)} error(s), {len(self.warnings)} warning(s)"]
        lines += [f"  [{i.severity}] {i.code} in {i.op_name!r}: {i.message}" for i in self.issues]
        return "\n".join(lines)


class ValidationError(ContractError):
    """A validation found an error (zephon raises its ValidationError, a RuntimeError): a strict
    ``Pipeline.validate()``, or a tokenize_chat template check (:mod:`zephon_ref.ops.chat_ownership`)."""

    def __init__(self, report: ValidationReport) -> None:
        super().__init__(report.format())
        self.report = report


class PayloadError(ZephonRefError, ValueError):
    """A record's payload lacks what an operator reads (a missing field, a malformed message)."""


class PayloadTypeError(ZephonRefError, TypeError):
    """A record's payload, or a value in it, has the wrong type for an operator."""


class StateFormatError(ZephonRefError, ValueError):
    """A state dict / checkpoint is malformed (missing keys, wrong types, bad version)."""


class StateMismatchError(ZephonRefError, ValueError, RuntimeError):
    """A well-formed state belongs to another lane, layout, fingerprint or capture."""


class AggregationError(ContractError):
    """A multi-rank aggregation round failed (``RuntimeError``, as in zephon).

    ``reason`` is a short stable code (``"timeout"``, ``"leader-failed"``,
    ``"mapping-mismatch"``, ``"rank-mismatch"``, ``"duplicate-participant"``,
    ``"merge"``, ``"publish-conflict"``, ``"storage"``, ...).
    """

    def __init__(self, message: str, *, reason: str = "aggregation") -> None:
        super().__init__(message)
        self.reason = reason


class AggregationTimeout(AggregationError):
    """The round's single ``aggregate_timeout_s`` budget ran out.

    ``waiting_for`` names the step (``"announcement"``, ``"shards"``,
    ``"outcome"``, ``"acks"``); ``missing_ranks`` / ``missing_lanes`` (shards) and
    ``missing_participants`` (acks) say who was late.
    """

    def __init__(
        self,
        message: str,
        *,
        waiting_for: str,
        missing_ranks: tuple[int, ...] = (),
        missing_lanes: tuple[int, ...] = (),
        missing_participants: tuple[str, ...] = (),
    ) -> None:
        super().__init__(message, reason="timeout")
        self.waiting_for = waiting_for
        self.missing_ranks = missing_ranks
        self.missing_lanes = missing_lanes
        self.missing_participants = missing_participants


class LeaderFailed(AggregationError):
    """A follower found the leader's failure notice for its round."""

    def __init__(self, message: str) -> None:
        super().__init__(message, reason="leader-failed")


class DataDroppedWarning(UserWarning):
    """Data the configuration drops, with its counts (see the module docstring).

    Attributes: ``op`` (the operator, e.g. ``"pack_sequences(first_fit)"``), ``cause`` (one
    of :data:`DROP_CAUSES`), ``lane`` (-1 on a ``"total"`` warning: every lane), ``records``
    (records dropped or cut) and ``tokens`` (tokens dropped, or None where the cause counts
    records only), ``phase``: ``"start"`` (the lane's first drop of this kind in the run: the
    counts are that drop's) or ``"total"`` (the run's totals at its close).
    """

    def __init__(self, message: str, *, op: str = "", cause: str = "", lane: int = -1, records: int = 0,
                 tokens: int | None = None, phase: str = "start") -> None:
        super().__init__(message)
        self.op, self.cause, self.lane, self.records, self.tokens = op, cause, lane, records, tokens
        self.phase = phase

    def __reduce__(self) -> Any:  # pickles (across processes) with its counts
        return (_rebuild_drop, (str(self), self.op, self.cause, self.lane, self.records, self.tokens,
                                self.phase))


def _rebuild_drop(message: str, op: str, cause: str, lane: int, records: int, tokens: int | None,
                  phase: str = "start") -> DataDroppedWarning:
    return DataDroppedWarning(message, op=op, cause=cause, lane=lane, records=records, tokens=tokens,
                              phase=phase)


#: every cause a DataDroppedWarning names (docs/drops.md has one row each)
DROP_CAUSES: dict[str, str] = {
    "oversized": "records longer than max_length under first_fit/best_fit with drop_oversized=True",
    "wrap_tail": "wrap's trailing tokens that did not fill a max_length bin at a flush (no segment cap)",
    "partial_batch": "the last partial micro-batch of a lane under batch(drop_last=True) at end of data",
    "strict_mixture": "records ensure_mixture (strict mode, max_buffer_size=None) discards at a flush",
    "source_leftover": "samples the work source skipped: a pass's remainder that could not fill a quota, "
    "at an epoch boundary or when the stream ended (there is no final partial chunk)",
}


@dataclass(frozen=True, slots=True)
class DropTotal:
    """What one lane dropped of one kind in a run: ``events`` drop points (flushes) that dropped,
    ``records`` and ``tokens`` (None where the cause counts records only) summed over them."""

    op: str
    cause: str
    lane: int
    events: int
    records: int
    tokens: int | None


class DropLedger:
    """The dropped-data counts of one run, per (lane, op, cause); diagnostics, never state.

    Invariants: a key's counts only grow; the ``"start"`` warning of a key is emitted exactly
    once, by the first :meth:`add` that counts something for it; :meth:`close` emits the
    ``"total"`` warnings once (a second close emits nothing new unless more was dropped).
    Every key is written by one owner only (one operator's accumulator, or one lane's work
    source), so the threads runner's pumps never write the same key; new keys are plain dict
    insertions.  Nothing here decides output: a run with warnings filtered away delivers the
    same stream and the same checkpoints.
    """

    __slots__ = ("_totals", "_closed_at")

    def __init__(self) -> None:
        #: (lane, op, cause) -> [events, records, tokens or -1 (no token count)]
        self._totals: dict[tuple[int, str, str], list[int]] = {}
        self._closed_at: dict[tuple[str, str], tuple[int, int]] = {}

    def add(self, *, op: str, cause: str, lane: int, records: int, tokens: int | None = None,
            detail: str = "") -> None:
        """Count one drop point's drop on ``lane`` (nothing when nothing was dropped); warn if it
        is the lane's first of this kind."""
        assert cause in DROP_CAUSES, cause
        if records <= 0 and not tokens:
            return
        key = (lane, op, cause)
        got = self._totals.get(key)
        if got is not None:
            got[0] += 1
            got[1] += records
            if tokens is not None:
                got[2] = max(got[2], 0) + tokens
            return
        self._totals[key] = [1, records, -1 if tokens is None else tokens]
        what = f"{records} record(s)" + ("" if tokens is None else f" ({tokens} token(s))")
        message = (f"{op}: lane {lane} dropped {what}: {DROP_CAUSES[cause]}"
                   + (f"; {detail}" if detail else "")
                   + "; further drops of this kind on this lane are counted, not warned (totals at the "
                   "run's close and in Pipeline.dropped(); zephon_ref.errors.DataDroppedWarning; "
                   "docs/drops.md)")
        # stacklevel 2: the drop point's module, the same line for every lane, so a filter by module works
        warnings.warn(DataDroppedWarning(message, op=op, cause=cause, lane=lane, records=records,
                                         tokens=tokens), stacklevel=2)

    def totals(self) -> tuple[DropTotal, ...]:
        """Every (lane, op, cause) that dropped something, sorted by lane, op, cause."""
        return tuple(
            DropTotal(op, cause, lane, ev, rec, None if tok < 0 else tok)
            for (lane, op, cause), (ev, rec, tok) in sorted(self._totals.items())
        )

    def close(self) -> None:
        """Emit one ``"total"`` warning per (op, cause) with the run's counts over every lane."""
        by: dict[tuple[str, str], list[DropTotal]] = {}
        for t in self.totals():
            by.setdefault((t.op, t.cause), []).append(t)
        for (op, cause), ts in sorted(by.items()):
            records = sum(t.records for t in ts)
            has_tokens = any(t.tokens is not None for t in ts)
            tokens = sum(t.tokens or 0 for t in ts) if has_tokens else None
            events = sum(t.events for t in ts)
            if self._closed_at.get((op, cause)) == (events, records):
                continue  # reported at an earlier close, nothing since
            self._closed_at[(op, cause)] = (events, records)
            what = f"{records} record(s)" + ("" if tokens is None else f" ({tokens} token(s))")
            message = (f"{op}: dropped {what} in total on {len(ts)} lane(s) over {events} drop point(s) "
                       f"this run: {DROP_CAUSES[cause]} "
                       "(zephon_ref.errors.DataDroppedWarning; docs/drops.md)")
            warnings.warn(DataDroppedWarning(message, op=op, cause=cause, lane=-1, records=records,
                                             tokens=tokens, phase="total"), stacklevel=3)


def ledger_of(ctx: Mapping[str, Any] | None) -> DropLedger:
    """The run's ledger an operator's accumulator counts into (``ctx["drops"]``, which the engine
    sets), or a ledger of its own where it is built outside an engine."""
    got = None if ctx is None else ctx.get("drops")
    return got if isinstance(got, DropLedger) else DropLedger()


def expected(what: str, expect: str, got: Any) -> str:
    """Format ``"<what>: expected <expect>, received <got!r>"``."""
    return f"{what}: expected {expect}, received {got!r}"

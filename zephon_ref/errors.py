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
discards) is never dropped silently: :func:`warn_data_dropped` emits a
:class:`DataDroppedWarning` (a ``UserWarning``: filter it, or make it an error with
``warnings.simplefilter("error", DataDroppedWarning)``) once per lane and cause at the
lane's flush or end of data, with the counts.  Emitting it changes no data and no state;
docs/drops.md lists every drop point.
"""

from __future__ import annotations

import warnings
from typing import Any

__all__ = [
    "DataDroppedWarning",
    "AggregationError",
    "AggregationTimeout",
    "CheckpointCorrupt",
    "CheckpointNotFound",
    "CheckpointRefused",
    "ConfigError",
    "ConfigNotImplemented",
    "ConfigTypeError",
    "ContractError",
    "PayloadError",
    "PayloadTypeError",
    "StateFormatError",
    "PublishConflict",
    "StateMismatchError",
    "ZephonRefError",
    "LeaderFailed",
    "StorageError",
    "expected",
    "warn_data_dropped",
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


class PayloadError(ZephonRefError, ValueError):
    """A record's payload lacks what an operator reads (a missing field, a malformed message)."""


class PayloadTypeError(ZephonRefError, TypeError):
    """A record's payload, or a value in it, has the wrong type for an operator."""


class StateFormatError(ZephonRefError, ValueError):
    """A state dict / checkpoint is malformed (missing keys, wrong types, bad version)."""


class StateMismatchError(ZephonRefError, ValueError, RuntimeError):
    """A well-formed state belongs to another lane, layout, fingerprint or capture."""


class CheckpointCorrupt(StateFormatError):
    """A stored checkpoint is damaged or unreadable: a missing or truncated file, a
    digest mismatch, a malformed manifest or an unknown format/schema version.

    ``reason`` is a short stable code (``"missing-shard"``, ``"digest-mismatch"``,
    ...) so tests and tools can count refusals by cause.
    """

    def __init__(self, message: str, *, reason: str = "corrupt") -> None:
        super().__init__(message)
        self.reason = reason


class CheckpointRefused(StateMismatchError):
    """A well-formed stored checkpoint that may not be restored here: another
    pipeline's fingerprint, another ``canonical_replicas``, a shard of another
    capture, or a generation older than one already restored (a reset cursor)."""

    def __init__(self, message: str, *, reason: str = "refused") -> None:
        super().__init__(message)
        self.reason = reason


class CheckpointNotFound(ZephonRefError, FileNotFoundError):
    """No published generation (or not the requested one) exists in a directory."""

    def __init__(self, message: str, *, reason: str = "not-found") -> None:
        super().__init__(message)
        self.reason = reason


class PublishConflict(ZephonRefError, FileExistsError):
    """A durable publish found its target name already taken; nothing was replaced."""

    def __init__(self, message: str, *, reason: str = "target-exists") -> None:
        super().__init__(message)
        self.reason = reason


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


class StorageError(ZephonRefError, OSError):
    """A storage operation failed in the operating system (a full disk, a read-only
    filesystem, a path that is a file, a symlink loop, ...).

    ``reason`` is a short stable code (``"disk-full"``, ``"read-only-fs"``,
    ``"file-too-large"``, ``"not-a-directory"``, ``"is-a-directory"``,
    ``"symlink-loop"``, ``"permission"``, ``"io-error"``, ``"temp-collision"``,
    ``"os-error"``, ...); ``errno`` and ``filename`` are the failed call's, as on any
    ``OSError``; ``op`` names the storage operation (``"create"``, ``"link"``, ...).
    """

    def __init__(
        self,
        message: str,
        *,
        reason: str = "os-error",
        errno: int | None = None,
        filename: str | None = None,
        op: str = "",
    ) -> None:
        super().__init__(message)
        self.reason = reason
        self.errno = errno
        self.filename = filename
        self.op = op

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class DataDroppedWarning(UserWarning):
    """Data the configuration drops on one lane, with its counts (see the module docstring).

    Attributes: ``op`` (the operator, e.g. ``"pack_sequences(first_fit)"``), ``cause`` (one
    of :data:`DROP_CAUSES`), ``lane``, ``records`` (records dropped or cut) and ``tokens``
    (tokens dropped, or None where the cause counts records only).
    """

    def __init__(self, message: str, *, op: str = "", cause: str = "", lane: int = -1, records: int = 0,
                 tokens: int | None = None) -> None:
        super().__init__(message)
        self.op, self.cause, self.lane, self.records, self.tokens = op, cause, lane, records, tokens

    def __reduce__(self) -> Any:  # pickles (across processes) with its counts
        return (_rebuild_drop, (str(self), self.op, self.cause, self.lane, self.records, self.tokens))


def _rebuild_drop(message: str, op: str, cause: str, lane: int, records: int, tokens: int | None
                  ) -> DataDroppedWarning:
    return DataDroppedWarning(message, op=op, cause=cause, lane=lane, records=records, tokens=tokens)


#: every cause a DataDroppedWarning names (docs/drops.md has one row each)
DROP_CAUSES: dict[str, str] = {
    "oversized": "records longer than max_length under first_fit/best_fit with drop_oversized=True",
    "wrap_tail": "wrap's trailing tokens that did not fill a max_length bin at a flush (no segment cap)",
    "partial_batch": "the last partial micro-batch of a lane under batch(drop_last=True) at end of data",
    "strict_mixture": "records ensure_mixture (strict mode, max_buffer_size=None) discards at a flush",
    "source_leftover": "samples the work source skipped: a pass's remainder that could not fill a quota, "
    "at an epoch boundary or when the stream ended (there is no final partial chunk)",
}


def warn_data_dropped(*, op: str, cause: str, lane: int, records: int, tokens: int | None = None,
                      detail: str = "") -> None:
    """Emit one :class:`DataDroppedWarning` for ``lane`` (nothing when nothing was dropped)."""
    assert cause in DROP_CAUSES, cause
    if records <= 0 and not tokens:
        return
    what = f"{records} record(s)" + ("" if tokens is None else f" ({tokens} token(s))")
    message = (f"{op}: lane {lane} dropped {what}: {DROP_CAUSES[cause]}" + (f"; {detail}" if detail else "")
               + " (zephon_ref.errors.DataDroppedWarning; docs/drops.md)")
    # stacklevel 2: the operator's module, the same line for every lane, so a filter by module works
    warnings.warn(DataDroppedWarning(message, op=op, cause=cause, lane=lane, records=records, tokens=tokens),
                  stacklevel=2)


def expected(what: str, expect: str, got: Any) -> str:
    """Format ``"<what>: expected <expect>, received <got!r>"``."""
    return f"{what}: expected {expect}, received {got!r}"

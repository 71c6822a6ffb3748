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
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "AggregationError",
    "AggregationTimeout",
    "CheckpointCorrupt",
    "CheckpointNotFound",
    "CheckpointRefused",
    "ConfigError",
    "ConfigTypeError",
    "ContractError",
    "StateFormatError",
    "PublishConflict",
    "StateMismatchError",
    "ZephonRefError",
    "LeaderFailed",
    "StorageError",
    "expected",
]


class ZephonRefError(Exception):
    """Root of every error zephon_ref raises on purpose."""


class ConfigError(ZephonRefError, ValueError):
    """An argument or configuration value is invalid."""


class ConfigTypeError(ZephonRefError, TypeError):
    """An argument has the wrong type."""


class ContractError(ZephonRefError, RuntimeError):
    """A run-time contract was violated (by an operator, a source, or the caller)."""


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


def expected(what: str, expect: str, got: Any) -> str:
    """Format ``"<what>: expected <expect>, received <got!r>"``."""
    return f"{what}: expected {expect}, received {got!r}"

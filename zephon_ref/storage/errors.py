"""The errors of the storage layer and of the durable checkpoint store on it.

They belong to :mod:`zephon_ref.errors`' one hierarchy (each derives from
:class:`~zephon_ref.errors.ZephonRefError` and from the builtin a caller would catch) but
live here, beside the only code that raises them: the semantics never touch a file, so a
reviewer of the semantics never needs them.  Each carries ``reason``, a short stable code,
so tests and tools can count failures by cause.
"""

from __future__ import annotations

from zephon_ref.errors import StateFormatError, StateMismatchError, ZephonRefError

__all__ = ["CheckpointCorrupt", "CheckpointNotFound", "CheckpointRefused", "PublishConflict", "StorageError"]


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

"""The storage interface: the few file operations durable state needs, and the one publish routine.

Theory of operation
-------------------
Everything zephon_ref writes durably (checkpoint shards and manifests, the
manifest tree, the directory aggregation backend) goes through a
:class:`Storage`: a handful of primitive operations on names in directories,
each the size of one system call, so that a fault injector (``sim/storage.py``)
can fail, tear, lose or observe any single step.  :class:`zephon_ref.storage.posix.PosixStorage`
is the real one.

The primitives (a :class:`Writer` comes from :meth:`Storage.create`):

* ``create(path) -> Writer``: create a new file exclusively (``FileExistsError`` if
  the name exists); ``Writer.write(data)`` writes all of it, ``Writer.sync()``
  makes it durable, ``Writer.close()`` releases it (idempotent).
* ``link(src, dst)``: give ``src``'s file the name ``dst`` too; never replaces
  (``FileExistsError`` if ``dst`` exists).  ``rename(src, dst)`` replaces ``dst``
  (only the aggregation backend's ``put`` uses it).
* ``remove(path) -> bool``: unlink; False when it was already absent.
* ``seal(path)``: make a file read-only.
* ``sync_dir(directory)``: make the directory's entries durable.
* ``make_dirs(directory) -> bool``: create it and its parents; False when it
  already was a directory.
* ``read(path) -> bytes | None``: the whole file, None when absent.
* ``list(directory) -> list[str]``: sorted names, ``[]`` when the directory is absent.

Primitives raise the operating system's ``OSError``; nothing else here does.
The routines below are the only callers the product has, and they turn every
``OSError`` into a typed :class:`~zephon_ref.storage.errors.StorageError` (with a
``reason``), a taken name into :class:`~zephon_ref.storage.errors.PublishConflict`.

**Publication** (:func:`publish`, the one owner of the durable-write sequence):
create a temp file ``.tmp.<name>.<token>`` in the target directory, write,
sync, close, seal, then ``link`` it to its final name (never replacing), remove
the temp, sync the directory.  A published name therefore always holds a
complete, synced, read-only file, and is never replaced.  The temp token is 16
random hex digits (not the PID: two writers in different PID namespaces share
PIDs), and a temp name that already exists is never touched: another token is
tried.  A failure before the link removes this call's temp file (best effort)
and leaves the target name as it was.

**Publish-level storages.**  A storage that has no temp files or links (object
storage: :class:`zephon_ref.storage.s3.S3Storage`) offers one optional
method, ``publish_object(path, data, *, replace)``, which publishes the whole
value under its final name (``FileExistsError`` when taken and not
``replace``).  :func:`publish` calls it instead of the sequence above when a
storage has it; storages without it (POSIX, the simulator's faulty one) are
unchanged.

What may not live here: checkpoint layout or schema (store.py), clocks, and
any fault injection (that is the simulator's storage).
"""

from __future__ import annotations

import contextlib
import errno as _errno
import os
import secrets
from pathlib import Path
from typing import Protocol, runtime_checkable

from zephon_ref.errors import ZephonRefError, expected
from zephon_ref.storage.errors import PublishConflict, StorageError

__all__ = [
    "AFTER_LINK_OPS",
    "PUBLISH_OPS",
    "TEMP_PREFIX",
    "Storage",
    "Writer",
    "ensure_dir",
    "list_names",
    "publish",
    "read_bytes",
    "remove_file",
    "storage_error",
    "sync_dir",
    "temp_target",
]

PathLike = str | os.PathLike[str]

TEMP_PREFIX = ".tmp."
# The steps of publish(), in order; a StorageError whose ``op`` is one of
# AFTER_LINK_OPS happened after the final name was linked (the file is there).
PUBLISH_OPS: tuple[str, ...] = ("create", "write", "sync", "close", "seal", "link", "remove", "sync_dir")
AFTER_LINK_OPS: frozenset[str] = frozenset({"remove", "sync_dir"})
_TEMP_TRIES = 4


class Writer(Protocol):
    """An exclusively created file being written (see the module docstring)."""

    def write(self, data: bytes) -> None: ...

    def sync(self) -> None: ...

    def close(self) -> None: ...


@runtime_checkable
class Storage(Protocol):
    """The primitive file operations; each raises ``OSError`` as the OS would."""

    def create(self, path: Path) -> Writer: ...

    def link(self, src: Path, dst: Path) -> None: ...

    def rename(self, src: Path, dst: Path) -> None: ...

    def remove(self, path: Path) -> bool: ...

    def seal(self, path: Path) -> None: ...

    def sync_dir(self, directory: Path) -> None: ...

    def make_dirs(self, directory: Path) -> bool: ...

    def read(self, path: Path) -> bytes | None: ...

    def list(self, directory: Path) -> list[str]: ...


_REASONS: dict[int, str] = {
    _errno.ENOSPC: "disk-full",
    _errno.EDQUOT: "quota-exceeded",
    _errno.EROFS: "read-only-fs",
    _errno.EFBIG: "file-too-large",
    _errno.ENOTDIR: "not-a-directory",
    _errno.EISDIR: "is-a-directory",
    _errno.ELOOP: "symlink-loop",
    _errno.EACCES: "permission",
    _errno.EPERM: "permission",
    _errno.EIO: "io-error",
    _errno.ENAMETOOLONG: "name-too-long",
    _errno.ENOENT: "missing-path",
    _errno.EEXIST: "path-exists",
    _errno.EMFILE: "too-many-open-files",
    _errno.EXDEV: "cross-device",
}


def storage_error(exc: OSError, op: str, path: PathLike) -> StorageError:
    """The typed form of an ``OSError`` raised by storage operation ``op`` on ``path``."""
    if isinstance(exc, StorageError):
        return exc
    code = exc.errno
    reason = _REASONS.get(code, "os-error") if code is not None else "os-error"
    detail = os.strerror(code) if code is not None else str(exc)
    return StorageError(
        expected(f"storage {op} of {os.fspath(path)}", "success", f"[{reason}] {detail}"),
        reason=reason,
        errno=code,
        filename=os.fspath(path),
        op=op,
    )


def temp_target(name: str) -> str | None:
    """The final name a temp file ``name`` was going to be published as, or None."""
    if not name.startswith(TEMP_PREFIX):
        return None
    stem, dot, token = name[len(TEMP_PREFIX) :].rpartition(".")
    return stem if dot and stem and token else None


def _token() -> str:
    return secrets.token_hex(8)  # clock-ok: temp-name uniqueness only, never data


def publish(
    storage: Storage, path: PathLike, data: bytes, *, replace: bool = False, seal: bool = True
) -> None:
    """Durably publish ``data`` at ``path`` (see the module docstring).

    ``replace=False`` (the default, and the only mode for checkpoints) raises
    :class:`PublishConflict` when the name is taken and changes nothing.
    Every ``OSError`` becomes a :class:`StorageError`.
    """
    final = Path(path)
    direct = getattr(storage, "publish_object", None)
    if callable(direct):
        try:
            direct(final, data, replace=replace)
        except FileExistsError as exc:
            raise PublishConflict(
                expected(f"publish target {final.name}", "a name not yet taken", "an existing object")
            ) from exc
        except OSError as exc:
            raise storage_error(exc, "put", final) from exc
        return
    directory = final.parent
    op = "create"
    tmp: Path | None = None
    try:
        for _ in range(_TEMP_TRIES):
            candidate = directory / f"{TEMP_PREFIX}{final.name}.{_token()}"
            try:
                writer = storage.create(candidate)
            except FileExistsError:
                continue  # someone else's temp: never touch it, draw another token
            tmp = candidate
            break
        else:
            raise StorageError(
                expected(
                    f"a free temp name for {final}",
                    f"one within {_TEMP_TRIES} random tokens",
                    "every one taken",
                ),
                reason="temp-collision",
                errno=_errno.EEXIST,
                filename=os.fspath(final),
                op="create",
            )
        # Invariant from here: ``tmp`` is ours, and ours alone to remove.
        try:
            op = "write"
            writer.write(data)
            op = "sync"
            writer.sync()
        except BaseException:
            with contextlib.suppress(OSError):
                writer.close()
            raise
        op = "close"
        writer.close()
        if seal:
            op = "seal"
            storage.seal(tmp)
        if replace:
            op = "rename"
            storage.rename(tmp, final)
            tmp = None
        else:
            op = "link"
            try:
                storage.link(tmp, final)
            except FileExistsError as exc:
                raise PublishConflict(
                    expected(f"publish target {final.name}", "a name not yet taken", "an existing file")
                ) from exc
            op = "remove"
            storage.remove(tmp)
            tmp = None
        op = "sync_dir"
        storage.sync_dir(directory)
    except BaseException as exc:
        if tmp is not None:
            with contextlib.suppress(OSError):
                storage.remove(tmp)
        if isinstance(exc, OSError) and not isinstance(exc, ZephonRefError):
            raise storage_error(exc, op, final) from exc
        raise


def read_bytes(storage: Storage, path: PathLike) -> bytes | None:
    """The file's bytes, None when absent; :class:`StorageError` for any other failure."""
    try:
        return storage.read(Path(path))
    except OSError as exc:
        raise storage_error(exc, "read", path) from exc


def list_names(storage: Storage, directory: PathLike) -> list[str]:
    """Sorted names in ``directory`` (``[]`` when absent); :class:`StorageError` otherwise."""
    try:
        return sorted(storage.list(Path(directory)))
    except OSError as exc:
        raise storage_error(exc, "list", directory) from exc


def remove_file(storage: Storage, path: PathLike) -> bool:
    """Remove ``path``; False when it was absent; :class:`StorageError` otherwise."""
    try:
        return storage.remove(Path(path))
    except OSError as exc:
        raise storage_error(exc, "remove", path) from exc


def ensure_dir(storage: Storage, directory: PathLike) -> None:
    """Create ``directory`` (and parents) durably; :class:`StorageError` if it cannot be one."""
    root = Path(directory)
    try:
        created = storage.make_dirs(root)
    except FileExistsError as exc:
        # Something that is not a directory holds the name (a file, a symlink
        # loop, a dangling link): listing it says which.
        try:
            storage.list(root)
        except OSError as probe:
            raise storage_error(probe, "make_dirs", root) from exc
        raise storage_error(OSError(_errno.ENOTDIR, os.strerror(_errno.ENOTDIR)), "make_dirs", root) from exc
    except OSError as exc:
        raise storage_error(exc, "make_dirs", root) from exc
    if not created:
        return
    try:
        storage.sync_dir(root.parent if root.parent != root else root)
    except OSError as exc:
        raise storage_error(exc, "sync_dir", root.parent) from exc


def sync_dir(storage: Storage, directory: PathLike) -> None:
    """Make removals in ``directory`` durable; :class:`StorageError` on failure."""
    try:
        storage.sync_dir(Path(directory))
    except OSError as exc:
        raise storage_error(exc, "sync_dir", directory) from exc

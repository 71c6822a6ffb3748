"""POSIX storage: the :class:`~zephon_ref.storage.Storage` primitives as system calls.

Theory of operation
-------------------
Each method is one (or, for ``write`` and ``make_dirs``, a loop of) system call
and raises the ``OSError`` the kernel reports; the typed errors and the publish
sequence live in base.py.  ``create`` opens with ``O_CREAT | O_EXCL`` so an
existing name (file, directory or dangling link) is never reused; ``link`` is
``link(2)``, which never replaces its target (the portable NOREPLACE);
``sync_dir`` fsyncs a directory descriptor, which is what makes a link or an
unlink durable.  Files are created ``0o644`` and sealed ``0o444``.

What may not live here: any policy (names, retries, layout), clocks.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

__all__ = ["PosixStorage", "PosixWriter"]

_READ_ONLY = stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH


class PosixWriter:
    """An open, exclusively created file descriptor."""

    __slots__ = ("_fd",)

    def __init__(self, fd: int) -> None:
        self._fd = fd

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            n = os.write(self._fd, view)
            view = view[n:]

    def sync(self) -> None:
        os.fsync(self._fd)

    def close(self) -> None:
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)


class PosixStorage:
    """The real filesystem (local or shared POSIX)."""

    __slots__ = ()

    def create(self, path: Path) -> PosixWriter:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
        return PosixWriter(os.open(path, flags, 0o644))

    def link(self, src: Path, dst: Path) -> None:
        os.link(src, dst, follow_symlinks=False)

    def rename(self, src: Path, dst: Path) -> None:
        os.replace(src, dst)

    def remove(self, path: Path) -> bool:
        try:
            os.unlink(path)
        except FileNotFoundError:
            return False
        return True

    def seal(self, path: Path) -> None:
        os.chmod(path, _READ_ONLY)

    def sync_dir(self, directory: Path) -> None:
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def make_dirs(self, directory: Path) -> bool:
        if os.path.isdir(directory):
            return False
        os.makedirs(directory, exist_ok=True)
        return True

    def read(self, path: Path) -> bytes | None:
        try:
            with open(path, "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None

    def list(self, directory: Path) -> list[str]:
        try:
            return sorted(os.listdir(directory))
        except FileNotFoundError:
            return []

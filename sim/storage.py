"""A fault-injecting :class:`~zephon_ref.checkpoint.storage.Storage` for tests and the simulator.

Theory of operation
-------------------
:class:`FaultyStorage` wraps a real storage (POSIX by default) and sees every
primitive operation (``create``, ``write``, ``sync``, ``close``, ``seal``,
``link``, ``rename``, ``remove``, ``sync_dir``, ``make_dirs``, ``read``,
``list``) before it reaches the inner storage.  For each it:

1. counts it and appends ``(op, file name)`` to :attr:`FaultyStorage.log`;
2. asks each :class:`Fault` in turn whether this call fails; the first that
   matches raises its ``OSError(errno)`` *instead of* the operation (a torn
   ``write`` first writes the leading half of the data, as a full disk does);
3. otherwise runs the operation and then calls ``after(op, path)``, the
   observer (the kill campaign SIGKILLs itself there).

A fault matches the ``nth`` call (1-based) of its ``op`` whose file name
contains ``name_contains``, or every such call from the ``nth`` on when
``sticky`` (a full disk stays full).  Everything is counted, so a test can say
how many faulty operations it tried and how each ended.

Not yet here (the simulator will grow them): durable vs pending layers with
unflushed writes lost on a crash, read corruption, stale listings.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from zephon_ref.checkpoint.fs import PosixStorage
from zephon_ref.checkpoint.storage import Storage, Writer

__all__ = ["OPS", "Fault", "FaultyStorage"]

OPS: tuple[str, ...] = (
    "create",
    "write",
    "sync",
    "close",
    "seal",
    "link",
    "rename",
    "remove",
    "sync_dir",
    "make_dirs",
    "read",
    "list",
)


@dataclass(slots=True)
class Fault:
    """Fail the ``nth`` matching call of ``op`` with ``OSError(errno)`` (see the module docstring)."""

    op: str
    errno: int
    nth: int = 1
    name_contains: str = ""
    torn: bool = False
    sticky: bool = False
    seen: int = field(default=0)
    fired: int = field(default=0)

    def __post_init__(self) -> None:
        if self.op not in OPS:
            raise ValueError(f"fault op: expected one of {OPS}, received {self.op!r}")
        if self.nth < 1:
            raise ValueError(f"fault nth: expected an int >= 1, received {self.nth!r}")

    def matches(self, op: str, path: Path) -> bool:
        if op != self.op or self.name_contains not in path.name:
            return False
        self.seen += 1
        hit = self.seen == self.nth or (self.sticky and self.seen > self.nth)
        self.fired += hit
        return hit

    def error(self, path: Path) -> OSError:
        return OSError(self.errno, f"{os.strerror(self.errno)} (injected: {self.op} #{self.seen})", str(path))


class _FaultyWriter:
    __slots__ = ("_inner", "_owner", "_path")

    def __init__(self, inner: Writer, owner: FaultyStorage, path: Path) -> None:
        self._inner, self._owner, self._path = inner, owner, path

    def write(self, data: bytes) -> None:
        fault = self._owner._enter("write", self._path)
        if fault is not None:
            if fault.torn and len(data) > 1:
                self._inner.write(data[: len(data) // 2])
            raise fault.error(self._path)
        self._inner.write(data)
        self._owner._after("write", self._path)

    def sync(self) -> None:
        self._owner._run("sync", self._path, self._inner.sync)

    def close(self) -> None:
        fault = self._owner._enter("close", self._path)
        # A failed close still releases the descriptor, as close(2) does.
        self._inner.close()
        if fault is not None:
            raise fault.error(self._path)
        self._owner._after("close", self._path)


class FaultyStorage:
    """A Storage that injects :class:`Fault` s and reports every operation."""

    def __init__(
        self,
        inner: Storage | None = None,
        *,
        faults: Sequence[Fault] = (),
        after: Callable[[str, Path], None] | None = None,
    ) -> None:
        self.inner: Storage = PosixStorage() if inner is None else inner
        self.faults = list(faults)
        self.after = after
        self.log: list[tuple[str, str]] = []
        self.counts: dict[str, int] = {}
        self.injected = 0

    # -- plumbing ----------------------------------------------------------------------------
    def _enter(self, op: str, path: Path) -> Fault | None:
        self.log.append((op, path.name))
        self.counts[op] = self.counts.get(op, 0) + 1
        for f in self.faults:
            if f.matches(op, path):
                self.injected += 1
                return f
        return None

    def _after(self, op: str, path: Path) -> None:
        if self.after is not None:
            self.after(op, path)

    def _run(self, op: str, path: Path, fn: Callable[[], object]) -> object:
        fault = self._enter(op, path)
        if fault is not None:
            raise fault.error(path)
        out = fn()
        self._after(op, path)
        return out

    # -- Storage -----------------------------------------------------------------------------
    def create(self, path: Path) -> Writer:
        fault = self._enter("create", path)
        if fault is not None:
            raise fault.error(path)
        w = _FaultyWriter(self.inner.create(path), self, path)
        self._after("create", path)
        return w

    def link(self, src: Path, dst: Path) -> None:
        self._run("link", dst, lambda: self.inner.link(src, dst))

    def rename(self, src: Path, dst: Path) -> None:
        self._run("rename", dst, lambda: self.inner.rename(src, dst))

    def remove(self, path: Path) -> bool:
        return bool(self._run("remove", path, lambda: self.inner.remove(path)))

    def seal(self, path: Path) -> None:
        self._run("seal", path, lambda: self.inner.seal(path))

    def sync_dir(self, directory: Path) -> None:
        self._run("sync_dir", directory, lambda: self.inner.sync_dir(directory))

    def make_dirs(self, directory: Path) -> bool:
        return bool(self._run("make_dirs", directory, lambda: self.inner.make_dirs(directory)))

    def read(self, path: Path) -> bytes | None:
        out = self._run("read", path, lambda: self.inner.read(path))
        assert out is None or isinstance(out, bytes)
        return out

    def list(self, directory: Path) -> list[str]:
        out = self._run("list", directory, lambda: self.inner.list(directory))
        assert isinstance(out, list)
        return out

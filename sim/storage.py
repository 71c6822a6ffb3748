"""A fault-injecting :class:`~zephon_ref.storage.Storage` for tests and the simulator.

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

Besides the fixed faults, a :class:`StorageNemesis` (the simulated world's, drawing
every decision from its choices) is asked on each call: ``fault(op, path)`` may return a
:class:`Fault` to inject now (an I/O error, or a torn write), ``corrupt(path, data)`` may
return damaged bytes for a read (read corruption: the file itself stays intact),
``stale(path)`` may answer a ``list`` with the directory's previous listing (a stale
listing), and ``latency(op, path)`` adds virtual ticks to :attr:`FaultyStorage.latency`
(latency spikes; the world waits that long).

:class:`MemStorage` is the simulated disk: an in-memory Storage with a *durable* and a
*pending* layer.  File data becomes durable on ``sync``, directory entries (creations,
links, renames, removals) on ``sync_dir`` of their directory; :meth:`MemStorage.crash`
drops pending changes (each pending entry is kept or lost as the caller's ``keep``
decides, in operation order) and reverts unsynced file data: lost unflushed writes.
Temp names carry random tokens (``storage.publish``); MemStorage lists them under a
stable alias (``.tmp.<target>.s<sequence>``) so that listings, and every decision taken
over them, are the same in every process.  :meth:`MemStorage.rot` damages a file's
bytes in both layers (bit rot of a published file).
"""

from __future__ import annotations

import builtins
import errno as _errno
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from zephon_ref.coordination.backends import MemoryBackend
from zephon_ref.storage import Storage, Writer
from zephon_ref.storage.posix import PosixStorage

__all__ = ["OPS", "FailingBackend", "Fault", "FaultyStorage", "MemStorage", "StorageNemesis", "stale_loads"]

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


class StorageNemesis(Protocol):
    """The decisions a simulated world takes on each storage call (see the module docstring)."""

    def fault(self, op: str, path: Path) -> Fault | None: ...

    def corrupt(self, path: Path, data: bytes) -> bytes | None: ...

    def stale(self, path: Path) -> bool: ...

    def latency(self, op: str, path: Path) -> int: ...


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
        nemesis: StorageNemesis | None = None,
    ) -> None:
        self.inner: Storage = PosixStorage() if inner is None else inner
        self.faults = list(faults)
        self.after = after
        self.nemesis = nemesis
        self.latency = 0
        self._listings: dict[str, list[str]] = {}
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
        if self.nemesis is not None:
            self.latency += self.nemesis.latency(op, path)
            fault = self.nemesis.fault(op, path)
            if fault is not None:
                self.injected += 1
                return fault
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
        if out is not None and self.nemesis is not None:
            bad = self.nemesis.corrupt(path, out)
            if bad is not None:
                self.injected += 1
                return bad
        return out

    def list(self, directory: Path) -> list[str]:
        out = self._run("list", directory, lambda: self.inner.list(directory))
        assert isinstance(out, list)
        key = str(directory)
        previous = self._listings.get(key)
        self._listings[key] = list(out)
        if (
            previous is not None
            and previous != out
            and self.nemesis is not None
            and self.nemesis.stale(directory)
        ):
            self.injected += 1
            return list(previous)
        return out


# ----------------------------------------------------------------------------- MemStorage


@dataclass(slots=True)
class _Inode:
    data: bytearray = field(default_factory=bytearray)
    durable: bytes = b""
    sealed: bool = False


class _MemWriter:
    __slots__ = ("_closed", "_inode")

    def __init__(self, inode: _Inode) -> None:
        self._inode, self._closed = inode, False

    def write(self, data: bytes) -> None:
        if self._closed:
            raise OSError(_errno.EBADF, "write to a closed file")
        self._inode.data.extend(data)

    def sync(self) -> None:
        if self._closed:
            raise OSError(_errno.EBADF, "sync of a closed file")
        self._inode.durable = bytes(self._inode.data)

    def close(self) -> None:
        self._closed = True


class MemStorage:
    """An in-memory Storage with durable and pending layers (see the module docstring)."""

    def __init__(self) -> None:
        self._names: dict[str, dict[str, _Inode]] = {}  # directory -> name -> inode (what readers see)
        self._durable: dict[str, dict[str, _Inode]] = {}  # directory -> name -> inode (what survives a crash)
        self._dirty: dict[str, list[str]] = {}  # directory -> names changed since its last sync_dir, in order
        self._alias: dict[str, str] = {}  # random temp path -> stable alias path
        self._seq = 0

    def _key(self, path: Path) -> tuple[str, str]:
        p = self._alias.get(str(path), str(path))
        d, _, name = p.rpartition("/")
        return d, name

    def _touch(self, d: str, name: str) -> None:
        dirty = self._dirty.setdefault(d, [])
        if name not in dirty:
            dirty.append(name)

    def _dir(self, d: str) -> dict[str, _Inode]:
        if d not in self._names:
            raise FileNotFoundError(_errno.ENOENT, "no such directory", d)
        return self._names[d]

    def create(self, path: Path) -> Writer:
        if path.name.startswith(".tmp."):
            self._seq += 1
            target = path.name[len(".tmp."):].rsplit(".", 1)[0]
            self._alias[str(path)] = str(path.parent / f".tmp.{target}.s{self._seq}")
        d, name = self._key(path)
        names = self._dir(d)
        if name in names:
            raise FileExistsError(_errno.EEXIST, "file exists", str(path))
        inode = _Inode()
        names[name] = inode
        self._touch(d, name)
        return _MemWriter(inode)

    def link(self, src: Path, dst: Path) -> None:
        sd, sn = self._key(src)
        dd, dn = self._key(dst)
        inode = self._dir(sd).get(sn)
        if inode is None:
            raise FileNotFoundError(_errno.ENOENT, "no such file", str(src))
        if dn in self._dir(dd):
            raise FileExistsError(_errno.EEXIST, "file exists", str(dst))
        self._names[dd][dn] = inode
        self._touch(dd, dn)

    def rename(self, src: Path, dst: Path) -> None:
        sd, sn = self._key(src)
        dd, dn = self._key(dst)
        inode = self._dir(sd).pop(sn, None)
        if inode is None:
            raise FileNotFoundError(_errno.ENOENT, "no such file", str(src))
        self._dir(dd)[dn] = inode
        self._touch(sd, sn)
        self._touch(dd, dn)

    def remove(self, path: Path) -> bool:
        d, name = self._key(path)
        names = self._names.get(d, {})
        if name not in names:
            return False
        del names[name]
        self._touch(d, name)
        return True

    def seal(self, path: Path) -> None:
        d, name = self._key(path)
        inode = self._dir(d).get(name)
        if inode is None:
            raise FileNotFoundError(_errno.ENOENT, "no such file", str(path))
        inode.sealed = True

    def sync_dir(self, directory: Path) -> None:
        d = str(directory)
        names = self._dir(d)
        self._durable[d] = dict(names)
        self._dirty.pop(d, None)

    def make_dirs(self, directory: Path) -> bool:
        d = str(directory)
        if d in self._names:
            return False
        for p in (directory, *directory.parents):  # directories themselves are modelled as durable
            self._names.setdefault(str(p), {})
            self._durable.setdefault(str(p), {})
        return True

    def read(self, path: Path) -> bytes | None:
        d, name = self._key(path)
        inode = self._names.get(d, {}).get(name)
        return None if inode is None else bytes(inode.data)

    def list(self, directory: Path) -> list[str]:
        return sorted(self._names.get(str(directory), {}))

    # -- the simulator's handles ------------------------------------------------------------
    def pending(self) -> builtins.list[tuple[str, str]]:
        """(directory, name) of every directory entry changed since its directory's last sync."""
        return [(d, n) for d in sorted(self._dirty) for n in self._dirty[d]]

    def crash(self, keep: Callable[[str, str], bool]) -> builtins.list[tuple[str, str]]:
        """A power loss: each pending entry survives iff ``keep(directory, name)``; unsynced data
        reverts to its last sync.  Returns the entries lost."""
        lost = []
        for d, name in self.pending():
            if keep(d, name):
                if name in self._names[d]:
                    self._durable[d][name] = self._names[d][name]
                else:
                    self._durable[d].pop(name, None)
            else:
                lost.append((d, name))
        self._names = {d: dict(names) for d, names in self._durable.items()}
        for names in self._names.values():
            for inode in names.values():
                if bytes(inode.data) != inode.durable:
                    inode.data = bytearray(inode.durable)
        self._dirty = {}
        return lost

    def rot(self, path: Path) -> bool:
        """Flip one byte in the middle of a file (both layers); False when it is absent or empty."""
        d, name = self._key(path)
        inode = self._names.get(d, {}).get(name)
        if inode is None or not inode.data:
            return False
        i = len(inode.data) // 2
        inode.data[i] ^= 0x5A
        inode.durable = bytes(inode.data)
        return True


class FailingBackend(MemoryBackend):
    """An aggregation :class:`~zephon_ref.coordination.backends.MemoryBackend` with injected faults.

    ``fail(op, key)`` (``op`` one of put, put_if_absent, get, list, delete; ``key`` the key or
    the listed prefix) is asked before every operation, after the operation is counted in
    ``ops``; if it returns True the operation raises ``OSError`` without touching the store.
    ``fail`` may be set or replaced at any time.  One thread (a test, the simulator).
    """

    def __init__(self, fail: Callable[[str, str], bool] | None = None) -> None:
        super().__init__()
        self.fail = fail

    def _injected(self, op: str, key: str) -> None:
        self.ops += 1  # counted first, as the operation counts itself, so ``fail`` sees this one in ``ops``
        if self.fail is not None and self.fail(op, key):
            raise OSError(f"injected failure of {op} {key!r}")  # counted once, above
        self.ops -= 1  # the operation below counts itself once

    def put(self, key: str, data: bytes) -> None:
        self._injected("put", key)
        super().put(key, data)

    def put_if_absent(self, key: str, data: bytes) -> bool:
        self._injected("put_if_absent", key)
        return super().put_if_absent(key, data)

    def get(self, key: str) -> bytes | None:
        self._injected("get", key)
        return super().get(key)

    def list(self, prefix: str) -> list[str]:
        self._injected("list", prefix)
        return super().list(prefix)

    def delete(self, key: str) -> None:
        self._injected("delete", key)
        super().delete(key)


def stale_loads(load_checkpoint: Callable[..., Any]) -> Callable[..., Any]:
    """A planted store bug for checker tests: ``load_checkpoint`` that answers a load of generation
    g > 1 with generation g-1's state under g's manifest (patch it over
    ``zephon_ref.checkpoint.store.load_checkpoint``; the checker must catch the stale restore)."""
    from zephon_ref.checkpoint.store import LoadedCheckpoint

    def stale(directory: Any, generation: Any = None, **kw: Any) -> Any:
        got = load_checkpoint(directory, generation, **kw)
        if generation is not None and generation > 1:
            older = load_checkpoint(directory, generation - 1, **kw)
            return LoadedCheckpoint(generation=got.generation, manifest=got.manifest, state=older.state)
        return got

    return stale

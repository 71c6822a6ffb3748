"""Storage backends for aggregation rounds: a shared directory, object storage, torch's TCPStore, memory.

Theory of operation
-------------------
A backend stores byte values under keys of the form ``<namespace>/<name>``
(exactly one ``/``; names are ``[A-Za-z0-9._-]`` and never start with ``.``).
It offers the five operations the round protocol's commands need and nothing
else:

* ``put(key, data)``: replace the value atomically; a reader sees the old value,
  the new value, or (for a new key) nothing, never a torn one.
* ``put_if_absent(key, data) -> bool``: create the key with the whole value only
  if it does not exist; True when this call created it.
* ``get(key) -> bytes | None``: the value, or None when absent.
* ``list(prefix) -> list[str]``: ``prefix`` ends with ``.``; the keys whose part
  after ``prefix`` contains no ``.``, sorted.
* ``delete(key)``: remove it if present.

Values are opaque and never empty.  Nothing here knows about rounds or states.

Backends:

* :class:`MemoryBackend`: a dict; the simulator and unit tests drive it step by
  step (one call = one atomic step).
* :class:`DirectoryBackend`: ``<root>/<namespace>/<name>`` files, through a
  checkpoint :class:`~zephon_ref.storage.Storage` and its one
  publish routine.  ``put`` writes a synced temp file in the same directory and
  renames it over the target; ``put_if_absent`` hard-links a complete, synced
  temp file to the target (``link`` fails if the name exists), so a created
  file is always complete; both sync the directory after.  Temp files start
  with ``.`` and are never listed.
* :class:`ObjectStoreBackend`: the directory backend over the ``s3://bucket/prefix``
  URL's S3 storage, polled with capped exponential back-off.
* :class:`TCPStoreBackend`: a client of torch.distributed's ``TCPStore``
  (``torch://`` = MASTER_ADDR/MASTER_PORT, or ``torch://host:port``).  Every
  value is stored behind a manifest: ``ZR1`` + kind + 16-byte write id, then the
  inline value, or (values over 4 MiB) the size, chunk count and a blake2b-128
  digest of chunks stored first under ``<key>#<write id>/<i>``; the manifest is
  published last from the same client, so a reader that sees it can read every
  chunk; a wrong size or digest raises.  ``list`` reads an index key that ``put``
  appends to after publishing.  ``get`` never blocks (TCPStore's own ``get``
  waits for absent keys): it uses ``compare_set`` with a sentinel that no
  manifest equals.  The client reconnects after a fork and after any failed
  operation; the failed operation is not retried.

Keys, prefixes and values follow :mod:`zephon_ref.coordination.keys`.

What may not live here: the protocol, decoding of states, clocks (the TCPStore
client's own connect timeout and the object store's polling waits aside).
"""

from __future__ import annotations

import hashlib
import math
import os
import struct
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any, Protocol, runtime_checkable
from urllib.parse import urlparse

from zephon_ref.coordination.keys import check_key, check_prefix, listed, nonempty, split_key
from zephon_ref.errors import ConfigError, ContractError, StateFormatError, expected
from zephon_ref.storage import (
    PosixStorage,
    Storage,
    ensure_dir,
    list_names,
    publish,
    read_bytes,
    remove_file,
    s3,
)
from zephon_ref.storage.errors import PublishConflict
from zephon_ref.storage.s3 import S3Storage

__all__ = [
    "CAP_S",
    "GROWTH",
    "MAX_TCP_VALUE",
    "START_S",
    "TIMEOUT_FLOOR_S",
    "Backend",
    "Backoff",
    "DirectoryBackend",
    "MemoryBackend",
    "ObjectStoreBackend",
    "TCPStoreBackend",
    "open_backend",
    "split_key",
]


@runtime_checkable
class Backend(Protocol):
    """What the round driver needs from storage (see the module docstring)."""

    def put(self, key: str, data: bytes) -> None: ...

    def put_if_absent(self, key: str, data: bytes) -> bool: ...

    def get(self, key: str) -> bytes | None: ...

    def list(self, prefix: str) -> list[str]: ...

    def delete(self, key: str) -> None: ...


class MemoryBackend:
    """A dict behind the Backend interface (thread-safe; for tests and the simulator).

    Every operation checks its key first (a bad key gets split_key's ConfigError), then
    counts itself (``ops``) under the lock.  Fault injection lives in ``sim.storage``
    (``FailingBackend``).
    """

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}
        self.ops = 0
        self._lock = threading.Lock()

    def put(self, key: str, data: bytes) -> None:
        check_key(key)
        with self._lock:
            self.ops += 1
            self.data[key] = nonempty(data, key)

    def put_if_absent(self, key: str, data: bytes) -> bool:
        check_key(key)
        with self._lock:
            self.ops += 1
            if key in self.data:
                return False
            self.data[key] = nonempty(data, key)
            return True

    def get(self, key: str) -> bytes | None:
        check_key(key)
        with self._lock:
            self.ops += 1
            return self.data.get(key)

    def list(self, prefix: str) -> list[str]:
        ns, pname = check_prefix(prefix)
        with self._lock:
            self.ops += 1
            return sorted(
                k for k in self.data if k.startswith(ns + "/") and listed(k[len(ns) + 1 :], pname)
            )

    def delete(self, key: str) -> None:
        check_key(key)
        with self._lock:
            self.ops += 1
            self.data.pop(key, None)


class DirectoryBackend:
    """Files under ``root/<namespace>/`` (a local or shared POSIX filesystem).

    Every file operation goes through a :class:`~zephon_ref.storage.Storage`
    (POSIX unless ``storage=`` is given; tests pass ``sim.storage.FaultyStorage``)
    and the shared :func:`~zephon_ref.storage.publish` routine, so a
    value is synced before its name appears and the directory is synced after.
    Operating-system failures raise :class:`~zephon_ref.storage.errors.StorageError`.
    """

    def __init__(self, root: str | os.PathLike[str], *, storage: Storage | None = None) -> None:
        self.root = Path(root)
        self.storage: Storage = PosixStorage() if storage is None else storage
        if self.root.exists() and not self.root.is_dir():
            raise ConfigError(expected("aggregate_dir", "a directory", str(self.root)))
        ensure_dir(self.storage, self.root)

    def _path(self, key: str) -> Path:
        ns, name = split_key(key)
        return self.root / ns / name

    def _writing(self) -> None:
        """Called before every write (put, put_if_absent, delete); nothing to do here."""

    def put(self, key: str, data: bytes) -> None:
        target = self._path(key)
        value = nonempty(data, key)
        self._writing()
        ensure_dir(self.storage, target.parent)
        publish(self.storage, target, value, replace=True, seal=False)

    def put_if_absent(self, key: str, data: bytes) -> bool:
        target = self._path(key)
        value = nonempty(data, key)
        self._writing()
        ensure_dir(self.storage, target.parent)
        try:
            publish(self.storage, target, value, seal=False)
        except PublishConflict:
            return False
        return True

    def get(self, key: str) -> bytes | None:
        return read_bytes(self.storage, self._path(key))

    def list(self, prefix: str) -> list[str]:
        ns, pname = check_prefix(prefix)
        names = list_names(self.storage, self.root / ns)
        return sorted(f"{ns}/{n}" for n in names if listed(n, pname))

    def delete(self, key: str) -> None:
        path = self._path(key)
        self._writing()
        remove_file(self.storage, path)


# ---------------------------------------------------------------- object storage

START_S = 0.5
GROWTH = 1.5
CAP_S = 5.0
TIMEOUT_FLOOR_S = 90.0


class Backoff:
    """Capped exponential waits: ``START_S``, x ``GROWTH``, at most ``CAP_S``; :meth:`reset` restarts."""

    __slots__ = ("_current", "_lock", "cap", "growth", "start", "waits")

    def __init__(self, *, start: float = START_S, growth: float = GROWTH, cap: float = CAP_S) -> None:
        if not (0 < start <= cap) or not growth >= 1:
            raise ConfigError(expected("backoff", "0 < start <= cap and growth >= 1", (start, growth, cap)))
        self.start, self.growth, self.cap = start, growth, cap
        self._current = start
        self._lock = threading.Lock()
        self.waits: list[float] = []  # every wait taken, for tests and reports

    def next_wait(self, asked: float) -> float:
        """The wait to take now when the caller may wait at most ``asked`` seconds."""
        with self._lock:
            wait = min(max(asked, 0.0), self._current)
            self._current = min(self._current * self.growth, self.cap)
            self.waits.append(wait)
            return wait

    def reset(self) -> None:
        with self._lock:
            self._current = self.start


class ObjectStoreBackend(DirectoryBackend):
    """The directory backend over an ``s3://bucket/prefix`` URL's storage, plus polling back-off.

    Values are objects ``<prefix>/<namespace>/<name>`` written through
    :class:`~zephon_ref.storage.s3.S3Storage` and the shared publish routine: ``put`` is
    a plain ``PutObject`` (objects appear whole or not at all), ``put_if_absent`` a
    ``PutObject`` with ``If-None-Match: *`` (412: another participant created it first);
    ``get`` / ``list`` / ``delete`` are ``GetObject`` / ``ListObjectsV2`` / ``DeleteObject``.
    The endpoint is probed for conditional writes when the backend is opened, before the
    round writes anything; an endpoint that ignores them is refused with a typed error.

    **Polling.**  zephon 0.2.0 polls cloud directories with a capped exponential back-off:
    the first wait 0.5 s, each next one x1.5, never more than 5 s, and the round's timeout
    raised to at least 90 s.  The driver sets the machine's ``poll`` to the cap
    (:data:`CAP_S`) and passes :meth:`pause` as its sleep, which waits ``min(asked,
    current)`` and grows ``current``.  Any write means the round moved to a new phase and
    resets ``current`` to the start.  Never sleeping longer than asked keeps the machine's
    deadline exact.  This class and the driver are the only places that wait on the wall
    clock.
    """

    def __init__(self, url: str, *, storage: S3Storage | None = None, backoff: Backoff | None = None) -> None:
        loc = s3.location(url)
        self.url = loc.url
        self.root = loc.root
        store = s3.storage_for(loc.bucket) if storage is None else storage
        if store.bucket != loc.bucket:
            raise ConfigError(
                expected("storage for aggregate_dir", f"one for bucket {loc.bucket}", store.bucket)
            )
        self.storage = store
        self.backoff = Backoff() if backoff is None else backoff
        store.ensure_conditional_writes()  # before the round writes anything

    def _writing(self) -> None:
        self.backoff.reset()

    def pause(self, seconds: float) -> None:
        """The driver's sleep: wait the back-off's next step, never more than ``seconds``."""
        wait = self.backoff.next_wait(seconds)
        if wait > 0:
            time.sleep(wait)  # clock-ok: the backend owns its polling waits


# ---------------------------------------------------------------- TCPStore

MAX_TCP_VALUE = 4 * 1024 * 1024  # one write; the libuv server drops anything over 8 MiB
_MAGIC = b"ZR1"
_INLINE = b"I"
_CHUNKED = b"C"
_WID = 16
_HEADER = len(_MAGIC) + 1 + _WID
_INFO = struct.Struct(">QI16s")
_ABSENT = b"\x00zephon_ref-absent"  # never a manifest: manifests start with ZR1
_KEY_ROOT = "zephon_ref"


def _digest(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=16).digest()


def _parse_port(value: object, source: str) -> int:
    try:
        port = int(str(value))
    except ValueError:
        raise ConfigError(expected(source, "a port in 1..65535", value)) from None
    if not 0 < port < 65536:
        raise ConfigError(expected(source, "a port in 1..65535", value))
    return port


class TCPStoreBackend:
    """A client of a running c10d TCPStore (torchrun's, or one a test started)."""

    def __init__(
        self,
        host: str | None = None,
        port: int | None = None,
        *,
        timeout_s: float = 30.0,
        max_value: int = MAX_TCP_VALUE,
    ) -> None:
        if (host is None) != (port is None):
            raise ConfigError(
                expected("TCPStoreBackend host and port", "both or neither", (host, port))
            )
        if port is not None:
            port = _parse_port(port, "TCPStore port")
        if not timeout_s > 0:
            raise ConfigError(expected("timeout_s", "a positive number", timeout_s))
        if type(max_value) is not int or max_value <= _HEADER:
            raise ConfigError(expected("max_value", f"an int > {_HEADER}", max_value))
        self._host, self._port = host, port
        self.timeout_s = timeout_s
        self.max_value = max_value
        self._store: Any = None
        self._pid: int | None = None

    @classmethod
    def from_uri(cls, uri: str, *, timeout_s: float = 30.0) -> TCPStoreBackend:
        """``torch://`` (MASTER_ADDR/MASTER_PORT, read on first use) or ``torch://host:port``."""
        parsed = urlparse(uri)
        if parsed.scheme != "torch":
            raise ConfigError(expected("aggregate store URI", "torch:// or torch://host:port", uri))
        if (
            parsed.username
            or parsed.password
            or parsed.path.strip("/")
            or parsed.query
            or parsed.fragment
        ):
            raise ConfigError(expected("aggregate store URI", "only a host and a port", uri))
        if not parsed.netloc:
            return cls(timeout_s=timeout_s)
        try:
            port = parsed.port
        except ValueError:
            raise ConfigError(
                expected("port in the aggregate store URI", "1..65535", uri)
            ) from None
        if not parsed.hostname or port is None:
            raise ConfigError(expected("aggregate store URI", "torch://host:port with both", uri))
        return cls(parsed.hostname, port, timeout_s=timeout_s)

    def endpoint(self) -> tuple[str, int]:
        if self._host is None or self._port is None:
            host = os.environ.get("MASTER_ADDR", "")
            raw = os.environ.get("MASTER_PORT", "")
            if not host or not raw:
                raise ConfigError(
                    expected(
                        "MASTER_ADDR and MASTER_PORT for torch://",
                        "both set (or use torch://host:port)",
                        {"MASTER_ADDR": host, "MASTER_PORT": raw},
                    )
                )
            self._host, self._port = host, _parse_port(raw, "MASTER_PORT")
        return self._host, self._port

    def _client(self) -> Any:
        pid = os.getpid()
        if self._store is None or self._pid != pid:
            try:
                import torch.distributed as dist
            except ImportError as exc:
                raise ContractError(
                    "aggregate store torch://: expected torch with torch.distributed, received an ImportError"
                ) from exc
            host, port = self.endpoint()
            tcp_store: Any = vars(dist)["TCPStore"]
            self._store = tcp_store(
                host,
                port,
                is_master=False,
                timeout=timedelta(seconds=self.timeout_s),
                wait_for_workers=False,
            )
            self._pid = pid
        return self._store

    def _call(self, op: str, key: str, fn: Callable[[Any], Any]) -> Any:
        try:
            return fn(self._client())
        except (ConfigError, ContractError):
            raise
        except Exception as exc:
            self._store = None  # a client in an unknown state is not reused
            host, port = self._host, self._port
            raise ContractError(
                f"TCPStore {op} of {key!r} at {host}:{port}: expected success, received {exc!r}"
            ) from exc

    @staticmethod
    def _k(key: str) -> str:
        return f"{_KEY_ROOT}/{key}"

    @staticmethod
    def _index(prefix: str) -> str:
        return f"{_KEY_ROOT}/{prefix}#index"

    def _stage(self, key: str, data: bytes) -> tuple[bytes, list[str]]:
        wid = os.urandom(_WID)
        if _HEADER + len(data) <= self.max_value:
            return _MAGIC + _INLINE + wid + data, []
        count = math.ceil(len(data) / self.max_value)
        chunks = [f"{self._k(key)}#{wid.hex()}/{i}" for i in range(count)]
        for i, ck in enumerate(chunks):
            part = data[i * self.max_value : (i + 1) * self.max_value]
            self._set_raw(ck, part)
        return _MAGIC + _CHUNKED + wid + _INFO.pack(len(data), count, _digest(data)), chunks

    def _chunks_of(self, key: str, manifest: bytes) -> list[str]:
        if (
            manifest[len(_MAGIC) : len(_MAGIC) + 1] != _CHUNKED
            or len(manifest) != _HEADER + _INFO.size
        ):
            return []
        _, count, _ = _INFO.unpack(manifest[_HEADER:])
        wid = manifest[len(_MAGIC) + 1 : _HEADER].hex()
        return [f"{self._k(key)}#{wid}/{i}" for i in range(count)]

    def _set_raw(self, k: str, value: bytes) -> None:
        self._call("set", k, lambda s: s.set(k, value))

    def _delete_raw(self, keys: list[str]) -> None:
        for k in keys:
            self._call("delete", k, lambda s: s.delete_key(k))  # noqa: B023 - called at once

    def _register(self, key: str) -> None:
        prefix = key[: key.rfind(".") + 1]
        if prefix.endswith(".") and "/" in prefix:
            self._call(
                "append", prefix, lambda s: s.append(self._index(prefix), f"{key}\n".encode())
            )

    def _raw_get(self, k: str) -> bytes | None:
        got = self._call("get", k, lambda s: s.compare_set(k, _ABSENT, _ABSENT))
        out = bytes(got)
        return None if out == _ABSENT else out

    def put(self, key: str, data: bytes) -> None:
        split_key(key)
        manifest, _ = self._stage(key, nonempty(data, key))
        old = self._raw_get(self._k(key))
        self._call("set", key, lambda s: s.set(self._k(key), manifest))
        self._register(key)
        if old is not None:
            self._delete_raw(self._chunks_of(key, old))

    def put_if_absent(self, key: str, data: bytes) -> bool:
        split_key(key)
        manifest, chunks = self._stage(key, nonempty(data, key))
        stored = bytes(
            self._call("compare_set", key, lambda s: s.compare_set(self._k(key), "", manifest))
        )
        if stored != manifest:
            self._delete_raw(chunks)
            return False
        self._register(key)
        return True

    def get(self, key: str) -> bytes | None:
        split_key(key)
        manifest = self._raw_get(self._k(key))
        if manifest is None:
            return None
        if not manifest.startswith(_MAGIC) or len(manifest) < _HEADER:
            raise StateFormatError(
                expected(f"TCPStore value at {key!r}", "a ZR1 manifest", manifest[:8])
            )
        kind = manifest[len(_MAGIC) : len(_MAGIC) + 1]
        if kind == _INLINE:
            return manifest[_HEADER:]
        chunks = self._chunks_of(key, manifest)
        if kind != _CHUNKED or not chunks:
            raise StateFormatError(
                expected(
                    f"TCPStore manifest at {key!r}", "kind I or C with size, count, digest", kind
                )
            )
        size, _, digest = _INFO.unpack(manifest[_HEADER:])
        parts = [self._raw_get(ck) for ck in chunks]
        missing = [ck for ck, p in zip(chunks, parts, strict=True) if p is None]
        if missing:
            raise StateFormatError(
                expected(
                    f"chunks of {key!r}",
                    f"all {len(chunks)} present",
                    f"{len(missing)} missing, e.g. {missing[0]}",
                )
            )
        data = b"".join(p for p in parts if p is not None)
        if len(data) != size or _digest(data) != digest:
            raise StateFormatError(
                expected(
                    f"value at {key!r}",
                    f"{size} bytes matching the manifest digest",
                    f"{len(data)} bytes, digest {_digest(data).hex()}",
                )
            )
        return data

    def list(self, prefix: str) -> list[str]:
        check_prefix(prefix)
        raw = self._raw_get(self._index(prefix))
        if raw is None:
            return []
        names = sorted({line for line in raw.decode("utf-8").split("\n") if line})
        return [
            k
            for k in names
            if listed(k.partition("/")[2], prefix.partition("/")[2])
            and self._raw_get(self._k(k)) is not None
        ]

    def delete(self, key: str) -> None:
        split_key(key)
        old = self._raw_get(self._k(key))
        if old is None:
            return
        self._call("delete", key, lambda s: s.delete_key(self._k(key)))  # manifest first
        self._delete_raw(self._chunks_of(key, old))

    def connect(self) -> None:
        """Connect now (importing torch can take seconds), so the round's budget
        is not spent on it; raises ContractError if the store is unreachable."""
        self._call("connect", "", lambda s: s)

    def close(self) -> None:
        self._store = None


def open_backend(spec: str | os.PathLike[str] | Backend, *, timeout_s: float = 30.0) -> Backend:
    """A backend from a spec: a Backend is returned as is, ``torch://...`` gives a
    TCPStoreBackend, ``memory://`` a fresh MemoryBackend, ``s3://bucket/prefix`` an
    :class:`ObjectStoreBackend`, anything else a
    directory path (``aggregate_dir``)."""
    if isinstance(spec, Backend):
        return spec
    if isinstance(spec, str) and "://" in spec:
        scheme = spec.partition("://")[0].lower()
        if scheme == "torch":
            return TCPStoreBackend.from_uri(spec, timeout_s=timeout_s)
        if scheme == "memory" and spec == "memory://":
            return MemoryBackend()
        if scheme == "s3":
            return ObjectStoreBackend(spec)
        if scheme != "file":
            raise ConfigError(
                expected(
                    "aggregate backend",
                    "a directory, s3://bucket/prefix, torch://[host:port] or memory://",
                    spec,
                )
            )
        spec = spec.partition("://")[2]
    if not isinstance(spec, (str, os.PathLike)) or not str(spec):
        raise ConfigError(
            expected("aggregate backend", "a directory, torch://[host:port] or memory://", spec)
        )
    return DirectoryBackend(spec)

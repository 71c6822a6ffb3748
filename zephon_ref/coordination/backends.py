"""Storage backends for aggregation rounds: a shared directory, torch's TCPStore, memory.

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
  checkpoint :class:`~zephon_ref.checkpoint.storage.Storage` and its one
  publish routine.  ``put`` writes a synced temp file in the same directory and
  renames it over the target; ``put_if_absent`` hard-links a complete, synced
  temp file to the target (``link`` fails if the name exists), so a created
  file is always complete; both sync the directory after.  Temp files start
  with ``.`` and are never listed.
* ``ObjectStoreBackend`` (:mod:`.objectstore`): ``s3://bucket/prefix``, objects
  through the checkpoint store's S3 storage, polled with capped exponential back-off.
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

What may not live here: the protocol, decoding of states, clocks (the TCPStore
client's own connect timeout aside).
"""

from __future__ import annotations

import hashlib
import math
import os
import re
import struct
import threading
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any, Protocol, runtime_checkable
from urllib.parse import urlparse

from zephon_ref.checkpoint.fs import PosixStorage
from zephon_ref.checkpoint.storage import (
    Storage,
    ensure_dir,
    list_names,
    publish,
    read_bytes,
    remove_file,
)
from zephon_ref.errors import (
    ConfigError,
    ContractError,
    PublishConflict,
    StateFormatError,
    expected,
)

__all__ = [
    "MAX_TCP_VALUE",
    "Backend",
    "DirectoryBackend",
    "MemoryBackend",
    "TCPStoreBackend",
    "open_backend",
    "split_key",
]

_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]*")
# A whole valid key in one match: two _NAMEs around the one "/" (neither may hold a "/").
# The fast check of the hot path; a key it rejects goes through split_key, which refuses it.
_KEY = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]*/[A-Za-z0-9_-][A-Za-z0-9._-]*")


def _check_key(key: str) -> None:
    """Refuse a bad key exactly as :func:`split_key` does, at one regex match for a good one."""
    if type(key) is not str or _KEY.fullmatch(key) is None:
        split_key(key)


def split_key(key: str) -> tuple[str, str]:
    """``"<namespace>/<name>"`` -> (namespace, name); ConfigError otherwise."""
    ns, sep, name = key.partition("/")
    if not sep or not _NAME.fullmatch(ns) or not _NAME.fullmatch(name):
        raise ConfigError(expected("storage key", "'<namespace>/<name>' of [A-Za-z0-9._-]", key))
    return ns, name


def _check_prefix(prefix: str) -> tuple[str, str]:
    ns, sep, name = prefix.partition("/")
    if not sep or not _NAME.fullmatch(ns) or not name.endswith(".") or not _NAME.fullmatch(name):
        raise ConfigError(expected("list prefix", "'<namespace>/<name>.'", prefix))
    return ns, name


def _listed(name: str, prefix_name: str) -> bool:
    return (
        name.startswith(prefix_name)
        and "." not in name[len(prefix_name) :]
        and len(name) > len(prefix_name)
    )


def _nonempty(data: bytes, key: str) -> bytes:
    if not isinstance(data, bytes) or not data:
        raise ConfigError(expected(f"value for {key!r}", "non-empty bytes", type(data).__name__))
    return data


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
        _check_key(key)
        with self._lock:
            self.ops += 1
            self.data[key] = _nonempty(data, key)

    def put_if_absent(self, key: str, data: bytes) -> bool:
        _check_key(key)
        with self._lock:
            self.ops += 1
            if key in self.data:
                return False
            self.data[key] = _nonempty(data, key)
            return True

    def get(self, key: str) -> bytes | None:
        _check_key(key)
        with self._lock:
            self.ops += 1
            return self.data.get(key)

    def list(self, prefix: str) -> list[str]:
        ns, pname = _check_prefix(prefix)
        with self._lock:
            self.ops += 1
            return sorted(
                k for k in self.data if k.startswith(ns + "/") and _listed(k[len(ns) + 1 :], pname)
            )

    def delete(self, key: str) -> None:
        _check_key(key)
        with self._lock:
            self.ops += 1
            self.data.pop(key, None)


class DirectoryBackend:
    """Files under ``root/<namespace>/`` (a local or shared POSIX filesystem).

    Every file operation goes through a :class:`~zephon_ref.checkpoint.storage.Storage`
    (POSIX unless ``storage=`` is given; tests pass ``sim.storage.FaultyStorage``)
    and the shared :func:`~zephon_ref.checkpoint.storage.publish` routine, so a
    value is synced before its name appears and the directory is synced after.
    Operating-system failures raise :class:`~zephon_ref.errors.StorageError`.
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

    def put(self, key: str, data: bytes) -> None:
        target = self._path(key)
        value = _nonempty(data, key)
        ensure_dir(self.storage, target.parent)
        publish(self.storage, target, value, replace=True, seal=False)

    def put_if_absent(self, key: str, data: bytes) -> bool:
        target = self._path(key)
        value = _nonempty(data, key)
        ensure_dir(self.storage, target.parent)
        try:
            publish(self.storage, target, value, seal=False)
        except PublishConflict:
            return False
        return True

    def get(self, key: str) -> bytes | None:
        return read_bytes(self.storage, self._path(key))

    def list(self, prefix: str) -> list[str]:
        ns, pname = _check_prefix(prefix)
        names = list_names(self.storage, self.root / ns)
        return sorted(f"{ns}/{n}" for n in names if _listed(n, pname))

    def delete(self, key: str) -> None:
        remove_file(self.storage, self._path(key))


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
        manifest, _ = self._stage(key, _nonempty(data, key))
        old = self._raw_get(self._k(key))
        self._call("set", key, lambda s: s.set(self._k(key), manifest))
        self._register(key)
        if old is not None:
            self._delete_raw(self._chunks_of(key, old))

    def put_if_absent(self, key: str, data: bytes) -> bool:
        split_key(key)
        manifest, chunks = self._stage(key, _nonempty(data, key))
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
        _check_prefix(prefix)
        raw = self._raw_get(self._index(prefix))
        if raw is None:
            return []
        names = sorted({line for line in raw.decode("utf-8").split("\n") if line})
        return [
            k
            for k in names
            if _listed(k.partition("/")[2], prefix.partition("/")[2])
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
    :class:`~zephon_ref.coordination.objectstore.ObjectStoreBackend`, anything else a
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
            from zephon_ref.coordination.objectstore import ObjectStoreBackend

            return ObjectStoreBackend(spec)
        if scheme != "file":
            raise ConfigError(
                expected("aggregate backend", "a directory, s3://bucket/prefix, torch://[host:port] or memory://", spec)
            )
        spec = spec.partition("://")[2]
    if not isinstance(spec, (str, os.PathLike)) or not str(spec):
        raise ConfigError(
            expected("aggregate backend", "a directory, torch://[host:port] or memory://", spec)
        )
    return DirectoryBackend(spec)

"""The aggregation backend over object storage (``aggregate_dir="s3://bucket/prefix"``).

Theory of operation
-------------------
:class:`ObjectStoreBackend` stores the round's values as objects
``<prefix>/<namespace>/<name>`` through :class:`~zephon_ref.checkpoint.s3.S3Storage`
and the shared publish routine:

* ``put``: a plain ``PutObject`` (S3 objects appear whole or not at all, so a
  reader sees the old value or the new one, never a torn one);
* ``put_if_absent``: ``PutObject`` with ``If-None-Match: *``; 412 means another
  participant created it first (False);
* ``get`` / ``list`` / ``delete``: ``GetObject`` / ``ListObjectsV2`` / ``DeleteObject``.

The endpoint is probed for conditional writes when the backend is opened,
before the round writes anything (see s3.py); an endpoint that ignores them is
refused with a typed error naming it.

**Polling.**  zephon 0.2.0 polls cloud directories with a capped exponential
back-off: the first wait 0.5 s, each next one x1.5, never more than 5 s, and the
round's timeout raised to at least 90 s.  The round machine asks to sleep
``poll`` ticks at a time; the driver sets ``poll`` to the cap (:data:`CAP_S`)
and passes :meth:`ObjectStoreBackend.pause` as its sleep, which waits
``min(asked, current)`` and grows ``current``.  Any write (``put``,
``put_if_absent``, ``delete``) means the round moved to a new phase and resets
``current`` to the start.  Never sleeping longer than asked keeps the machine's
deadline exact.  This class and the driver are the only places that wait on
the wall clock.

What may not live here: the protocol, decoding of states, checkpoint layout.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from zephon_ref.checkpoint import s3
from zephon_ref.checkpoint.storage import list_names, publish, read_bytes, remove_file
from zephon_ref.coordination.backends import _check_prefix, _listed, _nonempty, split_key
from zephon_ref.errors import ConfigError, PublishConflict, expected

__all__ = ["CAP_S", "GROWTH", "START_S", "TIMEOUT_FLOOR_S", "Backoff", "ObjectStoreBackend"]

START_S = 0.5
GROWTH = 1.5
CAP_S = 5.0
TIMEOUT_FLOOR_S = 90.0


class Backoff:
    """Capped exponential waits: ``START_S``, x ``GROWTH``, at most ``CAP_S``; :meth:`reset` restarts."""

    __slots__ = ("_current", "_lock", "start", "growth", "cap", "waits")

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


class ObjectStoreBackend:
    """The Backend interface over an ``s3://bucket/prefix`` URL (see the module docstring)."""

    def __init__(self, url: str, *, storage: s3.S3Storage | None = None, backoff: Backoff | None = None) -> None:
        loc = s3.location(url)
        self.url = loc.url
        self.root: Path = loc.root
        self.storage = s3.storage_for(loc.bucket) if storage is None else storage
        if storage is not None and storage.bucket != loc.bucket:
            raise ConfigError(expected("storage for aggregate_dir", f"one for bucket {loc.bucket}", storage.bucket))
        self.backoff = Backoff() if backoff is None else backoff
        self.storage.ensure_conditional_writes()  # before the round writes anything

    def _path(self, key: str) -> Path:
        ns, name = split_key(key)
        return self.root / ns / name

    def put(self, key: str, data: bytes) -> None:
        value = _nonempty(data, key)
        self.backoff.reset()
        publish(self.storage, self._path(key), value, replace=True, seal=False)

    def put_if_absent(self, key: str, data: bytes) -> bool:
        value = _nonempty(data, key)
        self.backoff.reset()
        try:
            publish(self.storage, self._path(key), value, seal=False)
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
        self.backoff.reset()
        remove_file(self.storage, self._path(key))

    def pause(self, seconds: float) -> None:
        """The driver's sleep: wait the back-off's next step, never more than ``seconds``."""
        wait = self.backoff.next_wait(seconds)
        if wait > 0:
            time.sleep(wait)  # clock-ok: the backend owns its polling waits

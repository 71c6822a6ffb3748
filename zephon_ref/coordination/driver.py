"""The runner: drive one participant's round machine against a real backend.

Theory of operation
-------------------
:func:`perform` turns one protocol command into one backend call and its
answer into one event; it is shared with the in-memory simulator
(:mod:`sim.cluster`, outside the product package), so real runs and simulated runs
execute commands the same way.  :func:`run_round` loops ``perform`` /
``apply`` with the wall clock (milliseconds) as the tick source and
``time.sleep`` for :class:`~zephon_ref.coordination.protocol.Sleep`; it is the
only place in the package that reads a clock (lines marked ``# clock-ok``).

:func:`aggregate` is what a rank (or DataLoader worker) calls: it validates its
arguments and state first (a refused call writes nothing), chooses leader or
follower from ``(rank, worker)``, picks a fresh round id (leader) and a fresh
participant token, and returns the merged state or raises the round's typed
error (:class:`~zephon_ref.errors.AggregationError` and subclasses).

Over object storage (``s3://``) the round polls with zephon's capped
exponential back-off (:mod:`.objectstore`: ``poll_s`` is ignored, the timeout is
raised to at least 90 s); the waits themselves are the backend's ``pause``.

Namespace: ``<run_id>-<checkpoint_reload_count>``: runs with distinct run ids
never see each other's keys; a restored run (reload count + 1) starts afresh.
"""

from __future__ import annotations

import os
import re
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from zephon_ref import codec
from zephon_ref.codec import Codec
from zephon_ref.coordination.backends import (
    CAP_S,
    TIMEOUT_FLOOR_S,
    Backend,
    ObjectStoreBackend,
    open_backend,
)
from zephon_ref.coordination.protocol import (
    Abort,
    Command,
    Created,
    Delete,
    Event,
    Fetched,
    Finish,
    Get,
    IOFailed,
    Listed,
    ListKeys,
    Machine,
    Put,
    PutIfAbsent,
    RoundConfig,
    Sleep,
    Started,
    Stored,
    Woke,
    machine_for,
)
from zephon_ref.errors import ConfigError, StateFormatError, expected
from zephon_ref.narrow import narrowed

__all__ = [
    "RoundResult",
    "aggregate",
    "aggregate_round",
    "namespace",
    "new_round_id",
    "perform",
    "run_round",
]

_RUN_ID = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]*")


def wall_ms() -> int:
    return time.time_ns() // 1_000_000  # clock-ok: the runner owns the clock


def namespace(run_id: str, reload_count: int) -> str:
    if not isinstance(run_id, str) or not _RUN_ID.fullmatch(run_id) or len(run_id) > 200:
        raise ConfigError(
            expected("run_id", "1-200 chars of [A-Za-z0-9._-], not starting with '.'", run_id)
        )
    if type(reload_count) is not int or reload_count < 0:
        raise StateFormatError(expected("checkpoint_reload_count", "an int >= 0", reload_count))
    return f"{run_id}-{reload_count}"


def new_round_id() -> str:
    """A round id unique across processes and runs: wall-clock ns, pid, random bits."""
    return f"{time.time_ns():x}-{os.getpid():x}-{os.urandom(4).hex()}"  # clock-ok


def new_token() -> str:
    return f"p{os.getpid()}x{os.urandom(4).hex()}"


def perform(cmd: Command, backend: Backend, *, now: int) -> Event:
    """Execute one storage or sleep command; answer with its event (never raises for storage)."""
    try:
        if isinstance(cmd, Put):
            backend.put(cmd.key, cmd.data)
            return Stored(now)
        if isinstance(cmd, Delete):
            backend.delete(cmd.key)
            return Stored(now)
        if isinstance(cmd, PutIfAbsent):
            return Created(now, backend.put_if_absent(cmd.key, cmd.data))
        if isinstance(cmd, Get):
            return Fetched(now, backend.get(cmd.key))
        if isinstance(cmd, ListKeys):
            return Listed(now, tuple(backend.list(cmd.prefix)))
    except Exception as exc:  # any storage failure becomes an event the machine decides on
        return IOFailed(
            now,
            f"{type(cmd).__name__} {getattr(cmd, 'key', getattr(cmd, 'prefix', ''))!r}: "
            f"{type(exc).__name__}: {exc}",
        )
    if isinstance(cmd, Sleep):
        return Woke(now)
    raise AssertionError(f"not a storage command: {cmd!r}")  # pragma: no cover


@dataclass(frozen=True, slots=True)
class RoundResult:
    merged: dict[str, Any]
    round_id: str


def run_round(
    machine: Machine,
    backend: Backend,
    *,
    clock: Callable[[], int] = wall_ms,
    sleep: Callable[[float], None] = time.sleep,
) -> RoundResult:
    """Drive ``machine`` to its end with real waiting; raise its error on Abort."""
    cmd = machine.apply(Started(clock()))
    while True:
        if isinstance(cmd, Finish):
            return RoundResult(cmd.merged, cmd.round_id)
        if isinstance(cmd, Abort):
            raise cmd.error
        if isinstance(cmd, Sleep):
            delay = cmd.until - clock()
            if delay > 0:
                sleep(delay / 1000)  # clock-ok
            cmd = machine.apply(Woke(clock()))
            continue
        event = perform(cmd, backend, now=0)
        # Stamp the event with the time the operation finished.
        cmd = machine.apply(_stamp(event, clock()))


def _stamp(event: Event, now: int) -> Event:
    if isinstance(event, Stored):
        return Stored(now)
    if isinstance(event, Created):
        return Created(now, event.won)
    if isinstance(event, Fetched):
        return Fetched(now, event.data)
    if isinstance(event, Listed):
        return Listed(now, event.keys)
    if isinstance(event, IOFailed):
        return IOFailed(now, event.message)
    raise AssertionError(event)  # pragma: no cover


def _seconds(value: float, name: str, *, lo: float) -> int:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not value >= lo
        or value != value
    ):
        raise ConfigError(expected(name, f"a number >= {lo}", value))
    return max(1, round(value * 1000)) if value > 0 else 0


def aggregate_round(
    state: Mapping[str, Any],
    *,
    backend: Backend | str | os.PathLike[str],
    rank: int,
    world_size: int,
    run_id: str,
    timeout_s: float,
    worker: int = 0,
    round_id: str | None = None,
    poll_s: float = 0.05,
    stale_grace_s: float = 30.0,
    token: str | None = None,
    warn_mid_window: bool = True,
    codec: Codec = codec,
) -> RoundResult:
    """Like :func:`aggregate`, also returning the round id (the engine records it
    as its ``last_round_id``).  ``codec`` encodes and decodes the round's bytes: the plain
    :mod:`zephon_ref.codec` unless a caller plugs in a faster one of the same bytes
    (:class:`zephon_ref.fast.codec.FastCodec`; see codec.Codec)."""
    if not isinstance(state, Mapping):
        raise StateFormatError(expected("state", "an engine-state dict", type(state).__name__))
    timeout = _seconds(timeout_s, "timeout_s", lo=0.001)
    poll = max(1, _seconds(poll_s, "poll_s", lo=0.001))
    cloud = _object_store(backend)
    timeout, poll = round_timing(cloud, timeout, poll)
    grace = _seconds(stale_grace_s, "stale_grace_s", lo=0.0)
    ns = namespace(run_id, state.get("checkpoint_reload_count", 0))
    is_leader = rank == 0 and worker == 0
    cfg = RoundConfig(
        namespace=ns,
        rank=rank,
        world_size=world_size,
        worker=worker,
        token=token if token is not None else new_token(),
        timeout=timeout,
        poll=poll,
        stale_grace=grace,
        round_id=(round_id if round_id is not None else new_round_id()) if is_leader else None,
    )
    machine = machine_for(state, cfg, warn_mid_window=warn_mid_window, codec=codec)  # validates; no I/O yet
    store = open_backend(backend, timeout_s=float(timeout_s))
    connect = getattr(store, "connect", None)
    if callable(connect):
        connect()  # before the clock starts: connection set-up is not round time
    pause = getattr(store, "pause", None) if cloud else None
    return run_round(machine, store, sleep=pause if callable(pause) else time.sleep)


def round_timing(cloud: bool, timeout: int, poll: int) -> tuple[int, int]:
    """(timeout, poll) in ms for a round: as given, or for object storage zephon's
    cloud rule: the timeout raised to at least 90 s, and the machine allowed to sleep
    up to the back-off cap (the backend's ``pause`` shortens each wait to its step:
    0.5 s, x1.5, cap 5 s)."""
    if not cloud:
        return timeout, poll
    return max(timeout, round(TIMEOUT_FLOOR_S * 1000)), round(CAP_S * 1000)


def _object_store(backend: object) -> bool:
    """True for an ``s3://`` spec or an object-store backend (polled with back-off)."""
    if isinstance(backend, str):
        return backend.partition("://")[0].lower() == "s3" and "://" in backend
    return isinstance(backend, ObjectStoreBackend)


aggregate = narrowed(
    aggregate_round,
    lambda result: result.merged,
    name="aggregate",
    returns="dict[str, Any]",
    doc="""Merge this participant's ``state`` with every other rank's; return the merged state.

    Every participant (each rank, and each DataLoader worker that owns lanes)
    calls this at the same step with the same ``run_id``; rank 0 worker 0 leads.
    ``backend`` is a Backend, a directory path (``aggregate_dir``), or
    ``"torch://"`` / ``"torch://host:port"``.  All waits share ``timeout_s``.
    Raises ConfigError / StateFormatError before any I/O for bad arguments, and
    AggregationError (AggregationTimeout, LeaderFailed) when the round fails.
    """,
)


def pipeline_aggregate(
    options: Mapping[str, Any],
) -> Callable[[dict[str, Any], Any], tuple[dict[str, Any], Any]]:
    """The aggregation round ``Pipeline.checkpoint()`` runs by default, from its options.

    ``aggregate_dir`` or ``aggregate_store`` names the backend; several DataLoader workers of
    one rank without either use a private directory under the system temp dir, as zephon
    does.  The wall clock (the round's budget) and the backend's I/O live here.
    """
    backend = options["aggregate_dir"] if options["aggregate_dir"] is not None else options["aggregate_store"]
    run_id, timeout_s = str(options["run_id"]), float(options["aggregate_timeout_s"])

    def aggregate(local: dict[str, Any], world: Any) -> tuple[dict[str, Any], Any]:
        where = backend
        if where is None:
            where = os.path.join(tempfile.gettempdir(), f"zephon_ref_state_r{world.global_rank}")
        result = aggregate_round(local, backend=where, rank=world.global_rank, world_size=world.world_size,
                                 worker=world.worker_id, run_id=run_id, timeout_s=timeout_s)
        return result.merged, result.round_id

    return aggregate

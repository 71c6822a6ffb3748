"""Execution settings: every ``Pipeline.options()`` key zephon 0.2.0 accepts, its default and its check.

Theory of operation
-------------------
Seed 002: execution settings never change the data.  zephon_ref therefore accepts every
execution setting zephon 0.2.0 accepts and delivers the same stream with it as without it;
none of them reaches the engine's decisions or the fingerprint (docs/options.md says, one line
per setting, what zephon does with it and what zephon_ref does).  This module owns the table
of those settings (:data:`EXEC_DEFAULTS`) and one check per setting (:func:`check_exec`).

Checks run at the ``options()`` call (house rule: validate eagerly), where zephon checks most
of them only when a run starts.  Where zephon refuses a value, the error derives from the same
builtin zephon raises (found by running zephon 0.2.0; the table in docs/options.md).  Where
zephon raises something no caller can catch by builtin (an AttributeError from inside its
engine), zephon_ref raises ConfigTypeError (TypeError).  Where zephon accepts a value that has
no meaning (a negative queue depth, ``mtp_mode="x"``), zephon_ref refuses it with the builtin
zephon uses for that setting's other bad values: docs/divergences.md, "Execution settings".

What may not live here: anything that runs, stores or times (this module is semantics: it
imports no machinery, not even the store options of :mod:`zephon_ref.io`, which it duck-types).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from zephon_ref.errors import ConfigError, ConfigNotImplemented, ConfigTypeError, expected
from zephon_ref.ops.base import check_bool, check_int

__all__ = [
    "EXEC_DEFAULTS",
    "RUNNERS",
    "TRACKING_MODES",
    "check_exec",
    "check_fetch",
    "check_prefetch",
    "check_tracking",
    "merge_io_options",
]

#: Runner names zephon 0.2.0 knows (a falsy value or "auto" lets it choose).
RUNNERS = ("auto", "inline", "threads", "process", "remote")
#: ``execution_tracking`` / ``enable_observability(tracking=)`` modes, by value.
TRACKING_MODES = ("off", "stages", "nodes")

#: Every execution setting of zephon 0.2.0's RuntimeOptions with its default, plus zephon_ref's
#: ``feeding`` and ``faster_ops`` (a bool: the facade plugs its faster operators in; the builder
#: only holds it).  ``mp_context=None`` stands for zephon's default spawn context (this module
#: imports no multiprocessing); ``io_options=None`` for a default StoreOptions();
#: ``execution_tracking`` is held by value ("off").
EXEC_DEFAULTS: dict[str, Any] = {
    "runner": None, "run_id": "default_run_id", "per_stage_runner": {}, "mp_context": None,
    "worker_allocation": "fit_to_ops", "max_workers": None, "deterministic": True,
    "prefetch_batches": None, "default_stage_prefetch": None, "per_stage_prefetch": {},
    "op_queue_capacity": None, "ipc_transport": "socketpair", "ipc_buffer_bytes": 512 * 1024,
    "mixture_config": None, "io_options": None, "allow_latency_flush_in_deterministic": True,
    "shutdown_mode": "graceful", "auto_validation": "strict",
    "mtp_mode": False, "mtp_buffer": None, "mtp_buffer_bytes": 8 * 1024 * 1024, "mtp_prefetch": None,
    "mtp_auto_checkpoint": True,
    "world_size": 1, "global_rank": 0, "dp_degree": None, "dp_group_id": None, "mapping_strategy": None,
    "shm_enabled": True, "shm_coalesce": True, "shm_min_item_bytes": 4096,
    "shm_min_new_allocation_bytes": 1024 * 1024, "shm_min_forward_bytes": 128 * 1024,
    "shm_compact_above_ratio": 8.0, "shm_compact_min_savings_bytes": 16 * 1024 * 1024,
    "shm_max_coalesced_bytes": 64 * 1024 * 1024, "max_worker_retries": 3,
    "aggregate_dir": None, "aggregate_store": None, "aggregate_timeout_s": 180.0,
    "aggregate_serializer": "msgpack", "aggregate_compressor": "zstd",
    "execution_tracking": "off", "metrics_sink_config": None,
    "feeding": "demand", "faster_ops": False,
}

_START_METHODS = ("spawn", "fork", "forkserver")


def _choice(name: str, value: Any, choices: tuple[str, ...]) -> None:
    """A str among ``choices`` (ValueError otherwise: zephon's builtin for unknown names)."""
    if not (isinstance(value, str) and value in choices):
        raise ConfigError(expected(name, "one of " + ", ".join(repr(c) for c in choices), value))


def _runner(name: str, value: Any) -> None:
    # zephon reads a falsy runner as "auto" and refuses any other unknown name with ValueError
    if value is None or value == "":
        return
    _choice(name, value, RUNNERS)


def _depth(name: str, value: Any) -> None:
    # zephon compares these with ints (TypeError for a str or a list); 0 means "none" or "auto"
    check_int(name, value, minimum=0, allow_none=True)


def _bytes(name: str, value: Any) -> None:
    # zephon: "<name> must be a non-negative integer" (ValueError), for any bad value
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(expected(name, "an int >= 0", value))


def _ipc_bytes(name: str, value: Any) -> None:
    # zephon hands these to setsockopt (TypeError for a str or a float)
    check_int(name, value, minimum=0)


def _shm_bool(name: str, value: Any) -> None:
    # zephon: "<name> must be a bool" (ValueError)
    if not isinstance(value, bool):
        raise ConfigError(expected(name, "a bool", value))


def _mapping(name: str, value: Any, check_value: Callable[[str, Any], None]) -> None:
    if not isinstance(value, Mapping):
        raise ConfigTypeError(expected(name, "a dict {stage index: value}", type(value).__name__))
    for k in sorted(value, key=repr):
        check_int(f"{name} key", k, minimum=0)
        check_value(f"{name}[{k}]", value[k])


def _worker_allocation(name: str, value: Any) -> None:
    if value == "autotune" and isinstance(value, str):
        raise ConfigNotImplemented(expected(name, "'fit_to_ops', 'per_stage_fixed' or 'global'",
                                            "'autotune' (reserved for a future tuner, as in zephon)"))
    _choice(name, value, ("fit_to_ops", "per_stage_fixed", "global"))


def _mp_context(name: str, value: Any) -> None:
    if value is None:
        return
    if isinstance(value, str):
        _choice(name, value, _START_METHODS)  # zephon: "cannot find context for 'x'" (ValueError)
        return
    if not callable(getattr(value, "get_start_method", None)):
        raise ConfigTypeError(expected(name, "None, a start-method name or a multiprocessing context",
                                       type(value).__name__))


def _auto_validation(name: str, value: Any) -> None:
    if not (isinstance(value, str) and value.lower() in ("strict", "warn", "off")):
        raise ConfigError(expected(name, "one of 'strict', 'warn', 'off' (case-insensitive)", value))


def _ratio(name: str, value: Any) -> None:
    if value is None:
        return
    number = not isinstance(value, bool) and isinstance(value, (int, float))
    if not number or not math.isfinite(value) or value < 1:
        raise ConfigError(expected(name, "a finite number >= 1, or None", value))


def _positive_or_none(name: str, value: Any) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ConfigError(expected(name, "an int >= 1, or None", value))


def _retries(name: str, value: Any) -> None:
    # zephon converts with int() (ValueError for 'x')
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(expected(name, "an int >= 0", value))


def _mixture_config(name: str, value: Any) -> None:
    # no longer read by zephon 0.2.0's engine; held, never used
    if value is not None and type(value).__name__ != "MixtureReadConfig":
        raise ConfigTypeError(expected(name, "None or a MixtureReadConfig", type(value).__name__))


def _sink(name: str, value: Any) -> None:
    if value is not None and type(value).__name__ != "MetricsSinkConfig" and not isinstance(value, Mapping):
        raise ConfigTypeError(expected(name, "None or a MetricsSinkConfig", type(value).__name__))


def check_tracking(name: str, value: Any) -> str:
    """An ExecutionTrackingMode (zephon's or any enum whose value is a mode) or its value, by value;
    ValueError otherwise (zephon: "Unsupported execution tracking mode")."""
    raw = getattr(value, "value", value)
    if not (isinstance(raw, str) and raw.lower() in TRACKING_MODES):
        raise ConfigError(expected(name, "an execution tracking mode: " + ", ".join(TRACKING_MODES), value))
    return raw.lower()


def _tracking(name: str, value: Any) -> None:
    check_tracking(name, value)


def _io_options(name: str, value: Any) -> None:
    # zephon: StoreOptions.from_any -> TypeError "Cannot interpret store options from ..."
    if value is None or value is False:
        return
    if isinstance(value, Mapping):
        bad = [k for k in value if not isinstance(k, str)]
        if bad:
            raise ConfigTypeError(expected(name, "a dict with str keys", bad))
        return
    if callable(getattr(value, "merge", None)):
        return  # a StoreOptions (zephon's or zephon_ref.io's)
    raise ConfigTypeError(expected(name, "None, a dict or a StoreOptions", value))


def merge_io_options(old: Any, new: Any) -> Any:
    """zephon merges ``io_options`` into the ones already set (a field given later wins): two
    dicts merge key by key, a StoreOptions merges with its own ``merge``, otherwise the new one
    replaces the old."""
    if new is None or new is False:
        return old
    if old is None:
        return dict(new) if isinstance(new, Mapping) else new
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        return {**old, **new}
    if callable(getattr(old, "merge", None)) and type(old) is type(new):
        return old.merge(new)
    return dict(new) if isinstance(new, Mapping) else new


def _str_choice(*choices: str) -> Callable[[str, Any], None]:
    return lambda name, value: _choice(name, value, choices)


#: the check of each execution setting this module owns (topology, aggregation and feeding
#: are checked by the builder, which resolves them together)
_CHECKS: dict[str, Callable[[str, Any], None]] = {
    "runner": _runner,
    "per_stage_runner": lambda name, value: _mapping(name, value, _runner),
    "mp_context": _mp_context,
    "worker_allocation": _worker_allocation,
    "max_workers": _depth, "prefetch_batches": _depth, "default_stage_prefetch": _depth,
    "op_queue_capacity": _depth, "mtp_buffer": _depth, "mtp_prefetch": _depth,
    "per_stage_prefetch": lambda name, value: _mapping(name, value, _depth),
    "ipc_transport": _str_choice("socketpair", "pipe"),
    "ipc_buffer_bytes": _ipc_bytes, "mtp_buffer_bytes": _ipc_bytes,
    "mixture_config": _mixture_config,
    "io_options": _io_options,
    "deterministic": check_bool, "allow_latency_flush_in_deterministic": check_bool,
    "faster_ops": check_bool,
    "mtp_mode": check_bool, "mtp_auto_checkpoint": check_bool,
    "shutdown_mode": _str_choice("graceful", "hard"),
    "auto_validation": _auto_validation,
    "shm_enabled": _shm_bool, "shm_coalesce": _shm_bool,
    "shm_min_item_bytes": _bytes, "shm_min_new_allocation_bytes": _bytes, "shm_min_forward_bytes": _bytes,
    "shm_compact_min_savings_bytes": _bytes,
    "shm_compact_above_ratio": _ratio,
    "shm_max_coalesced_bytes": _positive_or_none,
    "max_worker_retries": _retries,
    "aggregate_serializer": _str_choice("msgpack", "json"),
    "aggregate_compressor": _str_choice("zstd", "none"),
    "execution_tracking": _tracking,
    "metrics_sink_config": _sink,
}


def check_exec(key: str, value: Any) -> None:
    """Refuse a bad value of execution setting ``key`` (a no-op for keys checked elsewhere)."""
    check = _CHECKS.get(key)
    if check is not None:
        check(key, value)


def _number(name: str, value: Any) -> None:
    """An int (TypeError otherwise, as zephon's comparisons raise)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigTypeError(expected(name, "an int", value))


def check_prefetch(buffer_size: Any, parallelism: Any, placement: Any) -> None:
    """``prefetch(buffer_size, parallelism, placement=)``: buffer_size an int >= 1 (zephon: ValueError
    "buffer_size must be positive", TypeError for None or a str), parallelism None or an int >= 1,
    placement a non-empty str."""
    _number("prefetch buffer_size", buffer_size)
    if buffer_size < 1:
        raise ConfigError(expected("prefetch buffer_size", "an int >= 1", buffer_size))
    check_int("prefetch parallelism", parallelism, minimum=1, allow_none=True)
    if not isinstance(placement, str) or not placement:
        raise ConfigTypeError(expected("prefetch placement", "a non-empty str", placement))


def check_fetch(parallelism: Any, max_batch: Any) -> None:
    """``fetch(parallelism, max_batch)``: each None or an int >= 1 (zephon: ValueError "Fetch
    parallelism must be >= 1", TypeError for a str)."""
    check_int("fetch parallelism", parallelism, minimum=1, allow_none=True)
    check_int("fetch max_batch", max_batch, minimum=1, allow_none=True)

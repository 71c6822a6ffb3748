"""zephon's observability configuration: tracking and sink modes, the metrics sink configuration.

``ExecutionTrackingMode`` is what ``options(execution_tracking=...)`` and
``enable_observability(tracking)`` take (:func:`zephon_ref.settings.check_tracking` reads any
enum whose value is a mode); ``MetricsSinkConfig`` is ``enable_observability(sink=...)`` /
``options(metrics_sink=...)``.  Both are held as execution settings: zephon_ref collects and sends
no metrics, and neither ever changes the data (seed 002).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any, TypeVar

from zephon_ref.errors import ConfigError, ConfigTypeError, expected

__all__ = ["ExecutionTrackingMode", "MetricsSinkConfig", "MetricsSinkMode"]


_E = TypeVar("_E", bound=Enum)


def _member(cls: type[_E], value: object, default: _E, what: str) -> _E:
    """``cls``'s member for a member, its exact str value, or None (``default``); ConfigError (a
    ValueError, as zephon's) naming ``what`` otherwise."""
    if value is None:
        return default
    for m in cls:
        if value is m or (type(value) is str and value == m.value):
            return m
    raise ConfigError(f"Unsupported {what}: {value!r}")


class ExecutionTrackingMode(str, Enum):
    """How much of a run zephon times: nothing, per stage, or per operator node."""

    OFF = "off"
    STAGES = "stages"
    NODES = "nodes"

    @classmethod
    def from_value(cls, value: ExecutionTrackingMode | str | None) -> ExecutionTrackingMode:
        """A member from a member, its exact value, or None (OFF); ValueError otherwise, as zephon."""
        return _member(cls, value, cls.OFF, "execution tracking mode")

    @property
    def collects_stages(self) -> bool:
        return self is not ExecutionTrackingMode.OFF

    @property
    def collects_nodes(self) -> bool:
        return self is ExecutionTrackingMode.NODES


class MetricsSinkMode(str, Enum):
    """Where zephon exports metrics: logs, statsd, or both."""

    LOG = "log"
    STATSD = "statsd"
    BOTH = "both"

    @classmethod
    def from_value(cls, value: MetricsSinkMode | str | None) -> MetricsSinkMode:
        """A member from a member, its exact value, or None (LOG); ValueError otherwise, as zephon."""
        return _member(cls, value, cls.LOG, "metrics sink mode")

    def includes_statsd(self) -> bool:
        return self is not MetricsSinkMode.LOG

    def includes_logs(self) -> bool:
        return self is not MetricsSinkMode.STATSD


def _check(name: str, ok: bool, want: str, value: Any, *, type_ok: bool = True) -> None:
    if not type_ok:
        raise ConfigTypeError(expected(f"MetricsSinkConfig {name}", want, value))
    if not ok:
        raise ConfigError(expected(f"MetricsSinkConfig {name}", want, value))


@dataclass(frozen=True)
class MetricsSinkConfig:
    """How observability data would be exported (zephon's fields and defaults).  Values are checked
    at construction (zephon stores them unchecked; docs/divergences.md D-98)."""

    mode: MetricsSinkMode = MetricsSinkMode.LOG
    namespace: str = "zephon.pipeline"
    statsd_host: str = "127.0.0.1"
    statsd_port: int = 8125
    default_tags: Mapping[str, str] = field(default_factory=dict)
    json_logs: bool = True
    max_batch_size: int = 32
    flush_interval_s: float = 5.0

    def __post_init__(self) -> None:
        _check("mode", True, "a MetricsSinkMode", self.mode, type_ok=isinstance(self.mode, MetricsSinkMode))
        for name in ("namespace", "statsd_host"):
            v = getattr(self, name)
            _check(name, bool(v), "a non-empty str", v, type_ok=isinstance(v, str))
        port = self.statsd_port
        _check("statsd_port", isinstance(port, int) and 0 < port < 65536, "an int in [1, 65535]", port,
               type_ok=isinstance(port, int) and not isinstance(port, bool))
        tags = self.default_tags
        _check("default_tags", True, "a mapping of str to str", tags,
               type_ok=isinstance(tags, Mapping) and all(isinstance(k, str) and isinstance(v, str)
                                                         for k, v in tags.items()))
        _check("json_logs", True, "a bool", self.json_logs, type_ok=isinstance(self.json_logs, bool))
        size = self.max_batch_size
        _check("max_batch_size", isinstance(size, int) and size >= 1, "an int >= 1", size,
               type_ok=isinstance(size, int) and not isinstance(size, bool))
        fl = self.flush_interval_s
        num = isinstance(fl, (int, float)) and not isinstance(fl, bool)
        _check("flush_interval_s", num and math.isfinite(fl) and fl > 0, "a finite number > 0", fl,
               type_ok=num)
        object.__setattr__(self, "default_tags", dict(tags))

    def should_emit_statsd(self) -> bool:
        return self.mode.includes_statsd()

    def should_log(self) -> bool:
        return self.mode.includes_logs()

    def with_additional_tags(self, extra: Mapping[str, str]) -> MetricsSinkConfig:
        """A copy whose ``default_tags`` are these updated by ``extra`` (``extra`` wins)."""
        if not isinstance(extra, Mapping):
            raise ConfigTypeError(expected("with_additional_tags extra", "a mapping of str to str", extra))
        return replace(self, default_tags={**self.default_tags, **extra})

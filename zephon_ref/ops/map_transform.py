"""map_transform: apply a deterministic payload function, dropping on None.

Theory of operation
-------------------
Owns nothing across calls: the accumulator is a per-lane
:class:`~zephon_ref.ops.base.CountingAccumulator` (count-only boundaries), and
``process_many`` maps each record independently.  When ``fn`` returns None and
``drop_none`` is set, the record is replaced by ``tombstones_for_record`` so its
closing contributors still close; with ``drop_none=False`` the record passes
unchanged.  Tombstones pass through untouched.  Order is preserved
(``preserves_cursor_order=True``).

What may not live here: any per-record state, randomness, or batch-shape
dependence (the function sees one payload at a time).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from zephon_ref.errors import ConfigTypeError, expected
from zephon_ref.lineage import tombstones_for_record
from zephon_ref.ops.base import (
    RecordMapOp,
)
from zephon_ref.ops.knobs import Bool, Func, Int, check_execution, check_fields, knob
from zephon_ref.types import SampleRecord

__all__ = ["DEFAULT_PARALLELISM", "MapTransform"]

#: zephon 0.2.0's worker count for map_transform(parallelism=None): an execution setting.
DEFAULT_PARALLELISM = 4


@dataclass(frozen=True, slots=True, kw_only=True)
class MapConfig:
    """The knobs of ``map_transform`` (field names: the builder's keywords), each with its
    declared domain (:mod:`zephon_ref.ops.knobs`)."""

    BUILDER: ClassVar[str] = "map_transform"

    transform_fn: Callable[[Any], Any] = knob(domain=Func(), doc="payload -> payload, or None to drop")
    drop_none: bool = knob(True, Bool(), doc="None drops the record (a tombstone); False keeps it")
    max_batch: int = knob(64, Int(1), doc="records per call (not a builder keyword)")

    def __post_init__(self) -> None:
        check_fields(self)


class MapTransform(RecordMapOp):
    """``map_transform(fn, *, drop_none=True)``."""

    #: alias -> config field: the fingerprint digests ``transform_fn`` under ``fn`` too, the name of
    #: the copy the operator once kept, so fingerprints (and the checkpoints carrying them) stay the same
    FINGERPRINT_ALIASES: ClassVar[Mapping[str, str]] = {"fn": "transform_fn"}

    def __init__(
        self,
        fn: Callable[[Any], Any],
        *,
        drop_none: bool = True,
        max_batch: int = 64,
        placement: str = "auto",
        parallelism: int | None = None,
    ) -> None:
        super().__init__()
        if not callable(fn):
            raise ConfigTypeError(expected("fn", "a callable payload -> payload | None", fn))
        #: the knobs, checked against their domains; the operator keeps no copy of them
        self.config = MapConfig(transform_fn=fn, drop_none=drop_none, max_batch=max_batch)
        check_execution(placement=placement, parallelism=parallelism)  # None: the default; 0 is refused
        self.parallelism = DEFAULT_PARALLELISM if parallelism is None else parallelism

    def process_many(self, elems: list[Any]) -> list[Any]:
        out: list[SampleRecord] = []
        fn, drop_none = self.config.transform_fn, self.config.drop_none
        for rec in elems:
            if rec.meta.tombstone:
                out.append(rec)
                continue
            new = fn(rec.payload)
            if new is None:
                if drop_none:
                    out.extend(tombstones_for_record(rec))
                else:
                    out.append(rec)
                continue
            out.append(SampleRecord(rec.meta, new))
        return out

"""``stateful_transform``: user push/flush callbacks as a per-lane accumulator.

Theory of operation
-------------------
The user's state is kept per lane, created lazily by ``init_state()``.  Each
``push_many`` groups records by lane (lanes in first-seen order) and calls
``push(state, lane_records) -> (new_state, outputs)``; when ``should_flush(state)``
is true the lane's ``flush(state)`` output follows and its state resets.
``flush(reset=True, lane_id=L)`` drains lane L through ``flush`` and drops its
state.  ``transform`` (optional) maps each ready batch on a worker.

As in zephon, a record the user drops here needs a tombstone the user emits
(``tombstones_for_record``); nothing is added automatically.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from zephon_ref.errors import ConfigTypeError, expected
from zephon_ref.ops.base import (
    Accumulator,
    BaseOp,
    OpTraits,
    ReadyBatch,
    check_int,
    lane_of,
)
from zephon_ref.ops.knobs import Bool, Domain, Func, Int, Text, check_execution, check_fields, knob
from zephon_ref.types import SampleRecord

__all__ = ["StatefulTransform", "StatefulTransformAccumulator", "checked_records"]


def checked_records(what: str, value: Any) -> list[SampleRecord]:
    """A user callback's output as a list of records, or a typed error naming the callback.

    ``push``, ``flush`` and ``transform`` can only be checked when they run; a result
    that is not an iterable of SampleRecords (None, a str, an int, payload dicts) would
    otherwise fail untyped somewhere downstream.
    """
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
        raise ConfigTypeError(expected(what, "a list of SampleRecords", value))
    out = list(value)
    for item in out:
        if not isinstance(item, SampleRecord):
            raise ConfigTypeError(expected(f"each element of {what}", "a SampleRecord", item))
    return out


class StatefulTransformAccumulator(Accumulator[SampleRecord]):
    def __init__(self, init_state: Callable[[], Any], push: Callable[[Any, list[SampleRecord]], Any],
                 flush: Callable[[Any], list[SampleRecord]] | None,
                 should_flush: Callable[[Any], bool] | None) -> None:
        self._init = init_state
        self._push = push
        self._flush = flush
        self._should_flush = should_flush
        self._states: dict[int, Any] = {}

    def has_pending_data(self, lane_id: int | None = None) -> bool:
        # a lane with live state may hold buffered records only if there is a flush callback
        if self._flush is None:
            return False
        return bool(self._states) if lane_id is None else lane_id in self._states

    def _emit(self, out: list[SampleRecord], ready: list[ReadyBatch[SampleRecord]]) -> None:
        if out:
            ready.append((list(out), 0))

    def push_many(self, elems: Sequence[SampleRecord]) -> list[ReadyBatch[SampleRecord]]:
        groups: dict[int, list[SampleRecord]] = {}
        for e in elems:
            groups.setdefault(lane_of(e), []).append(e)
        ready: list[ReadyBatch[SampleRecord]] = []
        for lane, recs in groups.items():
            state = self._states[lane] if lane in self._states else self._init()
            result = self._push(state, recs)
            if not (isinstance(result, tuple) and len(result) == 2):
                raise ConfigTypeError(
                    expected("stateful_transform push() result", "(new_state, outputs)", result)
                )
            state, outputs = result
            self._states[lane] = state
            self._emit(checked_records("stateful_transform push() outputs", outputs), ready)
            if self._should_flush is not None and self._should_flush(state):
                if self._flush is not None:
                    self._emit(
                        checked_records("stateful_transform flush() result", self._flush(state)), ready
                    )
                del self._states[lane]
        return ready

    def flush(self, *, reset: bool = False, lane_id: int | None = None) -> list[ReadyBatch[SampleRecord]]:
        lanes = sorted(self._states) if lane_id is None else [lane_id]
        ready: list[ReadyBatch[SampleRecord]] = []
        for lane in lanes:
            if lane not in self._states:
                continue
            state = self._states.pop(lane)
            if self._flush is not None:
                self._emit(checked_records("stateful_transform flush() result", self._flush(state)), ready)
        return ready


@dataclass(frozen=True, slots=True, kw_only=True)
class StatefulConfig:
    """The knobs of ``stateful_transform``, each with its declared domain (:mod:`zephon_ref.ops.knobs`)."""

    BUILDER: ClassVar[str] = "stateful_transform"
    #: its execution settings where they differ from knobs.EXECUTION: parallelism is an int, no None
    EXECUTION: ClassVar[Mapping[str, Domain]] = {"parallelism": Int(1)}

    name: str = knob(domain=Text(), doc="the operator's name (and its state's key)")
    init_state: Callable[[], Any] = knob(domain=Func(), doc="a lane's fresh state")
    push: Callable[..., Any] = knob(domain=Func(), doc="(state, records) -> (state, records out)")
    flush: Callable[[Any], list[SampleRecord]] | None = knob(None, Func(none=True), doc="state -> records")
    should_flush: Callable[[Any], bool] | None = knob(None, Func(none=True), doc="flush the lane now?")
    transform: Callable[[list[SampleRecord]], list[SampleRecord]] | None = knob(
        None, Func(none=True), doc="records -> records, after the accumulator")
    indexable: bool = knob(False, Bool(), doc="a declared trait")
    preserves_cursor_order: bool = knob(True, Bool(), doc="a declared trait: output in cursor order")

    def __post_init__(self) -> None:
        check_fields(self)


class StatefulTransform(BaseOp):
    """``stateful_transform(name, *, init_state, push, flush=None, ...)``."""

    #: alias -> config field: the fingerprint digests ``flush`` under ``flush_fn`` too, the name of
    #: the copy the operator once kept, so fingerprints (and the checkpoints carrying them) stay the same
    FINGERPRINT_ALIASES: ClassVar[Mapping[str, str]] = {"flush_fn": "flush"}

    def __init__(self, name: str, *, init_state: Callable[[], Any], push: Callable[..., Any],
                 flush: Callable[[Any], list[SampleRecord]] | None = None,
                 should_flush: Callable[[Any], bool] | None = None,
                 transform: Callable[[list[SampleRecord]], list[SampleRecord]] | None = None,
                 placement: str = "auto", parallelism: int = 1, indexable: bool = False,
                 preserves_cursor_order: bool = True) -> None:
        super().__init__()
        if not isinstance(name, str) or not name:
            raise ConfigTypeError(expected("name", "a non-empty str", name))
        check_execution(placement=placement)
        check_int("parallelism", parallelism, minimum=1)
        #: the knobs, checked against their domains; the operator keeps no copy of them
        self.config = StatefulConfig(name=name, init_state=init_state, push=push, flush=flush,
                                     should_flush=should_flush, transform=transform, indexable=indexable,
                                     preserves_cursor_order=preserves_cursor_order)
        self.parallelism = parallelism

    def traits(self) -> OpTraits:
        c = self.config
        return OpTraits(preserves_cursor_order=c.preserves_cursor_order, indexable=c.indexable,
                        parallelism=self.parallelism)

    def accumulator(self, *, deterministic: bool, ctx: dict[str, Any]) -> Accumulator[Any]:
        c = self.config
        return StatefulTransformAccumulator(c.init_state, c.push, c.flush, c.should_flush)

    def process_many(self, elems: list[Any]) -> list[Any]:
        transform = self.config.transform
        if transform is None:
            return list(elems)
        return checked_records("stateful_transform transform() result", transform(list(elems)))

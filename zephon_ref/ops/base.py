"""The operator authoring kit: traits, ops, accumulators.

Theory of operation
-------------------
An operator is split in two, as in zephon 0.2.0 (``zephon.ops``):

* the **accumulator** is a sans-IO state machine that owns *all* cross-call
  state (buffers, bins, counters).  The runner calls it serially, in upstream
  order: ``push_many(records) -> [ReadyBatch]``, ``flush(reset=, lane_id=)``,
  ``on_source_exhausted``, ``try_epoch_reset``.  A ``ReadyBatch`` is the tuple
  ``(elements, wait_ns)``; ``wait_ns`` is always 0 here (no clocks);
* the **op** (:class:`BaseOp`) is stateless across calls; ``process_many`` maps
  one ready batch to output records and may be fanned out to workers.

Invariants kept by every accumulator in this package:

* state is per lane; ``flush(reset=True, lane_id=L)`` drains lane ``L`` only and
  afterwards ``has_pending_data(L)`` is False and lane ``L`` behaves exactly as
  in a freshly constructed accumulator; other lanes are untouched;
* no clock, no global ``random``, no ``hash()`` of strings: a ready batch
  depends only on the pushed records and the constructor's knobs.

What may not live here: any particular operator's algorithm, engine state,
threads or I/O; the runner (ordering, sentinels, stalls) belongs to the engine.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, Protocol, TypeAlias, TypeVar, runtime_checkable

from zephon_ref.errors import ConfigError, ConfigTypeError, expected
from zephon_ref.types import SampleBatch, SampleRecord

__all__ = [
    "Accumulator",
    "BaseOp",
    "CountingAccumulator",
    "FasterOps",
    "OpContext",
    "OpTraits",
    "PassthroughAccumulator",
    "ReadyBatch",
    "SourceExhaustion",
    "StageInfo",
    "check_bool",
    "check_choice",
    "check_int",
    "lane_of",
]

T = TypeVar("T")

#: ``(elements, wait_ns)``: one batch ready for ``process_many``.
ReadyBatch: TypeAlias = tuple[list[T], int]


# ----------------------------------------------------------------------------
# argument validation shared by the operators (typed errors naming the argument)
# ----------------------------------------------------------------------------


def check_int(
    name: str, value: Any, *, minimum: int | None = None, allow_none: bool = False
) -> None:
    """Raise ConfigError/ConfigTypeError unless ``value`` is an int >= minimum."""
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        want = "an int" + (" or None" if allow_none else "")
        raise ConfigTypeError(expected(name, want, value))
    if minimum is not None and value < minimum:
        raise ConfigError(expected(name, f"an int >= {minimum}", value))


def check_bool(name: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise ConfigTypeError(expected(name, "a bool", value))



def check_choice(name: str, value: Any, choices: Sequence[Any]) -> None:
    # Compare by type first: ``value in choices`` would call an arbitrary ``__eq__``
    # (a numpy array compares elementwise and then refuses to be a bool).
    for c in choices:
        if value is c or (type(value) is type(c) and value == c):
            return
    want = "one of " + ", ".join(repr(c) for c in choices)
    if value is None or isinstance(value, str):
        raise ConfigError(expected(name, want, value))
    raise ConfigTypeError(expected(name, want, value))


# ----------------------------------------------------------------------------
# traits, context
# ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class OpTraits:
    """Static capabilities an operator advertises to the planner.

    ``preserves_cursor_order`` has no default: every operator must say whether it
    reorders (packs, shuffles, mixture correction) or not.
    """

    preserves_cursor_order: bool
    indexable: bool = True
    calibration_replayable: bool = False
    parallelism: int = 1
    batch_shape_sensitive: bool = False
    requires_serial_state: bool = False

    def __post_init__(self) -> None:
        check_bool("preserves_cursor_order", self.preserves_cursor_order)
        check_int("parallelism", self.parallelism, minimum=1)


@dataclass(frozen=True, slots=True)
class StageInfo:
    """Plan metadata (defaults mean ``setup`` has not run)."""

    stage_index: int = -1
    stage_name: str = ""
    op_index: int = -1
    collect_stats: bool = False


class OpContext:
    """Runner-provided services, read with :meth:`get`."""

    __slots__ = ("_services", "stage_info")

    def __init__(self, services: dict[str, Any], stage_info: StageInfo | None = None) -> None:
        self._services = dict(services)
        self.stage_info = stage_info if stage_info is not None else StageInfo()

    def get(self, key: str, default: Any | None = None) -> Any:
        return self._services.get(key, default)


@dataclass(frozen=True, slots=True)
class SourceExhaustion:
    """What one operator has seen of end-of-data sentinels in one lane."""

    exhausted: frozenset[int] = frozenset()
    continuing: frozenset[int] = frozenset()
    final_component: int | None = None


# ----------------------------------------------------------------------------
# accumulators
# ----------------------------------------------------------------------------


def lane_of(elem: Any) -> int:
    """Lane of a record, a batch (its first record) or an engine tuple ``(_, lane, ...)``."""
    kind = type(elem)  # exact types first: this runs for every element of every push
    if kind is SampleRecord:
        lane: int = elem.meta.lane_id
        return lane
    if kind is tuple:
        return int(elem[1])
    if isinstance(elem, SampleRecord):
        return elem.meta.lane_id
    if isinstance(elem, SampleBatch):
        return elem.lane_ids[0]
    if isinstance(elem, tuple):
        return int(elem[1])
    meta = getattr(elem, "meta", None)  # duck-typed records (e.g. zephon's)
    if meta is not None:
        return int(meta.lane_id)
    raise ConfigTypeError(expected("element", "a SampleRecord, SampleBatch or engine tuple", elem))


class Accumulator(ABC, Generic[T]):
    """Serial, per-lane state machine that decides worker batch boundaries."""

    @abstractmethod
    def push_many(self, elems: Sequence[T]) -> list[ReadyBatch[T]]:
        """Consume ``elems`` in stream order; return 0..N ready batches."""

    @abstractmethod
    def flush(self, *, reset: bool = False, lane_id: int | None = None) -> list[ReadyBatch[T]]:
        """Emit what is buffered (lane ``lane_id`` only, or all lanes when None).

        With ``reset=True`` the flushed lane(s) must end up indistinguishable
        from a freshly constructed accumulator.
        """

    @property
    def reads_payload(self) -> bool:
        """Whether ``push_many`` reads payloads (default: metadata only)."""
        return False

    def has_pending_data(self, lane_id: int | None = None) -> bool:
        """True if ``flush`` would emit something (for ``lane_id``, or any lane)."""
        return False

    def on_source_exhausted(self, lane_id: int, component_id: int) -> list[ReadyBatch[T]]:
        """React to an end-of-data sentinel; the default leaves buffers alone."""
        return []

    def try_epoch_reset(self, boundary_chunk_id: int, lane_id: int | None = None) -> bool:
        """Delayed reset for a stalled flush sentinel; default: only when empty."""
        return not self.has_pending_data(lane_id)

    def on_chunk(self, lane_id: int, chunk_id: int, mixture: Mapping[int, float]) -> None:
        """Chunk ``chunk_id`` of ``lane_id`` starts; ``mixture`` (component id -> weight) is its
        target mixture, or its counted one.  Announced ahead of the chunk's first sample (chunk
        mixtures travel forward with the data); the default ignores it.  A zephon_ref addition:
        zephon's accumulators ask the engine (``ctx["get_chunk_mixture"]``) instead."""


class PassthroughAccumulator(Accumulator[T]):
    """Each non-empty upstream micro-batch becomes one ready batch, unchanged."""

    def push_many(self, elems: Sequence[T]) -> list[ReadyBatch[T]]:
        if not elems:
            return []
        return [(list(elems), 0)]

    def flush(self, *, reset: bool = False, lane_id: int | None = None) -> list[ReadyBatch[T]]:
        return []


class CountingAccumulator(Accumulator[T]):
    """Per-lane count batching: a lane's buffer is emitted when it holds ``max_batch``.

    ``max_latency_ms`` is accepted for signature compatibility; zephon_ref has no
    clock in its data path, so it is recorded and never consulted (the
    deterministic-mode behaviour of zephon, where built-ins pass None).
    With ``drop_last`` a flush discards partial batches.
    """

    def __init__(
        self, max_batch: int, max_latency_ms: int | None = None, *, drop_last: bool = False
    ) -> None:
        check_int("max_batch", max_batch, minimum=1)
        check_int("max_latency_ms", max_latency_ms, minimum=0, allow_none=True)
        check_bool("drop_last", drop_last)
        self.max_batch = max_batch
        self.max_latency_ms = max_latency_ms
        self.drop_last = drop_last
        # lane -> records in arrival order; a lane key exists only while non-empty
        self._buffers: dict[int, list[T]] = {}

    def has_pending_data(self, lane_id: int | None = None) -> bool:
        if lane_id is None:
            return bool(self._buffers)
        return lane_id in self._buffers

    def buffered(self, lane_id: int) -> tuple[T, ...]:
        return tuple(self._buffers.get(lane_id, ()))

    def push_many(self, elems: Sequence[T]) -> list[ReadyBatch[T]]:
        ready: list[ReadyBatch[T]] = []
        for elem in elems:
            lane = lane_of(elem)
            buf = self._buffers.setdefault(lane, [])
            buf.append(elem)
            if len(buf) >= self.max_batch:
                ready.append((buf, 0))
                del self._buffers[lane]
        return ready

    def flush(self, *, reset: bool = False, lane_id: int | None = None) -> list[ReadyBatch[T]]:
        lanes = sorted(self._buffers) if lane_id is None else [lane_id]
        ready: list[ReadyBatch[T]] = []
        for lane in lanes:
            buf = self._buffers.pop(lane, None)
            if buf and not self.drop_last:
                ready.append((buf, 0))
        return ready


# ----------------------------------------------------------------------------
# operators
# ----------------------------------------------------------------------------


class BaseOp(ABC):
    """Base class of every operator: stateless ``process_many`` plus an accumulator."""

    def __init__(self) -> None:
        self.stage_info: StageInfo = StageInfo()

    @classmethod
    def plan_identity(cls) -> str:
        return f"{cls.__module__}.{cls.__qualname__}"

    def setup(self, ctx: OpContext) -> None:
        self.stage_info = ctx.stage_info

    def teardown(self) -> None:  # noqa: B027 (optional hook, deliberately empty)
        """Release worker resources; the default has none."""

    @abstractmethod
    def traits(self) -> OpTraits: ...

    def accumulator(self, *, deterministic: bool, ctx: dict[str, Any]) -> Accumulator[Any]:
        return PassthroughAccumulator()

    def process_one(self, elem: Any) -> list[Any]:
        return self.process_many([elem])

    @abstractmethod
    def process_many(self, elems: list[Any]) -> list[Any]: ...

    def validation_samples(self) -> list[SampleRecord] | None:
        return None


class RecordMapOp(BaseOp):
    """An operator that maps each record on its own, keeping the cursor order, read in micro-batches
    of at most ``config.max_batch`` records (the counting accumulator): map_transform, tokenize,
    decode_text, expand_chat, tokenize_chat.  It sets ``self.config`` (with ``max_batch``) and
    ``self.parallelism``; a subclass whose records cannot be read by index on their own (a record
    that fans out) sets ``indexable = False``."""

    indexable: ClassVar[bool] = True
    config: Any
    parallelism: int

    def traits(self) -> OpTraits:
        return OpTraits(preserves_cursor_order=True, indexable=self.indexable, calibration_replayable=True,
                        parallelism=self.parallelism)

    def accumulator(self, *, deterministic: bool, ctx: dict[str, Any]) -> Accumulator[Any]:
        return CountingAccumulator(self.config.max_batch)


@runtime_checkable
class FasterOps(Protocol):
    """The seam where faster operator implementations enter (:class:`zephon_ref.fast.ops.FastOps`):
    ``operator(op)`` is an operator whose records, refusals and warnings equal ``op``'s for every
    input, or ``op`` itself.  The engine asks it once per stage at start; the fingerprint and the
    state never see it (tests/properties/test_fast_ops.py checks it against the plain operators)."""

    def operator(self, op: BaseOp) -> BaseOp:
        ...

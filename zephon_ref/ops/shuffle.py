"""shuffle: deterministic streaming (reservoir) and block shuffles.

Theory of operation
-------------------
**streaming** (default).  Per lane a reservoir list, a counter
``emitted_since_reset`` and closer bookkeeping.  A record is appended; if the
reservoir is now longer than its target ``min(buffer_size, W + counter)``
(``W = max(1, min(128, buffer_size // 16))``, or target 0 when
``buffer_size == 1``), one victim leaves by swap-pop at index
``stable_index(seed, lane, salt(record), counter, size)``.  The index is a pure
function of those values, so the output does not depend on how the input is
split into ``push_many`` calls.  ``flush`` drains the reservoir with the fixed
flush salt, counters running on from the lane's counter and sizes shrinking to
1, then forgets the lane.

Closer rewriting keeps the lineage invariant under reordering: records with
explicit contributors are counted per ``(lane, chunk, offset)``; when one is
emitted a ref closes iff a closer of that offset was seen and no sibling stays
buffered, so ``is_last_child`` moves to the last-emitted sibling
(:class:`~zephon_ref.ops.closers.CloserTally`).  Records without contributors
are their own sole closer and need no tracking.

**block** / **block_warmup**.  A per-lane count accumulator forms blocks
(``buffer_size``, or a size growing from ``W`` by ``warmup_growth``), and
``process_many`` shuffles each lane-pure block with
``random.Random(batch_seed(seed, block))`` (an explicitly seeded generator, no
global state), then moves each offset's closing flag to its last occurrence
(:func:`~zephon_ref.ops.closers.move_closers_to_last`).

``batch_seed`` folds cursor keys as zephon 0.2.0 does, including its use of
CPython's ``hash()`` of the lineage and sample-id *int tuples*.  Int-tuple
hashes do not depend on ``PYTHONHASHSEED`` (string hashes do), so this is
deterministic across processes; we compute that hash explicitly
(:func:`int_tuple_hash`, CPython >= 3.8 on 64-bit) rather than call ``hash()``,
so the value does not silently change with the interpreter.

What may not live here: wall clock, global ``random``, string hashing.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from random import Random  # seeded instances only: never the global generator
from typing import Any, ClassVar

from zephon_ref.ops.base import (
    Accumulator,
    BaseOp,
    CountingAccumulator,
    OpTraits,
    ReadyBatch,
    check_int,
    lane_of,
)
from zephon_ref.ops.closers import CloserTally, move_closers_to_last
from zephon_ref.ops.knobs import Choice, Float, Int, check_execution, check_fields, knob
from zephon_ref.types import SampleMeta, SampleRecord

__all__ = [
    "DEFAULT_BUFFER_SIZE",
    "FLUSH_SALT",
    "BlockWarmupAccumulator",
    "Shuffle",
    "ShuffleConfig",
    "StreamingShuffleAccumulator",
    "batch_seed",
    "check_growth",
    "cursor_salt",
    "int_tuple_hash",
    "move_closers_to_last",
    "stable_index",
    "warmup_window",
]

DEFAULT_BUFFER_SIZE = 8192
ALGORITHMS = ("streaming", "block", "block_warmup")
FLUSH_SALT = 0xD1B54A32D192ED03

_M64 = (1 << 64) - 1
_M32 = (1 << 32) - 1
_GOLDEN = 0x9E3779B97F4A7C15


# ----------------------------------------------------------------------------
# stable hashing
# ----------------------------------------------------------------------------


def _avalanche(x: int) -> int:
    """splitmix64 finaliser."""
    x &= _M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


def _fold(acc: int, value: int) -> int:
    return _avalanche(acc ^ _avalanche(value + _GOLDEN))


def stable_index(seed: int, lane: int, salt: int, counter: int, size: int) -> int:
    """Victim index in ``[0, size)``: a pure function of its five arguments."""
    assert size >= 1
    acc = _avalanche(seed)
    for v in (lane, salt, counter, size):
        acc = _fold(acc, v)
    return acc % size


def cursor_salt(meta: SampleMeta) -> int:
    """32-bit FNV-1a over chunk, offset, lineage and sample id (each as two 32-bit halves)."""
    h = 0x811C9DC5
    for v in (meta.chunk_id, meta.chunk_offset, *meta.lineage, *meta.sample_id):
        v &= _M64
        for half in (v & _M32, v >> 32):
            h = ((h ^ half) * 0x01000193) & _M32
    return h


_PY_MODULUS = (1 << 61) - 1
_XX1 = 11400714785074694791
_XX2 = 14029467366897019727
_XX5 = 2870177450012600261


def _int_hash(n: int) -> int:
    """CPython's hash() of an int (64-bit build)."""
    h = abs(n) % _PY_MODULUS
    if n < 0:
        h = -h
    return -2 if h == -1 else h


def int_tuple_hash(values: Sequence[int]) -> int:
    """CPython >= 3.8 ``hash(tuple_of_ints)`` on a 64-bit build, computed explicitly."""
    acc = _XX5
    for v in values:
        lane = _int_hash(int(v)) & _M64
        acc = (acc + lane * _XX2) & _M64
        acc = ((acc << 31) | (acc >> 33)) & _M64
        acc = (acc * _XX1) & _M64
    acc = (acc + (len(values) ^ (_XX5 ^ 3527539))) & _M64
    if acc == _M64:
        return 1546275796
    return acc - (1 << 64) if acc >> 63 else acc


def batch_seed(base_seed: int, elems: Sequence[SampleRecord]) -> int:
    """32-bit seed folded from a block's cursor keys (zephon 0.2.0's formula)."""
    acc = base_seed
    for rec in elems:
        m = rec.meta
        acc = (acc * 1315423911) ^ (m.chunk_id * 2654435761) ^ (m.chunk_offset << 8)
        acc = acc ^ int_tuple_hash(m.lineage) ^ int_tuple_hash(tuple(m.sample_id))
    return acc & _M32


def warmup_window(buffer_size: int) -> int:
    return 0 if buffer_size <= 1 else max(1, min(128, buffer_size // 16))


#: ``warmup_growth``: a finite number > 1.0 (inf and nan have no block size)
GROWTH = Float(1.0, min_open=True)


def check_growth(growth: Any) -> float:
    """``warmup_growth`` checked against :data:`GROWTH`, as a float."""
    GROWTH.check("warmup_growth", growth)
    return float(growth)


@dataclass(slots=True)
class _StreamingLane:
    reservoir: list[SampleRecord] = field(default_factory=list)
    counter: int = 0
    # the explicit contributors of the records in the reservoir (the closer move, ops/closers.py)
    tally: CloserTally = field(default_factory=CloserTally)


class StreamingShuffleAccumulator(Accumulator[SampleRecord]):
    """Per-lane deterministic reservoir; see the module docstring."""

    def __init__(self, buffer_size: int, seed: int = 0) -> None:
        check_int("buffer_size", buffer_size, minimum=1)
        check_int("seed", seed, minimum=0)
        self.buffer_size = buffer_size
        self.seed = seed
        self.warmup = warmup_window(buffer_size)
        self._lanes: dict[int, _StreamingLane] = {}

    def has_pending_data(self, lane_id: int | None = None) -> bool:
        if lane_id is None:
            return any(s.reservoir for s in self._lanes.values())
        s = self._lanes.get(lane_id)
        return s is not None and bool(s.reservoir)

    def _target(self, counter: int) -> int:
        if self.buffer_size == 1:
            return 0
        return min(self.buffer_size, self.warmup + counter)

    def push_many(self, elems: Sequence[SampleRecord]) -> list[ReadyBatch[SampleRecord]]:
        out: list[SampleRecord] = []
        lanes = self._lanes
        for rec in elems:
            lane = lane_of(rec)
            st = lanes.get(lane)
            if st is None:
                st = lanes[lane] = _StreamingLane()
            st.tally.add(rec.meta.contributors)
            st.reservoir.append(rec)
            size = len(st.reservoir)
            if size > self._target(st.counter):
                idx = stable_index(self.seed, lane, cursor_salt(rec.meta), st.counter, size)
                st.counter += 1
                out.append(self._release(st, _swap_pop(st.reservoir, idx)))
        return [(out, 0)] if out else []

    def flush(self, *, reset: bool = False, lane_id: int | None = None) -> list[ReadyBatch[SampleRecord]]:
        lanes = sorted(self._lanes) if lane_id is None else [lane_id]
        ready: list[ReadyBatch[SampleRecord]] = []
        for lane in lanes:
            st = self._lanes.pop(lane, None)
            if st is None or not st.reservoir:
                continue
            out: list[SampleRecord] = []
            while st.reservoir:
                size = len(st.reservoir)
                idx = stable_index(self.seed, lane, FLUSH_SALT, st.counter, size)
                st.counter += 1
                out.append(self._release(st, _swap_pop(st.reservoir, idx)))
            assert not st.tally, "every tracked offset drains with the reservoir"
            ready.append((out, 0))
        return ready

    @staticmethod
    def _release(st: _StreamingLane, rec: SampleRecord) -> SampleRecord:
        refs = rec.meta.contributors
        new = st.tally.release(refs) if refs else None
        return rec if new is None else SampleRecord(rec.meta.with_contributors(new), rec.payload)


def _swap_pop(buf: list[SampleRecord], idx: int) -> SampleRecord:
    rec = buf[idx]
    tail = buf.pop()
    if idx < len(buf):
        buf[idx] = tail
    return rec


class BlockWarmupAccumulator(Accumulator[SampleRecord]):
    """Per-lane blocks whose size starts at ``W`` and grows by ``growth`` to ``buffer_size``."""

    def __init__(self, buffer_size: int, *, growth: float = 1.5) -> None:
        check_int("buffer_size", buffer_size, minimum=1)
        self.growth = check_growth(growth)
        self.buffer_size = buffer_size
        self.initial = min(buffer_size, max(1, warmup_window(buffer_size)))
        self._buffers: dict[int, list[SampleRecord]] = {}
        self._targets: dict[int, int] = {}

    def has_pending_data(self, lane_id: int | None = None) -> bool:
        if lane_id is None:
            return any(self._buffers.values())
        return bool(self._buffers.get(lane_id))

    def push_many(self, elems: Sequence[SampleRecord]) -> list[ReadyBatch[SampleRecord]]:
        ready: list[ReadyBatch[SampleRecord]] = []
        for rec in elems:
            lane = lane_of(rec)
            buf = self._buffers.setdefault(lane, [])
            target = self._targets.setdefault(lane, self.initial)
            buf.append(rec)
            if len(buf) >= target:
                ready.append((buf, 0))
                self._buffers[lane] = []
                # Compare before rounding: target * growth overflows ceil() for a huge
                # (finite) growth, and any product >= buffer_size caps at buffer_size anyway.
                scaled = target * self.growth
                grown = self.buffer_size if scaled >= self.buffer_size else math.ceil(scaled)
                self._targets[lane] = min(self.buffer_size, max(target + 1, grown))
        return ready

    def flush(self, *, reset: bool = False, lane_id: int | None = None) -> list[ReadyBatch[SampleRecord]]:
        lanes = sorted(set(self._buffers) | set(self._targets)) if lane_id is None else [lane_id]
        ready: list[ReadyBatch[SampleRecord]] = []
        for lane in lanes:
            buf = self._buffers.pop(lane, None)
            self._targets.pop(lane, None)
            if buf:
                ready.append((buf, 0))
        return ready


@dataclass(frozen=True, slots=True, kw_only=True)
class ShuffleConfig:
    """The data knobs of ``shuffle``: each field's domain is declared (:mod:`zephon_ref.ops.knobs`)."""

    BUILDER: ClassVar[str] = "shuffle"  # the builder method these knobs configure (the suite draws it)
    buffer_size: int = knob(DEFAULT_BUFFER_SIZE, Int(1), doc="records a lane's buffer holds")
    seed: int = knob(0, Int(0), doc="the shuffle's own seed (not the source's)")
    algorithm: str = knob("streaming", Choice(ALGORITHMS), doc="reservoir, fixed blocks, or growing blocks")
    warmup_growth: float = knob(1.5, GROWTH,
                                doc="block_warmup: each block is this much larger than the last")

    def __post_init__(self) -> None:
        check_fields(self)
        # a finite int or float > 1; kept as a float (an int beyond the float range is refused above)
        object.__setattr__(self, "warmup_growth", float(self.warmup_growth))


class Shuffle(BaseOp):
    """``shuffle(buffer_size=None, *, seed=0, algorithm="streaming", warmup_growth=1.5)``."""

    def __init__(
        self,
        buffer_size: int | None = None,
        *,
        seed: int = 0,
        algorithm: str = "streaming",
        warmup_growth: float = 1.5,
        placement: str = "auto",
        parallelism: int | None = None,
    ) -> None:
        super().__init__()
        # execution settings: validated here; parallelism is kept as the plan's hint only (traits,
        # explain(); the fingerprint leaves it out), never read by the data path
        check_execution(placement=placement, parallelism=parallelism)
        self.parallelism = 1 if parallelism is None else parallelism
        self.config = ShuffleConfig(buffer_size=DEFAULT_BUFFER_SIZE if buffer_size is None else buffer_size,
                                    seed=seed, algorithm=algorithm, warmup_growth=warmup_growth)

    def traits(self) -> OpTraits:
        return OpTraits(
            preserves_cursor_order=False, indexable=False, calibration_replayable=True,
            parallelism=self.parallelism
        )

    def accumulator(self, *, deterministic: bool, ctx: dict[str, Any]) -> Accumulator[Any]:
        c = self.config
        if c.algorithm == "streaming":
            return StreamingShuffleAccumulator(c.buffer_size, c.seed)
        if c.algorithm == "block_warmup":
            return BlockWarmupAccumulator(c.buffer_size, growth=c.warmup_growth)
        return CountingAccumulator(c.buffer_size)

    def process_many(self, elems: list[Any]) -> list[Any]:
        if not elems or self.config.algorithm == "streaming":
            return list(elems)
        block = list(elems)
        Random(batch_seed(self.config.seed, block)).shuffle(block)
        return move_closers_to_last(block)

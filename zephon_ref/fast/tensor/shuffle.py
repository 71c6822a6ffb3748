"""The shuffle permutation of one lane: streaming reservoir and block shuffles over units.

Theory of operation
-------------------
A *unit* is what flows after the record-level stages: ``(documents, flags)``, a
pack or a single document, with one contributor flag per document.  Its cursor
is the first document's (extended by offset 0 for a pack); its contributors are
its documents' base offsets ``(chunk, offset)``.

Streaming (``StreamingLane``): a reservoir list and a counter.  A unit is
appended; while the reservoir is longer than ``min(buffer_size, W + counter)``
(``W = max(1, min(128, buffer_size // 16))``; target 0 when ``buffer_size == 1``)
one unit leaves by swap-pop at the victim index, a splitmix64 fold of
``(seed, lane, salt, counter, size)`` modulo ``size``, where ``salt`` is a 32-bit
FNV-1a of the unit's cursor (chunk, offset, lineage, sample id as 32-bit
halves).  A flush drains the reservoir with the fixed flush salt and forgets the
lane (the counter restarts at 0).  These are the formulas of the zephon 0.2.0
notes (section on shuffle); implemented here from the notes, not from the
reference's code path.

Block (``BlockLane``): groups of ``buffer_size`` (or, for ``block_warmup``,
growing sizes), each permuted by ``random.Random(block_seed)`` where the seed
folds the block's cursors (zephon's formula, whose tuple hashes are CPython's
hash of int tuples; :func:`tuple_hash` computes that value with explicit 64-bit
integer arithmetic, so nothing depends on the interpreter's hashing); a flush
emits the partial block, permuted the same way.

Closing flags: per base offset a count of buffered units and whether a closer
was seen; when a unit leaves, a flag closes iff a closer was seen and no other
buffered unit holds that offset (block: the last occurrence in the permuted
block closes).
"""

from __future__ import annotations

import math
from random import Random  # explicitly seeded instances only
from typing import Any

__all__ = ["BlockLane", "StreamingLane", "Unit", "tuple_hash", "unit_cursor"]

Unit = tuple[tuple[Any, ...], tuple[bool, ...]]

_M64 = (1 << 64) - 1
_M32 = (1 << 32) - 1
_PHI = 0x9E3779B97F4A7C15
FLUSH_SALT = 0xD1B54A32D192ED03


def _mix(x: int) -> int:
    x &= _M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


def victim(seed: int, lane: int, salt: int, counter: int, size: int) -> int:
    acc = _mix(seed)
    for v in (lane, salt, counter, size):
        acc = _mix(acc ^ _mix(v + _PHI))
    return acc % size


#: ``_mix(v + _PHI)`` for small ``v`` (counters and sizes), grown on demand: a pure function's table
_KEYED: list[int] = []


def _keyed(v: int) -> int:
    if v < len(_KEYED):
        return _KEYED[v]
    if v < (1 << 20):
        _KEYED.extend(_mix(x + _PHI) for x in range(len(_KEYED), 2 * v + 64))
        return _KEYED[v]
    return _mix(v + _PHI)


def unit_cursor(u: Unit, packed: bool) -> tuple[int, int, tuple[int, ...], tuple[int, int, int]]:
    d = u[0][0]
    return d[1], d[2], ((*d[4], 0) if packed else d[4]), d[0]


_FNV = 0x01000193
_FNV2 = (_FNV * _FNV) & _M32  # two FNV steps of which the second xors in 0 (a value below 2**32)


def fnv_salt(cur: tuple[int, int, tuple[int, ...], tuple[int, int, int]]) -> int:
    h = 0x811C9DC5
    for v in (cur[0], cur[1], *cur[2], *cur[3]):
        if 0 <= v <= _M32:  # high half 0: ((h ^ v) * P ^ 0) * P == (h ^ v) * P**2 (mod 2**32)
            h = ((h ^ v) * _FNV2) & _M32
            continue
        v &= _M64
        h = ((h ^ (v & _M32)) * _FNV) & _M32
        h = ((h ^ (v >> 32)) * _FNV) & _M32
    return h


_MODULUS = (1 << 61) - 1  # CPython's hash modulus for ints on 64-bit builds
_XX1, _XX2, _XX5 = 11400714785074694791, 14029467366897019727, 2870177450012600261


def _int_hash(n: int) -> int:
    """CPython's hash of an int (64-bit build), as an unsigned 64-bit value."""
    h = n % _MODULUS if n >= 0 else -((-n) % _MODULUS)
    if h == -1:
        h = -2
    return h & _M64


def tuple_hash(values: tuple[int, ...]) -> int:
    """CPython (>= 3.8, 64-bit) ``hash()`` of a tuple of ints, as an unsigned 64-bit value,
    spelled out (the xxHash-style fold of the tuple's item hashes), so the block seed is
    plain integer arithmetic, not a call into the interpreter's hashing."""
    acc = _XX5
    for v in values:
        acc = (acc + _int_hash(v) * _XX2) & _M64
        acc = ((acc << 31) | (acc >> 33)) & _M64
        acc = (acc * _XX1) & _M64
    acc = (acc + (len(values) ^ (_XX5 ^ 3527539))) & _M64
    return 1546275796 if acc == _M64 else acc


def block_seed(base: int, units: list[Unit], packed: bool) -> int:
    """The block's generator seed: a fold of its units' cursors (zephon's formula).  Only the
    low 32 bits are kept, so the fold runs modulo 2**64 (products and xors of the low bits do
    not depend on the high ones)."""
    acc = base & _M64
    for u in units:
        cid, off, lineage, sid = unit_cursor(u, packed)
        acc = ((acc * 1315423911) ^ (cid * 2654435761) ^ (off << 8)) & _M64
        acc ^= tuple_hash(lineage) ^ tuple_hash(tuple(sid))
    return acc & _M32


class StreamingLane:
    __slots__ = ("buffer_size", "counter", "head", "lane", "packed", "reservoir", "seed", "tallies", "warmup")

    def __init__(self, lane: int, buffer_size: int, seed: int, packed: bool) -> None:
        self.lane, self.buffer_size, self.seed, self.packed = lane, buffer_size, seed, packed
        self.head = _mix(_mix(seed) ^ _mix(lane + _PHI))
        self.warmup = 0 if buffer_size <= 1 else max(1, min(128, buffer_size // 16))
        self.reservoir: list[Unit] = []
        self.counter = 0
        self.tallies: dict[tuple[int, int], list[int]] = {}

    def _release(self, idx: int) -> Unit:
        buf = self.reservoir
        u = buf[idx]
        tail = buf.pop()
        if idx < len(buf):
            buf[idx] = tail
        docs, flags = u
        tallies = self.tallies
        new: list[bool] | None = None  # the flags, copied on the first one that changes
        for i, d in enumerate(docs):
            if d[5] is None:  # a 1:1 document: no other unit holds its offset, its flag stays
                continue
            key = (d[1], d[2])
            t = tallies[key]
            n = t[0] = t[0] - 1
            if n == 0:
                del tallies[key]
            flag = n == 0 and bool(t[1])
            if flag != flags[i]:
                if new is None:
                    new = list(flags)
                new[i] = flag
        return u if new is None else (docs, tuple(new))

    def push(self, units: list[Unit], out: list[Unit]) -> None:
        tallies, reservoir, packed = self.tallies, self.reservoir, self.packed
        mix, keyed, phi, m32, fnv2 = _mix, _keyed, _PHI, _M32, _FNV2
        buffer_size, warmup, release = self.buffer_size, self.warmup, self._release
        # victim(seed, lane, salt, counter, size), with the (seed, lane) prefix computed once
        head = self.head
        for u in units:
            docs = u[0]
            for d, f in zip(docs, u[1], strict=True):
                if d[5] is None:
                    continue  # a 1:1 document's offset is in this unit only (see _release)
                key = (d[1], d[2])
                t = tallies.get(key)
                if t is None:
                    tallies[key] = [1, int(f)]
                else:
                    t[0] += 1
                    t[1] = t[1] or int(f)
            reservoir.append(u)
            size = len(reservoir)
            counter = self.counter
            if size > (0 if buffer_size == 1 else min(buffer_size, warmup + counter)):
                # fnv_salt(unit_cursor(u, packed)), inline: FNV-1a over (chunk, offset, lineage
                # (+ 0 for a pack), sample id); fused steps for values in [0, 2**32)
                d = docs[0]
                h = 0x811C9DC5
                for v in ((d[1], d[2], *d[4], 0, *d[0]) if packed else (d[1], d[2], *d[4], *d[0])):
                    if 0 <= v <= m32:
                        h = ((h ^ v) * fnv2) & m32
                    else:
                        v &= _M64
                        h = ((h ^ (v & m32)) * _FNV) & m32
                        h = ((h ^ (v >> 32)) * _FNV) & m32
                acc = mix(head ^ mix(h + phi))
                acc = mix(acc ^ keyed(counter))
                idx = mix(acc ^ keyed(size)) % size
                self.counter = counter + 1
                out.append(release(idx))

    def flush(self, out: list[Unit]) -> None:
        salted = _mix(self.head ^ _mix(FLUSH_SALT + _PHI))  # victim()'s prefix with the flush salt
        while self.reservoir:
            size = len(self.reservoir)
            idx = _mix(_mix(salted ^ _keyed(self.counter)) ^ _keyed(size)) % size
            self.counter += 1
            out.append(self._release(idx))
        assert not self.tallies
        self.counter = 0


class BlockLane:
    __slots__ = ("buf", "buffer_size", "growth", "initial", "packed", "seed", "target")

    def __init__(self, buffer_size: int, seed: int, packed: bool, growth: float | None) -> None:
        self.buffer_size, self.seed, self.packed, self.growth = buffer_size, seed, packed, growth
        w = 0 if buffer_size <= 1 else max(1, min(128, buffer_size // 16))
        self.initial = buffer_size if growth is None else min(buffer_size, max(1, w))
        self.target = self.initial
        self.buf: list[Unit] = []

    def _emit(self, block: list[Unit], out: list[Unit]) -> None:
        Random(block_seed(self.seed, block, self.packed)).shuffle(block)
        last: dict[tuple[int, int], int] = {}
        closer: set[tuple[int, int]] = set()
        for i, (docs, flags) in enumerate(block):
            for d, f in zip(docs, flags, strict=True):
                last[(d[1], d[2])] = i
                if f:
                    closer.add((d[1], d[2]))
        for i, (docs, flags) in enumerate(block):
            nf = tuple((d[1], d[2]) in closer and last[(d[1], d[2])] == i for d in docs)
            out.append((docs, flags) if nf == flags else (docs, nf))

    def push(self, units: list[Unit], out: list[Unit]) -> None:
        for u in units:
            self.buf.append(u)
            if len(self.buf) >= self.target:
                block, self.buf = self.buf, []
                self._emit(block, out)
                if self.growth is not None:
                    scaled = self.target * self.growth
                    grown = self.buffer_size if scaled >= self.buffer_size else math.ceil(scaled)
                    self.target = min(self.buffer_size, max(self.target + 1, grown))

    def flush(self, out: list[Unit]) -> None:
        block, self.buf = self.buf, []
        self.target = self.initial
        if block:
            self._emit(block, out)

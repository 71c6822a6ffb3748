"""The traversal order of one dataset and a cursor over it.

Theory of operation
-------------------
For epoch ``e`` a dataset's samples form one sequence, built in three layers,
each a pure function of ``(seed_e, layout)``:

1. *shard order*: ascending shard ids, permuted by ``random.Random(seed_e)``
   when ``shuffle_shards`` and there are several shards;
2. *within-shard order*: ``0..count-1``, or (``shuffle_within_shard``) that
   range shuffled by ``numpy.random.default_rng((seed_e << 32) ^ ((position << 16) + shard_id))``
   where ``position`` is the shard's place in the visiting order;
3. *blocks*: with block size ``B`` the flattened sequence is cut into aligned
   windows ``[kB, (k+1)B)`` and each is shuffled, in order, by one generator
   seeded ``seed_e ^ GOLDEN``.

``seed_e`` is the base seed, or ``seed + e * GOLDEN`` when reshuffling on repeat.

Layers 1 and 2 are random access: :meth:`DatasetOrder.raw_slice` computes any
range from a binary search over shard sizes.  Layer 3 is sequential in the
generator, so the cursor shuffles whole *fills* of about 65,536 samples and
remembers the generator state from before the current fill
(``block_rng_snapshot``).  Restoring a position therefore costs at most one fill
of generator replay, however far the run has gone: O(1) in training progress.

Memory: O(largest shard) for one within-shard permutation, plus one fill.
Nothing here knows about mixtures, chunks or lanes.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Mapping
from dataclasses import dataclass
from random import Random  # seeded instances only: never the global generator
from typing import Any

import numpy as np

from zephon_ref.types import SampleId

__all__ = ["BLOCK_FILL_TARGET", "GOLDEN", "DatasetCursor", "DatasetOrder"]

GOLDEN = 0x9E3779B97F4A7C15
BLOCK_FILL_TARGET = 1 << 16


@dataclass(frozen=True, slots=True)
class _Knobs:
    shuffle_shards: bool
    shuffle_within_shard: bool
    block_size: int | None  # resolved and clamped; None = no block shuffle


class DatasetOrder:
    """The epoch-specific sample sequence of one dataset (immutable, shareable)."""

    __slots__ = ("_cum", "_cum_list", "_dataset_id", "_knobs", "_perm_cache", "_seed", "_shard_ids", "_sizes",
                 "total")

    def __init__(self, dataset_id: int, ids: np.ndarray, counts: np.ndarray, seed: int, knobs: _Knobs) -> None:
        n = int(ids.size)
        if knobs.shuffle_shards and n > 1:
            perm = list(range(n))
            Random(seed).shuffle(perm)
            idx = np.asarray(perm, dtype=np.intp)
            ids, counts = ids[idx], counts[idx]
        self._dataset_id = dataset_id
        self._shard_ids = [int(x) for x in ids]
        self._sizes = [int(x) for x in counts]
        self._cum = np.cumsum(np.asarray(self._sizes, dtype=np.int64))
        self._cum_list: list[int] = self._cum.tolist()
        self.total = int(self._cum[-1]) if n else 0
        self._seed = seed
        self._knobs = knobs
        self._perm_cache: tuple[int, np.ndarray] | None = None

    def _offsets(self, position: int) -> np.ndarray:
        """Within-shard order of the shard visited at ``position`` (cached: one shard)."""
        cached = self._perm_cache
        if cached is not None and cached[0] == position:
            return cached[1]
        shard_id = self._shard_ids[position]
        offs = np.arange(self._sizes[position], dtype=np.int64)
        if offs.size > 1:
            np.random.default_rng((self._seed << 32) ^ ((position << 16) + shard_id)).shuffle(offs)
        self._perm_cache = (position, offs)
        return offs

    def raw_slice(self, start: int, n: int) -> np.ndarray:
        """Rows ``[start, start+n)`` of the pre-block sequence as an ``(m, 3)`` int64 array."""
        end = min(start + n, self.total)
        if end <= start:
            return np.empty((0, 3), dtype=np.int64)
        out = np.empty((end - start, 3), dtype=np.int64)
        out[:, 0] = self._dataset_id
        # precondition: 0 <= start < total, so the search lands on a real shard
        pos = int(np.searchsorted(self._cum, start, side="right"))
        at = start
        filled = 0
        while at < end:
            shard_start = int(self._cum[pos - 1]) if pos else 0
            shard_end = int(self._cum[pos])
            take = min(end, shard_end) - at
            if take > 0:
                lo = at - shard_start
                out[filled:filled + take, 1] = self._shard_ids[pos]
                if self._knobs.shuffle_within_shard:
                    out[filled:filled + take, 2] = self._offsets(pos)[lo:lo + take]
                else:
                    out[filled:filled + take, 2] = np.arange(lo, lo + take, dtype=np.int64)
                filled += take
                at += take
            pos += 1
        return out

    def point(self, at: int) -> SampleId:
        """Row ``at`` of the pre-block sequence (precondition: ``0 <= at < total``)."""
        pos = bisect_right(self._cum_list, at)
        lo = at - (self._cum_list[pos - 1] if pos else 0)
        off = int(self._offsets(pos)[lo]) if self._knobs.shuffle_within_shard else lo
        return SampleId(self._dataset_id, self._shard_ids[pos], off)

    def block_len(self, block_index: int) -> int:
        b = self._knobs.block_size
        assert b is not None
        return max(0, min(b, self.total - block_index * b))


class DatasetCursor:
    """Position of one dataset's traversal: ``(epoch, position)`` plus the block buffer."""

    __slots__ = (
        "_base_seed", "_block_rng", "_buf", "_buf_start", "_dataset_id", "_ids", "_counts",
        "_knobs", "_order", "_rng_blocks", "_snap_blocks", "_snap_state", "epoch", "position",
    )

    def __init__(self, dataset_id: int, ids: np.ndarray, counts: np.ndarray, *, seed: int,
                 shuffle_shards: bool, shuffle_within_shard: bool, block_size: int | None) -> None:
        self._dataset_id = dataset_id
        self._ids = ids
        self._counts = counts
        self._base_seed = seed
        self._knobs = _Knobs(shuffle_shards, shuffle_within_shard, block_size)
        self.epoch = 0
        self.position = 0
        self._order = self._make_order(0, reshuffle=False)
        self._reset_block_state()

    # -- epochs ---------------------------------------------------------------------------
    def _make_order(self, epoch: int, *, reshuffle: bool) -> DatasetOrder:
        seed = self._base_seed + epoch * GOLDEN if (reshuffle and epoch > 0) else self._base_seed
        return DatasetOrder(self._dataset_id, self._ids, self._counts, seed, self._knobs)

    def _reset_block_state(self) -> None:
        self._buf: np.ndarray | None = None
        self._buf_start = 0
        self._block_rng: np.random.Generator | None = None
        self._rng_blocks = 0  # blocks the generator has shuffled so far
        self._snap_state: Mapping[str, Any] | None = None
        self._snap_blocks = 0
        if self.has_blocks:
            self._block_rng = np.random.default_rng(self._order._seed ^ GOLDEN)
            self._snap_state = self._block_rng.bit_generator.state

    @property
    def has_blocks(self) -> bool:
        return self._knobs.block_size is not None and self._order.total > 1

    @property
    def total(self) -> int:
        return self._order.total

    @property
    def remaining(self) -> int:
        return self._order.total - self.position

    def reset(self, *, reshuffle: bool) -> None:
        """Start the next epoch at position 0."""
        self.seek(self.epoch + 1, 0, reshuffle=reshuffle)

    # -- reading --------------------------------------------------------------------------
    def next_many(self, n: int) -> list[SampleId]:
        """Up to ``n`` next pointers (fewer only at the end of the epoch)."""
        n = min(n, self.remaining)
        if n <= 0:
            return []
        if not self.has_blocks:
            rows = self._order.raw_slice(self.position, n)
        else:
            parts = []
            want = n
            at = self.position
            while want > 0:
                buf = self._buf
                if buf is None or not (self._buf_start <= at < self._buf_start + len(buf)):
                    self._fill(self._fill_index(at))
                    buf = self._buf
                    assert buf is not None
                lo = at - self._buf_start
                take = min(want, len(buf) - lo)
                parts.append(buf[lo:lo + take])
                at += take
                want -= take
            rows = parts[0] if len(parts) == 1 else np.concatenate(parts)
        self.position += n
        return list(map(SampleId._make, rows.tolist()))

    def next_one(self) -> SampleId | None:
        """The next pointer, or None at the end of the epoch (same order as :meth:`next_many`)."""
        at = self.position
        if at >= self._order.total:
            return None
        if not self.has_blocks:
            sid = self._order.point(at)
        else:
            buf = self._buf
            if buf is None or not (self._buf_start <= at < self._buf_start + len(buf)):
                self._fill(self._fill_index(at))
                buf = self._buf
                assert buf is not None
            row = buf[at - self._buf_start]
            sid = SampleId(int(row[0]), int(row[1]), int(row[2]))
        self.position = at + 1
        return sid

    # Fills lie on a fixed grid of `_fill_blocks` blocks, so the snapshot a state
    # carries depends only on (epoch, position): a restored cursor writes the same
    # state as one that never stopped.
    @property
    def _fill_blocks(self) -> int:
        b = self._knobs.block_size
        assert b is not None
        return max(1, -(-BLOCK_FILL_TARGET // b))

    def _fill_index(self, at: int) -> int:
        b = self._knobs.block_size
        assert b is not None
        return (at // b) // self._fill_blocks

    def _fill(self, k: int) -> None:
        """Shuffle fill ``k`` (blocks ``[k*F, (k+1)*F)``) into the buffer."""
        b = self._knobs.block_size
        assert b is not None and self._block_rng is not None
        first = k * self._fill_blocks
        # invariant: the generator sits after exactly `_rng_blocks` block shuffles
        assert self._rng_blocks == first, (self._rng_blocks, first)
        start = first * b
        rows = self._order.raw_slice(start, self._fill_blocks * b)
        self._snap_state = self._block_rng.bit_generator.state
        self._snap_blocks = first
        for j in range(0, len(rows), b):
            perm = np.arange(min(b, len(rows) - j), dtype=np.intp)
            self._block_rng.shuffle(perm)
            rows[j:j + len(perm)] = rows[j:j + len(perm)][perm]
        self._rng_blocks = first + -(-len(rows) // b)
        self._buf = rows
        self._buf_start = start

    # -- state ----------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        """``{position, epoch[, block_rng_snapshot]}``: enough to :meth:`seek` back here.

        The snapshot is the generator state before the fill that holds ``position``
        (none once the epoch is used up).
        """
        out: dict[str, Any] = {"position": self.position, "epoch": self.epoch}
        if self.has_blocks and self.position < self.total:
            first = self._fill_index(self.position) * self._fill_blocks
            if self._buf is not None and self._snap_blocks == first:
                snap = self._snap_state
            else:
                # position is at the first block of the next, not yet shuffled, fill
                assert self._block_rng is not None and self._rng_blocks == first, (self._rng_blocks, first)
                snap = self._block_rng.bit_generator.state
            out["block_rng_snapshot"] = {"rng_state": snap, "block_count": first}
        return out

    def seek(self, epoch: int, position: int, *, reshuffle: bool,
             block_rng_snapshot: dict[str, Any] | None = None) -> None:
        """Jump to ``(epoch, position)``; with a snapshot, replay at most one fill of blocks."""
        self.epoch = epoch
        self._order = self._make_order(epoch, reshuffle=reshuffle)
        self._reset_block_state()
        self.position = max(0, min(position, self.total))
        if not self.has_blocks or self.position >= self.total:
            return
        assert self._block_rng is not None
        k = self._fill_index(self.position)
        first = k * self._fill_blocks
        done = 0
        if block_rng_snapshot is not None and int(block_rng_snapshot["block_count"]) <= first:
            self._block_rng.bit_generator.state = block_rng_snapshot["rng_state"]
            done = int(block_rng_snapshot["block_count"])
        # advance the generator past blocks [done, first) without materialising them
        for j in range(done, first):
            self._block_rng.shuffle(np.arange(self._order.block_len(j), dtype=np.intp))
        self._rng_blocks = first
        self._fill(k)

    def clone(self) -> DatasetCursor:
        """An independent cursor at the same place (the order object is shared: immutable)."""
        c = DatasetCursor.__new__(DatasetCursor)
        c._dataset_id, c._ids, c._counts = self._dataset_id, self._ids, self._counts
        c._base_seed, c._knobs, c._order = self._base_seed, self._knobs, self._order
        c.epoch, c.position = self.epoch, self.position
        c._buf = None if self._buf is None else self._buf.copy()
        c._buf_start = self._buf_start
        c._rng_blocks = self._rng_blocks
        c._snap_state, c._snap_blocks = self._snap_state, self._snap_blocks
        c._block_rng = None
        if self._block_rng is not None:
            c._block_rng = np.random.default_rng(0)
            c._block_rng.bit_generator.state = self._block_rng.bit_generator.state
        return c

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

Memory: O(largest shard) for the within-shard permutation of the shard being read, plus
one fill.  A cursor shares nothing mutable: a clone gets its own order and generator
(the shard ids and sizes are immutable and shared).  Nothing here knows about mixtures,
chunks or lanes.
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
    """The epoch-specific sample sequence of one dataset.

    Immutable but for ``held``: the within-shard permutation of the shard last read (one
    shard; a cursor reads positions in increasing order, so each shard's permutation is
    built once per pass).  Owned by one cursor: :meth:`DatasetCursor.clone` copies it.
    """

    __slots__ = (
        "_cum",
        "_cum_list",
        "_dataset_id",
        "_knobs",
        "_seed",
        "_shard_ids",
        "_sizes",
        "held",
        "total",
    )

    def __init__(
        self, dataset_id: int, ids: np.ndarray, counts: np.ndarray, seed: int, knobs: _Knobs
    ) -> None:
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
        self.held: tuple[int, np.ndarray] | None = None  # (shard position, its within-shard order)

    def copy(self) -> DatasetOrder:
        """The same order for another owner (the immutable tables are shared, ``held`` is not)."""
        c = DatasetOrder.__new__(DatasetOrder)
        c._dataset_id, c._shard_ids, c._sizes = self._dataset_id, self._shard_ids, self._sizes
        c._cum, c._cum_list, c.total = self._cum, self._cum_list, self.total
        c._seed, c._knobs, c.held = self._seed, self._knobs, self.held
        return c

    def _offsets(self, position: int) -> np.ndarray:
        """Within-shard order of the shard visited at ``position``."""
        held = self.held
        if held is not None and held[0] == position:
            return held[1]
        shard_id = self._shard_ids[position]
        offs = np.arange(self._sizes[position], dtype=np.int64)
        if offs.size > 1:
            np.random.default_rng((self._seed << 32) ^ ((position << 16) + shard_id)).shuffle(offs)
        offs.setflags(write=False)
        self.held = (position, offs)
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
    """Position of one dataset's traversal: ``(epoch, position)`` plus the block state.

    With blocks, the generator shuffles a whole *fill* of block permutations at a
    time (it is sequential), but rows are sliced and permuted one block at a time,
    only for blocks something reads: a lane that reads a few blocks of a fill pays
    the generator for the fill and the rows of those blocks only.
    """

    __slots__ = (
        "_base_seed", "_blk", "_block_rng", "_counts", "_dataset_id", "_fill_k", "_ids", "_knobs",
        "_order", "_perms", "_rng_blocks", "_snap_blocks", "_snap_state", "epoch", "position",
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
        self._order = DatasetOrder(dataset_id, ids, counts, seed, self._knobs)
        self._reset_block_state()

    # -- epochs ---------------------------------------------------------------------------
    def _make_order(self, epoch: int, *, reshuffle: bool) -> DatasetOrder:
        seed = self._base_seed + epoch * GOLDEN if (reshuffle and epoch > 0) else self._base_seed
        if seed == self._order._seed:
            return self._order  # the same sequence (no reshuffle): keep it and what it holds
        return DatasetOrder(self._dataset_id, self._ids, self._counts, seed, self._knobs)

    def _reset_block_state(self) -> None:
        self._perms: list[np.ndarray] | None = None  # block permutations of fill `_fill_k`
        self._fill_k = -1
        self._blk: tuple[int, np.ndarray] | None = None  # (block index, its permuted rows)
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
    def _block_rows(self, at: int) -> tuple[np.ndarray, int]:
        """The permuted rows of the block holding ``at``, and ``at``'s index in them."""
        b = self._knobs.block_size
        assert b is not None
        k = self._fill_index(at)
        if self._perms is None or self._fill_k != k:
            self._fill(k)
        j = at // b
        blk = self._blk
        if blk is None or blk[0] != j:
            perms = self._perms
            assert perms is not None
            perm = perms[j - self._fill_k * self._fill_blocks]
            rows = self._order.raw_slice(j * b, len(perm))[perm]
            rows.setflags(write=False)
            blk = (j, rows)
            self._blk = blk
        return blk[1], at - j * b

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
                blk, lo = self._block_rows(at)
                take = min(want, len(blk) - lo)
                parts.append(blk[lo:lo + take])
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
            blk, lo = self._block_rows(at)
            row = blk[lo]
            sid = SampleId(int(row[0]), int(row[1]), int(row[2]))
        self.position = at + 1
        return sid

    def advance(self, n: int) -> int:
        """Move past the next ``n`` pointers without building them; returns how many.

        Same end state as ``len(next_many(n))``: the block generator is moved past
        every fill before the one holding the new position (it is sequential), but
        no rows are sliced, and that fill is shuffled only when something is read.
        """
        n = min(n, self.remaining)
        if n <= 0:
            return 0
        at = self.position + n
        if self.has_blocks and at < self.total:
            k = self._fill_index(at)
            if self._perms is None or self._fill_k != k:
                first = k * self._fill_blocks
                if self._rng_blocks < first:
                    self._move_generator(first)
                    self._perms, self._fill_k, self._blk = None, -1, None  # behind the position now
        self.position = at
        return n

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

    def _move_generator(self, first: int) -> None:
        """Move the block generator forward to block ``first`` (a fill start) without filling."""
        assert self._block_rng is not None and self._rng_blocks <= first
        order = self._order
        for j in range(self._rng_blocks, first):
            self._block_rng.shuffle(np.arange(order.block_len(j), dtype=np.intp))
        self._rng_blocks = first

    def _fill(self, k: int) -> None:
        """Shuffle the block permutations of fill ``k`` (blocks ``[k*F, (k+1)*F)``)."""
        b = self._knobs.block_size
        assert b is not None and self._block_rng is not None
        first = k * self._fill_blocks
        # invariant: the generator sits after exactly `_rng_blocks` block shuffles
        assert self._rng_blocks == first, (self._rng_blocks, first)
        total = self._order.total
        last = min(first + self._fill_blocks, -(-total // b))
        before = self._block_rng.bit_generator.state
        perms = []
        for j in range(first, last):
            perm = np.arange(min(b, total - j * b), dtype=np.intp)
            self._block_rng.shuffle(perm)
            perm.setflags(write=False)
            perms.append(perm)
        self._snap_state = before
        self._snap_blocks = first
        self._rng_blocks = last
        self._perms, self._fill_k, self._blk = perms, k, None

    # -- state ----------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        """``{position, epoch[, block_rng_snapshot]}``: enough to :meth:`seek` back here.

        The snapshot is the generator state before the fill that holds ``position``
        (none once the epoch is used up).
        """
        out: dict[str, Any] = {"position": self.position, "epoch": self.epoch}
        if self.has_blocks and self.position < self.total:
            first = self._fill_index(self.position) * self._fill_blocks
            if self._perms is not None and self._snap_blocks == first:
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
        if block_rng_snapshot is not None and int(block_rng_snapshot["block_count"]) <= first:
            self._block_rng.bit_generator.state = block_rng_snapshot["rng_state"]
            self._rng_blocks = int(block_rng_snapshot["block_count"])
        # advance the generator past blocks [done, first) without materialising them
        self._move_generator(first)
        self._fill(k)

    def clone(self) -> DatasetCursor:
        """An independent cursor at the same place (immutable tables and read-only arrays are shared)."""
        c = DatasetCursor.__new__(DatasetCursor)
        c._dataset_id, c._ids, c._counts = self._dataset_id, self._ids, self._counts
        c._base_seed, c._knobs, c._order = self._base_seed, self._knobs, self._order.copy()
        c.epoch, c.position = self.epoch, self.position
        c._perms, c._fill_k, c._blk = self._perms, self._fill_k, self._blk
        c._rng_blocks = self._rng_blocks
        c._snap_state, c._snap_blocks = self._snap_state, self._snap_blocks
        c._block_rng = None
        if self._block_rng is not None:
            c._block_rng = np.random.default_rng(0)
            c._block_rng.bit_generator.state = self._block_rng.bit_generator.state
        return c

"""ChunkWalk: one walk of the global chunk order, shared by the lane clones of one owner.

Theory of operation
-------------------
Every lane clone of a :class:`~zephon_ref.work.static_mixture.StaticMixtureWorkSource`
enumerates the *whole* global chunk sequence and keeps the chunks it owns.  Two parts of
that walk are the same for every lane:

* *routing*: global chunk ``g`` belongs to slot ``g mod C`` of block ``g div C``, and
  block ``b``'s lane order is :func:`~zephon_ref.work.routing.lane_permutation`
  (``permute``), or lane ``g mod C`` (``modulo``).  A lane alone computes a block's
  permutation once per block it crosses;
* *quotas*: in accumulator mode without ``redistribute`` datasets, the quotas of chunk
  ``g`` are a pure function of the accumulators before it (an exhaustion resets a cursor
  and retries from the same accumulators, so it changes which samples are taken, never
  how many).

Walked plainly (no :class:`ChunkWalk`), C lanes cost O(C) quota computations per chunk a
lane keeps.  A :class:`ChunkWalk` computes routing and quotas once for every clone it is
given, and lets a clone whose accumulators lie on its quota chain jump to its next own
chunk in O(datasets + log window).

It is a faster implementation beside the oracle (house rule 8), entering at one seam: the
``walk=`` argument of ``WorkSource.clone_lanes`` / ``Builder.engine`` (the protocol
:class:`zephon_ref.work.base.SharedWalk`).  Without it every clone walks plainly.

Ownership: a ChunkWalk is created and passed by whoever clones lanes *together* and
serialises their calls: the pipeline facade for one engine's lanes (every ``next_chunk``
call happens on the thread that admits), the simulated world for every rank (one thread).
It is deliberately not thread-safe and nothing in this module is process-global.

Invariant (the reason it may exist): a clone given a ChunkWalk produces exactly the chunks
and states of the same clone walking plainly, whatever the interleaving of lanes, restores
and states from elsewhere (a clone off the chain walks).  ``properties.shortcuts`` checks
it against the plain walk on drawn configurations.

What may not live here: cursors, samples, policies (the source's), chunk ids (the engine's).
"""

from __future__ import annotations

from collections.abc import Hashable

from zephon_ref.errors import ConfigError, expected
from zephon_ref.work.base import QuotaStep
from zephon_ref.work.routing import lane_permutation, lane_slots

__all__ = ["ROUTING_BLOCKS", "TIMELINE_WINDOW", "ChunkWalk"]

TIMELINE_WINDOW = 1 << 14  # global chunks a quota timeline keeps (about 6 MiB at most with three datasets)
ROUTING_BLOCKS = 8  # routing blocks a ChunkWalk keeps (lanes of one owner move through blocks together)
TIMELINE_RULES = 4  # quota rules a ChunkWalk keeps (one per source configuration it serves)


class _QuotaTimeline:
    """The global quota sequence of one quota rule, from some chunk ``lo`` on.

    ``accs[i]``: the accumulators before global chunk ``lo + i``; ``sums[i]``: the quotas of
    chunks ``lo .. lo + i - 1`` summed per dataset.  Invariant: ``accs[i + 1]`` is ``step``
    applied to ``accs[i]`` (the entries form one chain), so a lane whose accumulators equal
    ``accs[g - lo]`` has exactly this future.
    """

    __slots__ = ("accs", "lo", "step", "sums", "window")

    def __init__(self, step: QuotaStep, window: int) -> None:
        self.step = step
        self.window = window
        self.lo = 0
        self.accs: list[tuple[float, ...]] = []
        self.sums: list[tuple[int, ...]] = []

    def _extend_to(self, g: int) -> bool:
        """Entries up to chunk ``g`` (precondition: the chain is not empty); False if the quota
        rule refused on the way (the ordinary path raises it at the right chunk)."""
        accs, sums = self.accs, self.sums
        while self.lo + len(accs) - 1 < g:
            got = self.step(accs[-1])
            if got is None:
                return False
            acc, q = got
            accs.append(acc)
            sums.append(tuple(s + k for s, k in zip(sums[-1], q, strict=True)))
        return True

    def jump(self, g: int, acc: tuple[float, ...], target: int, remaining: tuple[int, ...],
             keep: tuple[int, ...]) -> tuple[int, tuple[float, ...], tuple[int, ...]] | None:
        """See :meth:`ChunkWalk.jump`."""
        accs, sums = self.accs, self.sums
        hi = self.lo + len(accs) - 1
        if not accs or g < self.lo or g > hi + self.window:
            # a new anchor: this lane's own state (every later entry derives from it)
            self.lo, accs[:], sums[:] = g, [acc], [(0,) * len(acc)]
        elif g > hi and not self._extend_to(g):
            return None
        i = g - self.lo
        if accs[i] != acc:
            return None  # not on this chain: the caller walks
        if not self._extend_to(target):
            target = self.lo + len(accs) - 1
        base = sums[i]
        end = target - self.lo
        # the last chunk index (relative) such that every chunk before it fits
        for d, r in enumerate(remaining):
            # the first j > i with sums[j][d] - base[d] > r: chunk j - 1 would run short
            lo_, hi_ = i + 1, end + 1
            while lo_ < hi_:
                mid = (lo_ + hi_) // 2
                if sums[mid][d] - base[d] > r:
                    hi_ = mid
                else:
                    lo_ = mid + 1
            end = min(end, lo_ - 1)
        # stop_after_passes ends the stream at a chunk where every dataset has done its passes;
        # a dataset in its last pass with samples left before the last jumped chunk keeps it
        # going (remaining only shrinks inside a jump), else no jump
        if keep and 2 not in keep and end > i and not any(
                k == 1 and remaining[d] - (sums[end - 1][d] - base[d]) > 0 for d, k in enumerate(keep)):
            end = i
        if end <= i:
            return None
        out = (self.lo + end, accs[end], tuple(a - b for a, b in zip(sums[end], base, strict=True)))
        if len(accs) > self.window + self.window // 4:  # keep the newest window (a lane behind it re-anchors)
            cut = len(accs) - self.window
            del accs[:cut], sums[:cut]
            self.lo += cut
        return out


class ChunkWalk:
    """One walk of the global chunk order, shared by the lane clones its owner passes it to.

    See the module docstring for the owner, the invariant and what is shared.  Bounded:
    the newest :data:`ROUTING_BLOCKS` routing blocks and, per quota rule (the newest
    :data:`TIMELINE_RULES`), the newest ``window`` chunks.
    """

    __slots__ = ("_routes", "_timelines", "window")

    def __init__(self, *, window: int = TIMELINE_WINDOW) -> None:
        if isinstance(window, bool) or not isinstance(window, int) or window < 1:
            raise ConfigError(expected("ChunkWalk window", "an int >= 1", window))
        self.window = window
        self._routes: dict[tuple[int, int, int], tuple[tuple[int, ...], tuple[int, ...]]] = {}
        self._timelines: dict[Hashable, _QuotaTimeline] = {}

    def routing(
        self, seed: int, canonical_replicas: int, block: int
    ) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """``(slot -> lane, lane -> slot)`` of a ``permute`` routing block."""
        key = (seed, canonical_replicas, block)
        got = self._routes.pop(key, None)
        if got is None:
            perm = lane_permutation(seed, block, canonical_replicas)
            got = (perm, lane_slots(perm))
            while len(self._routes) >= ROUTING_BLOCKS:
                del self._routes[next(iter(self._routes))]  # the least recently used
        self._routes[key] = got  # (re)inserted last: the most recently used
        return got

    def next_own(self, seed: int, canonical_replicas: int, lane: int, g: int) -> int:
        """The first global chunk ``>= g`` that ``lane`` owns under ``permute`` routing."""
        block, slot = divmod(g, canonical_replicas)
        mine = self.routing(seed, canonical_replicas, block)[1][lane]
        if mine >= slot:
            return block * canonical_replicas + mine
        return (block + 1) * canonical_replicas + self.routing(seed, canonical_replicas, block + 1)[1][lane]

    def jump(
        self,
        rule: Hashable,
        step: QuotaStep,
        g: int,
        acc: tuple[float, ...],
        target: int,
        remaining: tuple[int, ...],
        keep: tuple[int, ...],
    ) -> tuple[int, tuple[float, ...], tuple[int, ...]] | None:
        """From chunk ``g`` at accumulators ``acc`` towards ``target`` (> ``g``) under quota rule
        ``rule`` (``step`` computes one chunk of it; equal rules must have equal steps).

        Returns ``(g', acc at g', per-dataset samples taken by chunks g .. g'-1)`` with
        ``g < g' <= target``, no dataset short (``remaining``) on the way and the stream provably
        not ended by ``stop_after_passes`` (``keep``: empty without it, else per dataset 2 if it
        has passes left beyond the current one, 1 if it is in its last pass (it keeps the stream
        going while it has samples), 0 if done); None when no chunk can be jumped (the caller
        walks one).
        """
        tl = self._timelines.pop(rule, None)
        if tl is None:
            tl = _QuotaTimeline(step, self.window)
            while len(self._timelines) >= TIMELINE_RULES:
                del self._timelines[next(iter(self._timelines))]
        self._timelines[rule] = tl
        return tl.jump(g, acc, target, remaining, keep)

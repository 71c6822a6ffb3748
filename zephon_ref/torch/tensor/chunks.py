"""Every lane's chunk sequence from one pass over the global chunk sequence.

Theory of operation
-------------------
A ``StaticMixtureWorkSource`` lane clone enumerates the whole global chunk sequence
and keeps the chunks it owns ("compute everywhere, discard locally"), so C lanes
compute every chunk's allocation C times.  The contents of global chunk ``g`` do not
depend on who owns it, so :class:`ChunkDispatcher` produces the global sequence once
(a clone of one lane out of one, which owns every chunk) and hands chunk ``g`` to its
owner, which it asks a lane clone of the real topology (``lane_for_chunk(g)``, the
source's public ownership rule).  Each lane reads its own queue
(:meth:`ChunkDispatcher.lane`); a lane whose queue is empty makes the dispatcher
produce until a chunk of that lane appears or the sequence ends.  Lazy: nothing is
produced ahead of the lane that needs it except other lanes' chunks on the way.

Any other work source falls back to one clone per lane.
"""

from __future__ import annotations

from collections import deque
from typing import Any

__all__ = ["ChunkDispatcher", "lane_sources"]


class ChunkDispatcher:
    __slots__ = ("_done", "_global", "_owner", "_queues", "g")

    def __init__(self, source: Any, lanes: int) -> None:
        self._global = source.clone_for_lane(0, 1)
        self._owner = source.clone_for_lane(0, lanes)
        self._queues: list[deque[Any]] = [deque() for _ in range(lanes)]
        self._done = False
        self.g = 0

    def next_for(self, lane: int) -> Any:
        q = self._queues[lane]
        while not q and not self._done:
            chunk = self._global.next_chunk()
            if chunk is None:
                self._done = True
                break
            self._queues[self._owner.lane_for_chunk(self.g)].append(chunk)
            self.g += 1
        return q.popleft() if q else None

    def lane(self, lane: int) -> _LaneView:
        return _LaneView(self, lane)


class _LaneView:
    __slots__ = ("_d", "_lane")

    def __init__(self, d: ChunkDispatcher, lane: int) -> None:
        self._d, self._lane = d, lane

    def next_chunk(self) -> Any:
        return self._d.next_for(self._lane)


def lane_sources(source: Any, lanes: int) -> list[Any]:
    """One chunk reader per lane (``next_chunk()``), in lane order."""
    from zephon_ref.work import StaticMixtureWorkSource

    if type(source) is StaticMixtureWorkSource:
        d = ChunkDispatcher(source, lanes)
        return [d.lane(lane) for lane in range(lanes)]
    return [source.clone_for_lane(lane, lanes) for lane in range(lanes)]

"""The tail multiplexer: per-lane buffers, strict round-robin delivery.

Theory of operation
-------------------
The operators see the owned lanes interleaved, and packing or filtering changes
the rate at which each lane produces output.  :class:`TailMux` buffers the tail's
output per lane and releases it in strict round robin over the owned lanes
(seed 002): the item at the head of lane ``lanes[p]``'s buffer is the only one
that may go next.  Sentinels go out when they reach the head of their lane's
buffer but never take a turn (``p`` moves only past data).

While upstream still produces, :meth:`TailMux.pop` answers None when the current
lane's buffer is empty (the caller must bring more input).  Once upstream is
done, :meth:`TailMux.pop_draining` skips empty lanes, as zephon's tail does at
end of stream.  A group that owns one lane passes items through unchanged.

The pointer ``p`` is pure state of this object; the engine writes the
checkpoint's round-robin pointer on delivery.  No I/O, no threads.
"""

from __future__ import annotations

import warnings
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["TailMux"]

_WARN_AT = 10_000


class TailMux:
    """Per-lane buffers and the strict round-robin pointer."""

    def __init__(self, lanes: Sequence[int], start: int, *, lane_of: Callable[[Any], int],
                 is_sentinel: Callable[[Any], bool]) -> None:
        self.lanes = tuple(lanes)
        self.p = start
        self._bufs: dict[int, deque[Any]] = {lane: deque() for lane in self.lanes}
        self._lane_of = lane_of
        self._is_sentinel = is_sentinel
        self._warn_at = _WARN_AT

    def ready(self) -> bool:
        """Whether the current lane has an item at its head."""
        return bool(self._bufs[self.lanes[self.p]])

    def push(self, item: Any) -> None:
        buf = self._bufs[self._lane_of(item)]
        buf.append(item)
        if len(buf) >= self._warn_at:
            warnings.warn(
                f"tail multiplexer: lane {self._lane_of(item)} buffers {len(buf)} items waiting for its "
                "round-robin turn",
                RuntimeWarning,
                stacklevel=3,
            )
            self._warn_at *= 2

    def _take(self, lane: int) -> Any:
        item = self._bufs[lane].popleft()
        if not self._is_sentinel(item):
            self.p = (self.p + 1) % len(self.lanes)
        return item

    def pop(self) -> Any | None:
        """The current lane's head item, or None when that lane has nothing buffered."""
        lane = self.lanes[self.p]
        return self._take(lane) if self._bufs[lane] else None

    def pop_draining(self) -> Any | None:
        """Upstream is done: the next item in round robin, skipping empty lanes; None when all are empty."""
        for _ in range(len(self.lanes)):
            lane = self.lanes[self.p]
            if self._bufs[lane]:
                return self._take(lane)
            self.p = (self.p + 1) % len(self.lanes)
        return None

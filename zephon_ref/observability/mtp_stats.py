"""zephon's ``MTPQueueStats``: a point-in-time occupancy of the MTP hand-off queue.

zephon_ref runs ``mtp_mode=True`` in-process (no queue), so ``Pipeline.mtp_queue_stats()`` returns
None; the type exists for code that builds or annotates with it.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["MTPQueueStats"]


@dataclass(frozen=True, slots=True)
class MTPQueueStats:
    """Queued items, the queue's capacity, bytes already pickled and the prefetch depth."""

    depth: int
    capacity: int
    staged_bytes: int
    prefetch_depth: int

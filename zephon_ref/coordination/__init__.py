"""Multi-rank checkpoint aggregation: merge, the round protocol, backends and runners.

* :mod:`.merge`     -- pure merge of per-participant engine states (notes 5.2)
* :mod:`.protocol`  -- leader/follower round as sans-IO state machines
* :mod:`.backends`  -- shared directory, torch TCPStore, in-memory storage
* :mod:`.driver`    -- the runner real processes call: :func:`aggregate`
* (the simulator's :mod:`sim.cluster`, outside this package) -- N participants over one in-memory store,
  stepped by hand
"""

from zephon_ref.coordination.backends import (
    Backend,
    DirectoryBackend,
    MemoryBackend,
    TCPStoreBackend,
    open_backend,
)
from zephon_ref.coordination.driver import RoundResult, aggregate, aggregate_round
from zephon_ref.coordination.merge import merge

__all__ = [
    "Backend",
    "DirectoryBackend",
    "MemoryBackend",
    "RoundResult",
    "TCPStoreBackend",
    "aggregate",
    "aggregate_round",
    "merge",
    "open_backend",
]

"""The deterministic core: world and lane mapping, lane streams and sentinels, replay,
completion tracking and eviction, the tail multiplexer, and the runners."""

from zephon_ref.engine.core import Engine, FetchOp
from zephon_ref.engine.world import World

__all__ = ["Engine", "FetchOp", "World"]

"""``zephon.io.memory``: the in-memory shard, the same object as ``zephon_ref.work.dataset.InMemoryShard``."""

from __future__ import annotations

from zephon_ref.work.dataset import InMemoryShard

__all__ = ["InMemoryShard"]

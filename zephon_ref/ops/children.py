"""``zephon.ops.children``: the lineage helpers operators use (defined in :mod:`zephon_ref.lineage`)."""

from zephon_ref.lineage import pack_meta, spawn_child, tombstone_meta, tombstones_for_record

__all__ = ["pack_meta", "spawn_child", "tombstone_meta", "tombstones_for_record"]

"""Lineage helpers: children, packs and tombstones.

Theory of operation
-------------------
The invariant these helpers protect: per lane and base offset, exactly one
record or tombstone in the whole pipeline carries a *closing* contributor
(``is_last_child=True``) for that offset, and it is emitted after every other
fragment of it.  Eviction waits for that closer, so

* a fan-out gives its children deterministic lineage indices and lets only the
  final child close (:func:`spawn_child`);
* a pack lists every contributor it contains (:func:`pack_meta`);
* a drop replaces the record by tombstones for its closing refs
  (:func:`tombstones_for_record`), so the offset still closes.

Nothing here touches engine state; these are pure functions of their inputs.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from zephon_ref.errors import ConfigError
from zephon_ref.types import (
    TAG_CONTRIBUTORS,
    TAG_TOMBSTONE,
    ContributorRef,
    SampleCursor,
    SampleMeta,
    SampleRecord,
)

__all__ = ["pack_meta", "spawn_child", "tombstone_meta", "tombstones_for_record"]


def _set_contributors(tags: dict[str, Any], refs: tuple[ContributorRef, ...]) -> None:
    """What :meth:`SampleMeta.with_contributors` does, on a tags dict being built."""
    if refs:
        tags[TAG_CONTRIBUTORS] = refs
    else:
        tags.pop(TAG_CONTRIBUTORS, None)


def spawn_child(
    parent: SampleMeta,
    child_idx: int,
    *,
    is_last_child: bool = False,
    tags: dict[str, Any] | None = None,
) -> SampleMeta:
    """Metadata of the ``child_idx``-th child of ``parent``.

    Without parent contributors the child gets one ref on its own cursor with the
    given ``is_last_child``.  With contributors, their cursors are kept; a closing
    child keeps their closing flags and a non-closing child clears them all.
    """
    if child_idx < 0:
        raise ConfigError(f"child_idx: expected an int >= 0, received {child_idx!r}")
    if is_last_child and parent.tombstone:
        raise ConfigError(
            "spawn_child: expected a non-tombstone parent for a closing child "
            "(is_last_child=True), received a tombstone"
        )
    lineage = parent.lineage + (int(child_idx),)
    parent_refs = parent.contributors
    refs: tuple[ContributorRef, ...]
    if not parent_refs:
        own = SampleCursor(parent.chunk_id, parent.chunk_offset, parent.sample_id, lineage)
        refs = (ContributorRef(own, is_last_child),)
    elif is_last_child:
        refs = parent_refs
    else:
        refs = tuple(ContributorRef(r.cursor, False) for r in parent_refs)
    child_tags = dict(parent.tags if tags is None else tags)
    child_tags.pop(TAG_TOMBSTONE, None)
    _set_contributors(child_tags, refs)
    tok = parent.component_token_counts
    return SampleMeta(
        parent.sample_id,
        parent.lane_id,
        parent.chunk_id,
        parent.chunk_offset,
        dict(parent.component_sample_counts),
        None if tok is None else dict(tok),
        lineage,
        child_tags,
    )


def pack_meta(
    primary_cursor: SampleCursor,
    contributors: Iterable[ContributorRef],
    *,
    lane_id: int,
    component_sample_counts: dict[int, int],
    component_token_counts: dict[int, int] | None = None,
    tags: dict[str, Any] | None = None,
) -> SampleMeta:
    """Metadata of a record that merges several contributors under ``primary_cursor``."""
    t = dict(tags or {})
    t.pop(TAG_TOMBSTONE, None)
    _set_contributors(t, tuple(contributors))
    return SampleMeta(
        primary_cursor.sample_id,
        lane_id,
        primary_cursor.chunk_id,
        primary_cursor.chunk_offset,
        component_sample_counts,
        component_token_counts,
        primary_cursor.lineage,
        t,
    )


def tombstone_meta(ref: ContributorRef, lane_id: int) -> SampleMeta:
    """A tombstone closing ``ref``'s base offset; ``ref`` must be a closing ref."""
    if not ref.is_last_child:
        raise ConfigError(
            "tombstone_meta: expected a closing contributor (is_last_child=True), "
            f"received {ref!r}"
        )
    c = ref.cursor
    meta = SampleMeta(
        c.sample_id, lane_id, c.chunk_id, c.chunk_offset, lineage=c.lineage,
        tags={TAG_TOMBSTONE: True},
    )
    return meta.with_contributors((ref,))


def tombstones_for_record(record: SampleRecord) -> list[SampleRecord]:
    """One tombstone (payload None) per closing contributor of ``record``."""
    lane = record.meta.lane_id
    return [
        SampleRecord(tombstone_meta(ref, lane), None)
        for ref in record.meta.contribution_refs()
        if ref.is_last_child
    ]

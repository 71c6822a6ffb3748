"""The item normal form: what the property suite compares, record for record.

Theory of operation
-------------------
An adapter (:mod:`properties.adapters`) hands the suite every delivered item as a
list of :class:`Record` (one per record of the item: a micro-batch has several, an
unbatched pipeline one).  Nothing else of an implementation reaches the suite, so
this is all an outside loader must produce:

* ``lane``: the canonical lane the record belongs to (``0 .. canonical_replicas-1``);
* ``cursor``: the record's identity (:class:`CursorKey`): ``(chunk_id, chunk_offset,
  lineage, sample_id)``; ``chunk_id`` counts the lane's admitted chunks from 0,
  ``chunk_offset`` is the position in that chunk, ``lineage`` is ``()`` for a whole
  record and, for a pack, the first segment's start offset in tokens (a record split
  across packs by ``wrap`` gives each piece its own start), ``sample_id`` is the
  sample pointer ``(dataset index, shard id, row index)``;
* ``contributors``: one :class:`Contributor` per segment of the record: the cursor of
  the source offset it came from (``lineage`` always ``()`` there) and
  ``is_last_child`` (True on the segment that closes that offset: the whole record,
  or the last piece of a split one);
* ``payload``: the token ids, a tuple of ints; for a pack, a tuple of per-segment
  token tuples in contributor order.

:class:`Record` and the two small tuples are ``NamedTuple``: a record equals the plain
tuple ``(lane, cursor, contributors, payload)`` with the same values, so views built
by :func:`sim.workloads.record_view` (the simulator's, which may not import
properties) and by :func:`item_view` compare equal, print the same and hash the same.
:func:`item_view` converts any zephon-API item (a ``SampleBatch`` or ``SampleRecord``
of zephon_ref or zephon 0.2.0); :func:`as_record` converts one plain tuple.

What may not live here: comparisons (sim/invariants.py, properties/lineage.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from sim.workloads import record_view

__all__ = ["Contributor", "CursorKey", "Item", "Record", "as_record", "item_view", "lanes_of"]


class CursorKey(NamedTuple):
    """A record's or a contributor's identity within its lane."""

    chunk_id: int
    chunk_offset: int
    lineage: tuple[int, ...]
    sample_id: tuple[int, int, int]


class Contributor(NamedTuple):
    """One segment of a record: the source offset it came from, and whether it closes it."""

    cursor: CursorKey
    is_last_child: bool


class Record(NamedTuple):
    """One delivered record in the normal form (see the module docstring)."""

    lane: int
    cursor: CursorKey
    contributors: tuple[Contributor, ...]
    payload: Any  # tuple[int, ...], or tuple[tuple[int, ...], ...] for a pack


#: one delivered item: its records (a micro-batch has several)
Item = list[Record]


def as_record(view: Sequence[Any]) -> Record:
    """A plain ``(lane, cursor, contributors, payload)`` tuple as a :class:`Record` (equal to it)."""
    lane, cursor, contributors, payload = view
    return Record(int(lane), CursorKey(*cursor),
                  tuple(Contributor(CursorKey(*c), bool(last)) for c, last in contributors), payload)


def item_view(item: Any) -> Item:
    """A delivered item of zephon_ref or zephon 0.2.0 (``SampleBatch`` or ``SampleRecord``) in
    the normal form."""
    return [as_record(v) for v in record_view(item)]


def lanes_of(items: Sequence[Sequence[Any]]) -> dict[int, list[Any]]:
    """Items grouped by the lane of their first record, in delivery order."""
    out: dict[int, list[Any]] = {}
    for v in items:
        out.setdefault(v[0][0], []).append(v)
    return out

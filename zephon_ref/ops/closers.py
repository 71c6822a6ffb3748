"""The closer move: after a reorder, ``is_last_child`` moves to the last emitted fragment of its offset.

Theory of operation
-------------------
Eviction waits, per lane and base offset ``(chunk_id, chunk_offset)``, for the record that
carries the offset's closing contributor (:mod:`zephon_ref.lineage`).  An operator that
reorders records (shuffle, the packers that reorder) must therefore let an offset close only
with its last emitted fragment, and only if some fragment carried a closer at all.  The rule
is written here once per form in which an operator sees its records, and every reordering
operator uses one of the three:

* :func:`move_closers_to_last`, for a whole reordered block at once (block shuffles): the
  last *record* holding a ref of an offset closes it, every ref of that offset in that record;
* :class:`CloserTally`, for records released one at a time from a buffer (the streaming
  shuffle; first/best fit and best_fit_wrap packing): each ref is counted in when its record
  is buffered and out when it leaves, and the last *ref* out closes;
* :func:`closers_after_siblings`, for a packer that keeps the incoming flags (wrap) and is
  handed a reordered push: the closing *record* moves after the last record of its offset, so
  the flag it carries is again the offset's last (divergence D-3).

The two differ only for a record that carries two refs of one offset (a pack of two children
of one record, shuffled afterwards): the block rule closes both, the incremental rule the
later one (as zephon 0.2.0's two shuffles do: divergence D-97).  Either way one record closes
each offset, after every other fragment of it.

What may not live here: any operator's buffering or order; this module only rewrites flags.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from zephon_ref.types import ContributorRef, SampleRecord

__all__ = ["CloserTally", "closers_after_siblings", "move_closers_to_last"]


def move_closers_to_last(records: Sequence[SampleRecord]) -> list[SampleRecord]:
    """After a pure reorder, let only the last occurrence of each base offset close.

    An offset closes at all only if some occurrence carried a closer.  Records
    without contributors count as closers of their own offset.
    """
    last: dict[tuple[int, int], int] = {}
    has_closer: set[tuple[int, int]] = set()
    for i, rec in enumerate(records):
        for ref in rec.meta.contribution_refs():
            key = ref.cursor.base_offset
            last[key] = i
            if ref.is_last_child:
                has_closer.add(key)
    out: list[SampleRecord] = []
    for i, rec in enumerate(records):
        refs = rec.meta.contribution_refs()
        new = tuple(
            ContributorRef(r.cursor, r.cursor.base_offset in has_closer and last[r.cursor.base_offset] == i)
            for r in refs
        )
        if new == refs:
            out.append(rec)
        else:
            out.append(SampleRecord(rec.meta.with_contributors(new), rec.payload))
    return out


class CloserTally:
    """One lane's buffered explicit contributors, per base offset: the incremental closer move.

    Invariants: ``buffered[key]`` is the number of refs of offset ``key`` counted in and not yet
    out (> 0; a key leaves at 0); ``closers`` holds the buffered offsets of which some counted ref
    carried ``is_last_child`` (a subset of ``buffered``'s keys).
    """

    __slots__ = ("buffered", "closers")

    def __init__(self) -> None:
        self.buffered: dict[tuple[int, int], int] = {}
        self.closers: set[tuple[int, int]] = set()

    def __bool__(self) -> bool:
        return bool(self.buffered)

    def add(self, refs: Iterable[ContributorRef]) -> None:
        """A record holding ``refs`` is buffered: count each ref in, note the closers."""
        buffered, closers = self.buffered, self.closers
        for ref in refs:
            c = ref.cursor
            key = (c.chunk_id, c.chunk_offset)
            buffered[key] = buffered.get(key, 0) + 1
            if ref.is_last_child:
                closers.add(key)

    def leave(self, ref: ContributorRef) -> bool:
        """``ref`` leaves the buffer: True when it closes its offset (the offset's last buffered ref
        and a closer was seen); the offset is forgotten once its last ref left."""
        c = ref.cursor
        key = (c.chunk_id, c.chunk_offset)
        left = self.buffered[key] - 1
        if left:
            self.buffered[key] = left
            return False
        del self.buffered[key]
        if key in self.closers:
            self.closers.discard(key)
            return True
        return False

    def release(self, refs: Sequence[ContributorRef]) -> tuple[ContributorRef, ...] | None:
        """Every ref of a record leaves: the refs with their closing flags set by :meth:`leave`,
        or None when no flag changes."""
        changed = False
        new: list[ContributorRef] = []
        for ref in refs:
            closes = self.leave(ref)
            if closes != ref.is_last_child:
                changed = True
                new.append(ContributorRef(ref.cursor, closes))
            else:
                new.append(ref)
        return tuple(new) if changed else None


def closers_after_siblings(order: Sequence[SampleRecord]) -> list[SampleRecord]:
    """``order`` with each record that closes an offset moved just after the last record of that
    offset (stable otherwise).

    A reordered push (``shuffle_strategy="random"`` / ``"length"``) may put a closing child ahead
    of a sibling of the same push; packed in that order, the closer would close the offset before
    the sibling's fragment is placed.  Records without closing refs keep their places.  Used by
    wrap, which keeps the incoming flags (first/best fit and best_fit_wrap count each offset's
    fragments instead, so they need no move).  divergence D-3
    """
    last: dict[tuple[int, tuple[int, int]], int] = {}
    for i, rec in enumerate(order):
        for ref in rec.meta.contribution_refs():
            last[(rec.meta.lane_id, ref.cursor.base_offset)] = i
    held: dict[int, list[SampleRecord]] = {}
    out: list[SampleRecord] = []
    for i, rec in enumerate(order):
        closing = [last[(rec.meta.lane_id, ref.cursor.base_offset)]
                   for ref in rec.meta.contribution_refs() if ref.is_last_child]
        target = max(closing, default=i)
        if target > i:
            held.setdefault(target, []).append(rec)
        else:
            out.append(rec)
        out.extend(held.pop(i, ()))
    assert not held
    return out

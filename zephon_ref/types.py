"""Records, cursors and the identity of a sample as it moves through a pipeline.

Theory of operation
-------------------
A work source names samples by :class:`SampleId` ``(dataset_id, shard_id,
local_idx)``; it performs no I/O.  The engine gives each pointer a *base offset*
``(chunk_id, chunk_offset)`` inside its lane.  Operators that fan a record out
extend its *lineage* (``child(i)``), so every emitted record has a unique,
deterministic :class:`SampleCursor` per lane.  The replay filter matches on that
cursor by equality, and eviction counts *closing* contributors per base offset.

Invariants kept here:

* ``SampleCursor`` orders lexicographically by ``(chunk_id, chunk_offset,
  lineage, sample_id)``; ``sample_id`` only breaks ties.
* Lineage entries are non-negative ints.
* Contributor and tombstone flags live in ``SampleMeta.tags`` under the reserved
  names below (as in zephon 0.2.0), so the public schema stays small.

What may not live here: any knowledge of operators, engine state, or I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple, TypeAlias

from zephon_ref import aliases as _aliases
from zephon_ref.aliases import *  # noqa: F403  (zephon's names of a record's ints and payloads)
from zephon_ref.errors import ConfigError, ConfigTypeError, expected
from zephon_ref.training import TrainingConversion

__all__ = [
    "EOD_CONTINUES_TAG",
    "EOD_FINAL_TAG",
    "TAG_BOUNDARY_CID",
    "TAG_CHUNK_MIXTURE",
    "TAG_CONTRIBUTORS",
    "TAG_FLUSH_SENTINEL",
    "TAG_PACKING_METADATA",
    "TAG_SOURCE_EXHAUSTED",
    "TAG_TOMBSTONE",
    "ContributorRef",
    "LineagePath",
    "SampleBatch",
    "SampleCursor",
    "SampleCursorKey",
    "SampleId",
    "SampleMeta",
    "SampleRecord",
    "StreamItem",
    "chunk_sentinel",
    "eod_sentinel",
    "flush_sentinel",
]
__all__ += _aliases.__all__

# Reserved tag names (the same strings zephon 0.2.0 uses, so records interoperate).
TAG_CONTRIBUTORS = "_contributors"
TAG_TOMBSTONE = "_tombstone"
TAG_FLUSH_SENTINEL = "_flush_sentinel"
TAG_BOUNDARY_CID = "_boundary_cid"
TAG_SOURCE_EXHAUSTED = "_source_exhausted"
#: a chunk announcement's ``{component id: weight}`` (the chunk's target or counted mixture)
TAG_CHUNK_MIXTURE = "_chunk_mixture"
EOD_CONTINUES_TAG = "_source_exhaustion_continues"
EOD_FINAL_TAG = "_source_exhaustion_final"
TAG_PACKING_METADATA = "_packing_metadata"

LineagePath: TypeAlias = tuple[int, ...]


class SampleId(NamedTuple):
    """Pointer to one sample: ``(dataset_id, shard_id, local_idx)``.

    A plain tuple underneath, so it compares equal to ``(d, s, i)`` and to
    zephon's tuple-typed ``SampleId``.
    """

    dataset_id: int
    shard_id: int
    local_idx: int


SampleCursorKey: TypeAlias = tuple[int, int, LineagePath, tuple[int, int, int]]


def _lineage(path: Iterable[int]) -> LineagePath:
    try:
        out = tuple(int(v) for v in path)
    except (TypeError, ValueError) as exc:
        raise ConfigTypeError(expected("lineage", "an iterable of ints", path)) from exc
    for v in out:
        if v < 0:
            raise ConfigError(expected("lineage index", "an int >= 0", v))
    return out


@dataclass(frozen=True, slots=True, order=False)
class SampleCursor:
    """Identity of an emitted record within its lane."""

    chunk_id: int
    chunk_offset: int
    sample_id: tuple[int, int, int]
    lineage: LineagePath = ()

    @staticmethod
    def from_key(key: Any) -> SampleCursor:
        """Build a cursor from ``(chunk_id, offset, lineage, sample_id)``; lists accepted."""
        try:
            chunk_id, chunk_offset, lineage, sample_id = key
            sid = SampleId(*(int(x) for x in sample_id))
            return SampleCursor(int(chunk_id), int(chunk_offset), sid, _lineage(lineage))
        except (TypeError, ValueError) as exc:
            if isinstance(exc, (ConfigError, ConfigTypeError)):
                raise
            raise ConfigError(
                expected(
                    "cursor key",
                    "(chunk_id, chunk_offset, lineage, (dataset, shard, idx))",
                    key,
                )
            ) from exc

    def child(self, index: int) -> SampleCursor:
        """Cursor of the ``index``-th child (``index >= 0``) of this record."""
        if index < 0:
            raise ConfigError(expected("lineage index", "an int >= 0", index))
        return SampleCursor(
            self.chunk_id, self.chunk_offset, self.sample_id, self.lineage + (int(index),)
        )

    def as_key(self) -> SampleCursorKey:
        """The tuple form stored in checkpoints; sorts exactly like the cursor."""
        sid = self.sample_id
        return (self.chunk_id, self.chunk_offset, self.lineage, (sid[0], sid[1], sid[2]))

    @property
    def base_offset(self) -> tuple[int, int]:
        """``(chunk_id, chunk_offset)``: the unit of eviction accounting."""
        return (self.chunk_id, self.chunk_offset)

    def _cmp(self) -> tuple[int, int, LineagePath, tuple[int, ...]]:
        return (self.chunk_id, self.chunk_offset, self.lineage, tuple(self.sample_id))

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, SampleCursor):
            return NotImplemented
        return self._cmp() < other._cmp()

    def __le__(self, other: object) -> bool:
        if not isinstance(other, SampleCursor):
            return NotImplemented
        return self._cmp() <= other._cmp()

    def __gt__(self, other: object) -> bool:
        if not isinstance(other, SampleCursor):
            return NotImplemented
        return self._cmp() > other._cmp()

    def __ge__(self, other: object) -> bool:
        if not isinstance(other, SampleCursor):
            return NotImplemented
        return self._cmp() >= other._cmp()


@dataclass(frozen=True, slots=True)
class ContributorRef:
    """Names a base offset (through ``cursor``) and whether this record closes it."""

    cursor: SampleCursor
    is_last_child: bool = True


def _default_counts() -> dict[int, int]:
    return {0: 1}


@dataclass(frozen=True, slots=True)
class SampleMeta:
    """Metadata of a record: identity, lane, base offset, lineage and tags."""

    sample_id: tuple[int, int, int]
    lane_id: int
    chunk_id: int
    chunk_offset: int = 0
    component_sample_counts: dict[int, int] = field(default_factory=_default_counts)
    component_token_counts: dict[int, int] | None = None
    lineage: LineagePath = ()
    tags: dict[str, Any] = field(default_factory=dict)

    @property
    def cursor(self) -> SampleCursor:
        return SampleCursor(self.chunk_id, self.chunk_offset, self.sample_id, self.lineage)

    def as_cursor_key(self) -> SampleCursorKey:
        return self.cursor.as_key()

    def with_lineage(self, path: Iterable[int]) -> SampleMeta:
        return replace(self, lineage=_lineage(path))

    def child(self, index: int) -> SampleMeta:
        if index < 0:
            raise ConfigError(expected("lineage index", "an int >= 0", index))
        return replace(self, lineage=self.lineage + (int(index),))

    @property
    def contributors(self) -> tuple[ContributorRef, ...]:
        refs = self.tags.get(TAG_CONTRIBUTORS)
        if not refs:
            return ()
        return refs if isinstance(refs, tuple) else tuple(refs)

    def contribution_refs(self) -> tuple[ContributorRef, ...]:
        """Explicit contributors, or one closing ref on the record's own cursor (1:1)."""
        refs = self.contributors
        return refs if refs else (ContributorRef(self.cursor, True),)

    def contribution_cursors(self) -> tuple[SampleCursor, ...]:
        return tuple(r.cursor for r in self.contribution_refs())

    @property
    def tombstone(self) -> bool:
        return bool(self.tags.get(TAG_TOMBSTONE, False))

    @property
    def is_flush_sentinel(self) -> bool:
        return bool(self.tags.get(TAG_FLUSH_SENTINEL, False))

    @property
    def is_eod_sentinel(self) -> bool:
        return TAG_SOURCE_EXHAUSTED in self.tags

    @property
    def is_chunk_sentinel(self) -> bool:
        return TAG_CHUNK_MIXTURE in self.tags

    @property
    def is_sentinel(self) -> bool:
        """Tombstones, flush sentinels, end-of-data sentinels and chunk announcements are control
        records."""
        t = self.tags
        return bool(t.get(TAG_TOMBSTONE) or t.get(TAG_FLUSH_SENTINEL) or TAG_SOURCE_EXHAUSTED in t
                    or TAG_CHUNK_MIXTURE in t)

    @property
    def padding_length(self) -> int | None:
        pm = self.tags.get(TAG_PACKING_METADATA)
        return None if not pm else pm.get("padding_length")

    def with_contributors(self, value: Iterable[ContributorRef] | None) -> SampleMeta:
        tags = dict(self.tags)
        refs_t = tuple(value) if value else ()
        if refs_t:
            tags[TAG_CONTRIBUTORS] = refs_t
        else:
            tags.pop(TAG_CONTRIBUTORS, None)
        return replace(self, tags=tags)

    def with_tombstone(self, value: bool = True) -> SampleMeta:
        tags = dict(self.tags)
        if value:
            tags[TAG_TOMBSTONE] = True
        else:
            tags.pop(TAG_TOMBSTONE, None)
        return replace(self, tags=tags)


@dataclass(frozen=True, slots=True)
class SampleRecord:
    """A payload with its metadata."""

    meta: SampleMeta
    payload: Any


@dataclass(frozen=True, slots=True)
class SampleBatch(TrainingConversion):
    """A lane-pure micro-batch of records as delivered after ``batch`` (``to_training``: see
    :class:`~zephon_ref.training.TrainingConversion`)."""

    records: tuple[SampleRecord, ...]
    lane_ids: tuple[int, ...] = field(init=False, repr=False, compare=False)
    chunk_ids: tuple[int, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        recs = tuple(self.records)
        object.__setattr__(self, "records", recs)
        object.__setattr__(self, "lane_ids", tuple(r.meta.lane_id for r in recs))
        object.__setattr__(self, "chunk_ids", tuple(r.meta.chunk_id for r in recs))

    def __len__(self) -> int:
        return len(self.records)

    def __iter__(self) -> Iterator[SampleRecord]:
        return iter(self.records)

    @property
    def ids(self) -> tuple[tuple[int, int, int], ...]:
        return tuple(r.meta.sample_id for r in self.records)

    @property
    def lineage_paths(self) -> tuple[LineagePath, ...]:
        return tuple(r.meta.lineage for r in self.records)


StreamItem: TypeAlias = SampleRecord | SampleBatch

_DUMMY_SID = SampleId(0, 0, 0)


def flush_sentinel(lane_id: int, boundary_cid: int) -> SampleRecord:
    """A flush sentinel for ``lane_id`` closing the epoch that ends before ``boundary_cid``."""
    meta = SampleMeta(
        _DUMMY_SID, lane_id, 0, 0,
        tags={TAG_FLUSH_SENTINEL: True, TAG_BOUNDARY_CID: boundary_cid},
    )
    return SampleRecord(meta, None)


def chunk_sentinel(lane_id: int, chunk_id: int, mixture: Mapping[int, float]) -> SampleRecord:
    """The announcement that chunk ``chunk_id`` of ``lane_id`` starts, carrying its mixture
    (component id -> weight): chunk mixtures travel forward with the data, ahead of the chunk's
    first sample, so an operator that needs one (``ensure_mixture``) never asks the engine."""
    meta = SampleMeta(_DUMMY_SID, lane_id, chunk_id, 0, tags={TAG_CHUNK_MIXTURE: dict(mixture)})
    return SampleRecord(meta, None)


def eod_sentinel(lane_id: int, component_id: int, *, continues: bool, final: bool) -> SampleRecord:
    """An end-of-data announcement that ``component_id`` has produced its last sample."""
    meta = SampleMeta(
        _DUMMY_SID, lane_id, 0, 0,
        tags={TAG_SOURCE_EXHAUSTED: component_id, EOD_CONTINUES_TAG: continues, EOD_FINAL_TAG: final},
    )
    return SampleRecord(meta, None)

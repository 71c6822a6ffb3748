"""zephon 0.2.0's names for the ints and payloads of a record, public in ``zephon_ref.types`` as in zephon.

Documentation only: each int name is the builtin type itself, as in zephon, so ``ChunkId is
int``; numpy scalars and arrays are payload values too, and ``Any`` stands for them, as in
zephon.  No zephon_ref code needs these names (the record types in :mod:`zephon_ref.types` say
``int``); they exist so that code written against ``zephon.types`` runs with ``import zephon_ref
as zephon``.
"""

from __future__ import annotations

from typing import Any, TypeAlias

__all__ = [
    "ChunkId",
    "ChunkOffset",
    "ComponentId",
    "DatasetId",
    "LaneId",
    "LineageIndex",
    "LocalSampleId",
    "SampleNumeric",
    "SamplePayload",
    "SamplePayloadArray",
    "SamplePayloadAtom",
    "SamplePayloadDict",
    "ShardId",
]

ChunkId: TypeAlias = int
ChunkOffset: TypeAlias = int
ComponentId: TypeAlias = int
DatasetId: TypeAlias = int
LaneId: TypeAlias = int
LineageIndex: TypeAlias = int
LocalSampleId: TypeAlias = int
ShardId: TypeAlias = int
SampleNumeric: TypeAlias = "int | float | complex | Any"
SamplePayloadArray: TypeAlias = Any
SamplePayloadAtom: TypeAlias = "bytes | memoryview | str | int | float | complex | Any | None"
SamplePayload: TypeAlias = "SamplePayloadAtom | list[SamplePayload] | dict[Any, SamplePayload]"
SamplePayloadDict: TypeAlias = "dict[Any, SamplePayload]"

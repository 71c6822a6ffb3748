"""Operators: the authoring kit and the built-in operators (one module each)."""

# zephon exports the lineage helpers from zephon.ops; they live in zephon_ref.lineage
from zephon_ref.lineage import pack_meta, spawn_child, tombstone_meta, tombstones_for_record
from zephon_ref.ops.base import (
    Accumulator,
    BaseOp,
    CountingAccumulator,
    OpContext,
    OpTraits,
    PassthroughAccumulator,
    ReadyBatch,
    SourceExhaustion,
    StageInfo,
)
from zephon_ref.ops.batch import Batch, BatchAccumulator
from zephon_ref.ops.ensure_mixture import EnsureMixture, MixtureAccumulator
from zephon_ref.ops.map_transform import MapTransform
from zephon_ref.ops.pack import PackingAccumulator, PackSequences
from zephon_ref.ops.replay_filter import ReplayFilter, ReplayFilterAccumulator
from zephon_ref.ops.shuffle import Shuffle, StreamingShuffleAccumulator
from zephon_ref.ops.tokenize import HashTokenizer, Tokenize

__all__ = [
    "Accumulator",
    "BaseOp",
    "Batch",
    "BatchAccumulator",
    "CountingAccumulator",
    "EnsureMixture",
    "HashTokenizer",
    "MapTransform",
    "MixtureAccumulator",
    "OpContext",
    "OpTraits",
    "PackSequences",
    "PackingAccumulator",
    "PassthroughAccumulator",
    "ReadyBatch",
    "ReplayFilter",
    "ReplayFilterAccumulator",
    "Shuffle",
    "SourceExhaustion",
    "StageInfo",
    "StreamingShuffleAccumulator",
    "Tokenize",
    "pack_meta",
    "spawn_child",
    "tombstone_meta",
    "tombstones_for_record",
]

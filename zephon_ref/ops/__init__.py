"""Operators: the authoring kit and the built-in operators (one module each)."""

# zephon exports the lineage helpers from zephon.ops; they live in zephon_ref.lineage
from zephon_ref.lineage import pack_meta, spawn_child, tombstone_meta, tombstones_for_record

# zephon's public submodules, reachable as attributes as in zephon (``zephon.ops.grouping``)
from zephon_ref.ops import accumulators as accumulators
from zephon_ref.ops import children as children
from zephon_ref.ops import config as config
from zephon_ref.ops import grouping as grouping
from zephon_ref.ops import traits as traits
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
from zephon_ref.ops.config import LossScope, MissingFieldMode, PackingAlgorithm, SpanSource, SpecialTokensMode
from zephon_ref.ops.ensure_mixture import EnsureMixture, MixtureAccumulator
from zephon_ref.ops.grouping import DomainGroups
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
    "DomainGroups",
    "EnsureMixture",
    "HashTokenizer",
    "LossScope",
    "MapTransform",
    "MissingFieldMode",
    "MixtureAccumulator",
    "OpContext",
    "OpTraits",
    "PackSequences",
    "PackingAccumulator",
    "PackingAlgorithm",
    "PassthroughAccumulator",
    "ReadyBatch",
    "ReplayFilter",
    "ReplayFilterAccumulator",
    "Shuffle",
    "SourceExhaustion",
    "SpanSource",
    "SpecialTokensMode",
    "StageInfo",
    "StreamingShuffleAccumulator",
    "Tokenize",
    "pack_meta",
    "spawn_child",
    "tombstone_meta",
    "tombstones_for_record",
]

"""Operators: the authoring kit and the built-in operators (one module each)."""

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
]

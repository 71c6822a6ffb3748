"""``zephon.ops.accumulators.base``: the accumulator contract (the objects of :mod:`zephon_ref.ops.base`)."""

from zephon_ref.ops.base import Accumulator, ReadyBatch, SourceExhaustion

__all__ = ["Accumulator", "ReadyBatch", "SourceExhaustion"]

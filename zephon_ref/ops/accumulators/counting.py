"""``zephon.ops.accumulators.counting``: the counting accumulator (defined in :mod:`zephon_ref.ops.base`)."""

from zephon_ref.ops.base import CountingAccumulator

__all__ = ["CountingAccumulator"]

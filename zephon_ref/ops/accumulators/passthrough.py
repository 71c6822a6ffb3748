"""``zephon.ops.accumulators.passthrough``: the pass-through accumulator (in :mod:`zephon_ref.ops.base`)."""

from zephon_ref.ops.base import PassthroughAccumulator

__all__ = ["PassthroughAccumulator"]

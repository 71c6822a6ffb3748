"""``zephon.ops.accumulators``: the accumulator contract and the two simple accumulators.

The objects are zephon_ref's own, defined in :mod:`zephon_ref.ops.base` (one definition each);
this package gives them zephon 0.2.0's import paths (``base``, ``counting``, ``passthrough``).
"""

from zephon_ref.ops.accumulators.base import Accumulator, ReadyBatch, SourceExhaustion
from zephon_ref.ops.accumulators.counting import CountingAccumulator
from zephon_ref.ops.accumulators.passthrough import PassthroughAccumulator

__all__ = ["Accumulator", "CountingAccumulator", "PassthroughAccumulator", "ReadyBatch", "SourceExhaustion"]

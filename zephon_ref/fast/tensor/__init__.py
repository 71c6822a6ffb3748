"""The tensor implementation: a second, independent implementation of the hot data path.

Theory of operation
-------------------
It reproduces what the reference (zephon_ref's engine, inline runner) delivers
for a subset of configurations, without running any of the reference's
operators or engine: per lane, work-source chunks become documents
(:mod:`.lanes`: map_transform, the built-in tokenizer), documents are packed
over integer lengths (:mod:`.packing`), grouped into micro-batches and
interleaved in round robin (:mod:`.stream`), and turned into tensors
(:mod:`.collate`) or, for comparison, into the reference's record objects
(:mod:`.records`).  :mod:`.config` accepts or refuses a configuration at build
time (:data:`REFUSED_KNOBS`); :mod:`.pipeline` is the entry point, with its own
checkpoint format.  Work-source chunks are read through the source's public lane
API (:mod:`.chunks`) and saved source states are checked by the reference's rule
(:func:`zephon_ref.work.base.check_source_state`): the two seams where it enters the reference.

Importing this package imports numpy, not torch; torch is imported by
:func:`collate` only.
"""

from zephon_ref.fast.tensor.config import REFUSED_KNOBS, TensorPlan, UnsupportedKnob, compile_chain
from zephon_ref.fast.tensor.pipeline import FORMAT, TensorPipeline

__all__ = ["FORMAT", "REFUSED_KNOBS", "TensorPipeline", "TensorPlan", "UnsupportedKnob", "compile_chain"]

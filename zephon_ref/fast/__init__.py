"""Faster implementations beside the oracle, each entering at one seam and checked against the plain
definition by the property suite (house rule 8).

* :mod:`zephon_ref.fast.walk` — :class:`~zephon_ref.fast.walk.ChunkWalk`, one walk of the global
  chunk order shared by lane clones (seam: ``walk=``; checked by the suite's ``shared walk`` row);
* :mod:`zephon_ref.fast.ops` — :class:`~zephon_ref.fast.ops.FastOps`, faster ``tokenize`` (built-in
  tokenizer, interned ids) (seam: ``faster=`` of ``Builder.engine`` / ``Engine.start``; a user of
  the facade opts in with ``Pipeline.options(faster_ops=True)``, default off, under either runner
  and across restores; checked against the plain operators by ``properties.fast_ops`` and
  tests/properties/test_fast_ops.py; the benchmarks that use it say so);
* :mod:`zephon_ref.fast.codec` — :class:`~zephon_ref.fast.codec.FastCodec`, the checkpoint codec's
  bytes computed faster (seam: ``codec=`` of the aggregation round's machines, ``aggregate_round``
  and ``checkpoint.store.save``; checked against :mod:`zephon_ref.codec` by
  ``properties.fast_codec`` and the suite's ``fast codec`` row; sim.scale and the benchmarks that
  use it say so); its :class:`~zephon_ref.fast.codec.SharingLeaderCodec` is a memory seam: a
  round's leader holds one decoded lane mapping for every equal one (sim.scale's star plugs it in);
* :mod:`zephon_ref.fast.tensor` — the array implementation of the hot path (seam: its own
  ``TensorPipeline`` built from a configuration; checked record for record by the suite).

Nothing in the semantics imports this package.
"""

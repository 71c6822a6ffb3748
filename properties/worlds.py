"""Small simulated worlds shared by the simulator's tests and canaries.

``CANARY_PIPELINE`` (packing + shuffle + batch over a 580-document corpus, 4 lanes, K=2)
in ``CANARY_WORLD`` (2 ranks, 40 steps, a checkpoint every 3 steps, crashes at 1 in 400
events restarting on 1, 2 or 4 ranks, and a mid-step checkpoint cut at 1 in 6 deliveries:
a cut between two deliveries of a step is common, and a crash usually restores one, on the
same rank count a third of the time).  :func:`canary_build` is its ``build(**topology)``.
"""

from __future__ import annotations

import functools

from properties.pipelines import PipelineConfig, build_pipeline
from sim.world import WorldConfig

__all__ = ["CANARY_PIPELINE", "CANARY_WORLD", "canary_build"]

CANARY_PIPELINE = PipelineConfig(
    chain=[("pack_sequences", {"max_length": 48, "algorithm": "first_fit", "num_bins": 4}),
           ("shuffle", {"buffer_size": 8, "seed": 3}), ("batch", {"microbatch_size": 2})],
    layout={"web": (200, 150), "code": (150,), "books": (80,)}, source_kwargs={"chunk_size": 8, "seed": 1},
    options={"runner": "inline", "canonical_replicas": 4, "flush_every_k_chunks": 2})
CANARY_WORLD = WorldConfig(canonical_replicas=4, ranks=2, steps=40, checkpoint_every=3, crash=(1, 400),
                           restart_ranks=(1, 2, 4), mid_step_checkpoint=(1, 6))
canary_build = functools.partial(build_pipeline, "zephon_ref", CANARY_PIPELINE)

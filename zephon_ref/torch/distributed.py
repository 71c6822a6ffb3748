"""Distributed launch: ranks through torch.distributed, the aggregation round over their TCPStore.

Theory of operation
-------------------
:func:`init_rank` joins a torch.distributed process group (gloo on the CPU, nccl
when asked; ``tcp://host:port`` rendezvous) and returns the pipeline options for
that rank: ``world_size``, ``global_rank`` and ``aggregate_store="torch://host:port"``,
so ``Pipeline.checkpoint()`` runs its aggregation round over the *same* TCPStore
the process group rendezvoused on (:class:`~zephon_ref.coordination.backends.TCPStoreBackend`
is a client of it; rank 0 hosts it).  Nothing here merges or orders data: the
pipeline's engine decides what each rank delivers, the coordination layer merges.

A **global step** is one round over every lane: each rank delivers
``canonical_replicas / world_size`` batches.  :func:`gather_global_step`
all-gathers the ranks' batches of one global step and returns them in lane order,
which is the same list on every rank and for every rank count (when the step is a
full round).  :func:`run_rank` is the distributed reference trainer built on it:
every rank applies the same update to the whole global batch (replicated compute,
so the loss curve is bit-identical across rank counts), checkpoints at global-step
boundaries (every rank joins the aggregation round; rank 0 publishes the merged
state and the trainer file), and resumes on any rank count.
``python -m zephon_ref.torch.distributed`` runs one rank (the tests launch them as
subprocesses).

What may not live here: pipeline logic, merge rules, the round protocol.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

from zephon_ref.errors import ConfigError, ContractError, expected
from zephon_ref.torch.collate import collate_for_training
from zephon_ref.torch.device import require_torch
from zephon_ref.torch.stateful import STATE_FORMAT, to_stateful_dataset

__all__ = ["gather_global_step", "init_rank", "main", "run_rank"]


def init_rank(*, rank: int, world_size: int, port: int, host: str = "127.0.0.1", backend: str = "gloo",
              timeout_s: float = 60.0) -> dict[str, Any]:
    """Join the process group; return this rank's pipeline options (topology and aggregation store)."""
    torch = require_torch()
    for name, value, lo in (("rank", rank, 0), ("world_size", world_size, 1), ("port", port, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < lo:
            raise ConfigError(expected(name, f"an int >= {lo}", value))
    if rank >= world_size:
        raise ConfigError(expected("rank", f"an int in [0, {world_size})", rank))
    if backend not in ("gloo", "nccl"):
        raise ConfigError(expected("backend", "'gloo' or 'nccl'", backend))
    dist = torch.distributed
    dist.init_process_group(backend, init_method=f"tcp://{host}:{port}", rank=rank, world_size=world_size,
                            timeout=timedelta(seconds=timeout_s))
    return {"world_size": world_size, "global_rank": rank, "aggregate_store": f"torch://{host}:{port}",
            "aggregate_timeout_s": timeout_s}


def gather_global_step(items: Iterator[Any], per_rank: int) -> list[Any]:
    """Take ``per_rank`` batches from this rank's ``items``; all-gather; return every rank's, by lane.

    Every rank must call it at the same step.  A rank whose stream ended early
    contributes what it had (the tail of the data is not a full round).
    """
    torch = require_torch()
    mine = []
    for _ in range(per_rank):
        try:
            mine.append(next(items))
        except StopIteration:
            break
    gathered: list[Any] = [None] * torch.distributed.get_world_size()
    torch.distributed.all_gather_object(gathered, mine)
    everything = [b for part in gathered for b in part]
    return sorted(everything, key=lambda b: (b.lane_ids[0], b.records[0].meta.cursor.as_key()))


def _view(batch: Any) -> list[Any]:
    """A JSON-able normal form of a batch: its lane and every record's cursor key and tokens."""
    out: list[Any] = [int(batch.lane_ids[0])]
    for rec in batch.records:
        out.append([list(rec.meta.cursor.as_key()),
                    [list(map(int, seg["input_ids"])) for seg in rec.payload["packed_samples"]]])
    return out


def run_rank(
    *,
    rank: int,
    world_size: int,
    port: int,
    steps: int,
    seed: int = 0,
    checkpoint_dir: str | None = None,
    resume: bool = False,
    workers: int | None = None,
) -> dict[str, Any]:
    """Train ``steps`` global steps of the demo pipeline on this rank (see the module docstring).

    ``workers=None`` iterates the pipeline in the rank's process and checkpoints with
    ``Pipeline.checkpoint()``; ``workers=n`` reads it through a plain
    ``DataLoader(num_workers=n)`` over :func:`~zephon_ref.torch.stateful.to_stateful_dataset`
    and checkpoints with its ``state_dict()`` (each worker's shard joins the round).

    Returns ``{"steps": [[view, ...] per global step], "losses": [...], "params": {name: list}}``
    (the same on every rank).  With ``checkpoint_dir`` the state after the last step is
    saved there (every rank joins the aggregation round, rank 0 publishes); with
    ``resume`` every rank first restores the newest checkpoint there.
    """
    torch = require_torch()
    from zephon_ref.demo import build_demo_pipeline
    from zephon_ref.torch.trainer import ReferenceTrainer, TrainerConfig

    torch.set_num_threads(1)
    options = init_rank(rank=rank, world_size=world_size, port=port)
    try:
        pipeline = build_demo_pipeline(seed=seed).options(**options)
        lanes = _lanes(pipeline)
        if lanes % world_size:
            raise ContractError(
                expected("canonical_replicas", f"a multiple of world_size={world_size}", lanes)
            )
        trainer = ReferenceTrainer(pipeline, config=TrainerConfig(seed=seed))
        dataset = None if workers is None else to_stateful_dataset(pipeline)
        if resume:
            if checkpoint_dir is None:
                raise ConfigError(expected("checkpoint_dir", "a directory when resume=True", None))
            saved, engine, _gen = trainer.read(checkpoint_dir)
            if dataset is None:
                pipeline.restore(engine)
            else:
                dataset.load_state_dict({"format": STATE_FORMAT, "engine": engine,
                                         "num_workers": int(saved.get("num_workers", 1)),
                                         "next_role": int(saved.get("next_role", 0))})
            trainer.adopt(saved)
        if dataset is None:
            items: Iterator[Any] = iter(pipeline)
        else:
            items = dataset.track(torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=workers))
        steps_seen: list[list[Any]] = []
        was = torch.are_deterministic_algorithms_enabled()
        torch.use_deterministic_algorithms(True)
        try:
            for _ in range(steps):
                batches = gather_global_step(items, lanes // world_size)
                steps_seen.append([_view(b) for b in batches])
                trainer.update([collate_for_training(b) for b in batches])
        finally:
            torch.use_deterministic_algorithms(was)
        if checkpoint_dir is not None:
            # the aggregation round over the process group's TCPStore (every rank, every worker shard)
            if dataset is None:
                state, extra = pipeline.checkpoint(), {}
            else:
                ds_state = dataset.state_dict()
                state = ds_state["engine"]
                extra = {"num_workers": ds_state["num_workers"], "next_role": ds_state["next_role"]}
            if rank == 0:
                trainer.publish(checkpoint_dir, state, extra)
        del items
        # nobody leaves (rank 0 hosts the store) before the checkpoint is published
        torch.distributed.barrier()
        return {"steps": steps_seen, "losses": trainer.losses,
                "params": {k: v.tolist() for k, v in trainer.model.state_dict().items()}}
    finally:
        torch.distributed.destroy_process_group()


def _lanes(pipeline: Any) -> int:
    return int(pipeline.local_state()["world"]["canonical_replicas"])


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m zephon_ref.torch.distributed``: run one rank; write its result as JSON."""
    parser = argparse.ArgumentParser(prog="python -m zephon_ref.torch.distributed", description=main.__doc__)
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--world-size", type=int, required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--steps", type=int, required=True, help="global steps to train in this run")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--checkpoint-dir")
    parser.add_argument("--resume", action="store_true")
    parser.add_argument(
        "--workers", type=int, help="read through DataLoader(num_workers=N) (stateful dataset)"
    )
    parser.add_argument("--out", required=True, help="where this rank writes its result (JSON)")
    args = parser.parse_args(argv)
    result = run_rank(rank=args.rank, world_size=args.world_size, port=args.port, steps=args.steps,
                      seed=args.seed, checkpoint_dir=args.checkpoint_dir, resume=args.resume,
                      workers=args.workers)
    Path(args.out).write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    from zephon_ref.torch.distributed import main as _main

    sys.exit(_main())

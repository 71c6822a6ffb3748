"""A trainer's data side under torchrun: every rank reads its micro-batches, the global step is
gathered over gloo, and the data state is checkpointed at a step boundary.

    python -m torch.distributed.run --nproc_per_node=2 --master-addr=127.0.0.1 --master-port=29511 \\
        examples/framework_loader/train.py --config cfg.json --steps 3 --save ckpt/ --out steps.jsonl

``--resume DIR`` starts from the state a run on any rank count saved in DIR.  Rank 0 appends one JSON
line per global step to ``--out``: the step number and every micro-batch of every rank (the tensors
of ``to_training``, as lists), in rank order.  No model: what a model would train on is the point.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parent))

from loader import FrameworkLoader, LoaderConfig, Topology  # noqa: E402


def as_lists(micro_batch: dict[str, Any]) -> dict[str, Any]:
    """The tensors of one ``to_training`` result as ``[dtype, values]`` (the other keys are bookkeeping)."""
    return {
        k: [str(v.dtype), v.tolist()] for k, v in sorted(micro_batch.items()) if isinstance(v, torch.Tensor)
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--config", required=True, help="a LoaderConfig as JSON")
    ap.add_argument("--backend", default=None, help="zephon or zephon_ref (default: $ZEPHON_BACKEND)")
    ap.add_argument("--steps", type=int, required=True, help="optimizer steps to run")
    ap.add_argument("--aggregate-dir", required=True, help="shared directory of the checkpoint round")
    ap.add_argument("--resume", default=None, help="directory a previous run saved its data state in")
    ap.add_argument("--save", default=None, help="directory to save the data state in after the steps")
    ap.add_argument("--out", required=True, help="JSON lines of the global steps (written by rank 0)")
    args = ap.parse_args(argv)

    topo = Topology.from_env()
    if topo.world_size > 1:
        dist.init_process_group("gloo")  # MASTER_ADDR / MASTER_PORT from torchrun
    cfg = LoaderConfig.from_dict(json.loads(Path(args.config).read_text()))
    loader = FrameworkLoader(cfg, topo, backend=args.backend, aggregate_dir=args.aggregate_dir)
    if args.resume:
        loader.load(args.resume)
    lines = []
    for _ in range(args.steps):
        mine = [as_lists(mb) for mb in loader.next_step()]
        gathered: list[Any] = [None] * topo.world_size
        if topo.world_size > 1:
            dist.all_gather_object(gathered, mine)
        else:
            gathered = [mine]
        lines.append(json.dumps({"step": loader.steps_done, "ranks": gathered}))
    if args.save:
        if topo.world_size > 1:
            dist.barrier()  # every rank is at the same step before the round
        loader.save(args.save)
    if topo.rank == 0:
        with open(args.out, "a") as f:
            f.writelines(line + "\n" for line in lines)
    if topo.world_size > 1:
        dist.barrier()
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())

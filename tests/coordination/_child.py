"""One aggregation participant in its own process (run as a script, never imported by pytest).

usage: _child.py JSON   where JSON holds backend, rank, worker, world_size, run_id,
timeout_s, seed, c, dp, workers, and optionally gloo (init torch.distributed
first), pad (bytes of incompressible work_config on rank 1), hang (sleep
forever instead of calling aggregate), stale_grace_s.
Prints one JSON line: {"ok": true, "digest": ..., "round_id": ...} or the error.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
import warnings


def main() -> None:
    warnings.simplefilter("ignore")
    args = json.loads(sys.argv[1])
    from sim.cluster import topology_states
    from zephon_ref import codec
    from zephon_ref.coordination import aggregate_round
    from zephon_ref.errors import AggregationError, AggregationTimeout

    states = topology_states(
        args["seed"],
        canonical_replicas=args["c"],
        world_size=args["world_size"],
        dp_degree=args.get("dp"),
        workers=args.get("workers", 1),
    )
    state = states[(args["rank"], args.get("worker", 0))]
    if args.get("pad") and args["rank"] == 1:
        state["work_config"] = {"pad": os.urandom(args["pad"])}
    dist = None
    if args.get("gloo"):
        import torch.distributed as dist

        dist.init_process_group("gloo", rank=args["rank"], world_size=args["world_size"])
        dist.barrier()  # the caller contract: every rank at the same step
    print(json.dumps({"started": os.getpid()}), flush=True)
    if args.get("hang"):
        time.sleep(3600)
    t0 = time.monotonic()
    try:
        res = aggregate_round(
            state,
            backend=args["backend"],
            rank=args["rank"],
            worker=args.get("worker", 0),
            world_size=args["world_size"],
            run_id=args["run_id"],
            timeout_s=args["timeout_s"],
            poll_s=args.get("poll_s", 0.02),
            stale_grace_s=args.get("stale_grace_s", 30.0),
        )
        out = {
            "ok": True,
            "digest": hashlib.sha256(codec.encode(res.merged)).hexdigest(),
            "round_id": res.round_id,
            "lanes": sorted(res.merged["progress"]),
        }
    except AggregationError as exc:
        out = {
            "ok": False,
            "type": type(exc).__name__,
            "reason": exc.reason,
            "msg": str(exc),
            "missing_ranks": list(getattr(exc, "missing_ranks", ()))
            if isinstance(exc, AggregationTimeout)
            else [],
            "missing_lanes": list(getattr(exc, "missing_lanes", ()))
            if isinstance(exc, AggregationTimeout)
            else [],
            "waiting_for": getattr(exc, "waiting_for", None),
        }
    out["elapsed"] = time.monotonic() - t0
    print(json.dumps(out), flush=True)
    if dist is not None:
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()

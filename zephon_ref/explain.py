"""``Pipeline.explain()``: the plan in zephon 0.2.0's explain() layout (text only).

What may not live here: anything that decides the data path (this only describes it).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from zephon_ref.ops.base import BaseOp
from zephon_ref.ops.batch import Batch

__all__ = ["explain_plan"]


#: the smallest queue depth explain() prints where the options leave a depth unset (zephon's)
DEFAULT_DEPTH = 8


def explain_plan(ops: Sequence[tuple[str, BaseOp]], *, runner: str, preserves_cursor_order: bool,
                 options: Mapping[str, Any] | None = None, default_workers: int | None = None) -> str:
    """The stages, their operators and the execution graph of a plan of ``ops``.  The depths come
    from ``options`` as in zephon (measured on 0.2.0: tests/conformance/test_explain_conformance.py):
    ``prefetch_batches`` before the pipeline's end (``F``; unset: ``max(8, 2 * max_workers)``, and
    ``max_workers`` unset: ``default_workers``, else zephon's default, this machine's CPU count clamped
    to [4, 16]),
    ``op_queue_capacity`` between the threads of a stage (``in_q``; unset: ``max(8, F)``),
    ``per_stage_prefetch[i]`` else ``default_stage_prefetch`` after stage ``i`` (``stage_out`` and the
    prefetch into the next stage; unset: ``max(8, F // 2)``).  A stage after ``batch`` runs on threads
    when it holds more than ``batch`` (zephon's planner), on the caller's thread otherwise.  Execution
    settings only: none of them changes the data (seed 002)."""
    opts = options or {}

    def given(key: str) -> Any:
        return opts.get(key)  # None where unset; 0 is a depth ("none") as in zephon

    workers = given("max_workers") or default_workers or min(16, max(4, os.cpu_count() or 4))
    final = given("prefetch_batches")
    final = max(DEFAULT_DEPTH, 2 * workers) if final is None else final
    in_q = given("op_queue_capacity")
    in_q = max(DEFAULT_DEPTH, final) if in_q is None else in_q
    per_stage = given("per_stage_prefetch") or {}
    default_stage = given("default_stage_prefetch")
    default_stage = max(DEFAULT_DEPTH, final // 2) if default_stage is None else default_stage
    # a plan node: (name, parallelism, counts towards the stage's cap); replay filters do not count
    user = [(n, op.traits().parallelism, True) for n, op in ops]
    batch_at = next((i for i, (_, op) in enumerate(ops) if isinstance(op, Batch)), None)
    fetch = ("fetch", 4, True)

    def fmt(nodes: list[tuple[str, int, bool]]) -> list[str]:
        return [f"{n}@p{p}" for n, p, _ in nodes]

    if batch_at is None:
        tail = user[-1][0] if user else "fetch"
        stages = [[fetch, *user, (f"{tail}_replay_filter", 1, False)]]
        modes = ["stream_items"]
    else:
        bname = user[batch_at][0]
        stages = [[fetch, *user[:batch_at]],
                  [(f"{bname}_replay_filter", 1, False), user[batch_at], *user[batch_at + 1:]]]
        modes = ["microbatches", "stream_items"]
    lines = []
    for i, names in enumerate(stages):
        brk = "start" if i == 0 else "batch-inline"
        lines.append(f"Stage[{i}] place=local break='{brk}' ops={fmt(names)}")
    fit = [sum(p for _, p, counts in nodes if counts) or 1 for nodes in stages]
    allocation = opts.get("worker_allocation") or "fit_to_ops"
    if given("max_workers") is not None:  # 0 is printed as given (zephon: per_stage=0, total=0)
        workers = given("max_workers")
    if allocation == "per_stage_fixed":
        caps, header = [workers] * len(stages), f"per_stage_fixed per_stage={workers}"
    elif allocation == "global":
        caps, header = split_workers(workers, fit), f"global total={workers}"
    else:
        caps, header = fit, "fit_to_ops (cap=sum(node.parallelism), min 1/op)"
    lines += ["", "Execution Graph:", f"Allocation={header}"]
    lines.append("Bookkeeping=simple chunk-watermark (preserves_cursor_order=True)" if preserves_cursor_order
                 else "Bookkeeping=contributor-aware (packing/shuffle-safe)")
    for i, names in enumerate(stages):
        stage_runner = runner if i == 0 else ("threads" if fit[i] > 1 else "inline")
        lines.append(f"Stage[{i}] place=local runner={stage_runner} cap={caps[i]} mode={modes[i]}")
        sep = " -> " if stage_runner == "inline" else f" -[in_q={in_q}]-> "
        lines.append("  " + sep.join(fmt(names)))
        out = per_stage.get(i, default_stage)
        # a depth of 0 (no prefetch) prints a bare arrow, and as stage_out the stage's own queue as
        # zephon does: in_q on threads, "?" on the caller's thread (measured on 0.2.0)
        lines.append(f"  --[stage_out={out if out else (in_q if stage_runner != 'inline' else '?')}]-->")
        if i + 1 < len(stages):
            lines.append(f"  ==[prefetch={out}]==> Stage[{i + 1}]" if out else f"  ==> Stage[{i + 1}]")
        else:
            lines.append(f"  ==[final_prefetch={final}]==> pipeline_end" if final else "  ==> pipeline_end")
    return "\n".join(lines)


def split_workers(total: int, fit: Sequence[int]) -> list[int]:
    """``worker_allocation="global"``: ``total`` workers shared by the stages in proportion to their
    fit_to_ops caps: each stage its floor share, the workers left over one each to the largest
    remainders, the earlier stage first on a tie; fewer workers than stages: one each (so a stage
    may print cap=0, as zephon 0.2.0 does: measured in tests/conformance/test_explain_conformance.py)."""
    if total < len(fit):
        return [1] * len(fit)
    whole = sum(fit)
    caps = [total * f // whole for f in fit]
    order = sorted(range(len(fit)), key=lambda i: (-(total * fit[i] % whole), i))
    for i in order[:total - sum(caps)]:
        caps[i] += 1
    return caps

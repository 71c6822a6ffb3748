"""``Pipeline.explain()``: the plan in zephon 0.2.0's explain() layout (text only).

What may not live here: anything that decides the data path (this only describes it).
"""

from __future__ import annotations

from collections.abc import Sequence

from zephon_ref.ops.base import BaseOp
from zephon_ref.ops.batch import Batch

__all__ = ["explain_plan"]


def explain_plan(ops: Sequence[tuple[str, BaseOp]], *, runner: str, preserves_cursor_order: bool) -> str:
    """The stages, their operators and the execution graph of a plan of ``ops``."""
    user = [n for n, _ in ops]
    batch_at = next((i for i, (_, op) in enumerate(ops) if isinstance(op, Batch)), None)
    par = {n: op.traits().parallelism for n, op in ops}
    par["fetch"] = 4

    def fmt(names: list[str]) -> list[str]:
        return [f"{n}@p{par.get(n, 1)}" for n in names]

    if batch_at is None:
        tail = user[-1] if user else "fetch"
        stages = [["fetch", *user, f"{tail}_replay_filter"]]
        modes = ["stream_items"]
    else:
        bname = user[batch_at]
        stages = [["fetch", *user[:batch_at]], [f"{bname}_replay_filter", bname, *user[batch_at + 1:]]]
        modes = ["microbatches", "stream_items"]
    lines = []
    for i, names in enumerate(stages):
        brk = "start" if i == 0 else "batch-inline"
        lines.append(f"Stage[{i}] place=local break='{brk}' ops={fmt(names)}")
    lines += ["", "Execution Graph:", "Allocation=fit_to_ops (cap=sum(node.parallelism), min 1/op)"]
    lines.append("Bookkeeping=simple chunk-watermark (preserves_cursor_order=True)" if preserves_cursor_order
                 else "Bookkeeping=contributor-aware (packing/shuffle-safe)")
    for i, names in enumerate(stages):
        stage_runner = "inline" if (i > 0 or runner == "inline") else runner
        cap = sum(par.get(n, 1) for n in names if not n.endswith("_replay_filter")) or 1
        lines.append(f"Stage[{i}] place=local runner={stage_runner} cap={cap} mode={modes[i]}")
        sep = " -> " if stage_runner == "inline" else " -[in_q=8]-> "
        lines.append("  " + sep.join(fmt(names)))
        lines.append(f"  --[stage_out={cap}]-->")
        lines.append(f"  ==[prefetch=8]==> Stage[{i + 1}]" if i + 1 < len(stages)
                     else "  ==[final_prefetch=8]==> pipeline_end")
    return "\n".join(lines)

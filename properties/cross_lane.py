"""The ``cross-lane order`` row: the delivered interleaving after N -> M -> N ranks (seed 002).

Theory of operation
-------------------
Seed 002 promises per-lane streams that survive any remap, and more at global-step boundaries:
"At the end of a step every lane has contributed exactly once per cycle, so every lane sits at
the same frontier, the tiebreaker resolves to the same place regardless of topology, and the
recomputed pointer starts where the saved one would have."  So a job that runs under topology N,
is cut anywhere (mid-step: no promise on the interleaving there), resumes under M, is cut at a
global-step boundary and resumes under N again delivers, on every participant, exactly what that
participant of an uninterrupted run under N delivers from the same frontier on.  The row checks
that, and that the per-lane record streams over the three phases are the oracle's.

It also changes the micro-batch size for the M phase (``batch(8)`` -> ``batch(4)`` with the scale
change, seed 002: "The same holds when you change the per-device microbatch size ... the
round-robin still cycles the same lanes producing the same data"), so frontiers are counted in
records, and the boundary is one whose record count is a whole number of batches of both sizes.

The reference (``expected``) is zephon_ref's (the oracle adapter's) uninterrupted run under N, one
participant at a time, cut where each of the participant's lanes has delivered the frontier's
records: a run that never restored, so never recomputed a pointer.  An adapter takes part with the
``remap`` and ``merged_checkpoint`` features (``merged_checkpoint(runs)``: the state of a whole
topology from its participants' runs, as the aggregation round merges them).

What may not live here: the engine's pointer rule (zephon_ref/engine/core.py), the lane
assignment (zephon_ref/engine/world.py): the row reads only delivered items.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import warnings
from collections.abc import Sequence
from typing import Any

from hypothesis import strategies as st

from properties.pipelines import PipelineConfig
from properties.strategies import Topology, topologies

__all__ = ["batch_size", "cross_lane_problems", "lane_record_problems", "lane_records", "with_microbatch"]


def batch_size(cfg: PipelineConfig) -> int | None:
    """The micro-batch size of ``cfg``'s closing ``batch`` (None when the chain does not end in one)."""
    if not cfg.chain or cfg.chain[-1][0] != "batch":
        return None
    return int(dict(cfg.chain[-1][1]).get("microbatch_size", 1))


def with_microbatch(cfg: PipelineConfig, size: int) -> PipelineConfig:
    """``cfg`` with its closing batch's micro-batch size set to ``size``."""
    assert batch_size(cfg) is not None, cfg.describe()
    name, kw = cfg.chain[-1]
    return dataclasses.replace(cfg, chain=[*cfg.chain[:-1], (name, {**dict(kw), "microbatch_size": size})])


def lane_records(items: Sequence[Sequence[Any]]) -> dict[int, list[Any]]:
    """The delivered records grouped by lane, in delivery order (a micro-batch's records in turn)."""
    out: dict[int, list[Any]] = {}
    for item in items:
        for rec in item:
            out.setdefault(int(rec[0]), []).append(rec)
    return out


def _deliver_all(runs: Sequence[Any]) -> list[list[Any]]:
    out = []
    for run in runs:
        out.append(run.deliver(1_000_000))
        run.close()
    return out


def _prefix_at(items: Sequence[Sequence[Any]], frontier: dict[int, int], lanes: set[int]) -> int | None:
    """The length of the prefix of ``items`` after which each lane of ``lanes`` has delivered
    exactly ``frontier[lane]`` records in all (counting from zero), or None if it never does."""
    counts = dict.fromkeys(lanes, 0)
    if all(counts[lane] == frontier[lane] for lane in lanes):
        return 0
    for i, item in enumerate(items):
        for rec in item:
            counts[int(rec[0])] = counts.get(int(rec[0]), 0) + 1
        if any(counts[lane] > frontier[lane] for lane in lanes):
            return None
        if all(counts[lane] == frontier[lane] for lane in lanes):
            return i + 1
    return None


def cross_lane_problems(adapter: Any, oracle: Any, cfg: PipelineConfig,
                        data: st.DataObject) -> list[str]:
    """N -> M -> N with a micro-batch change in M (see the module docstring); the problems found."""
    c = int(cfg.options.get("canonical_replicas", 1))
    n_top: Topology = data.draw(topologies(c), label="topology N")
    # M scales: another dp_degree whenever there are lanes for one (down or up, then back to N)
    m_top = Topology(
        dp_degree=data.draw(st.integers(1, c).filter(lambda d: c == 1 or d != n_top.dp_degree), label="M dp"),
        workers=data.draw(st.integers(1, 3), label="M workers"),
        mapping=data.draw(st.sampled_from(["contiguous", "interleaved"]), label="M mapping"))
    size = batch_size(cfg)
    m_size = size
    if size is not None:
        sizes = sorted({max(1, size // 2), size, 2 * size})
        m_size = data.draw(st.sampled_from(sizes), label="M micro-batch")
    cfg_m = cfg if m_size == size or m_size is None else with_microbatch(cfg, m_size)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # mid-window and uneven-lane warnings are expected here
        # the oracle: every participant of an uninterrupted run under N
        truth = _deliver_all(oracle.participants(cfg, n_top, None))
        want_lanes = lane_records([it for part in truth for it in part])
        owned = [set(lane_records(part)) for part in truth]
        # phase N: each participant delivers a drawn number of items (a cut anywhere, mid-step)
        runs = adapter.participants(cfg, n_top, None)
        head: list[Any] = []
        for i, run in enumerate(runs):
            head += run.deliver(data.draw(st.integers(0, 6), label=f"N participant {i} items"))
        state1 = copy.deepcopy(adapter.merged_checkpoint(runs))
        for run in runs:
            run.close()
        # phase M: a first pass to find the global-step boundaries it reaches, then to one of them
        m_items = _deliver_all(adapter.participants(cfg_m, m_top, copy.deepcopy(state1)))
        before = lane_records(head)
        step = math.lcm(size or 1, m_size or 1)  # a whole number of batches of both sizes
        shortest = min((len(v) for v in want_lanes.values()), default=0)
        start = max((len(v) for v in before.values()), default=0)
        frontiers = [f for f in range(start, shortest) if f % step == 0]  # every lane still has records
        boundary: tuple[int, list[int]] | None = None
        for f in frontiers:
            m_owned = [set(lane_records(part)) for part in m_items]  # every lane has records left
            cuts = [_prefix_at(part, {lane: f - len(before.get(lane, [])) for lane in range(c)}, lanes)
                    for part, lanes in zip(m_items, m_owned, strict=True)]
            if all(x is not None for x in cuts):
                boundary = (f, [int(x) for x in cuts if x is not None])
                if data.draw(st.booleans(), label=f"stop at frontier {f}"):
                    break
        problems: list[str] = []
        if boundary is None:  # no global-step boundary reached (uneven after the cut): lanes only
            got = lane_records(head + [it for part in m_items for it in part])
            # the last phase ran with M's micro-batch size: with drop_last a lane's end may differ by
            # less than a batch (the last incomplete one), the rest is the oracle's
            problems += lane_record_problems(got, want_lanes,
                                             f"N={n_top} -> M={m_top} (no boundary to return at)",
                                             slack=0 if m_size == size else max(size or 1, m_size or 1))
            return problems
        f, cuts = boundary
        runs = adapter.participants(cfg_m, m_top, copy.deepcopy(state1))
        middle: list[Any] = []
        for run, k in zip(runs, cuts, strict=True):
            middle += run.deliver(k)  # deliver(0) too: every run opened, so its local state is its own
        state2 = copy.deepcopy(adapter.merged_checkpoint(runs))
        for run in runs:
            run.close()
        # phase N again, from the boundary
        tail = _deliver_all(adapter.participants(cfg, n_top, copy.deepcopy(state2)))
    where = (f"N={n_top} (cut mid-step after {len(head)} items) -> M={m_top}"
             + (f" with batch({m_size})" if m_size != size else "")
             + f" (cut at the global-step boundary of {f} records per lane) -> N")
    got = lane_records(head + middle + [it for part in tail for it in part])
    problems += lane_record_problems(got, want_lanes, where)
    if len(tail) != len(truth):
        return [*problems, f"{where}: {len(tail)} participants, the oracle has {len(truth)}"]
    for i, (part, ref) in enumerate(zip(tail, truth, strict=True)):
        k = _prefix_at(ref, dict.fromkeys(range(c), f), owned[i])
        if k is None:
            continue  # this participant's lanes never sit at the frontier together in the oracle run
        want = ref[k:]
        if part != want:
            at = next((j for j in range(min(len(part), len(want))) if part[j] != want[j]),
                      min(len(part), len(want)))
            a = part[at] if at < len(part) else "<the stream ended>"
            b = want[at] if at < len(want) else "<the stream ended>"
            problems.append(
                f"{where}: participant {i} item {at} after the boundary differs from the uninterrupted run "
                f"(delivered {len(part)}, uninterrupted {len(want)}): lane {_lane(a)} {str(a)[:160]} | "
                f"lane {_lane(b)} {str(b)[:160]}")
            break
    return problems


def _lane(item: Any) -> Any:
    return item[0][0] if isinstance(item, list) and item else "-"


def lane_record_problems(got: dict[int, list[Any]], want: dict[int, list[Any]], where: str, *,
                   slack: int = 0) -> list[str]:
    """The first lane whose records differ; ``slack``: the lengths may differ by less than that
    (one side a prefix of the other)."""
    for lane in sorted(set(got) | set(want)):
        a, b = got.get(lane, []), want.get(lane, [])
        n = min(len(a), len(b))
        if a[:n] != b[:n] or (a != b and abs(len(a) - len(b)) >= max(slack, 1)):
            at = next((j for j in range(min(len(a), len(b))) if a[j] != b[j]), min(len(a), len(b)))
            return [f"{where}: lane {lane} record {at} differs from the oracle's lane (delivered {len(a)}, "
                    f"the oracle {len(b)})"]
    return []

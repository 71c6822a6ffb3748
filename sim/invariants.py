"""Stream invariants shared by the simulator's checker and the property suite (defined once).

Theory of operation
-------------------
Pure functions over plain data.  A *step* is one global step as consumed by the trainer:
a tuple of ``(lane, view)`` pairs, ``view`` being any comparable normal form of an item
(the caller picks it: ``repr``, :func:`properties.pipelines.item_view`, a cursor key).
Each function returns a list of problems as one-line strings naming the lane, the step or
the item where the first difference is; an empty list means the invariant holds.

* :func:`lane_stream_problems`: every lane's observed stream is a prefix of its
  reference stream (nothing lost, repeated or reordered, and no lane's stream changed
  after a remap: the per-lane stream does not depend on the topology);
* :func:`global_step_problems`: every global step that is a full round in the reference
  (one item of every lane) holds the same *set* of items on any topology.

sim/checker.py's history checker and properties/invariants.py both call these; nothing
else compares streams.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["Step", "global_step_problems", "lane_stream_problems", "per_lane"]

Step = tuple[tuple[int, Any], ...]  # ((lane, view), ...) in delivery order


def per_lane(steps: Sequence[Sequence[tuple[int, Any]]]) -> dict[int, list[Any]]:
    """The per-lane streams of a sequence of steps, in delivery order."""
    lanes: dict[int, list[Any]] = {}
    for step in steps:
        for lane, v in step:
            lanes.setdefault(lane, []).append(v)
    return lanes


def lane_stream_problems(observed: Mapping[int, Sequence[Any]], reference: Mapping[int, Sequence[Any]], *,
                         exact: bool = False) -> list[str]:
    """Each observed lane stream must be a prefix of the reference's (equal to it if ``exact``)."""
    problems = []
    for lane in sorted(set(observed) | set(reference)):
        got, want = list(observed.get(lane, [])), list(reference.get(lane, []))
        if got == want or (not exact and got == want[:len(got)]):
            continue
        at = next((i for i in range(min(len(got), len(want))) if got[i] != want[i]), min(len(got), len(want)))
        if at >= len(got):
            problems.append(f"lane {lane}: stream ends after {len(got)} items, the reference has {len(want)}")
        elif at >= len(want):
            problems.append(f"lane {lane}: item {at} is an extra item past the reference's {len(want)}")
        else:
            kind = "a repeat" if got[at] in want[:at] else "lost or reordered"
            problems.append(f"lane {lane}: item {at} differs from the reference ({kind}): "
                            f"got {got[at]!r}, expected {want[at]!r}")
    return problems


def global_step_problems(observed: Sequence[Sequence[tuple[int, Any]]],
                         reference: Sequence[Sequence[tuple[int, Any]]]) -> list[str]:
    """Every reference step holding one item of every lane must be the same set when observed.

    Near the end of data lanes run dry at different steps and the tail multiplexer drains
    the others, so those last steps are checked per lane only (by :func:`lane_stream_problems`).
    """
    n_lanes = len(per_lane(reference))
    problems = []
    for i, step in enumerate(observed):
        if i >= len(reference):
            break
        ref = reference[i]
        full_round = len({lane for lane, _ in ref}) == n_lanes == len(ref)
        if full_round and sorted(map(repr, step)) != sorted(map(repr, ref)):
            problems.append(f"global step {i + 1}: another set of samples than the reference's")
    return problems

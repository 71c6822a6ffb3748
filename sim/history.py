"""The simulated job's history (Jepsen's vocabulary) and the checker that judges it.

Theory of operation
-------------------
Every thing that happens in a :class:`~sim.world.World` is appended to its history as
one frozen :class:`Event`: ``time`` (virtual ticks), ``kind`` (what: ``deliver``,
``step``, ``checkpoint``, ``restore``, ``fault``, ``resize``, ``end``), ``step`` (the
trainer's global step when it happened), ``detail``, and Jepsen's ``type``: ``invoke``
when an operation starts, ``ok`` when it completed, ``fail`` when it certainly did not
take effect, ``info`` when the outcome is unknown or the entry is a nemesis action
(a fault).  ``process`` names who: ``job``, ``nemesis``, or a participant ``r<rank>w<worker>``.
``extra`` carries what the checker needs beyond that (a restore's generation and whether
the world had saved exactly that state under it).

:func:`check_history` rebuilds the stream the trainer consumed: ``step ok`` entries in
order; a ``checkpoint ok`` (or ``info``: a save that failed after its manifest was linked)
naming a generation snapshots the consumed stream, and a ``restore ok`` of that generation
resumes from the snapshot (the trainer's state is the generation's: after a restart from
scratch, say on a stale listing, a later restore of an older generation brings back the
steps that generation had seen); a restore naming no known generation truncates the
stream to its step.  Then, against an
uninterrupted single-rank reference run cut into global steps:

* per lane, the first place where the consumed stream leaves the reference is
  classified as ``lost`` (a reference item skipped and never seen), ``duplicated``
  (an item consumed again), ``non-monotonic`` (an item of the lane consumed early,
  the skipped one comes later) or ``unexpected`` (an item the reference lane never
  has), and named ``changed after a remap`` when it was consumed after a restore on
  another rank count;
* every global step that is a full round in the reference must hold the same set
  (:func:`sim.invariants.global_step_problems`);
* within such a step, every participant must have delivered its lanes in the order the
  reference gives them (the tail multiplexer's round robin; a ``step ok`` entry's
  ``extra["order"]`` lists each participant's lanes in delivery order): a lane twice, or
  two lanes swapped, is an ``interleaving`` problem even when the step's set is right.
  This is what sees a round-robin pointer lost across a restore of a *mid-step* cut (a
  checkpoint between two deliveries of a step, where the pointer is not at the first
  lane).  Seed 002 promises the exact interleaving across a restore only on the same
  topology: after a mid-step cut restored on another rank count (the snapshot's ``dp``
  and ``mid_step`` entries say so) the lanes sit at different frontiers for the rest of
  that timeline, so those steps are *drifted* and exempt from both step checks (the
  per-lane checks still hold them; a ``restore ok`` entry's ``mid_step`` and ``cut_dp``
  say so too, for a generation the history has no snapshot of);
* a ``restore ok`` whose generation the world did not save with exactly the loaded
  state is a restore that accepted a bad checkpoint;
* ``step ok`` numbers must follow each other (a step taken twice or skipped);
* when the run drained the data (an ``end`` entry with detail ``end-of-data``) every lane's
  stream must be the whole reference lane (a short stream lost its tail); otherwise a
  prefix suffices (the run stopped at its step budget).

**A micro-batch size change** (a ``start`` or ``restore ok`` entry's ``extra["microbatch"]``
differs from the first ``start``'s, the size the reference ran with): seed 002 promises that
"the round-robin still cycles the same lanes producing the same data", not the same items (a
lane's local batch holds another number of samples).  When a consumed step of the timeline ran
with another size, the checker compares in a unit that survives the change, the *record* (a
step's views are then tuples of per-record views, :func:`sim.workloads.records_view`):

* per lane, the records in delivery order must be the complete record stream of the lane
  (``records``: an uninterrupted run at micro-batch 1, which drops nothing) with the checks
  above, record by record; a drained run with ``drop_last`` may end short by less than the
  micro-batch size then in effect (its last partial batch, dropped by configuration);
* every item holds 1 to ``m`` records, ``m`` the size its step ran with (exactly ``m`` with
  ``drop_last``, which never emits a partial batch; the items a mid-step cut carried over a
  restore may have the cut's size): an engine that kept the old size is caught here;
* global steps: the steps before the first changed one are compared with the reference as
  above; from it on, the samples of a step are one batch of each lane (the per-lane check
  fixes which), so each undrifted step must be a *round*: a lane missing from a step may not
  appear in a later one (near the end of data a participant whose lane ran dry delivers its
  other lanes twice: that lane never comes back), and a step that holds every lane once
  must list each participant's lanes in the reference's round-robin order.

Each problem is a :class:`Problem` with a minimal witness (seed, step, lane, record);
:class:`RunReport` keeps the one-line strings for callers that want text.

What may not live here: the world (this module only reads entries), pipeline logic.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sim.invariants import Step, global_step_problems, per_lane

__all__ = ["Event", "Problem", "RunReport", "check_history"]


@dataclass(frozen=True, slots=True)
class Event:
    """One history entry (see the module docstring)."""

    time: int
    kind: str
    step: int
    detail: Any = None
    type: str = "ok"
    process: str = "job"
    extra: Any = None


@dataclass(frozen=True, slots=True)
class Problem:
    """One violated invariant and its minimal witness."""

    # lost / duplicated / non-monotonic / unexpected / short / step-order / global-step / interleaving /
    # bad-restore / lineage
    kind: str
    message: str
    seed: int | None = None
    step: int | None = None
    lane: int | None = None
    record: Any = None

    def __str__(self) -> str:
        return self.message


@dataclass(frozen=True, slots=True)
class RunReport:
    """What the checker found: empty ``problems`` means the run is correct."""

    steps_checked: int
    restores: int
    problems: tuple[str, ...]
    witnesses: tuple[Problem, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.problems


def _lane_problem(lane: int, got: list[Any], want: list[Any], steps: list[int], remapped: list[str | None],
                  seed: int | None, *, exact: bool = False) -> Problem | None:
    if got == want[:len(got)]:
        if not exact or len(got) == len(want):
            return None
        where = f"seed {seed}, " if seed is not None else ""
        return Problem(
            "lost",
            f"{where}lane {lane}: the run drained the data but the lane's stream ends after "
            f"{len(got)} items, the reference has {len(want)} (lost: {want[len(got)]!r:.120})",
            seed,
            steps[-1] if steps else 0,
            lane,
            want[len(got)],
        )
    at = next((i for i in range(min(len(got), len(want))) if got[i] != want[i]), min(len(got), len(want)))
    where = f"seed {seed}, " if seed is not None else ""
    if at >= len(want):
        kind, record = "unexpected", got[at]
        text = f"an extra item past the reference's {len(want)}"
    else:
        record = got[at]
        if got[at] in want[:at]:
            kind, text = "duplicated", "a repeat of an earlier item"
        elif got[at] not in want:
            kind, text = "unexpected", "an item the reference lane never has"
        elif want[at] in got[at + 1:]:
            kind, text = "non-monotonic", f"reference item {at} comes later"
        else:
            kind, text = "lost", f"reference item {at} ({want[at]!r:.120}) was skipped"
    remap = remapped[at]
    if remap is not None:
        text += f"; the lane changed after a remap ({remap})"
    return Problem(kind, f"{where}lane {lane}: item {at} (global step {steps[at]}) is {kind}: {text}; "
                   f"got {record!r:.160}", seed, steps[at], lane, record)


def check_history(
    history: Sequence[Event], reference: Sequence[Step], *, seed: int | None = None,
    records: Mapping[int, Sequence[Any]] | None = None, drop_last: bool = False,
) -> RunReport:
    """Judge a world's history against the uninterrupted reference (see the module docstring);
    ``records``: every lane's complete record stream, for a run whose micro-batch size changed
    (default: the reference's records), ``drop_last``: the workload's."""
    consumed: list[Step] = []
    dp_of_step: list[int] = []  # the rank count that produced each consumed step
    dp = 0
    base_mb: int | None = None  # the micro-batch size of the first incarnation (the reference's)
    mb: int | None = None  # the size the current incarnation runs with
    mb_of_step: list[tuple[int | None, int | None]] = []  # (size of the step, size of carried items)
    carried_mb: int | None = None  # the cut's size, for the first step after a mid-step restore
    last_remap: str | None = None
    remap_of_step: list[str | None] = []
    restores = 0
    problems: list[Problem] = []
    drift_of_step: list[bool] = []  # the step was consumed after a mid-step cut restored on another topology
    order_of_step: list[Any] = []  # each participant's lanes in delivery order (None: not recorded)
    drifted = False
    # generation -> (consumed, dp_of_step, remap_of_step, drift_of_step, order_of_step, drifted, dp at the
    # cut, items of the unfinished step at the cut, mb_of_step, micro-batch size at the cut)
    snapshots: dict[Any, tuple[list[Step], list[int], list[str | None], list[bool], list[Any], bool, int,
                               int, list[tuple[int | None, int | None]], int | None]] = {}
    for e in history:
        if e.type != "ok":
            continue
        if e.kind == "start":
            dp = int(e.detail)
            mb = e.extra.get("microbatch") if isinstance(e.extra, dict) else None
            if base_mb is None:
                base_mb = mb
        elif e.kind == "step":
            if e.step != len(consumed) + 1:
                problems.append(
                    Problem("step-order", f"step {e.step} taken after {len(consumed)} steps", seed, e.step)
                )
                break
            consumed.append(tuple(e.detail))
            dp_of_step.append(dp)
            remap_of_step.append(last_remap)
            drift_of_step.append(drifted)
            order_of_step.append(e.extra.get("order") if isinstance(e.extra, dict) else None)
            mb_of_step.append((mb, carried_mb))
            carried_mb = None
        elif e.kind == "checkpoint" and isinstance(e.extra, dict) and e.extra.get("generation") is not None:
            snapshots[e.extra["generation"]] = (
                list(consumed),
                list(dp_of_step),
                list(remap_of_step),
                list(drift_of_step),
                list(order_of_step),
                drifted,
                int(e.extra.get("dp") or dp),
                int(e.extra.get("mid_step") or 0),
                list(mb_of_step),
                mb,
            )
        elif e.kind == "restore":
            restores += 1
            gen = e.extra.get("generation") if isinstance(e.extra, dict) else None
            new_dp = int(e.detail) if isinstance(e.detail, int) else dp
            info = e.extra if isinstance(e.extra, dict) else {}
            new_mb = info.get("microbatch", mb)
            carried_mb = None
            if gen is not None and gen in snapshots:
                # the trainer resumes from the generation's state: the stream consumed when it was saved
                snap = snapshots[gen]
                consumed, dp_of_step, remap_of_step = list(snap[0]), list(snap[1]), list(snap[2])
                drift_of_step, order_of_step, mb_of_step = list(snap[3]), list(snap[4]), list(snap[8])
                mid, cut_dp = int(info.get("mid_step", snap[7]) or 0), int(info.get("cut_dp", snap[6]) or 0)
                if mid:
                    carried_mb = snap[9]  # the items the cut carries were batched with the cut's size
                drifted = snap[5] or (mid > 0 and cut_dp != new_dp)
                if len(consumed) != e.step:
                    problems.append(
                        Problem(
                            "step-order",
                            f"restore of generation {gen} claims step {e.step}, "
                            f"it was saved after {len(consumed)} steps",
                            seed,
                            e.step,
                        )
                    )
                    break
            elif gen is None and e.step == 0:
                consumed, dp_of_step, remap_of_step, drift_of_step, order_of_step = [], [], [], [], []
                mb_of_step = []
                drifted = False
            else:
                for lst in (consumed, dp_of_step, remap_of_step, drift_of_step, order_of_step, mb_of_step):
                    del lst[e.step:]
                # no snapshot of this generation: the restore entry says whether its cut was mid-step
                drifted = bool(drift_of_step and drift_of_step[-1]) or (
                    int(info.get("mid_step") or 0) > 0 and int(info.get("cut_dp") or 0) != new_dp)
            before = dp_of_step[-1] if dp_of_step else dp
            dp, mb = new_dp, new_mb
            if dp != before and e.step > 0:
                last_remap = f"restore at step {e.step}: {before} -> {dp} ranks"
            extra = e.extra if isinstance(e.extra, dict) else {}
            if extra.get("intact") is False:
                problems.append(Problem("bad-restore", f"seed {seed}, step {e.step}: a restore accepted "
                                        f"generation {extra.get('generation')}, which is not the state saved "
                                        f"under it ({extra.get('why', 'unknown')})", seed, e.step,
                                        None, extra.get("generation")))
    drained = any(e.kind == "end" and e.detail == "end-of-data" for e in history)
    changed = next((i for i, (m, _) in enumerate(mb_of_step) if m != base_mb), None)
    if changed is None and mb != base_mb:
        changed = len(consumed)  # the last incarnation took no step: its size still decides what it dropped
    if changed is not None:
        problems += _sample_problems(consumed, mb_of_step, remap_of_step, drift_of_step, order_of_step,
                                     reference, records, changed, seed, drained=drained,
                                     tail=(mb or 1) if drop_last else 1, drop_last=drop_last)
        return RunReport(len(consumed), restores, tuple(str(p) for p in problems), tuple(problems))
    mine = per_lane(consumed)
    want = per_lane(reference)
    for lane in sorted(set(mine) | set(want)):
        got = mine.get(lane, [])
        steps = [i + 1 for i, step in enumerate(consumed) for ln, _ in step if ln == lane]
        remaps = [remap_of_step[i] for i, step in enumerate(consumed) for ln, _ in step if ln == lane]
        p = _lane_problem(lane, got, want.get(lane, []), steps, remaps, seed, exact=drained)
        if p is not None:
            problems.append(p)
    # drifted steps are compared per lane only: stand the reference's own step in for them here
    undrifted = [
        reference[i] if drift_of_step[i] and i < len(reference) else step for i, step in enumerate(consumed)
    ]
    for text in global_step_problems(undrifted, reference):
        n = int(text.split()[2].rstrip(":"))
        problems.append(Problem("global-step", f"seed {seed}, {text}" if seed is not None else text, seed, n,
                                None, consumed[n - 1]))
    p = _interleaving_problem(consumed, order_of_step, drift_of_step, reference, seed)
    if p is not None:
        problems.append(p)
    return RunReport(len(consumed), restores, tuple(str(p) for p in problems), tuple(problems))


def _interleaving_problem(consumed: Sequence[Step], orders: Sequence[Any], drift: Sequence[bool],
                          reference: Sequence[Step], seed: int | None, *,
                          rounds_from: int | None = None) -> Problem | None:
    """The first full-round, undrifted step where a participant's lanes are not in the reference's
    order (a lane twice counts too); see the module docstring.  From step index ``rounds_from`` on
    (a micro-batch size change: the steps no longer match the reference's one for one) a step is
    checked when it holds every lane once, against the reference's first round's order."""
    n_lanes = len({lane for step in reference for lane, _ in step})
    for i, order in enumerate(orders):
        if rounds_from is not None and i >= rounds_from:
            if order is None or drift[i] or not reference:
                continue
            ref = reference[0]
            if not len({lane for lane, _ in consumed[i]}) == n_lanes == len(consumed[i]):
                continue  # not a whole round (the end of data)
        else:
            if order is None or drift[i] or i >= len(reference):
                continue
            ref = reference[i]
        if not len({lane for lane, _ in ref}) == n_lanes == len(ref):
            continue  # near the end of data the lanes run dry at different steps
        pos = {lane: k for k, (lane, _) in enumerate(ref)}
        for j, seq in enumerate(order):
            want = sorted(set(seq), key=lambda lane: pos.get(lane, n_lanes))
            if list(seq) != want:
                k = next((k for k in range(min(len(seq), len(want))) if seq[k] != want[k]), len(want))
                where = f"seed {seed}, " if seed is not None else ""
                return Problem("interleaving", f"{where}global step {i + 1}: participant {j} delivered lanes "
                               f"{list(seq)}, the uninterrupted run's round robin gives {want}",
                               seed, i + 1, seq[min(k, len(seq) - 1)], consumed[i])
    return None


def _records(view: Any) -> tuple[Any, ...]:
    """The per-record views of one item's view (:func:`sim.workloads.records_view` gives tuples)."""
    return tuple(view) if isinstance(view, tuple) else (view,)


def _sample_problems(consumed: Sequence[Step], mb_of_step: Sequence[tuple[int | None, int | None]],
                     remap_of_step: Sequence[str | None], drift: Sequence[bool], orders: Sequence[Any],
                     reference: Sequence[Step], records: Mapping[int, Sequence[Any]] | None, changed: int,
                     seed: int | None, *, drained: bool, tail: int, drop_last: bool) -> list[Problem]:
    """The checks of a timeline with a micro-batch size change, in records (module docstring)."""
    problems: list[Problem] = []
    where = f"seed {seed}, " if seed is not None else ""
    bad = next((v for step in (*consumed, *reference) for _, v in step if not isinstance(v, tuple)), None)
    if bad is not None:
        raise ValueError(f"check_history: expected per-record views (tuples, sim.workloads.records_view) "
                         f"in a run whose micro-batch size changed, received {type(bad).__name__} "
                         f"{bad!r:.80}")
    # every item holds 1..m records (exactly m with drop_last); items carried by a mid-step cut: its m
    for i, step in enumerate(consumed):
        sizes = {m for m in mb_of_step[i] if m is not None}
        for lane, v in step:
            n = len(_records(v))
            ok = n in sizes if drop_last else 1 <= n <= max(sizes, default=n)
            if sizes and not ok:
                problems.append(Problem(
                    "batch-size", f"{where}global step {i + 1}: lane {lane} delivered a micro-batch of {n} "
                    f"records, the step ran with micro-batch size {sorted(sizes)}"
                    + (" and drop_last" if drop_last else ""), seed, i + 1, lane, v))
                break
        if problems:
            break
    want: dict[int, list[Any]] = (
        {lane: list(recs) for lane, recs in records.items()} if records is not None
        else {lane: [r for v in views for r in _records(v)] for lane, views in per_lane(reference).items()})
    got: dict[int, list[Any]] = {}
    steps: dict[int, list[int]] = {}
    remaps: dict[int, list[str | None]] = {}
    for i, step in enumerate(consumed):
        for lane, v in step:
            for r in _records(v):
                got.setdefault(lane, []).append(r)
                steps.setdefault(lane, []).append(i + 1)
                remaps.setdefault(lane, []).append(remap_of_step[i])
    for lane in sorted(set(got) | set(want)):
        g, w = got.get(lane, []), want.get(lane, [])
        # a drained run with drop_last ends short by its last partial batch: less than the size then
        exact = drained and not (g == w[:len(g)] and len(w) - len(g) < tail)
        p = _lane_problem(lane, g, w, steps.get(lane, []), remaps.get(lane, []), seed, exact=exact)
        if p is not None:
            problems.append(p)
    # the steps before the first changed one: the reference's own steps
    head = [reference[i] if drift[i] and i < len(reference) else step
            for i, step in enumerate(consumed[:changed])]
    for text in global_step_problems(head, reference):
        n = int(text.split()[2].rstrip(":"))
        problems.append(Problem("global-step", f"{where}{text}", seed, n, None, consumed[n - 1]))
    # from it on, rounds: a lane missing from a step comes back in no later step
    later: set[int] = set()
    missing: tuple[int, int] | None = None
    for i in range(len(consumed) - 1, changed - 1, -1):
        lanes = {lane for lane, _ in consumed[i]}
        gone = sorted(later - lanes)
        if gone and not drift[i]:
            missing = (i, gone[0])
        later |= lanes
    if missing is not None:
        i, lane = missing
        problems.append(Problem("global-step", f"{where}global step {i + 1}: lane {lane} has no batch in it "
                                f"but comes back later (after a micro-batch size change a step is one batch "
                                f"of every lane)", seed, i + 1, lane, consumed[i]))
    p = _interleaving_problem(consumed, orders, drift, reference, seed, rounds_from=changed)
    if p is not None:
        problems.append(p)
    return problems

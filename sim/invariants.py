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
  (one item of every lane) holds the same *set* of items on any topology;
* :func:`resume_problems`: a run restored at cut ``i`` delivers exactly ``reference[i:]``;
* :func:`settings_invariance_problems`: runs that differ only in execution settings
  (runner, workers, queue sizes, placement) deliver identical streams;
* :func:`inflight_bound` and :func:`bounded_inflight_problems`: under demand-paced feeding
  (zephon_ref's default) the inflight chunks a checkpoint keeps per lane stay within what
  ``flush_every_k_chunks``, the chunk size and the runner's admission window allow, however
  long the run (the formula and its derivation are in :func:`inflight_bound`);
  :func:`inflight_growth` summarizes how they grow instead (round-robin feeding has no bound);
* :func:`eviction_safety_problems`: no chunk a checkpoint has evicted is needed by the
  records delivered after a restore from it;
* :func:`checkpoint_bytes_problems`: checkpoints of the same delivered prefix encode to
  the same bytes.

sim/checker.py's history checker and properties/invariants.py both call these; nothing
else compares streams.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from zephon_ref.engine.plan import FETCH_BATCH  # samples the fetch stage collects per lane

__all__ = [
    "LaneCut",
    "Step",
    "bounded_inflight_problems",
    "checkpoint_bytes_problems",
    "eviction_safety_problems",
    "global_step_problems",
    "inflight_bound",
    "inflight_growth",
    "lane_stream_problems",
    "per_lane",
    "resume_problems",
    "settings_invariance_problems",
]

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


def _first_difference(got: Sequence[Any], want: Sequence[Any]) -> int:
    return next((i for i in range(min(len(got), len(want))) if got[i] != want[i]), min(len(got), len(want)))


def resume_problems(reference: Sequence[Any], resumed: Sequence[Any], *, cut: int) -> list[str]:
    """Resume equivalence: a run restored from the checkpoint taken after ``cut`` items of the
    uninterrupted ``reference`` delivers exactly ``reference[cut:]`` (nothing skipped, repeated,
    reordered or changed, and it ends where the reference ends)."""
    if not 0 <= cut <= len(reference):
        return [f"cut {cut}: outside the reference's 0..{len(reference)} items"]
    want = list(reference[cut:])
    got = list(resumed)
    if got == want:
        return []
    at = _first_difference(got, want)
    if at >= len(got):
        return [
            f"resumed at {cut}: the stream ends after {len(got)} items, the reference has {len(want)} more"
        ]
    if at >= len(want):
        return [f"resumed at {cut}: item {cut + at} is extra, past the reference's {len(reference)} items"]
    kind = "a repeat" if got[at] in reference[:cut + at] else "skipped, reordered or changed"
    return [f"resumed at {cut}: item {cut + at} differs from the uninterrupted run ({kind}): "
            f"got {got[at]!r}, expected {want[at]!r}"]


def settings_invariance_problems(runs: Mapping[str, Sequence[Any]]) -> list[str]:
    """Execution-settings invariance: every run (keyed by a label naming its execution settings)
    delivers the same stream as the first label in sorted order."""
    labels = sorted(runs)
    if not labels:
        return []
    base = list(runs[labels[0]])
    problems = []
    for label in labels[1:]:
        got = list(runs[label])
        if got != base:
            at = _first_difference(got, base)
            problems.append(f"{label}: item {at} differs from {labels[0]} "
                            f"({len(got)} items against {len(base)})")
    return problems


def inflight_bound(*, k: int, monotone: bool, depth_samples: int, min_chunk: int,
                   fetch_batch: int = FETCH_BATCH) -> int:
    """The most inflight chunks one lane may hold at a checkpoint under demand-paced feeding.

    ``k`` is the plan's ``flush_every_k_chunks`` (K); ``depth_samples`` (W) is how many source
    items the runner may admit for a lane past the item that produced that lane's next
    delivered item (the admission window: 0 for the inline runner, which runs every stage dry
    after each admission; ``queue_size - 1`` for the threads runner, whose consumer keeps at most
    ``queue_size`` admitted messages in its queues, one of them the item that produced the output;
    the engine's ``window`` for a caller stepping it,
    such as the simulator); ``min_chunk`` (c) is the smallest chunk size among the chunks
    counted; ``fetch_batch`` (F) is how many samples the fetch stage collects per lane.

    Derivation (zephon_ref/engine: core.py feeding, stage.py, completion.py, mux.py).  A
    lane's inflight chunks run from the first chunk of the lowest epoch that is unclosed or
    pinned up to its admission frontier ``a`` (eviction is contiguous from the bottom).
    Count what holds a lane's records between admission and delivery:

    * operator buffers (fetch, pack bins, shuffle reservoir, ensure_mixture, batch): every
      flush sentinel flushes and resets them for the lane, so they hold records of the open
      epoch only; the one allowed stall, ``batch(drop_last=True)``, holds older records only
      until the batch it completes goes out, and a batch's cursor is its newest record;
    * the stages after ``batch`` (``map_batch``, the only operator allowed there) hold nothing
      across pushes (:class:`zephon_ref.ops.map_batch.MapBatchAccumulator`): what ``batch``
      emits reaches the tail in the same run of the stages.  This is what keeps the stall
      harmless: a buffer there (zephon 0.2.0's counting one, 64 micro-batches) holds an
      epoch's complete batches behind the stalled sentinel, the session's first item is then
      one of them (cursor in epoch e) while the lane has admitted the chunks that complete the
      stalled batch, and how many those are depends on the data, not on the configuration
      (K=1, batch(4), a chunk of 5 records then g chunks a filter empties: g + 2 chunks at a
      checkpoint; tests/properties/test_feeding.py); in a monotone plan such a buffer holds up
      to 64 micro-batches past F.  No term of the bound could cover that, so map_batch holds
      nothing instead (docs/divergences.md D-102);
    * the tail multiplexer's queue of the lane: demand feeding admits for a lane only on its
      round-robin turn with its queue empty (sentinels consumed) and the tail's outbox empty,
      and stops once the lane's next item reaches the tail; the queue therefore holds only
      what the items admitted in that one *session* produced;
    * the runner's queues: at most W admitted items past the one that produced the output;
    * DataLoader worker prefetch: nothing.  A worker stamps the state its engine had right
      after it delivered an item, and the trainer records the stamp of the last item it
      consumed; prefetched items come after that cut (zephon_ref/torch/stateful.py).

    At the tail a lane's items are in epoch order (each sentinel passes a stage only after
    that stage emitted the lane's older records), so when a session's first item goes out,
    every older epoch is closed (its records delivered, its tombstones consumed ahead of it)
    and evicted, and the cursor's epoch e is the epoch whose records came out: mid-epoch (the
    frontier is inside e) or at e's own flush (the frontier is e's end, the next chunk is
    admitted only when the lane is fed again).  So ``a <= K * (e + 1)`` plus the chunks the W
    extra items reach, and later deliveries of the session's output only move the cursor up:

    * non-monotone plan:  **inflight <= K + ceil(W / c)**;
    * monotone plan (K = 0, watermark eviction: a delivered item of top chunk d evicts every
      chunk below d): the session's output appears when fetch emits its F samples, so the
      frontier is at most F - 1 + W samples past the delivered item's top chunk:
      **inflight <= 1 + ceil((F + W) / c)**.

    Where it does not apply, on purpose (the checks skip these checkpoints and say why):

    * *end of data*: once a lane of the engine has admitted all its input, the strict round
      robin waits on that lane until the close flush, which needs every lane's remaining
      input admitted; any feeding policy then holds each lane's remaining chunks (bounded by
      the data left, not by the configuration);
    * a checkpoint of one engine taken while another participant's lane is part-way through
      a session (a simulator's mid-step cut): that lane may additionally hold its pinned epoch
      and epochs whose records were all dropped, until its next item goes out;
    * right after a restore of a state written under round-robin feeding: the restored
      inflight chunks stay until delivery passes them.

    The bound does not grow with the length of the stream, and an engine that stops evicting
    (a lost tombstone, a stuck pin) exceeds it.  Under round-robin feeding (zephon 0.2.0's)
    the lane that packs densely is fed while the tail waits on another, its queue in the
    multiplexer grows, and nothing bounds its inflight set (:func:`inflight_growth`).
    """
    if k < 0 or depth_samples < 0 or min_chunk < 1 or fetch_batch < 1:
        raise ValueError(
            f"inflight_bound: expected k >= 0, depth_samples >= 0, min_chunk >= 1, fetch_batch >= 1, "
            f"received k={k}, depth_samples={depth_samples}, min_chunk={min_chunk}, "
            f"fetch_batch={fetch_batch}"
        )
    if monotone or k == 0:
        return 1 + math.ceil((fetch_batch + depth_samples) / min_chunk)
    return k + math.ceil(depth_samples / min_chunk)


def inflight_growth(points: Sequence[tuple[int, int]]) -> str:
    """How the worst lane's inflight chunks grew: ``points`` are ``(items delivered, worst inflight
    chunks of any lane so far)``; the summary names the first and last point and the slope of a
    least-squares fit of log(inflight) on log(items) over every point (about 0.5 for round-robin
    feeding of a packing pipeline, 0 for a bounded one)."""
    pts = [(n, v) for n, v in points if n > 0 and v > 0]
    if len(pts) < 2:
        return f"{len(pts)} point(s): no growth to report"
    xs = [math.log(n) for n, _ in pts]
    ys = [math.log(v) for _, v in pts]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    vx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / vx if vx else 0.0
    (n0, v0), (n1, v1) = pts[0], pts[-1]
    return (f"worst lane inflight {v0} chunks after {n0} items, {v1} after {n1} "
            f"(log-log slope {slope:.2f} over {len(pts)} points)")


def bounded_inflight_problems(observations: Sequence[Mapping[int, int]], *, bound: int) -> list[str]:
    """Bounded inflight state: at every observation (one per checkpoint, ``lane -> number of
    inflight chunks``) every lane holds at most ``bound`` chunks (see :func:`inflight_bound`)."""
    problems = []
    for i, obs in enumerate(observations):
        for lane in sorted(obs):
            if obs[lane] > bound:
                problems.append(f"checkpoint {i}: lane {lane} holds {obs[lane]} inflight chunks, "
                                f"more than the bound {bound}")
                return problems  # the first is enough; the rest usually follow from it
    return problems


LaneCut = Mapping[int, tuple[Collection[int], int]]  # lane -> (inflight chunk ids, next chunk id)


def eviction_safety_problems(cuts: Sequence[tuple[int, LaneCut]],
                             needs: Sequence[Collection[tuple[int, int]]], *,
                             pinned: Sequence[Collection[tuple[int, int]]] = ()) -> list[str]:
    """Eviction safety: a chunk a checkpoint has evicted is never needed after a restore from it.

    ``cuts[j] = (position, lanes)``: a checkpoint taken after ``position`` items, with each
    lane's inflight chunk ids and next chunk id.  ``needs[i]`` is the ``(lane, chunk id)``
    pairs item ``i`` of the uninterrupted stream was built from (its contributors);
    ``pinned[j]`` (optional) adds what the restore itself reads: the chunks of the replay
    cursors, needed only by a lane that still holds inflight chunks (the replay filter
    skips that lane's records up to its cursor; a lane holding none replays nothing).  A
    chunk ``(lane, c)`` is available after cut ``j`` when it is inflight there or not
    admitted yet (``c >= next chunk id``: the work source makes it again); needing any
    other chunk at or after the cut's position is a problem.
    """
    # The plain definition is _cut_problem over every cut, which scans every later item's needs: with a
    # checkpoint after every item that is quadratic in the stream (the conformance row spent most of a
    # 100-example run there).  Each chunk's last needing item says whether a cut can have a problem at
    # all; _cut_problem then finds the first one, so the messages are the plain definition's.
    last_need: dict[tuple[int, int], int] = {}
    for i, need in enumerate(needs):
        for pair in need:
            last_need[pair] = i
    by_last = sorted(last_need.items(), key=lambda kv: (-kv[1], kv[0]))
    problems = []
    for j, (position, lanes) in enumerate(cuts):
        pins = sorted(pinned[j]) if j < len(pinned) else []
        suspect = False
        for pair, last in by_last:
            if last < position:
                break
            if _evicted(lanes, pair):
                suspect = True
                break
        suspect = suspect or any(_evicted(lanes, pair) for pair in pins if lanes.get(pair[0], ((), 0))[0])
        if suspect:
            problems += _cut_problem(position, lanes, needs, pins)
    return problems


def _evicted(lanes: LaneCut, pair: tuple[int, int]) -> bool:
    lane, cid = pair
    inflight, next_cid = lanes.get(lane, ((), 0))
    return cid < next_cid and cid not in inflight


def _cut_problem(position: int, lanes: LaneCut, needs: Sequence[Collection[tuple[int, int]]],
                 pins: Sequence[tuple[int, int]]) -> list[str]:
    """The first problem of one cut (:func:`eviction_safety_problems`), by the plain scan."""
    wanted = [(i, pair) for i in range(position, len(needs)) for pair in sorted(needs[i])]
    wanted += [(-1, (lane, cid)) for lane, cid in pins if lanes.get(lane, ((), 0))[0]]
    for i, (lane, cid) in wanted:
        if _evicted(lanes, (lane, cid)):
            who = "the replay cursor" if i < 0 else f"item {i}"
            return [f"checkpoint after {position} items: {who} needs chunk {cid} of lane {lane}, "
                    f"which that checkpoint already evicted"]
    return []


def checkpoint_bytes_problems(encodings: Mapping[str, bytes]) -> list[str]:
    """Determinism of checkpoint bytes: encodings of checkpoints of the same delivered prefix
    (keyed by how each was obtained) are byte-identical to the first label in sorted order."""
    labels = sorted(encodings)
    if not labels:
        return []
    base = encodings[labels[0]]
    problems = []
    for label in labels[1:]:
        data = encodings[label]
        if data != base:
            at = _first_difference(data, base)
            problems.append(f"{label}: {len(data)} bytes differ from {labels[0]}'s {len(base)} at byte {at}")
    return problems

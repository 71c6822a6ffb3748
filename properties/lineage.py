"""No skip, no duplicate, nothing changed: a delivered stream against plain definitions of the data.

Theory of operation
-------------------
The resume rows compare a run with another run of the same implementation, and the
oracle row compares it with zephon_ref; neither sees a bug that zephon_ref itself has
when zephon_ref is the implementation under test.  This module checks a delivered
stream (the items of every run that makes up one consumer's timeline, in the
normal form of :mod:`properties.normal_form`) against definitions that trust
nothing the pipeline computed:

* **what each lane admits** (:func:`expected_lanes`): the *global* chunk sequence,
  walked plainly on one lane of one (``canonical_replicas=1``: the clone owns every
  global chunk, so no routing and no skipping over other lanes' chunks is involved),
  and the owner of global chunk ``g`` written out from the spec (``g mod C`` for
  ``modulo``; slot ``g mod C`` of ``range(C)`` shuffled by ``random.Random(seed +
  (g div C) * GOLDEN)`` for ``permute``).  Lane ``L``'s chunk id ``j`` is the ``j``-th
  global chunk that ``L`` owns, so chunk ids are contiguous from 0, every global chunk
  reaches exactly one lane and nothing before the end of data is missing: a routing
  bug that never delivers a third of the chunks is deterministic and self-consistent
  (resume and remap agree with it) but not with this.  The walk also checks that no
  sample pointer appears more often than its exhaustion policy allows;
* **what each sample holds**: its row's tokens, by the suite's tokenizer
  (:func:`properties.pipelines.crc_tokens`) on the corpus row the sample pointer names.

:func:`lineage_problems` then requires, with a witness ``(lane, offset, item)`` per
problem:

1. every contributor names an offset its lane admits, carrying that offset's sample
   pointer (nothing delivered that was not admitted);
2. every record's cursor is unique within its lane (split-record children sharing a
   cursor fail here);
3. every admitted offset is closed (``is_last_child``) at most once, through any number
   of checkpoints, restores and remaps (the shared core
   :func:`sim.checker.check_lineage_views`);
4. content conservation: an offset's fragments, ordered by their start in tokens,
   are contiguous and concatenate to its tokens (all of them when it closed, a prefix
   when ``wrap`` dropped its tail);
5. an admitted offset that never closes is one the configuration documents as
   discarded (:func:`discard_reason`): an empty record or an oversized one under
   first_fit/best_fit packing (dropped with a tombstone), wrap's trailing tokens at a
   flush (under ``max_length`` tokens per lane and flush), the records of a micro-batch that a
   dropping ``map_batch`` (a transform marked ``drops_batches``, ``drop_none=True``) returned None
   for (with tombstones), records of a partial batch
   under ``batch(drop_last=True)`` (under ``microbatch_size`` batches' worth per lane and
   flush), or anything under strict ``ensure_mixture(max_buffer_size=None)``; with
   ``batch(drop_last=False)`` nothing may be missing;
6. with engine states (:func:`final_state_problems`): a run that delivered its last
   item holds nothing inflight;
7. with tombstones (:func:`closure_problems`, an uninterrupted run whose dropped records
   are visible): every admitted offset closes exactly once, through a delivered record or
   a tombstone, with no documented discard to excuse it except the final partial batch of
   each lane under ``batch(drop_last=True)``, which is discarded at the end of data without
   tombstones (an operator that drops a record without its tombstone fails here, even where
   the drop itself is documented).

What may not live here: anything that runs an implementation (properties/conformance.py
collects the streams), and any pipeline logic: the definitions above must stay plain
enough to check by eye.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from random import Random  # seeded instances only
from typing import Any

from properties.pipelines import PipelineConfig, crc_tokens, work_source
from sim.checker import check_lineage_views

__all__ = [
    "GOLDEN",
    "Expected",
    "closure_problems",
    "discard_reason",
    "expected_lanes",
    "final_state_problems",
    "lineage_problems",
    "owner",
]

#: the routing constant of the spec (zephon 0.2.0's notes, "lane assignment")
GOLDEN = 0x9E3779B97F4A7C15
#: a global walk longer than this is not a small configuration: the check refuses to guess
MAX_GLOBAL_CHUNKS = 200_000

SampleKey = tuple[int, int, int]


def owner(g: int, canonical_replicas: int, *, seed: int, assignment: str) -> int:
    """The lane that owns global chunk ``g`` (the spec, written out)."""
    if assignment == "modulo":
        return g % canonical_replicas
    order = list(range(canonical_replicas))
    Random(seed + (g // canonical_replicas) * GOLDEN).shuffle(order)
    return order[g % canonical_replicas]


@dataclass(frozen=True)
class Expected:
    """What each lane admits and what each sample holds, from the plain definitions."""

    lanes: dict[int, list[list[SampleKey]]]  # lane -> chunk id -> sample pointer per offset
    tokens: dict[SampleKey, tuple[int, ...]]
    global_chunks: int
    problems: tuple[str, ...]  # the global walk's own problems (a sample repeated beyond its policy)


def _allowed_uses(cfg: PipelineConfig, name: str) -> int | None:
    """How often one sample pointer of dataset ``name`` may appear in the whole global sequence
    (None: no plain bound; with no policy given, small datasets repeat until every dataset has
    finished ``stop_after_passes`` passes)."""
    kw = cfg.source_kwargs
    policy = kw.get("exhausted_policy")
    pol = policy.get(name) if isinstance(policy, Mapping) else policy
    if pol in ("stop", "redistribute"):
        return 1
    cap = kw.get("max_repeats")
    cap = cap.get(name) if isinstance(cap, Mapping) else cap
    if pol == "repeat" and cap is not None:
        return int(cap) + 1
    return None


def _coverage_problems(cfg: PipelineConfig, corpus: Any, uses: Mapping[SampleKey, int]) -> list[str]:
    """The global sequence covers the corpus as its exhaustion policy says, counted plainly from
    the dataset sizes (a chunk lost on every lane, consistently, shows here):

    * no policy given (``stop_after_passes`` P, default 1): the stream ends once every dataset
      has finished P passes, and a pass ends when a quota does not fit in what is left of it
      (the rest is skipped, fewer than ``chunk_size`` samples): in every dataset fewer than
      ``P * chunk_size`` samples appear fewer than P times;
    * ``redistribute`` everywhere: every sample exactly once;
    * ``stop`` (sample units): the stream ends at the first quota a dataset cannot fill, so some
      dataset has fewer than ``chunk_size`` samples left unused;
    * ``repeat`` with ``max_repeats`` M (sample units): the stream ends when a dataset that
      started its last allowed pass cannot fill a quota; each of its M + 1 passes used all but
      fewer than ``chunk_size`` samples, so it drew at least ``(M + 1) * (size - chunk_size + 1)``."""
    kw = cfg.source_kwargs
    policy = kw.get("exhausted_policy")
    sizes = {i: {(i, int(sh), j) for sh, n in zip(d.ids().tolist(), d.counts().tolist(), strict=True)
                 for j in range(int(n))} for i, d in enumerate(corpus.datasets)}
    names = [d.name for d in corpus.datasets]
    chunk = int(kw.get("chunk_size", 16384))
    token_aware = kw.get("token_estimation") is not None
    if policy is None and kw.get("max_repeats") is None:
        passes = int(kw.get("stop_after_passes") or 1)
        for i, samples in sizes.items():
            short = sorted(s for s in samples if uses.get(s, 0) < passes)
            if len(short) >= passes * chunk:
                return [
                    f"global chunk sequence: {len(short)} samples of {names[i]!r} (first {short[0]}) "
                    f"appear fewer than {passes} times, but the stream ends only after every dataset "
                    f"finished {passes} pass(es)"
                ]
        return []
    if policy == "redistribute" or (isinstance(policy, Mapping) and set(policy.values()) == {"redistribute"}):
        for i, samples in sizes.items():
            short = sorted(s for s in samples if uses.get(s, 0) != 1)
            if short:
                return [
                    f"global chunk sequence: sample {short[0]} of {names[i]!r} "
                    f"appears {uses.get(short[0], 0)} times, 'redistribute' everywhere delivers each "
                    f"sample exactly once"
                ]
        return []
    if token_aware or isinstance(policy, Mapping):
        return []
    cap = kw.get("max_repeats")
    if policy == "stop":
        left = {i: sum(1 for s in samples if s not in uses) for i, samples in sizes.items()}
        if all(n >= chunk for n in left.values()):
            return [
                f"global chunk sequence: every dataset has at least a chunk ({chunk}) of samples left unused "
                f"({ {names[i]: n for i, n in left.items()} }), but 'stop' ends at the first quota a dataset "
                f"cannot fill"
            ]
    elif policy == "repeat" and isinstance(cap, int):
        drawn = {i: sum(uses.get(s, 0) for s in samples) for i, samples in sizes.items()}
        if all(drawn[i] < (cap + 1) * (len(samples) - chunk + 1) for i, samples in sizes.items()):
            return [
                f"global chunk sequence: no dataset drew (max_repeats + 1) * (size - chunk_size + 1) samples "
                f"({ {names[i]: n for i, n in drawn.items()} }), but the stream ends only when one ran out "
                f"of repeats"
            ]
    return []


def expected_lanes(cfg: PipelineConfig) -> Expected:
    """The plain definitions of the module docstring for ``cfg`` (a source that ends)."""
    c = int(cfg.options.get("canonical_replicas", 1))
    kw = cfg.source_kwargs
    seed, assignment = int(kw.get("seed", 0)), str(kw.get("lane_assignment", "permute"))
    walk = work_source(cfg).clone_for_lane(0, 1)
    names = list(cfg.layout)
    lanes: dict[int, list[list[SampleKey]]] = {lane: [] for lane in range(c)}
    uses: dict[SampleKey, int] = {}
    g = 0
    while (chunk := walk.next_chunk()) is not None:
        sids = [(int(sid[0]), int(sid[1]), int(sid[2])) for sid, _name in chunk]
        lanes[owner(g, c, seed=seed, assignment=assignment)].append(sids)
        for s in sids:
            uses[s] = uses.get(s, 0) + 1
        g += 1
        if g > MAX_GLOBAL_CHUNKS:
            raise ValueError(f"lineage: expected a source that ends within {MAX_GLOBAL_CHUNKS} chunks, "
                             f"received {cfg.describe()}")
    problems = []
    for s, n in sorted(uses.items()):
        allowed = _allowed_uses(cfg, names[s[0]])
        if allowed is not None and n > allowed:
            problems.append(f"global chunk sequence: sample {s} of {names[s[0]]!r} appears {n} times, "
                            f"its exhaustion policy allows {allowed}")
            break
    from zephon_ref.synthetic import synthetic_corpus

    corpus = synthetic_corpus(seed=cfg.corpus_seed, layout=cfg.layout)
    problems += _coverage_problems(cfg, corpus, uses)
    tokens = {s: tuple(crc_tokens(corpus.datasets[s[0]].get(s[1], s[2]))["input_ids"]) for s in uses}
    return Expected(lanes, tokens, g, tuple(problems))


def _ops(cfg: PipelineConfig) -> dict[str, Mapping[str, Any]]:
    return {m: kw for m, kw in cfg.chain}


def _map_batch_drops(ops: Mapping[str, Mapping[str, Any]]) -> bool:
    """A ``map_batch`` whose transform may return None (marked ``drops_batches``) under drop_none=True."""
    mb = ops.get("map_batch")
    return mb is not None and mb.get("drop_none", True) and bool(getattr(mb["transform_fn"], "drops_batches",
                                                                         False))


def discard_reason(cfg: PipelineConfig, tokens: Sequence[int]) -> str | None:
    """Why ``cfg`` may discard a sample with these tokens without delivering it whole (None: it
    must close in a delivered record)."""
    ops = _ops(cfg)
    mapped = ops.get("map_transform")
    if mapped is not None and mapped.get("drop_none", True) and mapped["transform_fn"](
            {"input_ids": list(tokens)}) is None:
        return "the map returned None (drop_none=True: a tombstone)"
    pack = ops.get("pack_sequences")
    if pack is not None:
        if not tokens:
            return "empty record (a tombstone under packing)"
        if (
            pack.get("algorithm", "first_fit") in ("first_fit", "best_fit")
            and len(tokens) > pack["max_length"]
            and pack.get("drop_oversized") is not False  # None: drop unless it splits
        ):
            return "oversized record (dropped with a tombstone)"
        if pack.get("algorithm") == "wrap":
            return "wrap's trailing tokens at a flush"
    if _map_batch_drops(ops):  # which micro-batches it drops depends on where a record lands, not on tokens
        return "a micro-batch map_batch dropped (drop_none=True: tombstones)"
    batch = ops.get("batch")
    if batch is not None and batch.get("drop_last", True):
        return "a partial batch under drop_last=True"
    em = ops.get("ensure_mixture")
    if em is not None and "max_buffer_size" in em and em["max_buffer_size"] is None:
        return "strict ensure_mixture's flush"
    return None


def _segments(rec: Any, packed: bool) -> list[tuple[Any, bool, int | None, tuple[int, ...]]]:
    """``(contributor cursor, closes, start in tokens, tokens)`` per segment of a record."""
    lane, cursor, contributors, payload = rec
    lineage = tuple(cursor[2])
    if packed:
        if not isinstance(payload, tuple) or len(payload) != len(contributors):
            raise AssertionError(f"a pack's payload: expected one token tuple per contributor "
                                 f"({len(contributors)}), received {payload!r:.120}")
        segs = list(payload)
    else:
        segs = [payload]
    out: list[tuple[Any, bool, int | None, tuple[int, ...]]] = []
    for i, ((ccur, closes), seg) in enumerate(zip(contributors, segs, strict=True)):
        # the record's lineage is its first segment's start in tokens; a later segment's start is not in
        # the normal form (under best_fit_wrap it may be any fragment, and the one that closes its offset
        # is the one emitted last, not the last in tokens): None, placed by _place_unknown where its tokens
        # fit between the offset's other fragments
        start = int(lineage[-1]) if i == 0 and lineage else (0 if i == 0 else None)
        out.append((ccur, bool(closes), start, tuple(seg)))
    return out


def _place_unknown(want: Sequence[int], fs: list[tuple[int | None, tuple[int, ...], int]]
                   ) -> list[tuple[int, tuple[int, ...], int]]:
    """The fragments with a start each: one whose start the normal form does not carry (None) goes to the
    first place where its tokens occur in ``want`` without overlapping a placed fragment (-1: nowhere, which
    check 4 reports as not the sample's tokens).  A changed, duplicated or extra fragment finds no place;
    a skipped one leaves a gap."""
    placed = [(s, t, i) for s, t, i in fs if s is not None]
    taken = [(s, s + len(t)) for s, t, _i in placed]
    for _s, toks, i in sorted((f for f in fs if f[0] is None), key=lambda f: f[2]):
        n = len(toks)
        at = next((p for p in range(len(want) - n + 1) if tuple(want[p:p + n]) == toks
                   and all(p + n <= a or p >= b for a, b in taken)), -1)
        if at >= 0:
            taken.append((at, at + n))
        placed.append((at, toks, i))
    return placed


def lineage_problems(cfg: PipelineConfig, items: Sequence[Sequence[Any]], *, expected: Expected | None = None,
                     limit: int = 3) -> list[str]:
    """Problems 1-5 of the module docstring for one consumer's timeline ``items`` (every item
    delivered, across checkpoints, restores and remaps, each once), at most ``limit`` of each kind."""
    exp = expected if expected is not None else expected_lanes(cfg)
    problems: list[str] = list(exp.problems)
    ops = _ops(cfg)
    packed = "pack_sequences" in ops
    records = [(i, r) for i, item in enumerate(items) for r in item]
    admitted = {
        lane: {cid: range(len(ch)) for cid, ch in enumerate(chunks)} for lane, chunks in exp.lanes.items()
    }

    # 1. contributors name admitted offsets with their sample pointers; 2. cursors unique per lane
    bad: list[str] = []
    seen: dict[tuple[int, Any], int] = {}
    dup_cursor: list[str] = []
    frags: dict[tuple[int, int, int], list[tuple[int, tuple[int, ...], int]]] = {}
    for i, rec in records:
        lane, cursor = int(rec[0]), rec[1]
        if (lane, cursor) in seen and len(dup_cursor) < limit:
            dup_cursor.append(
                f"lane {lane}: cursor {tuple(cursor)} delivered twice (items {seen[(lane, cursor)]} and {i})"
            )
        seen.setdefault((lane, cursor), i)
        try:
            segs = _segments(rec, packed)
        except AssertionError as exc:
            problems.append(f"lane {lane}, item {i}: {exc}")
            continue
        for ccur, _closes, start, toks in segs:
            cid, off, sid = int(ccur[0]), int(ccur[1]), tuple(int(x) for x in ccur[3])
            chunks = exp.lanes.get(lane)
            if chunks is None or cid >= len(chunks) or off >= len(chunks[cid]):
                if len(bad) < limit:
                    bad.append(
                        f"lane {lane}, offset ({cid}, {off}), item {i}: delivered but the lane admits "
                        f"no such offset ({0 if chunks is None else len(chunks)} chunks)"
                    )
                continue
            if chunks[cid][off] != sid:
                if len(bad) < limit:
                    bad.append(
                        f"lane {lane}, offset ({cid}, {off}), item {i}: carries sample {sid}, the lane's "
                        f"chunk {cid} holds {chunks[cid][off]} there"
                    )
                continue
            frags.setdefault((lane, cid, off), []).append((start, toks, i))  # type: ignore[arg-type]
    problems += bad + dup_cursor

    # 3. closed at most once (and 5's input: what never closed)
    report = check_lineage_views(admitted, [r for _, r in records])
    unclosed: dict[int, tuple[tuple[int, int], ...]] = {}
    for lane, v in sorted(report.lanes.items()):
        for (where, closers) in v.closers[:limit]:
            problems.append(f"lane {lane}, offset {where}: closed {len(closers)} times, by records "
                            f"{[idx for _k, idx, _key in closers]}")
        unclosed[lane] = v.lost

    # 4. content conservation (a partial batch dropped under drop_last=True may hold any fragment)
    unclosed_sets = {lane: frozenset(v) for lane, v in unclosed.items()}
    batch_op = ops.get("batch")
    # (the packs of a micro-batch a dropping map_batch returned None for, too; and whatever a strict
    # ensure_mixture holds at a flush, a packed fragment from the middle of a sample among it, as step 5
    # below already grants: docs/divergences.md D-90)
    em_op = ops.get("ensure_mixture")
    strict_mixture = em_op is not None and "max_buffer_size" in em_op and em_op["max_buffer_size"] is None
    gaps_allowed = (batch_op is not None and batch_op.get("drop_last", True) or _map_batch_drops(ops)
                    or strict_mixture)
    shown = 0
    for (lane, cid, off), fs in sorted(frags.items()):
        want = exp.tokens[exp.lanes[lane][cid][off]]
        closed = (cid, off) not in unclosed_sets.get(lane, frozenset())
        fs = _place_unknown(want, fs)
        end, trouble = 0, ""
        for start, toks, _i in sorted(fs):
            if tuple(want[start:start + len(toks)]) != toks:
                trouble = f"the fragment at {start} is not the sample's tokens {start}..{start + len(toks)}"
            elif start < end:
                trouble = f"the fragment at {start} overlaps the one before it (delivered twice)"
            elif start > end and not gaps_allowed:
                trouble = f"tokens {end}..{start} are missing"
            if trouble:
                break
            end = start + len(toks)
        if not trouble and closed and end != len(want) and not gaps_allowed:
            trouble = f"it closed after {end} of its {len(want)} tokens"
        if not trouble:
            continue
        if shown < limit:
            problems.append(
                f"lane {lane}, offset ({cid}, {off}), sample {exp.lanes[lane][cid][off]}, items "
                f"{[i for _s, _t, i in fs]}: fragments at {[s for s, _t, _i in sorted(fs)]}: {trouble} "
                f"({'closed' if closed else 'not closed'})"
            )
        shown += 1

    # 5. what never closed is documented as discarded, within its bound
    k = int(cfg.options.get("flush_every_k_chunks") or 1)
    for lane, lost in sorted(unclosed.items()):
        if not lost:
            continue
        flushes = math.ceil(len(exp.lanes[lane]) / k) + 1
        budget_tokens = 0
        budget_records = 0
        shown = 0
        for cid, off in lost:
            want = exp.tokens[exp.lanes[lane][cid][off]]
            reason = discard_reason(cfg, want)
            if reason is None:
                if shown < limit:
                    problems.append(
                        f"lane {lane}, offset ({cid}, {off}), sample {exp.lanes[lane][cid][off]}: never "
                        f"closed (no delivered record or fragment closes it, and the configuration "
                        f"discards nothing of it)"
                    )
                shown += 1
            elif reason.startswith("wrap"):
                budget_tokens += len(want) - sum(len(t) for _s, t, _i in frags.get((lane, cid, off), ()))
            elif reason.startswith("a partial batch"):
                budget_records += 1
        batch = ops.get("batch")
        pack = ops.get("pack_sequences")
        em = ops.get("ensure_mixture")
        if em is not None and "max_buffer_size" in em and em["max_buffer_size"] is None:
            continue  # strict ensure_mixture may discard anything it holds at a flush: no bound
        if batch is not None and batch.get("drop_last", True):
            # a dropped partial batch holds < microbatch_size records, each a pack of up to max_length samples
            per_record = int(pack["max_length"]) if pack else 1
            budget_tokens = 0 if pack else budget_tokens
            if budget_records > flushes * (int(batch["microbatch_size"]) - 1) * per_record:
                problems.append(f"lane {lane}: {budget_records} offsets never closed, more than "
                                f"{flushes} flushes' partial batches hold")
        elif pack is not None and pack.get("algorithm") == "wrap" and budget_tokens > flushes * (
                int(pack["max_length"]) - 1):
            problems.append(
                f"lane {lane}: {budget_tokens} tokens never delivered, more than wrap's trailing tokens "
                f"at {flushes} flushes allow ({int(pack['max_length']) - 1} each)"
            )
    return problems


def closure_problems(cfg: PipelineConfig, items: Sequence[Sequence[Any]], tombstones: Sequence[Any], *,
                     expected: Expected | None = None, limit: int = 3) -> list[str]:
    """Problem 7 of the module docstring: delivered records and tombstones (normal form) close
    every admitted offset exactly once."""
    exp = expected if expected is not None else expected_lanes(cfg)
    admitted = {
        lane: {cid: range(len(ch)) for cid, ch in enumerate(chunks)} for lane, chunks in exp.lanes.items()
    }
    records = [r for item in items for r in item]
    report = check_lineage_views(admitted, [*records, *tombstones])
    out: list[str] = []
    batch, pack = _ops(cfg).get("batch"), _ops(cfg).get("pack_sequences")
    # batch(drop_last=True) discards the final partial batch of each lane at the end of data without
    # tombstones (nothing is evicted after it): fewer than microbatch_size records, each a pack of up
    # to max_length samples
    excused = 0
    if batch is not None and batch.get("drop_last", True):
        excused = (int(batch["microbatch_size"]) - 1) * (int(pack["max_length"]) if pack else 1)
    for lane, v in sorted(report.lanes.items()):
        if len(v.lost) <= excused:
            continue
        for cid, off in v.lost[:limit]:
            out.append(
                f"lane {lane}, offset ({cid}, {off}), sample {exp.lanes[lane][cid][off]}: "
                f"closed by no delivered record and no tombstone (dropped without its tombstone?)"
            )
        for where, closers in v.closers[:limit]:
            by = [("record" if int(idx) < len(records) else "tombstone", idx) for _k, idx, _key in closers]
            out.append(f"lane {lane}, offset {where}: closed {len(closers)} times, by {by}")
        for _kind, idx, key in v.unexpected[:limit]:
            out.append(
                f"lane {lane}: {'record' if int(idx) < len(records) else 'tombstone'} {idx} ({key!r:.80}) "
                f"closes an offset the lane does not admit"
            )
    return out


def final_state_problems(state: Mapping[str, Any], *, what: str = "the final checkpoint") -> list[str]:
    """An engine state taken after a run delivered its last item holds no inflight chunk (every
    offset it admitted closed, through a record or a tombstone)."""
    out = []
    for lane, chunks in sorted((state.get("inflight") or {}).items()):
        if chunks:
            out.append(
                f"{what}: lane {lane} still holds chunks {sorted(chunks)} inflight after the end of data "
                f"(an offset never closed: a record dropped without its tombstone?)"
            )
    return out

"""TensorPipeline: build, iterate, checkpoint and restore the tensor implementation.

Theory of operation
-------------------
A :class:`TensorPipeline` holds a compiled :class:`~.config.TensorPlan` and a
work source.  Iterating it clones the source per lane, runs every lane's stream
(:mod:`.stream`) and interleaves them in round robin; it delivers *native
items* ``(lane, entries)``.  :meth:`TensorPipeline.tensors` turns an item into
tensors (:mod:`.collate`), :meth:`TensorPipeline.records` into the reference's
record objects (:mod:`.records`).

Delivery is strict round robin over the lanes from the lane whose turn is next
(index 0 on a fresh run); a lane whose stream has ended drops out, which is the
order the reference's tail multiplexer produces.  The pipeline's position (items
delivered per lane, the next lane) advances as it delivers.

Checkpoint (its own format, ``FORMAT``): the configuration's fingerprint, the
items delivered per lane (informational), per lane the resume point ``(flush
epoch e, units of epoch e delivered)`` and the next lane.  Every stage is empty
at the start of a flush epoch and a delivered item ends on a batch boundary, so
restore starts each lane at its chunk ``e * k`` (the chunk order of the earlier
chunks is computed, their documents never read) and drops the epoch's delivered
units: its cost is one flush epoch per lane, not the delivered prefix.  With
``k = 0`` (a plan that never flushes) the one epoch is the whole stream and the
restore replays it.  ``restore`` also reads the reference's engine state
(``zephon_ref.state``: schema, integrity, per-lane ``lane_emitted``, the
round-robin pointer), after checking each lane's work-source configuration and
that each lane's replay cursor is the cursor of the item this implementation
delivers at that position (that state names per-lane counts only, so this restore
replays each lane's delivered prefix).  It does not write that schema.  A state of another
format or configuration, or a position past the end of a lane's stream, is
refused with a typed error and changes nothing.

What may not live here: per-lane semantics (stream.py), torch (collate.py).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from zephon_ref.errors import (
    ConfigError,
    ConfigTypeError,
    StateFormatError,
    StateMismatchError,
    expected,
)
from zephon_ref.fast.tensor.chunks import lane_feeds
from zephon_ref.fast.tensor.config import (
    MixtureSpec,
    PackSpec,
    TensorPlan,
    TokenizeSpec,
    UnsupportedKnob,
    compile_chain,
)
from zephon_ref.fast.tensor.records import to_reference
from zephon_ref.fast.tensor.stream import Item, lane_items, word_tables

__all__ = ["FORMAT", "TensorPipeline"]

FORMAT = "zephon_ref.tensor/2"


def _describe(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, str, float)):
        return repr(value) if isinstance(value, float) else value
    if isinstance(value, (list, tuple)):
        return [_describe(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _describe(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if callable(value) and hasattr(value, "__qualname__"):
        return f"callable:{getattr(value, '__module__', '?')}.{value.__qualname__}"
    return repr(value)


class TensorPipeline:
    """The tensor implementation of one pipeline configuration (one participant)."""

    def __init__(self, source: Any, chain: Sequence[tuple[str, Mapping[str, Any]]],
                 options: Mapping[str, Any] | None = None) -> None:
        if not hasattr(source, "clone_for_lane") or not hasattr(source, "component_ids"):
            raise ConfigTypeError(expected("source", "a work source with a lane API (clone_for_lane, "
                                           "component_ids)", source))
        self.plan: TensorPlan = compile_chain(chain, dict(options or {}))
        self.source = source
        packs = [s for s in self.plan.stages if isinstance(s, PackSpec)]
        self._pack_max = packs[0].max_length if packs else None
        desc = {"chain": _describe([(m, dict(kw)) for m, kw in chain]), "lanes": self.plan.canonical_replicas,
                "k": self.plan.k,
                "source": _describe(source.clone_for_lane(0, self.plan.canonical_replicas).state_dict())}
        self.fingerprint = hashlib.blake2b(
            json.dumps(desc, sort_keys=True).encode(), digest_size=16
        ).hexdigest()
        self._lane_counts = [0] * self.plan.canonical_replicas
        self._next_lane = 0
        #: per lane, where its stream resumes: (flush epoch, units of that epoch already delivered)
        self._resume: list[tuple[int, int]] = [(0, 0)] * self.plan.canonical_replicas
        self._mixture: dict[int, float] | None = None
        mixes = [s for s in self.plan.stages if isinstance(s, MixtureSpec)]
        if mixes:
            if len(mixes) > 1:
                raise UnsupportedKnob(expected("ensure_mixture", "at most one", len(mixes)))
            if source.continues_after_exhaustion():
                raise UnsupportedKnob(
                    expected(
                        "work source with ensure_mixture",
                        "no redistributing component",
                        sorted(source.continues_after_exhaustion()),
                    )
                )
            comp = dict(source.component_ids())
            if mixes[0].mixture is not None:
                by_id: dict[int, float] = {}
                for key, w in mixes[0].mixture:
                    if isinstance(key, str):
                        if key not in comp:
                            raise ConfigError(expected("mixture key", f"one of {sorted(comp)}", key))
                        key = comp[key]
                    by_id[key] = w
                self._mixture = by_id

    # -- delivery -------------------------------------------------------------------------------
    def _streams(self, resume: Sequence[tuple[int, int]] | None = None,
                 where: list[list[int]] | None = None) -> list[Iterator[Item]]:
        C = self.plan.canonical_replicas
        resume = [(0, 0)] * C if resume is None else resume
        where = [[0, 0] for _ in range(C)] if where is None else where
        ids = dict(self.source.component_ids())
        datasets = dict(getattr(self.source, "datasets_by_id", {}))
        words = word_tables(self.plan)
        first = self.plan.stages[0] if self.plan.stages else None
        pre = (first.field, words[0]) if isinstance(first, TokenizeSpec) else None
        k = self.plan.k
        feeds = lane_feeds(self.source, C, datasets=datasets, ids=ids, pretokenize=pre,
                           starts=[e * k for e, _ in resume])
        return [lane_items(self.plan, lane, feeds[lane], len(ids), self._mixture, words, start=resume[lane],
                           where=where[lane]) for lane in range(C)]

    def _skip_to(self, streams: list[Iterator[Item]], counts: list[int]) -> list[Item | None]:
        """Drop each lane's first ``counts[lane]`` items; the last dropped item per lane (or None)."""
        last: list[Item | None] = []
        for lane, (s, n) in enumerate(zip(streams, counts, strict=True)):
            x: Item | None = None
            for i in range(n):
                x = next(s, None)
                if x is None:
                    raise StateMismatchError(
                        expected(
                            f"lane {lane} restored position",
                            f"{n} delivered items of this configuration's lane stream",
                            f"a stream of {i} items",
                        )
                    )
            last.append(x)
        return last

    def __iter__(self) -> Iterator[Item]:
        C = self.plan.canonical_replicas
        where = [list(p) for p in self._resume]
        streams = self._streams(list(self._resume), where)
        counts, start = list(self._lane_counts), self._next_lane
        resume = list(self._resume)
        self._lane_counts, self._next_lane, self._resume = counts, start, resume
        # strict round robin from lane `start`; a lane whose stream has ended drops out
        live = [(lane, streams[lane]) for lane in list(range(start, C)) + list(range(start))]
        while live:
            alive = []
            for lane, s in live:
                x = next(s, None)
                if x is None:
                    continue
                alive.append((lane, s))
                counts[lane] += 1
                resume[lane] = (where[lane][0], where[lane][1])
                self._next_lane = (lane + 1) % C
                yield x
            live = alive

    def records(self, item: Item) -> Any:
        """The reference's delivered object (SampleBatch or SampleRecord) for ``item``."""
        return to_reference(item, pack_max_length=self._pack_max, batched=self.plan.batch is not None)

    def tensors(self, item: Item, *, device: Any = None) -> dict[str, Any]:
        from zephon_ref.fast.tensor.collate import collate

        return collate(item, device=device)

    # -- checkpoint -----------------------------------------------------------------------------
    def checkpoint(self) -> dict[str, Any]:
        """Its own format: per lane the items delivered and where its stream resumes (flush epoch,
        units of it delivered), and the lane whose turn is next."""
        return {"format": FORMAT, "fingerprint": self.fingerprint, "lane_delivered": list(self._lane_counts),
                "lane_resume": [list(p) for p in self._resume], "next_lane": self._next_lane}

    def restore(self, state: Any) -> None:
        """Position a fresh iteration at ``state``: this implementation's own checkpoint, or the
        reference's engine state (``zephon_ref.engine/1``: Pipeline.checkpoint()).  Validated
        first; a refusal changes nothing."""
        if isinstance(state, Mapping) and "schema" in state:
            counts, start, resume = self._from_engine_state(state)
        else:
            counts, start, resume = self._from_own_state(state)
        self._lane_counts, self._next_lane, self._resume = counts, start, resume

    def _from_own_state(self, state: Any) -> tuple[list[int], int, list[tuple[int, int]]]:
        C = self.plan.canonical_replicas
        keys = {"format", "fingerprint", "lane_delivered", "lane_resume", "next_lane"}
        if not isinstance(state, Mapping) or set(state) != keys:
            raise StateFormatError(
                expected("tensor checkpoint", f"a mapping with keys {sorted(keys)}", state)
            )
        if state["format"] != FORMAT:
            raise StateFormatError(expected("tensor checkpoint format", FORMAT, state["format"]))
        if state["fingerprint"] != self.fingerprint:
            raise StateMismatchError(expected("tensor checkpoint fingerprint", self.fingerprint,
                                              state["fingerprint"]))
        counts, start = state["lane_delivered"], state["next_lane"]
        if (not isinstance(counts, list) or len(counts) != C
                or any(not isinstance(n, int) or isinstance(n, bool) or n < 0 for n in counts)):
            raise StateFormatError(expected("tensor checkpoint lane_delivered", f"{C} ints >= 0", counts))
        if not isinstance(start, int) or isinstance(start, bool) or not 0 <= start < C:
            raise StateFormatError(expected("tensor checkpoint next_lane", f"an int in [0, {C})", start))
        resume = state["lane_resume"]

        def _pos(p: Any) -> bool:
            return (isinstance(p, (list, tuple)) and len(p) == 2
                    and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in p))

        if not isinstance(resume, list) or len(resume) != C or not all(_pos(p) for p in resume):
            raise StateFormatError(
                expected("tensor checkpoint lane_resume", f"{C} pairs [epoch, units] of ints >= 0", resume)
            )
        positions = [(int(p[0]), int(p[1])) for p in resume]
        # each lane's resume point is checked now (its flush epoch is run up to the point): a
        # position past a lane's end is refused before anything changes
        for s in self._streams(positions):
            next(s, None)
        return list(counts), start, positions

    def _from_engine_state(self, state: Mapping[str, Any]) -> tuple[list[int], int, list[tuple[int, int]]]:
        """The reference's engine state: per-lane delivered counts, the round-robin pointer, and
        checks that it belongs to this configuration (work-source configuration per lane, and the
        replay cursor of every lane equal to the cursor of the item this implementation delivers
        at that position)."""
        from zephon_ref import state as schema
        from zephon_ref.types import SampleCursor
        from zephon_ref.work.base import check_source_state

        C = self.plan.canonical_replicas
        c = schema.validate(state, require_all_lanes=True)
        schema.verify_integrity(state)
        if c != C:
            raise StateMismatchError(expected("engine state canonical_replicas", str(C), c))

        def table(name: str) -> dict[int, Any]:
            return {schema.lane_key(k, name, C): v for k, v in (state.get(name) or {}).items()}

        ws, emitted, cursors = table("lane_ws_state"), table("lane_emitted"), table("replay_cursors")
        for lane in range(C):  # the reference's own rule, at its one seam
            check_source_state(self.source.clone_for_lane(lane, C), lane, ws.get(lane))
        counts = [int(emitted.get(lane, 0)) for lane in range(C)]
        rr = state.get("rr_next_idx") or {}
        key = f"0/1:{','.join(map(str, range(C)))}"
        start = int(rr[key]) % C if key in rr else min((n, i) for i, n in enumerate(counts))[1]
        where = [[0, 0] for _ in range(C)]
        last = self._skip_to(self._streams(None, where), counts)  # the engine state names counts only: replay
        resume = [(p[0], p[1]) for p in where]
        monotone = self.plan.k == 0
        for lane, item in enumerate(last):
            raw = cursors.get(lane)
            if item is None:
                continue  # validate() already required no cursor for a lane that delivered nothing
            recs = self.records(item)
            recs = recs.records if hasattr(recs, "records") else (recs,)
            mine = max(r.meta.cursor for r in recs) if monotone else recs[-1].meta.cursor
            if raw is None or SampleCursor.from_key(raw).as_key() != mine.as_key():
                raise StateMismatchError(
                    expected(
                        f"lane {lane} replay cursor",
                        f"{mine.as_key()} (the cursor of "
                        f"this configuration's item {counts[lane]} of the lane)",
                        raw,
                    )
                )
        return counts, start, resume

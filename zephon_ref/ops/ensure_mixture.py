"""ensure_mixture: reorder records per lane so emitted mass follows a target mixture.

Theory of operation
-------------------
Per lane, :class:`MixtureAccumulator` keeps a smooth weighted round robin
(:class:`zephon_ref.swrr.SmoothWeightedRoundRobin`: normalized target ``T``, emitted mass ``E``; deficit
``T_k * max(1, sum_{j in T} E_j) - E_k``; ties go to the earlier component in
its order, initially sorted ids) and buffers: one FIFO per component for
single-component records, a FIFO of multi-component (packed) records, and an
*obsolete* FIFO for records whose contributions are off-target.

* The target is adopted from the explicit ``mixture`` or the chunk's mixture (announced
  ahead of the chunk's samples, :meth:`MixtureAccumulator.on_chunk`) when a record
  arrives with a chunk id higher than the last adopted one; components removed by continuing
  end-of-data announcements (except the final one) are filtered out.
* After each push, each touched lane emits while it can: every
  ``int(1 / obsolete_drain_rate)`` normal emissions one obsolete record goes
  out; otherwise, unless *forced* (buffer >= ``max_buffer_size``, draining down
  to ``drain_target_ratio * max``), the lane waits until the ideal (peeked)
  component is buffered; then: ideal single, best pack containing the ideal,
  best available single, best pack overall, and (forced) an obsolete record.
* ``flush``: bounded mode emits everything (forced); strict mode
  (``max_buffer_size=None``) discards everything and emits tombstones for the
  closing contributors.  ``reset=True`` replaces the lane's state by a fresh one.

Deficits are floats computed in the same order as zephon 0.2.0 so that
selections agree bit for bit; weights are inherently real (token shares).

Retirement groups: when a target change drops components, they form one
*group* weighted by the previous target; records of a group's components are
obsolete and drain, through the shared obsolete slot, oldest group first and
within a group by the group's own round robin over the components it still
holds (packs by the largest weighted deficit).  Records obsolete for no known
reason drain from a FIFO after every group.  A component that comes back into
the target leaves its group.  A reset forgets the groups.

What may not live here: warnings of drift, clocks.
"""

from __future__ import annotations

import math
import numbers
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from zephon_ref.errors import ConfigError, ConfigTypeError, DropLedger, expected, ledger_of
from zephon_ref.lineage import tombstones_for_record
from zephon_ref.ops.base import (
    Accumulator,
    BaseOp,
    OpTraits,
    ReadyBatch,
    SourceExhaustion,
    check_int,
)
from zephon_ref.ops.knobs import Choice, Float, Func, Int, OneOf, Opaque, Text, check_fields, domains, knob
from zephon_ref.ops.pack import resolve_token_field, value_length
from zephon_ref.swrr import SmoothWeightedRoundRobin
from zephon_ref.types import SampleRecord

__all__ = ["EnsureMixture", "MixtureAccumulator", "Swrr"]

TOMBSTONE_BATCH = 1024

# the per-lane round robin over integer component ids (zephon_ref/swrr.py; targets normalised once)
Swrr = SmoothWeightedRoundRobin[int]


@dataclass(slots=True)
class _Item:
    record: SampleRecord
    contributions: dict[int, float]
    pairs: tuple[tuple[int, float], ...] = ()  # contributions.items(), frozen for the scoring loop

    def __post_init__(self) -> None:
        self.pairs = tuple(self.contributions.items())


def _best_pack(packs: deque[_Item], deficits: Mapping[int, float], holding: int | None) -> int:
    """The index of the pack with the largest weighted deficit ``sum(w_c * deficit_c)`` among the
    packs holding component ``holding`` (None: among all); the first such pack wins ties, as max()
    does; -1 when no pack qualifies."""
    dget = deficits.get
    best_i, best = -1, 0.0
    for i, p in enumerate(packs):
        if holding is not None and holding not in p.contributions:
            continue
        score = 0.0
        for c, w in p.pairs:
            score += w * dget(c, 0.0)
        if best_i < 0 or score > best:
            best_i, best = i, score
    return best_i


@dataclass(slots=True)
class _Retired:
    """Components dropped by one target change, drained in proportion to their old weights."""

    weights: dict[int, float]
    singles: dict[int, deque[_Item]] = field(default_factory=dict)
    packs: deque[_Item] = field(default_factory=deque)
    counts: dict[int, int] = field(default_factory=dict)
    swrr: Swrr | None = None

    def add(self, item: _Item) -> None:
        if len(item.contributions) == 1:
            self.singles.setdefault(next(iter(item.contributions)), deque()).append(item)
        else:
            self.packs.append(item)
        for c in item.contributions:
            self.counts[c] = self.counts.get(c, 0) + 1

    def _selector(self) -> Swrr:
        # restart selection whenever the set of components on hand changes, so an
        # absence never builds up a catch-up entitlement
        live = sorted(c for c in self.weights if c in self.counts)
        if self.swrr is None or set(self.swrr.target) != set(live):
            self.swrr = Swrr({c: self.weights[c] for c in live}, live)
        return self.swrr

    def take(self) -> _Item:
        sel = self._selector()
        ideal = sel.peek()
        assert ideal is not None
        q = self.singles.get(ideal)
        if q:
            item = q.popleft()
        else:
            idx = _best_pack(self.packs, sel.deficits(), ideal)
            assert idx >= 0, ideal  # invariant: a live component with no single is in a pack
            item = self.packs[idx]
            del self.packs[idx]
        sel.record(item.contributions)
        for c in item.contributions:
            self.counts[c] -= 1
            if not self.counts[c]:
                del self.counts[c]
                if c in self.weights:
                    self.swrr = None
        return item

    def drain(self) -> list[_Item]:
        """Every buffered item, singles (by component) then packs, without selection; the
        selection history is forgotten (the group is being discarded)."""
        out = self.detach()
        self.swrr = None
        return out

    def detach(self) -> list[_Item]:
        """Every buffered item, singles (by component) then packs, without selection, keeping
        the selection history: a reclassification routes the items again (mostly back into this
        group), and only a change of the components on hand restarts selection (``_selector``)."""
        out = [it for q in self.singles.values() for it in q] + list(self.packs)
        self.singles, self.packs, self.counts = {}, deque(), {}
        return out


@dataclass(slots=True)
class _MixLane:
    singles: dict[int, deque[_Item]] = field(default_factory=dict)
    packs: deque[_Item] = field(default_factory=deque)
    obsolete: deque[_Item] = field(default_factory=deque)
    pack_counts: dict[int, int] = field(default_factory=dict)
    swrr: Swrr | None = None
    target_chunk_id: int | None = None
    total_buffered: int = 0
    since_obsolete: int = 0
    removed: frozenset[int] | None = None
    groups: list[_Retired] = field(default_factory=list)
    retired_by: dict[int, _Retired] = field(default_factory=dict)
    obsolete_count: int = 0  # records in the groups plus the fallback FIFO

    def has_buffered(self) -> bool:
        return any(self.singles.values()) or bool(self.packs) or self.obsolete_count > 0

    def take_obsolete(self) -> _Item:
        """Oldest group holding something first; the unknown-reason FIFO last."""
        self.obsolete_count -= 1
        for g in self.groups:
            if g.counts:
                item = g.take()
                # a pack may also carry components retired by a later change: credit
                # those groups' selectors without banking debt for absent components
                for c, w in item.contributions.items():
                    other = self.retired_by.get(c)
                    if other is not None and other is not g and c in other.counts:
                        other._selector().record({c: w})
                return item
        return self.obsolete.popleft()


class MixtureAccumulator(Accumulator[SampleRecord]):
    """See the module docstring."""

    def __init__(
        self,
        *,
        max_buffer_size: int | None = 1000,
        drain_target_ratio: float = 0.8,
        obsolete_drain_rate: float = 0.1,
        weight_by: str | Callable[[SampleRecord], float] = "auto",
        mixture: Mapping[int, float] | None = None,
        get_source_exhaustion: Callable[[int], SourceExhaustion] | None = None,
    ) -> None:
        self.max_buffer_size = max_buffer_size
        self.drain_target_ratio = drain_target_ratio
        self.weight_by = weight_by
        self.mixture = dict(mixture) if mixture else None
        self.get_source_exhaustion = get_source_exhaustion
        #: per lane, the announced mixtures of chunks above the adopted one (on_chunk); a lane's
        #: entries up to a chunk are dropped when a record of that chunk adopts its target
        self._chunk_mixtures: dict[int, dict[int, dict[int, float]]] = {}
        self.interval = int(1.0 / obsolete_drain_rate) if obsolete_drain_rate else None
        self.discarded = 0  # diagnostics only
        #: the run's dropped-data counts (the engine's, through ``ctx["drops"]``); never state
        self.drops = DropLedger()
        self._lanes: dict[int, _MixLane] = {}

    @property
    def reads_payload(self) -> bool:
        return True

    def has_pending_data(self, lane_id: int | None = None) -> bool:
        if lane_id is None:
            return any(s.has_buffered() for s in self._lanes.values())
        s = self._lanes.get(lane_id)
        return s is not None and s.has_buffered()

    # -- weights ----------------------------------------------------------------

    def _contributions(self, rec: SampleRecord) -> dict[int, float]:
        m = rec.meta
        if self.weight_by == "samples":
            return {c: float(n) for c, n in m.component_sample_counts.items()}
        if m.component_token_counts is not None:
            return {c: float(n) for c, n in m.component_token_counts.items()}
        if callable(self.weight_by):
            got = self.weight_by(rec)
            # the callable's result is only seen here: a typed error naming weight_by and the record
            if (
                isinstance(got, bool)
                or not isinstance(got, (int, float))
                or not math.isfinite(got)
                or got < 0
            ):
                err = (
                    ConfigError
                    if isinstance(got, (int, float)) and not isinstance(got, bool)
                    else ConfigTypeError
                )
                raise err(
                    expected(f"weight_by(record {rec.meta.cursor.as_key()})", "a finite number >= 0", got)
                )
            total = float(got)
        else:
            name = resolve_token_field(rec.payload, "auto" if self.weight_by == "auto" else self.weight_by)
            total = float(value_length(rec.payload[name], name))
        n_samples = sum(m.component_sample_counts.values())
        if n_samples == 0:
            return {0: total}
        return {c: total * (n / n_samples) for c, n in m.component_sample_counts.items()}

    # -- targets ----------------------------------------------------------------

    def on_chunk(self, lane_id: int, chunk_id: int, mixture: Mapping[int, float]) -> None:
        if self.mixture is None:  # an explicit mixture overrides every chunk's
            self._chunk_mixtures.setdefault(lane_id, {})[chunk_id] = dict(mixture)

    def _adopt_chunk_mixture(self, lane: int, cid: int) -> dict[int, float]:
        """Chunk ``cid``'s announced mixture (empty if none was announced); forget the lane's
        announcements up to ``cid`` (no later record adopts a chunk at or below it)."""
        table = self._chunk_mixtures.get(lane, {})
        got = table.get(cid, {})
        for c in [c for c in table if c <= cid]:
            del table[c]
        return got

    def _removals(self, lane: int) -> frozenset[int]:
        if self.get_source_exhaustion is None:
            return frozenset()
        ex = self.get_source_exhaustion(lane)
        if ex.final_component is not None:
            return ex.continuing - {ex.final_component}
        return ex.continuing

    def _set_target(self, st: _MixLane, target: Mapping[int, float] | None) -> None:
        assert st.removed is not None
        previous = dict(st.swrr.target) if st.swrr is not None else None
        unfiltered = dict(target) if target is not None else None
        filtered: dict[int, float] | None = None
        if target is None:
            st.swrr = None
        else:
            filtered = {c: w for c, w in target.items() if w > 0 and c not in st.removed}
            if st.swrr is None:
                st.swrr = Swrr(filtered, sorted(filtered))
            else:
                st.swrr.update_target(filtered)
        old = set(previous) if previous is not None else None
        new = set(filtered) if filtered is not None else None
        # retirement bookkeeping: components back in the target leave their group;
        # components dropped now form one new group weighted by the previous target
        retire_from = previous if previous is not None else unfiltered
        old_groups = list(st.groups)
        for c in list(st.retired_by):
            if new is None or c in new:
                g = st.retired_by.pop(c)
                del g.weights[c]
                g.swrr = None
        st.groups = [g for g in old_groups if g.weights]
        if retire_from is not None and filtered is not None:
            weights = {c: w for c, w in retire_from.items()
                       if w > 0 and c not in filtered and c not in st.retired_by}
            if weights:
                g = _Retired(weights)
                st.groups.append(g)
                st.retired_by.update(dict.fromkeys(weights, g))
        if not st.total_buffered or old == new:
            return
        if old is not None and new is not None:
            gone, added = old - new, new - old
            affected = any(st.singles.get(c) or st.pack_counts.get(c) for c in gone)
            if not (affected or ((gone or added) and st.obsolete_count)):
                return
        # reclassify everything buffered against the new target, oldest categories first
        singles, packs, obsolete = st.singles, st.packs, st.obsolete
        st.singles, st.packs, st.obsolete, st.pack_counts = {}, deque(), deque(), {}
        st.obsolete_count = 0
        retired = [g.detach() for g in old_groups]
        for item in obsolete:
            self._buffer(st, item)
        for items in retired:
            for item in items:
                self._buffer(st, item)
        for q in singles.values():
            for item in q:
                self._buffer(st, item)
        for item in packs:
            self._buffer(st, item)

    def _buffer(self, st: _MixLane, item: _Item) -> None:
        target = st.swrr.target if st.swrr is not None else None
        contrib = item.contributions
        if len(contrib) == 1:
            (cid,) = contrib
            if target is None or cid in target:
                st.singles.setdefault(cid, deque()).append(item)
                return
        elif target is None or (
            any(c in target for c in contrib)
            and not any(w > 0 and c not in target for c, w in contrib.items())
        ):
            st.packs.append(item)
            for c in contrib:
                st.pack_counts[c] = st.pack_counts.get(c, 0) + 1
            return
        assert target is not None
        # a pack belongs to the oldest group among its retired (positive) components
        why = {c for c, w in contrib.items() if c not in target and w > 0} or (contrib.keys() - target.keys())
        owners = {id(st.retired_by[c]) for c in why if c in st.retired_by}
        for g in st.groups:
            if id(g) in owners:
                g.add(item)
                break
        else:
            st.obsolete.append(item)
        st.obsolete_count += 1

    # -- push / emit --------------------------------------------------------------

    def push_many(self, elems: Sequence[SampleRecord]) -> list[ReadyBatch[SampleRecord]]:
        touched: list[int] = []
        for rec in elems:
            lane, cid = rec.meta.lane_id, rec.meta.chunk_id
            st = self._lanes.setdefault(lane, _MixLane())
            if st.target_chunk_id is None or cid > st.target_chunk_id:
                if st.removed is None:
                    st.removed = self._removals(lane)
                target = self.mixture or self._adopt_chunk_mixture(lane, cid)
                self._set_target(st, target or None)
                st.target_chunk_id = cid
            self._buffer(st, _Item(rec, self._contributions(rec)))
            st.total_buffered += 1
            if lane not in touched:
                touched.append(lane)
        ready: list[ReadyBatch[SampleRecord]] = []
        for lane in sorted(touched):
            ready.extend(self._emit_ready(self._lanes[lane]))
        return ready

    def _emit_ready(self, st: _MixLane, *, flushing: bool = False) -> list[ReadyBatch[SampleRecord]]:
        """Emit while the lane can; forced while a full buffer drains to its floor, and throughout
        a (bounded) flush."""
        cap = self.max_buffer_size
        force = cap is not None and st.total_buffered >= cap
        floor = int(self.drain_target_ratio * cap) if cap is not None else 0
        out: list[SampleRecord] = []
        while st.has_buffered():
            rec = self._emit_one(st, force=flushing or (force and st.total_buffered > floor))
            if rec is None:
                break
            st.total_buffered -= 1
            out.append(rec)
        return [(out, 0)] if out else []

    def _finish(self, st: _MixLane, item: _Item, *, obsolete: bool) -> SampleRecord:
        if st.swrr is not None:
            st.swrr.record(item.contributions)
        if obsolete:
            st.since_obsolete = 0
        elif self.interval is not None:
            st.since_obsolete = min(st.since_obsolete + 1, self.interval)
        return item.record

    def _take_pack(self, st: _MixLane, idx: int) -> _Item:
        item = st.packs[idx]
        del st.packs[idx]
        for c in item.contributions:
            st.pack_counts[c] -= 1
            if not st.pack_counts[c]:
                del st.pack_counts[c]
        return item

    def _emit_one(self, st: _MixLane, *, force: bool) -> SampleRecord | None:
        if st.obsolete_count and self.interval is not None and st.since_obsolete >= self.interval:
            return self._finish(st, st.take_obsolete(), obsolete=True)
        ideal = st.swrr.peek() if st.swrr is not None else None
        ideal_ok = st.swrr is None or (
            ideal is not None and bool(st.singles.get(ideal) or st.pack_counts.get(ideal))
        )
        if not force and not ideal_ok:
            return None
        available = {c for c, q in st.singles.items() if q}
        if ideal is not None and ideal in available:
            return self._finish(st, st.singles[ideal].popleft(), obsolete=False)
        has_ideal = ideal is not None and bool(st.pack_counts.get(ideal))
        if not has_ideal and available:
            chosen = st.swrr.select(available) if st.swrr is not None else None
            if chosen is None:
                chosen = min(available)
            return self._finish(st, st.singles[chosen].popleft(), obsolete=False)
        if st.packs:
            d = st.swrr.deficits() if st.swrr is not None else {}
            best_i = _best_pack(st.packs, d, ideal if has_ideal else None)
            return self._finish(st, self._take_pack(st, best_i), obsolete=False)
        if force and st.obsolete_count:
            return self._finish(st, st.take_obsolete(), obsolete=True)
        return None

    def on_source_exhausted(self, lane_id: int, component_id: int) -> list[ReadyBatch[SampleRecord]]:
        if self.get_source_exhaustion is None:
            return []
        if component_id not in self.get_source_exhaustion(lane_id).continuing:
            return []
        st = self._lanes.setdefault(lane_id, _MixLane())
        st.removed = self._removals(lane_id)
        if st.swrr is not None:
            self._set_target(st, dict(st.swrr.target))
        return self._emit_ready(st)

    def flush(self, *, reset: bool = False, lane_id: int | None = None) -> list[ReadyBatch[SampleRecord]]:
        lanes = list(self._lanes) if lane_id is None else ([lane_id] if lane_id in self._lanes else [])
        ready: list[ReadyBatch[SampleRecord]] = []
        for lane in lanes:
            st = self._lanes[lane]
            if self.max_buffer_size is None:
                ready.extend(self._discard(st, lane))
            else:
                ready.extend(self._emit_ready(st, flushing=True))
            if reset:
                self._lanes[lane] = _MixLane()
        return ready

    def _discard(self, st: _MixLane, lane: int) -> list[ReadyBatch[SampleRecord]]:
        tombs: list[SampleRecord] = []
        order = [i for q in st.singles.values() for i in q] + list(st.packs) + list(st.obsolete)
        for g in st.groups:
            order += g.drain()
        for item in order:
            tombs.extend(tombstones_for_record(item.record))
        self.discarded += len(order)
        if order:
            self.drops.add(
                op="ensure_mixture(strict)",
                cause="strict_mixture",
                lane=lane,
                records=len(order),
                detail="max_buffer_size=None discards what is buffered at a flush; a bounded "
                "max_buffer_size emits it",
            )
        st.singles, st.packs, st.obsolete, st.pack_counts = {}, deque(), deque(), {}
        st.obsolete_count = 0
        st.total_buffered = 0
        return [(tombs[i : i + TOMBSTONE_BATCH], 0) for i in range(0, len(tombs), TOMBSTONE_BATCH)]


@dataclass(frozen=True, slots=True, kw_only=True)
class MixtureConfig:
    """The knobs of ``ensure_mixture`` as the call passed them, each with its declared domain
    (:mod:`zephon_ref.ops.knobs`); a mixture's keys and weights are :class:`EnsureMixture`'s to check."""

    BUILDER: ClassVar[str] = "ensure_mixture"

    max_buffer_size: int | None = knob(1000, Int(1, none=True), doc="records a lane holds; None: strict")
    drain_target_ratio: float = knob(0.8, Float(0, 1, min_open=True, max_open=True),
                                      doc="drain to this share")
    obsolete_drain_rate: float = knob(0.1, Float(0, 1), doc="share of picks given to retired components")
    weight_by: Any = knob("auto", OneOf((Choice(("auto", "samples")), Text(), Func())),
                          doc="units of the mixture: tokens ('auto', a field), samples, or a callable")
    warn_tolerance: float | None = knob(None, Float(0, 1, none=True), doc="warn beyond this deviation")
    mixture: Any = knob(None, Opaque((Mapping,), "a mapping component -> weight", none=True),
                        doc="the target; None: each chunk's own")

    def __post_init__(self) -> None:
        check_fields(self)
        # the config's own copy: a caller changing its mapping afterwards changes nothing here
        if self.mixture is not None:
            object.__setattr__(self, "mixture", dict(self.mixture))


class EnsureMixture(BaseOp):
    """``ensure_mixture(*, max_buffer_size=1000, drain_target_ratio=0.8, ...)``."""

    def __init__(
        self,
        *,
        max_buffer_size: int | None = 1000,
        drain_target_ratio: float = 0.8,
        obsolete_drain_rate: float = 0.1,
        weight_by: str | Callable[[SampleRecord], float] = "auto",
        warn_tolerance: float | None = None,
        mixture: Mapping[Any, float] | None = None,
        parallelism: int | None = None,
    ) -> None:
        super().__init__()
        check_int("parallelism", parallelism, minimum=1, allow_none=True)
        # an execution hint (plan and explain(); the fingerprint leaves it out), never read by the data path
        self.parallelism = 1 if parallelism is None else parallelism
        # the numeric knobs against their declared domains, before weight_by and the mixture
        knobs = domains(MixtureConfig)
        for name, value in (("max_buffer_size", max_buffer_size), ("drain_target_ratio", drain_target_ratio),
                            ("obsolete_drain_rate", obsolete_drain_rate), ("warn_tolerance", warn_tolerance)):
            knobs[name].check(name, value)
        if not (callable(weight_by) or (isinstance(weight_by, str) and weight_by)):
            raise ConfigTypeError(
                expected("weight_by", "'auto', 'samples', a field name or a callable", weight_by)
            )
        if mixture is not None:
            if not isinstance(mixture, Mapping) or not mixture:
                raise ConfigError(expected("mixture", "a non-empty mapping component -> weight", mixture))
            for k, w in mixture.items():
                if isinstance(k, bool) or not isinstance(k, (str, int)) or (isinstance(k, int) and k < 0):
                    raise ConfigTypeError(
                        expected("mixture key", "a component name (str) or id (int >= 0)", k)
                    )
                if isinstance(w, bool) or not isinstance(w, numbers.Real):
                    raise ConfigTypeError(expected(f"mixture[{k!r}]", "a finite number >= 0", w))
                if not (math.isfinite(w) and w >= 0):
                    raise ConfigError(expected(f"mixture[{k!r}]", "a finite number >= 0", w))
            total = sum(float(w) for w in mixture.values())
            if not (total > 0 and math.isfinite(total)):
                raise ConfigError(expected("mixture", "weights with a finite sum > 0", dict(mixture)))
        #: the knobs as the call passed them; the operator keeps no copy of them
        self.config = MixtureConfig(max_buffer_size=max_buffer_size, drain_target_ratio=drain_target_ratio,
                                    obsolete_drain_rate=obsolete_drain_rate, weight_by=weight_by,
                                    warn_tolerance=warn_tolerance, mixture=mixture)

    @property
    def strict(self) -> bool:
        return self.config.max_buffer_size is None

    def traits(self) -> OpTraits:
        return OpTraits(preserves_cursor_order=False, indexable=False, calibration_replayable=not self.strict,
                        parallelism=self.parallelism)

    def accumulator(self, *, deterministic: bool, ctx: dict[str, Any]) -> Accumulator[Any]:
        c = self.config
        by_id: dict[int, float] | None = None
        if c.mixture is not None:
            by_id = {}
            resolve = ctx.get("get_component_id")
            for k, w in c.mixture.items():
                if isinstance(k, int) and not isinstance(k, bool):
                    by_id[k] = float(w)
                elif isinstance(k, str) and resolve is not None:
                    by_id[int(resolve(k))] = float(w)
                else:
                    raise ConfigError(
                        expected("mixture key", "a component id, or a name with get_component_id", k)
                    )
        acc = MixtureAccumulator(
            max_buffer_size=c.max_buffer_size,
            drain_target_ratio=float(c.drain_target_ratio),
            obsolete_drain_rate=float(c.obsolete_drain_rate),
            weight_by=c.weight_by,
            mixture=by_id,
            get_source_exhaustion=ctx.get("get_source_exhaustion"),
        )
        acc.drops = ledger_of(ctx)
        return acc

    def process_many(self, elems: list[Any]) -> list[Any]:
        return list(elems)

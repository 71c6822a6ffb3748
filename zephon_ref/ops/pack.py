"""pack_sequences: first_fit, best_fit and wrap packing into envelope records.

Theory of operation
-------------------
:class:`PackingAccumulator` owns, per lane, the open bins (first/best) or the
FIFO of record slices (wrap), plus the token counts already charged to split
records.  ``push_many`` places records and returns finished packs as
one-record ready batches; ``process_many`` is the identity (payloads are
assembled when a bin closes: the envelope ``{"packed_samples": [...]}``).

first_fit / best_fit (``num_bins`` required): an oversized record is dropped
with tombstones (``drop_oversized``, the default) or refused; otherwise it
goes into the first bin (creation order) / the tightest bin that fits.  If
none fits, a new bin is made; a new bin that is already *full* is emitted at
once, otherwise bins are closed (``fifo``: oldest; ``fullest``: least remaining)
while ``num_bins`` are open, and the new bin is appended.  A bin is full when
``remaining < min_sequence_length`` or it holds ``max_sequences_per_bin``.

wrap: slices stream through a FIFO; while it holds ``>= max_length`` tokens (or
the segment cap is reached) a bin of up to ``max_length`` tokens is cut,
splitting the head record if needed.  At flush an uncapped tail is dropped
(tombstones close its records); a capped tail is emitted.  Empty records
become tombstones.

Every pack's meta (§3.6 of the notes): one contributor per segment and
contribution ref, closing iff the ref closes and the segment is its record's
last; sample counts charged on the closing segment; token counts floor-split on
intermediate slices with the remainder on the closing one; primary cursor =
first segment's record cursor extended by that segment's start offset.

Drops are never silent: the oversized records a lane dropped since its last flush
(first/best) and the wrap tail a flush drops are each reported by one
:class:`~zephon_ref.errors.DataDroppedWarning` per lane at that flush, lanes in
ascending order, with record and token counts (diagnostics: the counts never
decide output and are not part of any state).

Invariants: per lane and base offset exactly one closing contributor or
tombstone leaves, after every other fragment of the offset; ``flush(reset=True,
lane_id=L)`` drops all of L's state.  What may not live here: homogeneous
(per-domain) packing and best_fit_wrap (not yet in the reference), clocks.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from numbers import Integral
from random import Random  # seeded instances only: never the global generator
from typing import Any, ClassVar

from zephon_ref.errors import ConfigError, ConfigTypeError, expected, warn_data_dropped
from zephon_ref.lineage import pack_meta, tombstones_for_record
from zephon_ref.ops.base import (
    Accumulator,
    BaseOp,
    OpTraits,
    ReadyBatch,
    check_bool,
    check_choice,
    check_int,
    check_parallelism,
    check_placement,
)
from zephon_ref.ops.knobs import Bool, Choice, Func, Int, OneOf, Text, check_fields, knob
from zephon_ref.ops.shuffle import batch_seed
from zephon_ref.types import (
    TAG_CONTRIBUTORS,
    TAG_PACKING_METADATA,
    ContributorRef,
    SampleCursorKey,
    SampleRecord,
)

__all__ = [
    "TOKEN_FIELD_CANDIDATES",
    "PackSequences",
    "PackingAccumulator",
    "apportion_tokens",
    "checked_length",
    "detect_token_field",
    "value_length",
]

TOKEN_FIELD_CANDIDATES = ("input_ids", "tokens", "token_ids", "ids")
ALGORITHMS = ("first_fit", "best_fit", "wrap", "best_fit_wrap")
SUPPORTED_ALGORITHMS = ("first_fit", "best_fit", "wrap")


def value_length(value: Any, name: str) -> int:
    """Length of a token field: an int is a precomputed length, else ``shape[0]`` or ``len``."""
    if isinstance(value, bool):
        raise ConfigTypeError(expected(f"field {name!r}", "an int length or a sized sequence", value))
    if isinstance(value, int):
        if value < 0:
            raise ConfigError(expected(f"field {name!r}", "a length >= 0 or a sized sequence", value))
        return value
    shape = getattr(value, "shape", None)
    if shape is not None and len(shape) > 0:
        return int(shape[0])
    try:
        return len(value)
    except TypeError as exc:
        raise ConfigTypeError(
            expected(f"field {name!r}", "an int length or a sized sequence", value)
        ) from exc


def checked_length(value: Any, rec: SampleRecord) -> int:
    """What ``length_fn(rec)`` returned, if it is a token count: an int >= 0.

    A user callback can only be checked when it runs, so this is the one argument of
    ``pack_sequences`` refused at iteration; the error names it and the record.  Floats
    and bools are refused (zephon 0.2.0 packs 2.5 or True as a length; a negative length
    would let a bin take more than ``max_length`` tokens).  numpy integers are ints.
    """
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise ConfigTypeError(expected(f"length_fn(record {rec.meta.cursor.as_key()})", "an int >= 0", value))
    n = int(value)
    if n < 0:
        raise ConfigError(expected(f"length_fn(record {rec.meta.cursor.as_key()})", "an int >= 0", value))
    return n


def _has_length(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or hasattr(value, "__len__")


def detect_token_field(payload: Any) -> str | None:
    if not isinstance(payload, Mapping):
        return None
    for name in TOKEN_FIELD_CANDIDATES:
        if name in payload and _has_length(payload[name]):
            return name
    return None


def resolve_token_field(payload: Any, tokens_field: str) -> str:
    if not isinstance(payload, Mapping):
        raise ConfigTypeError(
            expected("payload", "a dict (packing measures a token field)", type(payload).__name__)
        )
    if tokens_field != "auto":
        if tokens_field not in payload:
            raise ConfigError(
                expected("tokens_field", f"a key of the payload {sorted(payload)}", tokens_field)
            )
        return tokens_field
    found = detect_token_field(payload)
    if found is None:
        raise ConfigError(
            expected("payload", f"one of the token fields {TOKEN_FIELD_CANDIDATES}", sorted(payload))
        )
    return found


def apportion_tokens(length: int, weights: Mapping[int, int]) -> dict[int, int]:
    """Integer split of ``length`` by ``weights``; the largest component id takes the remainder."""
    total = sum(weights.values())
    if total <= 0 or length <= 0:
        return {}
    items = sorted(weights.items())
    out: dict[int, int] = {}
    given = 0
    for cid, w in items[:-1]:
        share = length * w // total
        out[cid] = share
        given += share
    out[items[-1][0]] = max(0, length - given)
    return out


@dataclass(slots=True)
class _Segment:
    """A span ``[start, end)`` of one record inside a bin."""

    record: SampleRecord
    start: int
    end: int
    seq_len: int
    token_field: str | None = None
    is_last: bool = False
    is_slice: bool = False

    @property
    def length(self) -> int:
        return self.end - self.start


@dataclass(slots=True)
class _Bin:
    segments: list[_Segment]
    remaining: int


@dataclass(slots=True)
class _PackLane:
    bins: list[_Bin] = field(default_factory=list)
    wrap: deque[_Segment] = field(default_factory=deque)
    wrap_total: int = 0
    auto_field: str | None = None
    # cursor key of a split record -> tokens already charged per component
    charged: dict[SampleCursorKey, dict[int, int]] = field(default_factory=dict)
    # first/best fit: base offset -> [fragments buffered in bins, closer seen]
    tally: dict[tuple[int, int], list[int]] = field(default_factory=dict)

    def pending(self) -> bool:
        return bool(self.bins) or self.wrap_total > 0


class PackingAccumulator(Accumulator[SampleRecord]):
    """Per-lane bins / wrap buffers; see the module docstring."""

    def __init__(
        self,
        *,
        max_length: int,
        algorithm: str = "first_fit",
        num_bins: int | None = None,
        max_sequences_per_bin: int | None = None,
        min_sequence_length: int = 1,
        drop_oversized: bool = True,
        flush_strategy: str = "fifo",
        tokens_field: str = "auto",
        length_fn: Callable[[SampleRecord], int] | None = None,
        shuffle_strategy: str | None = None,
        shuffle_seed: int = 0,
        pack_payloads: Callable[[list[Any]], Any] | None = None,
    ) -> None:
        self.max_length = max_length
        self.algorithm = algorithm
        self.num_bins = num_bins
        self.cap = max_sequences_per_bin
        self.min_sequence_length = min_sequence_length
        self.drop_oversized = drop_oversized
        self.flush_strategy = flush_strategy
        self.tokens_field = tokens_field
        self.length_fn = length_fn
        self.shuffle_strategy = shuffle_strategy
        self.shuffle_seed = shuffle_seed
        self.pack_payloads = pack_payloads
        self.dropped_oversized = 0  # diagnostics only, never decides output
        # diagnostics only: lane -> [records, tokens] oversized since the lane's last flush (warned there)
        self._oversized: dict[int, list[int]] = {}
        self._lanes: dict[int, _PackLane] = {}

    @property
    def reads_payload(self) -> bool:
        return True

    def has_pending_data(self, lane_id: int | None = None) -> bool:
        if lane_id is None:
            return any(s.pending() for s in self._lanes.values())
        s = self._lanes.get(lane_id)
        return s is not None and s.pending()

    # -- measuring ------------------------------------------------------------

    def _length(self, rec: SampleRecord) -> int:
        if self.length_fn is not None:
            return checked_length(self.length_fn(rec), rec)
        payload = rec.payload
        if type(payload) is dict:
            # fast path, same answer as below: "auto" picks input_ids first whenever it has a length
            value = payload.get("input_ids" if self.tokens_field == "auto" else self.tokens_field)
            if type(value) is list:
                return len(value)
        name = resolve_token_field(rec.payload, self.tokens_field)
        return value_length(rec.payload[name], name)

    def _wrap_field(self, st: _PackLane, rec: SampleRecord) -> str:
        name = resolve_token_field(rec.payload, self.tokens_field)
        if self.tokens_field == "auto":
            if st.auto_field is None:
                st.auto_field = name
            elif st.auto_field != name:
                raise ConfigError(
                    expected(
                        f"token field of lane {rec.meta.lane_id}",
                        f"{st.auto_field!r} (as earlier records; set tokens_field explicitly)",
                        name,
                    )
                )
        return name

    # -- push -----------------------------------------------------------------

    def push_many(self, elems: Sequence[SampleRecord]) -> list[ReadyBatch[SampleRecord]]:
        if not elems:
            return []
        order: list[SampleRecord] = list(elems)
        if self.shuffle_strategy == "random":
            order = closers_after_siblings(self._shuffled_per_lane(order))
        elif self.shuffle_strategy == "length":
            order.sort(key=lambda r: (-self._length(r), r.meta.cursor.as_key()))
            order = closers_after_siblings(order)
        out: list[SampleRecord] = []
        for rec in order:
            st = self._lanes.setdefault(rec.meta.lane_id, _PackLane())
            if self.algorithm == "wrap":
                out.extend(self._push_wrap(st, rec))
            else:
                out.extend(self._push_fit(st, rec))
        return [([r], 0) for r in out]

    def _shuffled_per_lane(self, elems: list[SampleRecord]) -> list[SampleRecord]:
        """``shuffle_strategy="random"``: permute each lane's records of this push on its own.

        Each lane's sub-sequence is shuffled with ``Random(batch_seed(shuffle_seed,
        lane_records))``, so a lane's order depends only on its own records in the
        micro-batch, never on which other lanes share it (seed 002: per-record state
        must be lane-aware).  A lane-pure micro-batch (every batch but the end-of-stream
        one, where upstream flushes all lanes into one push) is shuffled exactly as
        zephon 0.2.0 does; zephon seeds one shuffle from the whole mixed batch, so there a
        lane's packs depend on the topology (docs/divergences.md, "Operators (session 7)").
        Lanes are taken in ascending id; bins are per lane, so that order only decides
        how lanes interleave in this push's output.
        """
        by_lane: dict[int, list[SampleRecord]] = {}
        for rec in elems:
            by_lane.setdefault(rec.meta.lane_id, []).append(rec)
        out: list[SampleRecord] = []
        for lane in sorted(by_lane):
            recs = by_lane[lane]
            Random(batch_seed(self.shuffle_seed, recs)).shuffle(recs)
            out.extend(recs)
        return out

    def _full(self, b: _Bin) -> bool:
        return b.remaining < self.min_sequence_length or (
            self.cap is not None and len(b.segments) >= self.cap
        )

    def _push_fit(self, st: _PackLane, rec: SampleRecord) -> list[SampleRecord]:
        n = self._length(rec)
        if n > self.max_length:
            if not self.drop_oversized:
                raise ConfigError(
                    expected("record length", f"<= max_length={self.max_length} (drop_oversized=False)", n)
                )
            self.dropped_oversized += 1
            tally_drop = self._oversized.setdefault(rec.meta.lane_id, [0, 0])
            tally_drop[0] += 1
            tally_drop[1] += n
            # A sibling still in a bin will carry the closer instead (see _close_refs).
            keep: list[SampleRecord] = []
            for t in tombstones_for_record(rec):
                tal = st.tally.get(t.meta.contributors[0].cursor.base_offset)
                if tal is not None and rec.meta.contributors:
                    tal[1] = 1
                else:
                    keep.append(t)
            return keep
        lane = rec.meta.lane_id
        for ref in rec.meta.tags.get(TAG_CONTRIBUTORS) or ():
            tal = st.tally.setdefault(ref.cursor.base_offset, [0, 0])
            tal[0] += 1
            tal[1] = tal[1] or int(ref.is_last_child)
        seg = _Segment(rec, 0, n, n, is_last=True)
        chosen: _Bin | None = None
        if self.algorithm == "first_fit":
            for b in st.bins:
                if b.remaining >= n:
                    chosen = b
                    break
        else:
            for b in st.bins:
                if b.remaining >= n and (chosen is None or b.remaining < chosen.remaining):
                    chosen = b
        if chosen is not None:
            chosen.segments.append(seg)
            chosen.remaining -= n
            if self._full(chosen):
                st.bins.remove(chosen)
                return [self._emit(st, chosen.segments, lane)]
            return []
        fresh = _Bin([seg], self.max_length - n)
        if self._full(fresh):
            return [self._emit(st, fresh.segments, lane)]
        out: list[SampleRecord] = []
        assert self.num_bins is not None
        while st.bins and len(st.bins) >= self.num_bins:
            if self.flush_strategy == "fifo":
                victim = st.bins.pop(0)
            else:
                i = min(range(len(st.bins)), key=lambda j: st.bins[j].remaining)
                victim = st.bins.pop(i)
            out.append(self._emit(st, victim.segments, lane))
        st.bins.append(fresh)
        return out

    def _push_wrap(self, st: _PackLane, rec: SampleRecord) -> list[SampleRecord]:
        name = self._wrap_field(st, rec)
        n = value_length(rec.payload[name], name)
        if n <= 0:
            return tombstones_for_record(rec)
        st.wrap.append(_Segment(rec, 0, n, n, token_field=name, is_slice=True))
        st.wrap_total += n
        lane = rec.meta.lane_id
        out: list[SampleRecord] = []
        # loop invariant: wrap_total == sum of live slice lengths in st.wrap
        while st.wrap_total >= self.max_length or (self.cap is not None and len(st.wrap) >= self.cap):
            room = self.max_length
            limit = len(st.wrap) if self.cap is None else min(len(st.wrap), self.cap)
            taken: list[_Segment] = []
            while room > 0 and len(taken) < limit:
                head = st.wrap[0]
                if head.length <= room:
                    head.is_last = True
                    taken.append(st.wrap.popleft())
                    room -= head.length
                    st.wrap_total -= head.length
                else:
                    cut = head.start + room
                    taken.append(
                        _Segment(head.record, head.start, cut, head.seq_len, head.token_field, False, True)
                    )
                    head.start = cut
                    st.wrap_total -= room
                    room = 0
            out.append(self._emit(st, taken, lane))
        return out

    # -- flush ----------------------------------------------------------------

    def flush(self, *, reset: bool = False, lane_id: int | None = None) -> list[ReadyBatch[SampleRecord]]:
        lanes = sorted(self._lanes) if lane_id is None else [lane_id]
        packs: list[SampleRecord] = []
        tombs: list[SampleRecord] = []
        tails: dict[int, tuple[int, int]] = {}  # lane -> (records, tokens) of a dropped wrap tail
        for lane in lanes:
            st = self._lanes.pop(lane, None)
            if st is None:
                continue
            for b in st.bins:
                packs.append(self._emit(st, b.segments, lane))
            if st.wrap:
                if self.cap is not None:
                    tail = list(st.wrap)
                    for s in tail:
                        s.is_last = True
                    packs.append(self._emit(st, tail, lane))
                else:
                    tails[lane] = (len(st.wrap), sum(s.length for s in st.wrap))
                    for s in st.wrap:
                        tombs.extend(tombstones_for_record(s.record))
        self._warn_drops(lane_id, lanes, tails)
        return [([r], 0) for r in packs] + [([t], 0) for t in tombs]

    def _warn_drops(self, lane_id: int | None, lanes: list[int], tails: dict[int, tuple[int, int]]) -> None:
        """One DataDroppedWarning per flushed lane and cause (diagnostics; output and state unchanged)."""
        op = f"pack_sequences({self.algorithm})"
        for lane in sorted(set(lanes) | set(self._oversized)) if lane_id is None else [lane_id]:
            over = self._oversized.pop(lane, None)
            if over is not None:
                warn_data_dropped(
                    op=op,
                    cause="oversized",
                    lane=lane,
                    records=over[0],
                    tokens=over[1],
                    detail=f"max_length={self.max_length}; algorithm='wrap' splits them instead",
                )
            if lane in tails:
                warn_data_dropped(
                    op=op,
                    cause="wrap_tail",
                    lane=lane,
                    records=tails[lane][0],
                    tokens=tails[lane][1],
                    detail=f"max_length={self.max_length}; max_sequences_per_bin emits the tail instead",
                )

    # -- emitting -------------------------------------------------------------

    def _emit(self, st: _PackLane, segments: list[_Segment], lane: int) -> SampleRecord:
        assert segments, "a pack has at least one segment"
        refs: list[ContributorRef] = []
        samples: dict[int, int] = {}
        tokens: dict[int, int] = {}
        wrap = self.algorithm == "wrap"
        for seg in segments:
            rec = seg.record
            m = rec.meta
            explicit = m.tags.get(TAG_CONTRIBUTORS)
            if not explicit:  # 1:1 record: its own cursor, closing with its last slice
                refs.append(ContributorRef(m.cursor, seg.is_last))
            elif not wrap:
                refs.extend(self._close_refs(st, rec))
            else:
                for ref in m.contribution_refs():
                    refs.append(ContributorRef(ref.cursor, ref.is_last_child and seg.is_last))
            if seg.is_last:
                for cid, cnt in m.component_sample_counts.items():
                    samples[cid] = samples.get(cid, 0) + cnt
            targets = m.component_token_counts
            if targets is None:
                counts = m.component_sample_counts
                if len(counts) == 1:  # the common case: apportion_tokens gives it everything
                    ((only, w),) = counts.items()
                    targets = {only: seg.seq_len} if w > 0 and seg.seq_len > 0 else {}
                else:
                    targets = apportion_tokens(seg.seq_len, counts)
            if not targets or seg.seq_len <= 0:
                continue
            if seg.is_last:
                # only a record split across earlier bins has charges to subtract
                done = st.charged.pop(rec.meta.cursor.as_key(), None) if st.charged else None
                for cid, t in targets.items():
                    tokens[cid] = tokens.get(cid, 0) + t - (done.get(cid, 0) if done else 0)
            else:
                done = st.charged.setdefault(rec.meta.cursor.as_key(), {})
                for cid, t in targets.items():
                    part = t * seg.length // seg.seq_len
                    done[cid] = done.get(cid, 0) + part
                    tokens[cid] = tokens.get(cid, 0) + part
        total = sum(s.length for s in segments)
        first = segments[0]
        meta = pack_meta(
            first.record.meta.cursor.child(first.start),
            refs,
            lane_id=lane,
            component_sample_counts=samples,
            component_token_counts=tokens or None,
            tags={
                TAG_PACKING_METADATA: {
                    "num_sequences": len(segments),
                    "total_length": total,
                    "packing_efficiency": total / self.max_length,
                    "padding_length": None,
                }
            },
        )
        entries = [s.record.payload if not s.is_slice else self._entry(s) for s in segments]
        payload = self.pack_payloads(entries) if self.pack_payloads is not None else entries
        return SampleRecord(meta, {"packed_samples": payload})

    @staticmethod
    def _close_refs(st: _PackLane, rec: SampleRecord) -> list[ContributorRef]:
        """first/best fit: a ref closes iff its offset's closer was seen and no sibling stays binned.

        zephon 0.2.0 keeps the incoming flag, so a closing child packed into an
        earlier-emitted bin than its sibling closes the offset too early (see
        docs/divergences.md).
        """
        out: list[ContributorRef] = []
        for ref in rec.meta.contributors:
            key = ref.cursor.base_offset
            tal = st.tally[key]
            tal[0] -= 1
            out.append(ContributorRef(ref.cursor, bool(tal[1]) and tal[0] == 0))
            if tal[0] == 0:
                del st.tally[key]
        return out

    @staticmethod
    def _entry(seg: _Segment) -> Any:
        payload = seg.record.payload
        if not seg.is_slice:
            return payload
        assert seg.token_field is not None and isinstance(payload, Mapping)
        names = [seg.token_field]
        for k, v in payload.items():
            if k == seg.token_field or v is None or isinstance(v, (bool, int, float)):
                continue
            try:
                n = value_length(v, k)
            except ConfigTypeError:
                continue
            if n != seg.seq_len:
                raise ConfigError(
                    expected(
                        f"payload field {k!r}", f"length {seg.seq_len} (aligned with {seg.token_field!r})", n
                    )
                )
            names.append(k)
        return {k: payload[k][seg.start : seg.end] for k in sorted(names)}


def closers_after_siblings(order: Sequence[SampleRecord]) -> list[SampleRecord]:
    """``order`` with each record that closes an offset moved just after the last record of that
    offset (stable otherwise).

    A reordered push (``shuffle_strategy="random"`` / ``"length"``) may put a closing child ahead
    of a sibling of the same push; packed in that order, the closer would close the offset before
    the sibling's fragment is placed (found by the operator row of the property suite, issue 32).
    Records without closing refs keep their places.
    """
    last: dict[tuple[int, tuple[int, int]], int] = {}
    for i, rec in enumerate(order):
        for ref in rec.meta.contribution_refs():
            last[(rec.meta.lane_id, ref.cursor.base_offset)] = i
    held: dict[int, list[SampleRecord]] = {}
    out: list[SampleRecord] = []
    for i, rec in enumerate(order):
        closing = [last[(rec.meta.lane_id, ref.cursor.base_offset)]
                   for ref in rec.meta.contribution_refs() if ref.is_last_child]
        target = max(closing, default=i)
        if target > i:
            held.setdefault(target, []).append(rec)
        else:
            out.append(rec)
        out.extend(held.pop(i, ()))
    assert not held
    return out


@dataclass(frozen=True, slots=True, kw_only=True)
class PackConfig:
    """The knobs of ``pack_sequences`` as the call passed them, each with its declared domain
    (:mod:`zephon_ref.ops.knobs`); the rules between knobs are :class:`PackSequences`'s."""

    BUILDER: ClassVar[str] = "pack_sequences"

    max_length: int = knob(domain=Int(1), doc="tokens a pack holds")
    num_bins: int | None = knob(None, Int(1, none=True), doc="open bins per lane (first_fit, best_fit)")
    max_sequences_per_bin: int | None = knob(None, Int(1, none=True), doc="segments a pack holds at most")
    algorithm: str = knob("first_fit", Choice(SUPPORTED_ALGORITHMS), doc="how records find a pack")
    tokens_field: str = knob("auto", Text(), doc="the payload field whose length is a record's length")
    length_fn: Callable[[SampleRecord], int] | None = knob(None, Func(none=True), doc="a record's length")
    drop_oversized: bool | None = knob(None, Bool(none=True), doc="None: drop unless the algorithm splits")
    min_sequence_length: int = knob(1, Int(0), doc="a bin with less room than this is full")
    shuffle_strategy: str | None = knob(None, Choice((None, "random", "length")),
                                   doc="order of a flush's packs")
    shuffle_seed: int | None = knob(None, Int(0, none=True), doc="seed of shuffle_strategy='random'")
    flush_strategy: str = knob("fifo", Choice(("fifo", "fullest")), doc="which bin closes first")
    pack_payloads: Any = knob("keep_list", OneOf((Choice(("keep_list",)), Func())), doc="a pack's payload")
    homogeneity: str = knob("none", Choice(("none",)), doc="per-domain packing (not in zephon_ref yet)")
    candidate_pool_size: int | None = knob(None, Choice((None,)), doc="best_fit_wrap (not in zephon_ref yet)")
    max_candidate_age: int | None = knob(None, Choice((None,)), doc="best_fit_wrap (not in zephon_ref yet)")
    groups: Any = knob(None, Choice((None,)), doc="homogeneity='group' (not in zephon_ref yet)")

    def __post_init__(self) -> None:
        check_fields(self)


class PackSequences(BaseOp):
    """``pack_sequences(max_length, *, num_bins=None, ...)`` with envelope output."""

    def __init__(
        self,
        max_length: int,
        *,
        num_bins: int | None = None,
        max_sequences_per_bin: int | None = None,
        algorithm: str = "first_fit",
        tokens_field: str = "auto",
        length_fn: Callable[[SampleRecord], int] | None = None,
        drop_oversized: bool | None = None,
        min_sequence_length: int = 1,
        shuffle_strategy: str | None = None,
        shuffle_seed: int | None = None,
        flush_strategy: str = "fifo",
        pack_payloads: str | Callable[[list[Any]], Any] = "keep_list",
        homogeneity: str = "none",
        candidate_pool_size: int | None = None,
        max_candidate_age: int | None = None,
        groups: Any = None,
        placement: str = "auto",
        parallelism: int | None = None,
    ) -> None:
        super().__init__()
        # execution settings: validated here, never stored, so they cannot reach the data path
        check_placement(placement)
        check_parallelism(parallelism)
        check_int("max_length", max_length, minimum=1)
        check_int("max_sequences_per_bin", max_sequences_per_bin, minimum=1, allow_none=True)
        check_int("min_sequence_length", min_sequence_length, minimum=0)
        check_choice("algorithm", algorithm, ALGORITHMS)
        if algorithm not in SUPPORTED_ALGORITHMS:
            raise ConfigError(
                expected(
                    "algorithm",
                    f"one of {SUPPORTED_ALGORITHMS} (best_fit_wrap is not in zephon_ref yet)",
                    algorithm,
                )
            )
        slicing = algorithm == "wrap"
        if slicing:
            if num_bins is not None:
                raise ConfigError(expected("num_bins", f"None for algorithm={algorithm!r}", num_bins))
        else:
            if num_bins is None:
                raise ConfigError(expected("num_bins", f"an int >= 1 for algorithm={algorithm!r}", None))
            check_int("num_bins", num_bins, minimum=1)
        if not isinstance(tokens_field, str) or not tokens_field:
            raise ConfigTypeError(expected("tokens_field", "'auto' or a field name", tokens_field))
        if length_fn is not None:
            if not callable(length_fn):
                raise ConfigTypeError(expected("length_fn", "a callable or None", length_fn))
            if slicing:
                raise ConfigError(expected("length_fn", "None for a slicing algorithm (wrap)", length_fn))
        drop_oversized_arg = drop_oversized
        if drop_oversized is None:
            drop_oversized = not slicing
        else:
            check_bool("drop_oversized", drop_oversized)
            if slicing and drop_oversized:
                raise ConfigError(
                    expected("drop_oversized", "False or None for algorithm='wrap' (it splits)", True)
                )
        check_choice("shuffle_strategy", shuffle_strategy, (None, "random", "length"))
        check_int("shuffle_seed", shuffle_seed, minimum=0, allow_none=True)
        check_choice("flush_strategy", flush_strategy, ("fifo", "fullest"))
        check_choice("homogeneity", homogeneity, ("none",))
        # zephon's best_fit_wrap and homogeneity="group" knobs: those modes are refused above
        for name, value in (
            ("candidate_pool_size", candidate_pool_size),
            ("max_candidate_age", max_candidate_age),
            ("groups", groups),
        ):
            if value is not None:
                raise ConfigError(expected(name, "None (its mode, best_fit_wrap or homogeneity='group', "
                                           "is not in zephon_ref yet)", value))
        if isinstance(pack_payloads, str) and pack_payloads == "keep_list":
            self._pack_payloads: Callable[[list[Any]], Any] | None = None
        elif callable(pack_payloads):
            self._pack_payloads = pack_payloads
        else:
            err = ConfigError if isinstance(pack_payloads, str) else ConfigTypeError
            raise err(expected("pack_payloads", "'keep_list' or a callable", pack_payloads))
        # every knob against its declared domain (the rules between knobs are checked above)
        self.config = PackConfig(
            max_length=max_length, num_bins=num_bins, max_sequences_per_bin=max_sequences_per_bin,
            algorithm=algorithm, tokens_field=tokens_field, length_fn=length_fn,
            drop_oversized=drop_oversized_arg,
            min_sequence_length=min_sequence_length, shuffle_strategy=shuffle_strategy,
            shuffle_seed=shuffle_seed,
            flush_strategy=flush_strategy, pack_payloads=pack_payloads, homogeneity=homogeneity,
            candidate_pool_size=candidate_pool_size, max_candidate_age=max_candidate_age, groups=groups)
        self.max_length = max_length
        self.num_bins = num_bins
        self.max_sequences_per_bin = max_sequences_per_bin
        self.algorithm = algorithm
        self.tokens_field = tokens_field
        self.length_fn = length_fn
        self.drop_oversized = drop_oversized
        self.min_sequence_length = min_sequence_length
        self.shuffle_strategy = shuffle_strategy
        self.shuffle_seed = 0 if shuffle_seed is None else shuffle_seed
        self.flush_strategy = flush_strategy

    def traits(self) -> OpTraits:
        return OpTraits(preserves_cursor_order=False, indexable=False)

    def accumulator(self, *, deterministic: bool, ctx: dict[str, Any]) -> Accumulator[Any]:
        return PackingAccumulator(
            max_length=self.max_length,
            algorithm=self.algorithm,
            num_bins=self.num_bins,
            max_sequences_per_bin=self.max_sequences_per_bin,
            min_sequence_length=self.min_sequence_length,
            drop_oversized=self.drop_oversized,
            flush_strategy=self.flush_strategy,
            tokens_field=self.tokens_field,
            length_fn=self.length_fn,
            shuffle_strategy=self.shuffle_strategy,
            shuffle_seed=self.shuffle_seed,
            pack_payloads=self._pack_payloads,
        )

    def process_many(self, elems: list[Any]) -> list[Any]:
        return list(elems)

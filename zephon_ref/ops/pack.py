"""pack_sequences / pack_flat: first_fit, best_fit, wrap and best_fit_wrap packing.

Theory of operation
-------------------
:class:`PackingAccumulator` owns, per lane and *packing group*, the open bins
(first/best), the FIFO of record slices (wrap) or the candidate pool
(best_fit_wrap), plus per lane the token counts already charged to split records
and the closer tallies.  ``push_many`` places records and returns finished packs
as one-record ready batches; ``process_many`` is the identity (payloads are
assembled when a bin closes).

Packing groups (``homogeneity``): ``"none"`` packs a lane's records together;
``"full"`` keeps one group per mixture component (a record must carry exactly
one component); ``"group"`` one group per :class:`~zephon_ref.ops.grouping.DomainGroups`
group, components in no group being their own group.  Every rule below holds per
group; ``num_bins`` is per group.  Flush visits groups in ascending ``(lane,
domain)`` order (domains: None, a component id, or ``("group", name)`` /
``("component", id)``).

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

best_fit_wrap: a record first gives whole ``max_length`` windows from its start,
emitted at once; the rest (if any) joins the group's candidate pool with an
arrival number.  While the pool holds ``>= candidate_pool_size`` candidates and
either ``>= max_length`` tokens or ``max_sequences_per_bin`` candidates, a bin is
built with a *gap* of ``max_length`` tokens and a segment limit (the pool's size,
capped): (1) while the oldest candidate is older than ``max_candidate_age``
arrivals and fits the gap, it is taken; (2) then repeatedly the longest candidate
that fits (ties: earliest arrival) is taken; when none fits, the shortest
candidate (ties: earliest) is cut to fill the gap exactly: from its end when it
is still a document prefix and the gap is shorter than what would stay, else
from its start.  At flush bins are built while the pool holds ``>= max_length``
tokens or more candidates than the cap, and the remaining candidates form one
last bin in arrival order.

Output (``output``): ``"envelope"`` gives ``{"packed_samples": [entry, ...]}`` (a
whole record's payload, or a slice's token field and length-aligned fields),
merged by ``pack_payloads``; ``"flat"`` (``pack_flat``) concatenates the token
field and the aligned fields (every segment must have the same set), pads to
``max_length`` (token field with ``pad_token_id``, others with 0) and, with
``emit_positions``, adds ``positions`` (int32, restarting at 0 per segment and
for the pad tail).

Every pack's meta (§3.6 of the notes): one contributor per segment and
contribution ref; sample counts charged on a record's last-emitted segment; token
counts floor-split on its other slices with the remainder on the last one;
primary cursor = first segment's record cursor extended by that segment's start
offset; ``_packing_metadata`` with ``padding_length`` (flat: pad tokens; envelope:
None).  A 1:1 record's ref closes with its last-emitted segment.  An explicit
contributor closes (first/best fit, best_fit_wrap, which reorder) iff its
offset's closer was seen and no sibling stays buffered in the lane
(:class:`~zephon_ref.ops.closers.CloserTally`), counting every
fragment from the push that brings it (a pre-packing shuffle may put the closer
first; zephon keeps the incoming flag: divergence D-1); wrap keeps the FIFO
order and the flag (a reordered push first moves each closer after its siblings:
divergence D-3).

Drops are never silent: the oversized records a lane dropped since its last flush
(first/best) and the wrap tail a flush drops are each counted, per lane at that
flush, lanes in ascending order, with record and token counts, into the run's
:class:`~zephon_ref.errors.DropLedger` (a warning when a lane starts dropping of a
kind, totals at the run's close; diagnostics: the counts never decide output and
are not part of any state).

Checkpoints hold no packing state: a restore replays the inflight chunks through
a fresh accumulator (the engine's replay), so everything here is a function of
the records pushed since the lane's last flush.

Invariants: per lane and base offset exactly one closing contributor or
tombstone leaves, after every other fragment of the offset (wrap: an empty
closing child hands its closer to a buffered sibling, D-2); ``flush(reset=True, lane_id=L)`` drops all of
L's state.  Payload fields that are torch tensors are joined and padded by torch's own
rules (:mod:`zephon_ref.ops.tensors`, which takes torch from the tensors themselves).  What may
not live here: clocks, importing torch, unsorted iteration.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from numbers import Integral
from random import Random  # seeded instances only: never the global generator
from typing import Any, ClassVar

import numpy as np

from zephon_ref.errors import ConfigError, ConfigTypeError, DropLedger, expected, ledger_of
from zephon_ref.lineage import pack_meta, tombstone_meta, tombstones_for_record
from zephon_ref.ops.base import (
    Accumulator,
    BaseOp,
    OpTraits,
    ReadyBatch,
)
from zephon_ref.ops.closers import CloserTally, closers_after_siblings
from zephon_ref.ops.grouping import DomainGroups
from zephon_ref.ops.knobs import (
    Bool,
    Choice,
    Func,
    Int,
    OneOf,
    Opaque,
    Text,
    check_execution,
    check_fields,
    knob,
)
from zephon_ref.ops.shuffle import batch_seed
from zephon_ref.ops.tensors import concat_tensors, is_tensor, join_entries, join_tensors, pad_tensor
from zephon_ref.training import TOKEN_FIELD_CANDIDATES  # the one list: to_training reads it too
from zephon_ref.types import (
    TAG_PACKING_METADATA,
    ContributorRef,
    SampleCursorKey,
    SampleRecord,
)

__all__ = [
    "ALGORITHMS",
    "DEFAULT_CANDIDATE_POOL_SIZE",
    "MAX_FLAT_LENGTH",
    "TOKEN_FIELD_CANDIDATES",
    "PackConfig",
    "PackSequences",
    "PackingAccumulator",
    "apportion_tokens",
    "checked_length",
    "detect_token_field",
    "join_numpy",
    "value_length",
]

ALGORITHMS = ("first_fit", "best_fit", "wrap", "best_fit_wrap")
SLICING = ("wrap", "best_fit_wrap")
DEFAULT_CANDIDATE_POOL_SIZE = 1024
#: the longest pack_flat row: its ``positions`` are int32
MAX_FLAT_LENGTH = 2**31 - 1
#: ``max_candidate_age`` defaults to this many times ``candidate_pool_size``
AGE_PER_CANDIDATE = 8


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
    and bools are refused, numpy integers are ints (a negative length would let a bin take
    more than ``max_length`` tokens).  divergence D-59
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




# ----------------------------------------------------------------------------
# payload assembly
# ----------------------------------------------------------------------------


def _sliceable(value: Any) -> bool:
    try:
        value[0:0]
    except Exception:  # noqa: BLE001 - any failure means "not sliceable"
        return False
    return True


def aligned_fields(payload: Mapping[str, Any], token_field: str, seq_len: int) -> list[str]:
    """The token field and every payload field of the same length, sorted: what a slice keeps.

    Scalars (bool, int, float, None) and values without a length are left out; a sized field
    of another length, or one that cannot be sliced, is refused (slices must stay aligned).
    """
    if token_field not in payload:
        raise ConfigError(expected("token field", f"a key of the payload {sorted(payload)}", token_field))
    if value_length(payload[token_field], token_field) != seq_len:
        raise ConfigError(expected(f"field {token_field!r}", f"length {seq_len} (the record's length)",
                                   value_length(payload[token_field], token_field)))
    if not _sliceable(payload[token_field]):
        raise ConfigTypeError(expected(f"tokens_field {token_field!r}",
                                       "a sliceable sequence (an int length only suits envelope first/best)",
                                       payload[token_field]))
    names = [token_field]
    for k, v in payload.items():
        if k == token_field or v is None or isinstance(v, (bool, int, float)):
            continue
        if getattr(v, "ndim", None) == 0:  # a 0-dim tensor / array, a numpy int: zephon refuses it too
            raise ConfigError(expected(f"payload field {k!r}", f"a Python scalar or a field of length "
                                       f"{seq_len} (aligned with {token_field!r})",
                                       f"a 0-dim {type(v).__name__}"))
        try:
            n = value_length(v, k)
        except ConfigTypeError:
            continue
        if n != seq_len:
            raise ConfigError(expected(f"payload field {k!r}",
                                       f"length {seq_len} (aligned with {token_field!r})", n))
        if not _sliceable(v):
            raise ConfigTypeError(expected(f"payload field {k!r}", "a sliceable sequence", type(v).__name__))
        names.append(k)
    return sorted(names)


def _numpy_join(parts: list[Any], what: str) -> Any:
    """``np.concatenate`` along the first axis; numpy's refusal as zephon_ref's error of its builtin."""
    try:
        return np.concatenate(parts, axis=0)
    except (TypeError, ValueError) as exc:
        err = ConfigTypeError if isinstance(exc, TypeError) else ConfigError
        raise err(expected(what, "arrays numpy joins along the first axis (same number of dims and "
                           "trailing sizes; a 1-D pad for a 1-D field)", str(exc))) from exc


def concat(parts: list[Any], name: str) -> Any:
    """Join slices along their first axis, keeping the first slice's kind (list, tuple, ndarray, tensor)."""
    first = parts[0]
    if isinstance(first, list):
        return [x for p in parts for x in p]
    if isinstance(first, tuple):
        return tuple(x for p in parts for x in p)
    if isinstance(first, np.ndarray):
        return _numpy_join(parts, f"field {name!r} to concatenate")
    if is_tensor(first):
        return concat_tensors(parts, name)
    raise ConfigTypeError(expected(f"field {name!r} to concatenate",
                                   "a list, tuple, numpy array or torch tensor", type(first).__name__))


def pad(value: Any, count: int, fill: int, name: str) -> Any:
    """``value`` with ``count`` copies of ``fill`` appended along the first axis (same kind)."""
    if isinstance(value, list):
        return value + [fill] * count
    if isinstance(value, tuple):
        return value + (fill,) * count
    if isinstance(value, np.ndarray):
        if value.dtype.kind in "iu":
            info = np.iinfo(value.dtype)
            if not info.min <= fill <= info.max:
                raise ConfigError(expected(f"pad value for field {name!r}",
                                           f"an id representable in {value.dtype}", fill))
        return _numpy_join([value, np.full(count, fill, dtype=value.dtype)],
                           f"field {name!r} to pad with {fill}")
    if is_tensor(value):
        return pad_tensor(value, count, fill, name)
    raise ConfigTypeError(expected(f"field {name!r} to pad", "a list, tuple, numpy array or torch tensor",
                                   type(value).__name__))


def join_numpy(entries: list[Any]) -> Any:
    """``pack_payloads="numpy_array"``: a bin's entries joined along their first axis.

    The first entry decides the form: numpy arrays are concatenated; dicts give one array per key
    of the first entry, each the concatenation of that key's arrays.  Anything else, a missing key
    or arrays that do not stack is refused, typed.
    """
    def joined(parts: list[Any], what: str) -> Any:
        kinds = sorted({type(x).__name__ for x in parts if not isinstance(x, np.ndarray)})
        if kinds:
            raise ConfigTypeError(expected(f"pack_payloads='numpy_array' {what}", "numpy arrays", kinds))
        try:
            return np.concatenate(parts, axis=0)
        except ValueError as exc:
            raise ConfigError(expected(f"pack_payloads='numpy_array' {what}",
                                       "arrays that agree beyond their first axis", str(exc))) from exc

    return join_entries(entries, "numpy_array", joined)


def positions(lengths: Sequence[int]) -> np.ndarray:
    """int32 ``[0..L0-1, 0..L1-1, ...]``: each 0 starts a document (the pad tail is its own)."""
    parts = [np.arange(n, dtype=np.int32) for n in lengths if n > 0]
    return np.concatenate(parts) if parts else np.empty(0, dtype=np.int32)


# ----------------------------------------------------------------------------
# bins, slices, candidates
# ----------------------------------------------------------------------------


@dataclass(slots=True)
class _Segment:
    """A span ``[start, end)`` of one record inside a bin (or still buffered)."""

    record: SampleRecord
    start: int
    end: int
    seq_len: int
    token_field: str | None = None
    is_last: bool = False  # the record's last-emitted segment (closes it)
    is_slice: bool = False  # envelope: keep only the aligned fields

    @property
    def length(self) -> int:
        return self.end - self.start


@dataclass(slots=True)
class _Bin:
    segments: list[_Segment]
    remaining: int


@dataclass(slots=True)
class _Candidate:
    """A best_fit_wrap pool entry: the buffered rest of one record, and when it arrived."""

    arrival: int
    segment: _Segment


@dataclass(slots=True)
class _Group:
    """One packing group's buffers (the algorithm decides which one is used)."""

    bins: list[_Bin] = field(default_factory=list)
    wrap: deque[_Segment] = field(default_factory=deque)
    wrap_total: int = 0
    pool: list[_Candidate] = field(default_factory=list)  # arrival order
    pool_total: int = 0
    arrivals: int = 0

    def pending(self) -> bool:
        return bool(self.bins) or self.wrap_total > 0 or self.pool_total > 0


@dataclass(slots=True)
class _PackLane:
    groups: dict[Any, _Group] = field(default_factory=dict)
    auto_field: str | None = None
    # cursor key of a split record -> tokens already charged per component
    charged: dict[SampleCursorKey, dict[int, int]] = field(default_factory=dict)
    # reordering algorithms: the explicit contributors buffered (the closer move, ops/closers.py)
    tally: CloserTally = field(default_factory=CloserTally)

    def pending(self) -> bool:
        return any(g.pending() for g in self.groups.values())


def _group_sort_key(domain: Any) -> tuple[int, Any]:
    # domains of one accumulator are all None, all component ids, or all (tag, name-or-id) pairs
    return (0, 0) if domain is None else (1, domain)


# ----------------------------------------------------------------------------
# the knobs
# ----------------------------------------------------------------------------



@dataclass(frozen=True, slots=True, kw_only=True)
class PackConfig:
    """The data knobs of ``pack_sequences`` / ``pack_flat``, each with its declared domain.

    ``None`` keeps its zephon meaning ("the default for this algorithm"): the resolved values are
    :attr:`drop`, :attr:`seed`, :attr:`pool_size` and :attr:`max_age`.
    """

    BUILDER: ClassVar[tuple[str, ...]] = ("pack_sequences", "pack_flat")

    max_length: int = knob(domain=Int(1), doc="tokens per packed bin")
    num_bins: int | None = knob(None, Int(1, none=True), doc="first/best: open bins per packing group")
    max_sequences_per_bin: int | None = knob(None, Int(1, none=True), doc="segments per bin at most")
    algorithm: str = knob("first_fit", Choice(ALGORITHMS), doc="how records are placed")
    output: str = knob("envelope", Choice(("envelope", "flat")),
                       doc="packed_samples lists (pack_sequences) or flat padded rows (pack_flat)")
    tokens_field: str = knob("auto", Text(), doc="the token field: 'auto' or a field name")
    length_fn: Callable[[SampleRecord], int] | None = knob(None, Func(none=True),
                                                            doc="envelope first/best: a record's length")
    drop_oversized: bool | None = knob(None, Bool(none=True), doc="first/best: drop records over max_length")
    min_sequence_length: int = knob(1, Int(0), doc="a bin with less room than this is emitted")
    shuffle_strategy: str | None = knob(None, Choice((None, "random", "length")),
                                        doc="reorder each push before packing")
    shuffle_seed: int | None = knob(None, Int(0, none=True), doc="shuffle_strategy='random': its seed")
    flush_strategy: str = knob("fifo", Choice(("fifo", "fullest")), doc="which bin closes at num_bins")
    pack_payloads: Any = knob("keep_list",
                              OneOf((Choice(("keep_list", "numpy_array", "torch_tensor")), Func())),
                              doc="envelope: merge a bin's entries (a list, joined numpy arrays or torch "
                                  "tensors, a callable)")
    emit_positions: bool = knob(True, Bool(), doc="flat: add the positions field")
    pad_token_id: int | None = knob(None, Int(0, none=True), doc="flat: the token field's pad id")
    candidate_pool_size: int | None = knob(None, Int(1, none=True),
                                           doc="best_fit_wrap: candidate lookahead per group (None: "
                                               f"{DEFAULT_CANDIDATE_POOL_SIZE})")
    max_candidate_age: int | None = knob(None, Int(1, none=True),
                                         doc="best_fit_wrap: arrivals before a candidate is forced (None: "
                                             f"{AGE_PER_CANDIDATE} x the pool size)")
    homogeneity: str = knob("none", Choice(("none", "group", "full")),
                            doc="what a pack may mix: anything, one group, one component")
    groups: DomainGroups | None = knob(None, Opaque((DomainGroups,), "DomainGroups", none=True),
                                       doc="homogeneity='group': which components share packs")

    def __post_init__(self) -> None:
        check_fields(self)
        alg, flat = self.algorithm, self.output == "flat"
        slicing = alg in SLICING
        if slicing and self.num_bins is not None:
            raise ConfigError(expected("num_bins", f"None for algorithm={alg!r}", self.num_bins))
        if not slicing and self.num_bins is None:
            raise ConfigError(expected("num_bins", f"an int >= 1 for algorithm={alg!r}", None))
        if self.homogeneity == "group" and self.groups is None:
            raise ConfigError(expected("groups", "a DomainGroups for homogeneity='group'", None))
        if self.homogeneity != "group" and self.groups is not None:
            raise ConfigError(expected("groups", f"None for homogeneity={self.homogeneity!r}", self.groups))
        if self.length_fn is not None and (flat or slicing):
            raise ConfigError(expected("length_fn", "None for pack_flat or a slicing algorithm (wrap, "
                                       "best_fit_wrap: the length is the token field's)", self.length_fn))
        if slicing and self.drop_oversized:
            raise ConfigError(expected("drop_oversized", f"False or None for algorithm={alg!r} (it splits)",
                                       True))
        if flat and self.max_length > MAX_FLAT_LENGTH:
            raise ConfigError(expected("max_length", f"an int <= {MAX_FLAT_LENGTH} for pack_flat (its "
                                       "positions are int32)", self.max_length))
        if flat and (alg != "wrap" or self.max_sequences_per_bin is not None) and self.pad_token_id is None:
            raise ConfigError(expected("pad_token_id", f"an int >= 0 (pack_flat with algorithm={alg!r} pads "
                                       "partial bins to max_length)", None))
        if not flat and self.pad_token_id is not None:
            raise ConfigError(expected("pad_token_id", "None for pack_sequences (only pack_flat pads)",
                                       self.pad_token_id))
        if flat and self.pack_payloads != "keep_list":
            raise ConfigError(expected("pack_payloads", "'keep_list' for pack_flat", self.pack_payloads))
        if alg != "best_fit_wrap":
            for name in ("candidate_pool_size", "max_candidate_age"):
                if getattr(self, name) is not None:
                    raise ConfigError(expected(name, f"None for algorithm={alg!r} (best_fit_wrap only)",
                                               getattr(self, name)))

    @property
    def drop(self) -> bool:
        """``drop_oversized`` resolved: first/best drop by default, slicing algorithms split."""
        return self.algorithm not in SLICING if self.drop_oversized is None else self.drop_oversized

    @property
    def seed(self) -> int:
        return 0 if self.shuffle_seed is None else self.shuffle_seed

    @property
    def pool_size(self) -> int:
        return DEFAULT_CANDIDATE_POOL_SIZE if self.candidate_pool_size is None else self.candidate_pool_size

    @property
    def max_age(self) -> int:
        age = self.max_candidate_age
        return AGE_PER_CANDIDATE * self.pool_size if age is None else age


# ----------------------------------------------------------------------------
# the accumulator
# ----------------------------------------------------------------------------


class _KnobViews:
    """``max_length`` and ``algorithm``, read by name across the package: views of ``config``, the one
    frozen PackConfig of the operator and of its accumulator (never copies of it)."""

    config: PackConfig

    @property
    def max_length(self) -> int:
        return self.config.max_length

    @property
    def algorithm(self) -> str:
        return self.config.algorithm


class PackingAccumulator(_KnobViews, Accumulator[SampleRecord]):
    """Per-lane, per-group bins / wrap buffers / candidate pools; see the module docstring."""

    def __init__(self, config: PackConfig, *, domain_of: Callable[[SampleRecord], Any] | None = None) -> None:
        """``domain_of(record)`` names a record's packing group (None: one group per lane;
        :meth:`PackSequences.accumulator` builds it)."""
        self.config = config
        pp = config.pack_payloads
        joiners: dict[str, Callable[[list[Any]], Any]] = {"numpy_array": join_numpy,
                                                          "torch_tensor": join_tensors}
        self.pack_payloads: Callable[[list[Any]], Any] | None = (
            None if isinstance(pp, str) and pp == "keep_list" else joiners[pp] if isinstance(pp, str) else pp)
        self.domain_of = domain_of
        # diagnostics only: lane -> [records, tokens] oversized since the lane's last flush (warned there)
        self._oversized: dict[int, list[int]] = {}
        #: the run's dropped-data counts (the engine's, through ``ctx["drops"]``); never state
        self.drops = DropLedger()
        self._lanes: dict[int, _PackLane] = {}

    # the knobs the rules below read most, as views of the one config (never copies of it)
    @property
    def cap(self) -> int | None:
        """``max_sequences_per_bin``."""
        return self.config.max_sequences_per_bin

    @property
    def flat(self) -> bool:
        """``pack_flat``'s rows (``output="flat"``) rather than envelopes."""
        return self.config.output == "flat"

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
        c = self.config
        if c.length_fn is not None:
            return checked_length(c.length_fn(rec), rec)
        name = resolve_token_field(rec.payload, c.tokens_field)
        return value_length(rec.payload[name], name)

    def _slice_field(self, st: _PackLane, rec: SampleRecord) -> tuple[str, int]:
        """The token field a slicing algorithm cuts, and its length; "auto" must resolve alike for a
        whole lane."""
        name = resolve_token_field(rec.payload, self.config.tokens_field)
        if self.config.tokens_field == "auto":
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
        return name, value_length(rec.payload[name], name)

    # -- push -----------------------------------------------------------------

    def push_many(self, elems: Sequence[SampleRecord]) -> list[ReadyBatch[SampleRecord]]:
        if not elems:
            return []
        order: list[SampleRecord] = list(elems)
        if self.config.shuffle_strategy == "random":
            order = self._shuffled_per_lane(order)
        elif self.config.shuffle_strategy == "length":
            order.sort(key=lambda r: (-self._length(r), r.meta.cursor.as_key()))
        if self.algorithm == "wrap" and self.config.shuffle_strategy is not None:
            order = closers_after_siblings(order)  # divergence D-3
        if self.algorithm != "wrap":
            # count the whole push first: a shuffle may place a closing child before a sibling of
            # the same push, and the closer must still wait for it (upstream delivers the closer
            # last, so once it is seen every sibling has been pushed)
            for rec in order:
                self._lanes.setdefault(rec.meta.lane_id, _PackLane()).tally.add(rec.meta.contributors)
        out: list[SampleRecord] = []
        for rec in order:
            domain = None if self.domain_of is None else self.domain_of(rec)
            st = self._lanes.setdefault(rec.meta.lane_id, _PackLane())
            g = st.groups.get(domain)
            if g is None:
                g = st.groups[domain] = _Group()
            if self.algorithm == "wrap":
                out.extend(self._push_wrap(st, g, rec))
            elif self.algorithm == "best_fit_wrap":
                out.extend(self._push_best_fit_wrap(st, g, rec))
            else:
                out.extend(self._push_fit(st, g, rec))
        return [([r], 0) for r in out]

    def _shuffled_per_lane(self, elems: list[SampleRecord]) -> list[SampleRecord]:
        """``shuffle_strategy="random"``: permute each lane's records of this push on its own.

        Each lane's sub-sequence is shuffled with ``Random(batch_seed(shuffle_seed,
        lane_records))``, so a lane's order depends only on its own records in the
        micro-batch, never on which other lanes share it (seed 002: per-record state
        must be lane-aware; divergence D-55).  Lanes are taken in ascending id; bins are
        per lane, so that order only decides how lanes interleave in this push's output.
        """
        by_lane: dict[int, list[SampleRecord]] = {}
        for rec in elems:
            by_lane.setdefault(rec.meta.lane_id, []).append(rec)
        out: list[SampleRecord] = []
        for lane in sorted(by_lane):
            recs = by_lane[lane]
            Random(batch_seed(self.config.seed, recs)).shuffle(recs)
            out.extend(recs)
        return out

    @staticmethod
    def _drop_tombstones(st: _PackLane, rec: SampleRecord) -> list[SampleRecord]:
        """Tombstones for a record that packs nothing (counted in by :meth:`push_many`): an offset whose
        last buffered fragment this was closes here, if its closer was seen; a sibling still
        buffered carries the closer otherwise."""
        if not rec.meta.contributors:
            return tombstones_for_record(rec)
        lane = rec.meta.lane_id
        return [SampleRecord(tombstone_meta(ContributorRef(ref.cursor, True), lane), None)
                for ref in rec.meta.contributors if st.tally.leave(ref)]

    def _full(self, b: _Bin) -> bool:
        return b.remaining < self.config.min_sequence_length or (
            self.cap is not None and len(b.segments) >= self.cap
        )

    def _push_fit(self, st: _PackLane, g: _Group, rec: SampleRecord) -> list[SampleRecord]:
        n = self._length(rec)
        if n > self.max_length:
            if not self.config.drop:
                raise ConfigError(
                    expected("record length", f"<= max_length={self.max_length} (drop_oversized=False)", n)
                )
            tally_drop = self._oversized.setdefault(rec.meta.lane_id, [0, 0])
            tally_drop[0] += 1
            tally_drop[1] += n
            return self._drop_tombstones(st, rec)
        lane = rec.meta.lane_id
        seg = _Segment(rec, 0, n, n, is_last=True)
        # first_fit: the first bin (creation order) that fits; best_fit: the tightest (ties: the first)
        fits = [b for b in g.bins if b.remaining >= n]
        if fits:
            chosen = fits[0] if self.algorithm == "first_fit" else min(fits, key=lambda b: b.remaining)
            chosen.segments.append(seg)
            chosen.remaining -= n
            if self._full(chosen):
                g.bins.remove(chosen)
                return [self._emit(st, chosen.segments, lane)]
            return []
        fresh = _Bin([seg], self.max_length - n)
        if self._full(fresh):
            return [self._emit(st, fresh.segments, lane)]
        out: list[SampleRecord] = []
        num_bins = self.config.num_bins
        assert num_bins is not None
        while g.bins and len(g.bins) >= num_bins:
            if self.config.flush_strategy == "fifo":
                victim = g.bins.pop(0)
            else:
                i = min(range(len(g.bins)), key=lambda j: g.bins[j].remaining)
                victim = g.bins.pop(i)
            out.append(self._emit(st, victim.segments, lane))
        g.bins.append(fresh)
        return out

    def _push_wrap(self, st: _PackLane, g: _Group, rec: SampleRecord) -> list[SampleRecord]:
        name, n = self._slice_field(st, rec)
        if n <= 0:
            return self._close_empty(g, rec)
        g.wrap.append(_Segment(rec, 0, n, n, token_field=name, is_slice=True))
        g.wrap_total += n
        lane = rec.meta.lane_id
        out: list[SampleRecord] = []
        # loop invariant: wrap_total == sum of live slice lengths in g.wrap
        while g.wrap_total >= self.max_length or (self.cap is not None and len(g.wrap) >= self.cap):
            room = self.max_length
            limit = len(g.wrap) if self.cap is None else min(len(g.wrap), self.cap)
            taken: list[_Segment] = []
            while room > 0 and len(taken) < limit:
                head = g.wrap[0]
                if head.length <= room:
                    head.is_last = True
                    taken.append(g.wrap.popleft())
                    room -= head.length
                    g.wrap_total -= head.length
                else:
                    cut = head.start + room
                    taken.append(
                        _Segment(head.record, head.start, cut, head.seq_len, head.token_field, False, True)
                    )
                    head.start = cut
                    g.wrap_total -= room
                    room = 0
            out.append(self._emit(st, taken, lane))
        return out

    @staticmethod
    def _close_empty(g: _Group, rec: SampleRecord) -> list[SampleRecord]:
        """An empty record in wrap's window packs nothing.  Each offset it closes closes now, by
        tombstone, unless a fragment of that offset is still buffered: then the last such fragment
        carries the closer and the offset closes when it leaves (wrap emits in arrival order, so after
        every other fragment).  divergence D-2"""
        tombs: list[SampleRecord] = []
        for ref in rec.meta.contribution_refs():
            if not ref.is_last_child:
                continue
            key = ref.cursor.base_offset
            holder = next((seg for seg in reversed(g.wrap)
                           if any(r.cursor.base_offset == key for r in seg.record.meta.contribution_refs())),
                          None)
            if holder is None:
                tombs.append(SampleRecord(tombstone_meta(ref, rec.meta.lane_id), None))
                continue
            m = holder.record.meta
            moved = tuple(ContributorRef(r.cursor, r.is_last_child or r.cursor.base_offset == key)
                          for r in m.contribution_refs())
            holder.record = SampleRecord(m.with_contributors(moved), holder.record.payload)
        return tombs

    # -- best_fit_wrap ----------------------------------------------------------

    def _push_best_fit_wrap(self, st: _PackLane, g: _Group, rec: SampleRecord) -> list[SampleRecord]:
        name, n = self._slice_field(st, rec)
        if n <= 0:
            return self._drop_tombstones(st, rec)
        lane, m = rec.meta.lane_id, self.max_length
        out: list[SampleRecord] = []
        start = 0
        # whole windows from the record's start can only fill a bin alone: emit them now
        while n - start >= m:
            end = start + m
            out.append(self._emit(st, [_Segment(rec, start, end, n, name, is_last=end == n,
                                                is_slice=start > 0 or end < n)], lane))
            start = end
        if start == n:
            return out
        g.arrivals += 1
        g.pool.append(_Candidate(g.arrivals, _Segment(rec, start, n, n, name, is_slice=start > 0)))
        g.pool_total += n - start
        while len(g.pool) >= self.config.pool_size and (
            g.pool_total >= m or (self.cap is not None and len(g.pool) >= self.cap)
        ):
            out.append(self._emit(st, self._build_bin(g), lane))
        return out

    def _take(self, g: _Group, c: _Candidate) -> _Segment:
        g.pool.remove(c)
        g.pool_total -= c.segment.length
        c.segment.is_last = True
        return c.segment

    def _build_bin(self, g: _Group) -> list[_Segment]:
        """One best_fit_wrap bin from the pool (see the module docstring); the rest stays pooled."""
        gap = self.max_length
        limit = len(g.pool) if self.cap is None else min(len(g.pool), self.cap)
        taken: list[_Segment] = []
        # (1) the starvation guard: overdue candidates first, oldest first, while they fit
        while gap > 0 and len(taken) < limit:
            oldest = g.pool[0]
            if g.arrivals - oldest.arrival <= self.config.max_age or oldest.segment.length > gap:
                break
            gap -= oldest.segment.length
            taken.append(self._take(g, oldest))
        # (2) best fit: the longest candidate that fits, else cut the shortest to fill the gap
        while gap > 0 and len(taken) < limit:
            fits = [c for c in g.pool if c.segment.length <= gap]
            if fits:
                best = max(fits, key=lambda c: (c.segment.length, -c.arrival))
                gap -= best.segment.length
                taken.append(self._take(g, best))
                continue
            victim = min(g.pool, key=lambda c: (c.segment.length, c.arrival))
            seg = victim.segment
            # cut from the end only while the candidate is still a document prefix, and only
            # when that severs fewer tokens from it than cutting from the start would
            if seg.start == 0 and gap < seg.length - gap:
                piece = _Segment(seg.record, seg.end - gap, seg.end, seg.seq_len, seg.token_field,
                                 is_slice=True)
                seg.end -= gap
            else:
                piece = _Segment(seg.record, seg.start, seg.start + gap, seg.seq_len, seg.token_field,
                                 is_slice=True)
                seg.start += gap
            seg.is_slice = True
            g.pool_total -= gap
            taken.append(piece)
            gap = 0
        return taken

    # -- flush ----------------------------------------------------------------

    def flush(self, *, reset: bool = False, lane_id: int | None = None) -> list[ReadyBatch[SampleRecord]]:
        lanes = sorted(self._lanes) if lane_id is None else [lane_id]
        packs: list[SampleRecord] = []
        tombs: list[SampleRecord] = []
        tails: dict[int, list[int]] = {}  # lane -> [records, tokens] of dropped wrap tails
        m = self.max_length
        for lane in lanes:
            st = self._lanes.pop(lane, None)
            if st is None:
                continue
            for domain in sorted(st.groups, key=_group_sort_key):
                g = st.groups[domain]
                for b in g.bins:
                    packs.append(self._emit(st, b.segments, lane))
                if g.pool:
                    while g.pool_total >= m or (self.cap is not None and len(g.pool) > self.cap):
                        packs.append(self._emit(st, self._build_bin(g), lane))
                    packs.extend(self._last_bin(st, [c.segment for c in g.pool], lane))
                if g.wrap:
                    if self.cap is not None:
                        packs.extend(self._last_bin(st, list(g.wrap), lane))
                    else:
                        t = tails.setdefault(lane, [0, 0])
                        t[0] += len(g.wrap)
                        t[1] += sum(s.length for s in g.wrap)
                        for s in g.wrap:
                            tombs.extend(tombstones_for_record(s.record))
        self._warn_drops(lane_id, lanes, tails)
        return [([r], 0) for r in packs] + [([t], 0) for t in tombs]

    def _last_bin(self, st: _PackLane, segments: list[_Segment], lane: int) -> list[SampleRecord]:
        """What a flush emits of a group's buffered rest: one bin in arrival order (if any), each
        segment the last of its record."""
        for s in segments:
            s.is_last = True
        return [self._emit(st, segments, lane)] if segments else []

    def _warn_drops(self, lane_id: int | None, lanes: list[int], tails: dict[int, list[int]]) -> None:
        """Count each flushed lane's drops into the run's ledger (diagnostics; output and state unchanged)."""
        op = f"{'pack_flat' if self.flat else 'pack_sequences'}({self.algorithm})"
        for lane in sorted(set(lanes) | set(self._oversized)) if lane_id is None else [lane_id]:
            over = self._oversized.pop(lane, None)
            if over is not None:
                self.drops.add(
                    op=op,
                    cause="oversized",
                    lane=lane,
                    records=over[0],
                    tokens=over[1],
                    detail=f"max_length={self.max_length}; algorithm='wrap' splits them instead",
                )
            if lane in tails:
                self.drops.add(
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
        keeps_flags = self.algorithm == "wrap"
        for seg in segments:
            rec = seg.record
            m = rec.meta
            if not m.contributors:  # 1:1 record: its own cursor, closing with its last slice
                refs.append(ContributorRef(m.cursor, seg.is_last))
            elif keeps_flags:
                for ref in m.contribution_refs():
                    refs.append(ContributorRef(ref.cursor, ref.is_last_child and seg.is_last))
            else:
                refs.extend(self._close_refs(st, rec, seg.is_last))
            if seg.is_last:
                for cid, cnt in m.component_sample_counts.items():
                    samples[cid] = samples.get(cid, 0) + cnt
            targets = m.component_token_counts
            if targets is None:
                targets = apportion_tokens(seg.seq_len, m.component_sample_counts)
            if not targets or seg.seq_len <= 0:
                continue
            if seg.is_last:
                # only a record split across earlier bins has charges to subtract
                done = st.charged.pop(rec.meta.cursor.as_key(), {})
                for cid, t in targets.items():
                    tokens[cid] = tokens.get(cid, 0) + t - done.get(cid, 0)
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
                    "padding_length": max(0, self.max_length - total) if self.flat else None,
                }
            },
        )
        if self.flat:
            return SampleRecord(meta, self._flat_payload(segments))
        entries = [s.record.payload if not s.is_slice else self._entry(s) for s in segments]
        payload = self.pack_payloads(entries) if self.pack_payloads is not None else entries
        return SampleRecord(meta, {"packed_samples": payload})

    @staticmethod
    def _close_refs(st: _PackLane, rec: SampleRecord, is_last: bool) -> list[ContributorRef]:
        """A ref closes iff this is the record's last segment, its offset's closer was seen and no
        sibling stays buffered.  divergence D-1"""
        if not is_last:
            return [ContributorRef(ref.cursor, False) for ref in rec.meta.contributors]
        return [ContributorRef(ref.cursor, st.tally.leave(ref)) for ref in rec.meta.contributors]

    @staticmethod
    def _entry(seg: _Segment) -> Any:
        payload = seg.record.payload
        assert seg.token_field is not None and isinstance(payload, Mapping)
        names = aligned_fields(payload, seg.token_field, seg.seq_len)
        return {k: payload[k][seg.start : seg.end] for k in names}

    def _flat_payload(self, segments: list[_Segment]) -> dict[str, Any]:
        """pack_flat's row: aligned fields concatenated and padded, plus ``positions``."""
        first = segments[0].record.payload
        token_field = segments[0].token_field or resolve_token_field(first, self.config.tokens_field)
        names: list[str] | None = None
        for seg in segments:
            payload = seg.record.payload
            assert isinstance(payload, Mapping)  # measured by resolve_token_field when pushed
            these = aligned_fields(payload, token_field, seg.seq_len)
            if names is None:
                names = these
            elif these != names:
                raise ConfigError(expected("pack_flat payload fields", f"the same aligned fields in every "
                                           f"packed record {names}", these))
            if self.config.emit_positions and "positions" in payload:
                raise ConfigError(expected("payload", "no 'positions' field with emit_positions=True "
                                           "(rename it upstream or set emit_positions=False)",
                                           sorted(payload)))
        assert names is not None
        out: dict[str, Any] = {
            k: concat([seg.record.payload[k][seg.start : seg.end] for seg in segments], k) for k in names
        }
        lengths = [s.length for s in segments]
        missing = self.max_length - sum(lengths)
        if missing > 0:
            pad_id = self.config.pad_token_id
            assert pad_id is not None  # uncapped wrap never pads; every other mode requires pad_token_id
            for k in names:
                out[k] = pad(out[k], missing, pad_id if k == token_field else 0, k)
            lengths.append(missing)
        if self.config.emit_positions:
            out["positions"] = positions(lengths)
        return out


# ----------------------------------------------------------------------------
# the operator
# ----------------------------------------------------------------------------


def component_domain(rec: SampleRecord) -> int:
    """``homogeneity="full"``: a record's one mixture component (packing before any merge)."""
    counts = rec.meta.component_sample_counts
    if len(counts) != 1:
        raise ConfigError(expected(f"components of record {rec.meta.cursor.as_key()} for homogeneous packing",
                                   "exactly one (place packing before any operator that merges components)",
                                   sorted(counts)))
    (cid,) = counts
    return cid


class PackSequences(_KnobViews, BaseOp):
    """``pack_sequences(max_length, *, num_bins=None, ...)`` (envelope) and ``pack_flat``
    (``output="flat"``)."""

    def __init__(
        self,
        max_length: int,
        *,
        num_bins: int | None = None,
        max_sequences_per_bin: int | None = None,
        algorithm: str = "first_fit",
        output: str = "envelope",
        tokens_field: str = "auto",
        length_fn: Callable[[SampleRecord], int] | None = None,
        drop_oversized: bool | None = None,
        min_sequence_length: int = 1,
        shuffle_strategy: str | None = None,
        shuffle_seed: int | None = None,
        flush_strategy: str = "fifo",
        pack_payloads: str | Callable[[list[Any]], Any] = "keep_list",
        emit_positions: bool = True,
        pad_token_id: int | None = None,
        homogeneity: str = "none",
        candidate_pool_size: int | None = None,
        max_candidate_age: int | None = None,
        groups: DomainGroups | Mapping[str, Sequence[str]] | None = None,
        placement: str = "auto",
        parallelism: int | None = None,
    ) -> None:
        super().__init__()
        # execution settings: validated here; parallelism is kept as the plan's hint only (traits,
        # explain(); the fingerprint leaves it out), never read by the data path
        check_execution(placement=placement, parallelism=parallelism)
        self.parallelism = 1 if parallelism is None else parallelism
        if groups is not None and not isinstance(groups, DomainGroups) and isinstance(groups, Mapping):
            groups = DomainGroups(groups)
        self.config = PackConfig(
            max_length=max_length, num_bins=num_bins, max_sequences_per_bin=max_sequences_per_bin,
            algorithm=algorithm, output=output, tokens_field=tokens_field, length_fn=length_fn,
            drop_oversized=drop_oversized, min_sequence_length=min_sequence_length,
            shuffle_strategy=shuffle_strategy, shuffle_seed=shuffle_seed, flush_strategy=flush_strategy,
            pack_payloads=pack_payloads, emit_positions=emit_positions, pad_token_id=pad_token_id,
            candidate_pool_size=candidate_pool_size, max_candidate_age=max_candidate_age,
            homogeneity=homogeneity, groups=groups,
        )

    def traits(self) -> OpTraits:
        return OpTraits(preserves_cursor_order=False, indexable=False, parallelism=self.parallelism)

    def domain_function(self, ctx: Mapping[str, Any]) -> Callable[[SampleRecord], Any] | None:
        """A record's packing group: None for ``homogeneity="none"``, else see the module docstring.

        ``"group"`` resolves the groups' component names through ``ctx["get_component_id"]``
        (the engine's vocabulary), once, here.
        """
        c = self.config
        if c.homogeneity == "none":
            return None
        if c.homogeneity == "full":
            return component_domain
        assert c.groups is not None  # PackConfig requires groups for "group"
        resolve = ctx.get("get_component_id")
        if resolve is None:
            raise ConfigError(expected("operator context for homogeneity='group'",
                                       "a get_component_id service (the engine provides it)", sorted(ctx)))
        group_of = {resolve(name): group for name, group in c.groups.to_member_map().items()}

        def group_domain(rec: SampleRecord) -> tuple[str, Any]:
            cid = component_domain(rec)
            group = group_of.get(cid)
            return ("group", group) if group is not None else ("component", cid)

        return group_domain

    def accumulator(self, *, deterministic: bool, ctx: dict[str, Any]) -> Accumulator[Any]:
        acc = PackingAccumulator(self.config, domain_of=self.domain_function(ctx))
        acc.drops = ledger_of(ctx)
        return acc

    def process_many(self, elems: list[Any]) -> list[Any]:
        return list(elems)

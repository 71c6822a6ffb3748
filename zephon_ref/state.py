"""THE engine-state schema: fields, universal vs per lane, accepted versions, one validate().

Theory of operation
-------------------
An engine state is the plain dict that ``Pipeline.checkpoint()`` returns (section
5.1 of the zephon notes, plus ``schema`` and ``fingerprint``).  This module is the
only place that spells out its keys.  The engine writes states through
:func:`new_state`; ``Pipeline.restore``, the merge of the aggregation round and
the durable store read them through :data:`FIELDS`, :data:`LANE_FIELDS`,
:data:`UNIVERSAL_FIELDS`, :func:`lane_key` and :func:`validate` (whose pieces a merge applies
to each participant's state: :func:`lane_table`, :func:`check_lane`, :func:`check_rr`).
:func:`warn_if_mid_window` is the one mid-window rule for a whole state.

Two kinds of field:

* **universal** fields describe the whole run (schema, version, fingerprint,
  world, round id, reload count, round-robin pointers);
* **lane** fields are dicts keyed by lane id in ``[0, canonical_replicas)``; a
  merged state has an entry for every canonical lane, a participant's local state
  one for every lane it owns.

:func:`validate` checks everything that can be checked without the pipeline:
types, ranges, lane keys, and the per-lane consistency rules (the next chunk id
follows the inflight chunks; boundaries are sorted and within the admitted
range; a lane that delivered something has a replay cursor, in a
chunk that is still inflight unless the lane holds no inflight chunk at all; a
lane that delivered nothing has none).  What needs the pipeline (fingerprint,
canonical_replicas, the work-source configuration inside each lane's source
state, sample ids that exist) is checked by the engine's dry-run load.

**Integrity.**  Some fields cannot be checked against the pipeline in O(1): a lane's
source position (``global_chunk_index``, cursor positions, mixture accumulators, the
block RNG snapshot) and the round-robin pointer decide what comes next, yet nothing else
in the state pins them.  So every state the engine writes carries ``integrity``, the
sha256 of its canonical content (:func:`content_digest`: keys as strings, sorted, tuples
as lists, so JSON and msgpack round trips keep it), and restore refuses a state whose
digest does not match (:func:`verify_integrity`).  Code that edits a state on purpose (a
migration, the zephon translator) vouches for the result with :func:`seal`; the
consistency rules above still apply to sealed states.  The merge seals its result only
when every input's digest verifies.

What may not live here: I/O, the encoding of bytes (zephon_ref/codec.py), the
merge policy (coordination/merge.py).
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from zephon_ref.errors import StateFormatError, StateMismatchError, expected
from zephon_ref.types import SampleCursor

__all__ = [
    "ACCEPTED_VERSIONS",
    "FIELDS",
    "LANE_FIELDS",
    "REQUIRED_LANE_FIELDS",
    "SCHEMA",
    "UNIVERSAL_FIELDS",
    "VERSION",
    "Field",
    "check_int",
    "check_lane",
    "check_rr",
    "content_digest",
    "int_key",
    "lane_key",
    "lane_table",
    "new_state",
    "owned_copy",
    "seal",
    "validate",
    "verify_integrity",
]

SCHEMA = "zephon_ref.engine/1"
VERSION = 2
#: The versions a restore, a merge and the store accept (one list for all three).
ACCEPTED_VERSIONS: tuple[int, ...] = (2,)


@dataclass(frozen=True, slots=True)
class Field:
    """One top-level key of an engine state."""

    name: str
    per_lane: bool
    required: bool
    doc: str


FIELDS: tuple[Field, ...] = (
    Field("schema", False, True, "the schema tag, SCHEMA"),
    Field("version", False, True, "the engine state version, one of ACCEPTED_VERSIONS"),
    Field("fingerprint", False, True, "digest of the pipeline's data settings (None only in merge inputs)"),
    Field("world", False, True, "canonical_replicas and the topology that wrote the state"),
    Field("work_source", False, False, "zephon's field: carried, never read (None in zephon_ref's states)"),
    Field("work_config", False, False, "zephon's field: carried, never read (None in zephon_ref's states)"),
    Field("last_round_id", False, False, "id of the aggregation round that produced the state"),
    Field("checkpoint_reload_count", False, False, "how many restores the run went through"),
    Field("rr_next_idx", False, False, "tail multiplexer pointer per round-robin key"),
    Field("integrity", False, False, "sha256 of the canonical content (content_digest); None = unsealed"),
    Field("inflight", True, True, "lane -> {chunk id -> work chunk state}"),
    Field("progress", True, True, "lane -> {chunk_id, offset} (diagnostic progress)"),
    Field("lane_next_cid", True, True, "lane -> next chunk id to admit"),
    Field("lane_ws_state", True, True, "lane -> work-source state"),
    Field("replay_cursors", True, True, "lane -> cursor key of the last delivered record, or None"),
    Field("epoch_boundaries", True, False, "lane -> sorted boundary chunk ids (absent = none)"),
    Field("lane_emitted", True, False, "lane -> delivered items (absent = 0)"),
)

LANE_FIELDS: tuple[str, ...] = tuple(f.name for f in FIELDS if f.per_lane)
UNIVERSAL_FIELDS: tuple[str, ...] = tuple(f.name for f in FIELDS if not f.per_lane)
REQUIRED_LANE_FIELDS: tuple[str, ...] = tuple(f.name for f in FIELDS if f.per_lane and f.required)
_KNOWN = frozenset(f.name for f in FIELDS)


def int_key(raw: Any) -> int | None:
    """A dict key as an int: an int, or a digit string as JSON leaves it; None for anything else."""
    if type(raw) is int:
        return raw
    if isinstance(raw, str) and raw.isascii() and raw.isdigit():
        return int(raw)
    return None


def lane_key(raw: Any, what: str, canonical_replicas: int) -> int:
    """A lane key as an int in ``[0, canonical_replicas)`` (digit strings, as JSON leaves them)."""
    lane = int_key(raw)
    if lane is None or not 0 <= lane < canonical_replicas:
        raise StateFormatError(expected(what, f"a lane id in [0, {canonical_replicas})", raw))
    return lane


def check_int(value: Any, what: str, *, lo: int) -> int:
    """An int (not a bool, not an int subclass) ``>= lo``: every integer field of a state."""
    if type(value) is not int or value < lo:
        raise StateFormatError(expected(what, f"an int >= {lo}", value))
    return value


def _cid(raw: Any, what: str, next_cid: int) -> int:
    """A chunk id below ``next_cid`` (digit strings accepted, as JSON leaves them)."""
    cid = int_key(raw)
    if cid is None or not 0 <= cid < next_cid:
        raise StateFormatError(expected(what, f"a chunk id in [0, {next_cid})", raw))
    return cid


def _canonical(obj: Any) -> Any:
    """The digest's form of plain state data: string keys, lists for tuples (JSON writes a
    tuple as it writes a list), hex text for bytes (msgpack keeps bytes; JSON needs text).
    Leaves are tested first and ``dict`` before the ``Mapping`` ABC only because most values
    are leaves and dicts; the result does not depend on the order."""
    if obj is None or isinstance(obj, (str, int, float)):
        return obj
    if isinstance(obj, (dict, Mapping)):
        return {str(k): _canonical(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_canonical(v) for v in obj]
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return {"$bytes": bytes(obj).hex()}
    return obj


def owned_copy(obj: Any) -> Any:
    """A deep copy of plain state data that shares no mutable object with ``obj``."""
    return copy.deepcopy(obj)


def content_digest(state: Mapping[str, Any]) -> str:
    """sha256 of the state's canonical content, ``integrity`` excluded."""
    body = _canonical({k: v for k, v in state.items() if k != "integrity"})
    blob = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=True)
    return hashlib.sha256(blob.encode("ascii")).hexdigest()


def seal(state: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``state`` whose ``integrity`` vouches for its current content."""
    out = dict(state)
    out["integrity"] = content_digest(out)
    return out


def verify_integrity(state: Mapping[str, Any]) -> None:
    """Refuse a state whose content no longer matches the digest it was written with."""
    got = state.get("integrity")
    if got is None:
        raise StateMismatchError(expected("checkpoint integrity", "the digest the engine wrote (or seal())",
                                          "an unsealed state"))
    if not isinstance(got, str) or got != content_digest(state):
        raise StateMismatchError(expected("checkpoint integrity", "the digest of its content",
                                          "a state altered after it was written (state.seal() vouches for "
                                          "a deliberate edit)"))


def new_state(
    *,
    fingerprint: str | None,
    world: Mapping[str, Any],
    lanes: Mapping[int, Mapping[str, Any]],
    last_round_id: Any,
    checkpoint_reload_count: int,
    rr_next_idx: Mapping[str, int],
    sealed: bool = True,
) -> dict[str, Any]:
    """Assemble a state from per-lane slices (each slice holds every lane field it has);
    ``sealed=False`` leaves ``integrity`` None (for a caller that edits it and seals once)."""
    state: dict[str, Any] = {
        "schema": SCHEMA,
        "version": VERSION,
        "fingerprint": fingerprint,
        "world": dict(world),
        "work_source": None,
        "work_config": None,
        "last_round_id": last_round_id,
        "checkpoint_reload_count": checkpoint_reload_count,
        "rr_next_idx": dict(sorted(rr_next_idx.items())),
    }
    for name in LANE_FIELDS:
        table = {lane: lanes[lane][name] for lane in sorted(lanes) if name in lanes[lane]}
        if name == "epoch_boundaries":
            table = {lane: b for lane, b in table.items() if b}
        state[name] = table
    return seal(state) if sealed else {**state, "integrity": None}


def lane_table(state: Mapping[str, Any], name: str, c: int, *, who: str = "checkpoint") -> dict[int, Any]:
    """Lane field ``name`` by int lane: a mapping keyed by lane ids in ``[0, c)``, each once (1 and "1"
    are one lane); an absent optional field is empty.  ``who`` names the state in messages."""
    raw = state.get(name)
    if raw is None and not next(f for f in FIELDS if f.name == name).required:
        return {}
    if not isinstance(raw, Mapping):
        raise StateFormatError(expected(f"{who} field {name!r}", "a mapping keyed by lane",
                                        type(raw).__name__))
    out: dict[int, Any] = {}
    for k, v in raw.items():
        lane = lane_key(k, f"{who} lane key of {name!r}", c)
        if lane in out:
            raise StateFormatError(expected(f"{who} lane keys of {name!r}", "unique lanes", k))
        out[lane] = v
    return out


def check_rr(rr: Any, *, who: str = "checkpoint") -> dict[str, int]:
    """The round-robin pointers: a mapping ``str -> int >= 0`` (zephon's key is 'worker/active:lanes')."""
    if not isinstance(rr, Mapping) or any(not isinstance(k, str) or type(v) is not int or v < 0
                                          for k, v in rr.items()):
        raise StateFormatError(expected(f"{who} rr_next_idx", "a mapping str -> int >= 0", rr))
    return dict(rr)


def check_lane(lane: int, slices: Mapping[str, Any], *, who: str = "", strict_cursors: bool = True) -> None:
    """The consistency rules of one lane's slice (see the module docstring): its value types and
    ranges, and how its fields agree.  ``who`` prefixes messages (a merge's ``states[i]``)."""
    where = f"{who} lane {lane}" if who else f"lane {lane}"
    nxt = check_int(slices["lane_next_cid"], f"{where} lane_next_cid", lo=0)
    inflight = slices["inflight"]
    if not isinstance(inflight, Mapping):
        raise StateFormatError(expected(f"{where} inflight", "a mapping chunk id -> chunk state",
                                        type(inflight).__name__))
    cids = sorted(_cid(k, f"{where} inflight chunk id", nxt) for k in inflight)
    if cids and cids[-1] != nxt - 1:
        raise StateFormatError(
            expected(f"{where} lane_next_cid", f"{cids[-1] + 1} (after the last inflight chunk)", nxt)
        )
    for cid in cids:
        if not isinstance(inflight.get(cid, inflight.get(str(cid))), Mapping):
            raise StateFormatError(expected(f"{where} inflight chunk {cid}", "a chunk state mapping",
                                            type(inflight.get(cid, inflight.get(str(cid)))).__name__))
    bounds = slices.get("epoch_boundaries", [])  # absent: none (None or 0 is not a list)
    if not isinstance(bounds, (list, tuple)) or any(type(b) is not int for b in bounds):
        raise StateFormatError(expected(f"{where} epoch_boundaries", "a list of ints", bounds))
    if list(bounds) != sorted(set(bounds)) or any(not 0 < b <= nxt for b in bounds):
        raise StateFormatError(
            expected(f"{where} epoch_boundaries", f"sorted unique ints in [1, {nxt}]", bounds)
        )
    prog = slices["progress"]
    if not isinstance(prog, Mapping) or set(prog) != {"chunk_id", "offset"}:
        raise StateFormatError(expected(f"{where} progress", "{'chunk_id': int, 'offset': int}", prog))
    check_int(prog["chunk_id"], f"{where} progress chunk_id", lo=-1)
    check_int(prog["offset"], f"{where} progress offset", lo=0)
    emitted = check_int(slices.get("lane_emitted", 0), f"{where} lane_emitted", lo=0)
    raw_cursor = slices["replay_cursors"]
    if raw_cursor is None:
        if emitted and strict_cursors:
            raise StateFormatError(
                expected(
                    f"{where} replay cursor",
                    f"the cursor of its last delivered item ({emitted} delivered)",
                    None,
                )
            )
        return
    if not emitted:
        raise StateFormatError(
            expected(f"{where} replay cursor", "None (the lane delivered nothing)", raw_cursor)
        )
    try:
        cursor = SampleCursor.from_key(raw_cursor)
    except (TypeError, ValueError, KeyError, IndexError, AttributeError) as exc:
        raise StateFormatError(expected(f"{where} replay cursor", "a cursor key", raw_cursor)) from exc
    # a delivered record's chunk stays inflight (monotone watermark and cursor pinning) until
    # the end-of-stream drain evicts everything; anything else cannot be checked, so refuse
    if cids and cursor.chunk_id not in cids:
        raise StateFormatError(expected(f"{where} replay cursor chunk", f"an inflight chunk {cids}",
                                        cursor.chunk_id))


def validate(state: Any, *, require_all_lanes: bool = False, strict_cursors: bool = True) -> int:
    """Check ``state`` against the schema; return its canonical_replicas.  Never mutates it.

    With ``require_all_lanes`` (a merged state), every canonical lane must be present.
    ``strict_cursors=False`` is for translated zephon 0.2.0 states only: zephon clears a
    lane's replay cursor once the cursor's chunk is evicted, so a lane that delivered items
    may carry none (nothing of its inflight chunks was delivered); zephon_ref's engine never
    clears a cursor, so for its own states the rule holds.
    """
    if not isinstance(state, Mapping):
        raise StateFormatError(expected("checkpoint", "a mapping (the dict checkpoint() returned)",
                                        type(state).__name__))
    unknown = sorted(str(k) for k in state if k not in _KNOWN)
    if unknown:
        raise StateFormatError(expected("checkpoint keys", f"a subset of {sorted(_KNOWN)}", unknown))
    missing = [f.name for f in FIELDS if f.required and f.name not in state]
    if missing:
        raise StateFormatError(expected("checkpoint keys", "every required field", f"missing {missing}"))
    if (
        state["schema"] != SCHEMA
        or type(state["version"]) is not int
        or state["version"] not in ACCEPTED_VERSIONS
    ):
        raise StateFormatError(expected("checkpoint schema/version", f"{SCHEMA!r}/{ACCEPTED_VERSIONS}",
                                        (state["schema"], state["version"])))
    if state.get("integrity") is not None and not isinstance(state["integrity"], str):
        raise StateFormatError(expected("checkpoint integrity", "a sha256 hex str or None",
                                        type(state["integrity"]).__name__))
    fp = state["fingerprint"]
    if fp is not None and not isinstance(fp, str):
        raise StateFormatError(expected("checkpoint fingerprint", "a str", type(fp).__name__))
    world = state["world"]
    if not isinstance(world, Mapping):
        raise StateFormatError(expected("checkpoint world", "a mapping", type(world).__name__))
    c = check_int(world.get("canonical_replicas"), "world canonical_replicas", lo=1)
    rid = state.get("last_round_id")
    if rid is not None and not isinstance(rid, (str, int)):
        raise StateFormatError(
            expected("checkpoint last_round_id", "a str, an int or None", type(rid).__name__)
        )
    check_int(state.get("checkpoint_reload_count", 0), "checkpoint_reload_count", lo=0)
    check_rr(state.get("rr_next_idx", {}))
    tables = {name: lane_table(state, name, c) for name in LANE_FIELDS}
    lanes = sorted(tables["progress"])
    for name in REQUIRED_LANE_FIELDS:
        missing_lanes = sorted(set(lanes) - set(tables[name]))
        if missing_lanes:  # a partial checkpoint: some lane's slice was lost
            raise StateMismatchError(expected(f"checkpoint {name}", f"an entry for lane {missing_lanes[0]}",
                                              f"lanes {sorted(tables[name])}"))
        if sorted(tables[name]) != lanes:
            raise StateFormatError(expected(f"lanes of {name!r}", f"the lanes of 'progress' {lanes}",
                                            sorted(tables[name])))
    for name in ("epoch_boundaries", "lane_emitted"):
        extra = sorted(set(tables[name]) - set(lanes))
        if extra:
            raise StateFormatError(expected(f"lanes of {name!r}", f"a subset of {lanes}", extra))
    if require_all_lanes and lanes != list(range(c)):
        raise StateFormatError(expected("lanes of a merged checkpoint", f"every lane in [0, {c})", lanes))
    for lane in lanes:
        check_lane(lane, {name: tables[name][lane] for name in LANE_FIELDS if lane in tables[name]},
                   strict_cursors=strict_cursors)
    return c


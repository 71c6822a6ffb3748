"""The logical schema of a stored checkpoint: fields, shards, capture and manifest.

Theory of operation
-------------------
This module owns *what* a stored checkpoint is, as pure data and pure functions:

* the split of an engine state dict (notes section 5.1) into one **universal**
  part and one **lane slice** per lane (:func:`split_state`), and its exact
  inverse (:func:`join_state`);
* the **schema digest**: the sha256 of the complete logical schema (format
  version, engine state version, lane-keyed and universal field names).  With
  the lane ordinal it is the logical identity of a shard; no rank, host, path or
  address is part of any identity;
* the **capture**: the moment a state describes (last aggregation round id,
  delivered counts = ``lane_emitted``, reload count), and the ``capture_id`` that
  binds every shard to one (generation, fingerprint, canonical_replicas,
  capture, schema);
* the frozen :class:`Manifest` and its canonical byte form (:func:`encode_manifest`,
  :func:`decode_manifest`): magic line, canonical JSON body, sha256 of the body.
  Decoding refuses any byte that differs from the canonical form.

Invariants: ``join_state(*split_state(s)) == s`` for every state :func:`validate_state`
accepts (lane keys given as digit strings are normalised to ints); manifests are
immutable values; every decode either returns a fully validated value or raises
a :class:`~zephon_ref.storage.errors.CheckpointCorrupt`.

What may not live here: file I/O, clocks, the encoding of shard bytes (codec.py),
policy about which generation to load (store.py).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from zephon_ref import state as state_schema
from zephon_ref.errors import StateFormatError, expected
from zephon_ref.storage.errors import CheckpointCorrupt

__all__ = [
    "FORMAT_VERSION",
    "KNOWN_ENGINE_VERSIONS",
    "LANE_FIELDS",
    "MANIFEST_MAGIC",
    "UNIVERSAL_FIELDS",
    "Capture",
    "Manifest",
    "ShardEntry",
    "capture_id",
    "capture_of",
    "decode_manifest",
    "encode_manifest",
    "join_state",
    "manifest_file_name",
    "parse_generation",
    "schema_digest",
    "sha256_hex",
    "split_state",
    "validate_state",
]

FORMAT_VERSION = 1
KNOWN_ENGINE_VERSIONS = state_schema.ACCEPTED_VERSIONS
MANIFEST_MAGIC = b"ZEPHON-REF-CKPT-MANIFEST 1\n"

# The engine state's fields: the one definition in zephon_ref.state.
LANE_FIELDS: tuple[str, ...] = state_schema.LANE_FIELDS
UNIVERSAL_FIELDS: tuple[str, ...] = state_schema.UNIVERSAL_FIELDS
# Key of the universal shard that records which lane fields the state had.
LANE_FIELDS_PRESENT = "__lane_fields_present__"

_HEX64 = re.compile(r"[0-9a-f]{64}")
_MANIFEST_NAME = re.compile(r"manifest-g(\d{12})\.json")
_SHARD_NAME = re.compile(r"g(\d{12})\.(universal|lane-\d{6})\.([0-9a-f]{64})\.shard")


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _canon_json(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode("ascii")


def schema_digest(engine_version: int) -> str:
    """sha256 of the complete logical schema for one engine state version."""
    return sha256_hex(
        _canon_json(
            {
                "format": FORMAT_VERSION,
                "engine_version": engine_version,
                "lane_fields": list(LANE_FIELDS),
                "universal_fields": list(UNIVERSAL_FIELDS),
            }
        )
    )


_KNOWN_SCHEMAS = {schema_digest(v): v for v in KNOWN_ENGINE_VERSIONS}


# ---------------------------------------------------------------- file names


def manifest_file_name(generation: int) -> str:
    return f"manifest-g{generation:012d}.json"


def parse_generation(name: str) -> tuple[str, int] | None:
    """``("manifest" | "shard", generation)`` for a published file name, else None.

    Temporary files (leading dot) and foreign names are invisible (None).
    """
    m = _MANIFEST_NAME.fullmatch(name)
    if m:
        return ("manifest", int(m.group(1)))
    m = _SHARD_NAME.fullmatch(name)
    if m:
        return ("shard", int(m.group(1)))
    return None


# ---------------------------------------------------------------- dataclasses


@dataclass(frozen=True, slots=True)
class ShardEntry:
    """One shard as a manifest names it: logical role, content digest and size."""

    lane: int | None  # None for the universal shard, else the lane ordinal
    digest: str
    size: int

    @property
    def role(self) -> str:
        return "universal" if self.lane is None else f"lane-{self.lane:06d}"

    def file_name(self, generation: int) -> str:
        # The name is a runtime binding derived from identity: no path is stored.
        return f"g{generation:012d}.{self.role}.{self.digest}.shard"


@dataclass(frozen=True, slots=True)
class Capture:
    """The moment a state describes."""

    round_id: str | None
    reload_count: int
    delivered: tuple[tuple[int, int], ...]  # (lane, lane_emitted), ascending lanes


@dataclass(frozen=True, slots=True)
class Manifest:
    """The published root of one generation."""

    format_version: int
    generation: int
    engine_version: int
    schema_digest: str
    fingerprint: str | None
    canonical_replicas: int
    capture: Capture
    capture_id: str
    universal: ShardEntry
    lanes: tuple[ShardEntry, ...]

    @property
    def shards(self) -> tuple[ShardEntry, ...]:
        return (self.universal, *self.lanes)


def capture_id(
    *,
    generation: int,
    fingerprint: str | None,
    canonical_replicas: int,
    capture: Capture,
    schema: str,
) -> str:
    """Digest binding every shard of one generation to one capture."""
    return sha256_hex(
        _canon_json(
            {
                "generation": generation,
                "fingerprint": fingerprint,
                "canonical_replicas": canonical_replicas,
                "round_id": capture.round_id,
                "reload_count": capture.reload_count,
                "delivered": [list(p) for p in capture.delivered],
                "schema": schema,
            }
        )
    )


# ---------------------------------------------------------------- manifest bytes


def _manifest_body(m: Manifest) -> dict[str, Any]:
    def entry(e: ShardEntry) -> dict[str, Any]:
        return {"lane": e.lane, "digest": e.digest, "size": e.size}

    return {
        "format_version": m.format_version,
        "generation": m.generation,
        "engine_version": m.engine_version,
        "schema_digest": m.schema_digest,
        "fingerprint": m.fingerprint,
        "canonical_replicas": m.canonical_replicas,
        "capture": {
            "round_id": m.capture.round_id,
            "reload_count": m.capture.reload_count,
            "delivered": [list(p) for p in m.capture.delivered],
        },
        "capture_id": m.capture_id,
        "universal": entry(m.universal),
        "lanes": [entry(e) for e in m.lanes],
    }


def encode_manifest(m: Manifest) -> bytes:
    """Canonical bytes: magic line, canonical JSON body, newline, sha256(body), newline."""
    body = _canon_json(_manifest_body(m))
    return MANIFEST_MAGIC + body + b"\n" + sha256_hex(body).encode("ascii") + b"\n"


def _corrupt(what: str, exp: str, got: Any, reason: str = "manifest-malformed") -> CheckpointCorrupt:
    return CheckpointCorrupt(expected(what, exp, got), reason=reason)


def _int(obj: Mapping[str, Any], key: str, *, lo: int = 0) -> int:
    v = obj.get(key)
    if type(v) is not int or v < lo:
        raise _corrupt(f"manifest field {key!r}", f"an int >= {lo}", v)
    return v


def _entry(obj: Any, *, universal: bool) -> ShardEntry:
    if not isinstance(obj, dict) or set(obj) != {"lane", "digest", "size"}:
        raise _corrupt("manifest shard entry", "{lane, digest, size}", obj)
    lane = obj["lane"]
    if universal:
        if lane is not None:
            raise _corrupt("universal shard lane", "null", lane)
    elif type(lane) is not int or lane < 0:
        raise _corrupt("lane shard lane", "an int >= 0", lane)
    digest = obj["digest"]
    if not isinstance(digest, str) or not _HEX64.fullmatch(digest):
        raise _corrupt("shard digest", "64 lowercase hex digits", digest)
    return ShardEntry(lane=lane, digest=digest, size=_int(obj, "size"))


def decode_manifest(data: bytes) -> Manifest:
    """Parse and fully validate manifest bytes; any deviation raises CheckpointCorrupt.

    An unknown ``format_version`` or schema digest raises with reason
    ``"unknown-version"`` / ``"unknown-schema"``.
    """
    if not data.startswith(MANIFEST_MAGIC):
        raise _corrupt("manifest magic", repr(MANIFEST_MAGIC), data[: len(MANIFEST_MAGIC)])
    rest = data[len(MANIFEST_MAGIC) :]
    # Layout: body "\n" 64-hex "\n"; the body is canonical JSON (no raw newlines).
    if len(rest) < 66 or rest[-1:] != b"\n" or rest[-66:-65] != b"\n":
        raise _corrupt("manifest layout", "body, newline, sha256, newline", len(data), "manifest-truncated")
    body, digest = rest[:-66], rest[-65:-1]
    if sha256_hex(body).encode("ascii") != digest:
        raise _corrupt(
            "manifest digest", sha256_hex(body), digest.decode("ascii", "replace"), "manifest-digest"
        )
    try:
        obj = json.loads(body.decode("ascii"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise _corrupt("manifest body", "canonical JSON", str(exc)) from exc
    if not isinstance(obj, dict):
        raise _corrupt("manifest body", "a JSON object", type(obj).__name__)
    if obj.get("format_version") != FORMAT_VERSION:
        raise _corrupt(
            "manifest format_version", str(FORMAT_VERSION), obj.get("format_version"), "unknown-version"
        )
    expected_keys = set(_MANIFEST_KEYS)
    if set(obj) != expected_keys:
        raise _corrupt("manifest fields", str(sorted(expected_keys)), sorted(obj))
    schema = obj["schema_digest"]
    engine_version = _int(obj, "engine_version")
    if _KNOWN_SCHEMAS.get(schema) != engine_version:
        raise _corrupt(
            "manifest schema_digest",
            f"one of the known schemas for engine versions {KNOWN_ENGINE_VERSIONS}",
            (engine_version, schema),
            "unknown-schema",
        )
    fp = obj["fingerprint"]
    if fp is not None and not isinstance(fp, str):
        raise _corrupt("manifest fingerprint", "a str or null", fp)
    cap = obj["capture"]
    if not isinstance(cap, dict) or set(cap) != {"round_id", "reload_count", "delivered"}:
        raise _corrupt("manifest capture", "{round_id, reload_count, delivered}", cap)
    rid = cap["round_id"]
    if rid is not None and not isinstance(rid, str):
        raise _corrupt("capture round_id", "a str or null", rid)
    delivered_raw = cap["delivered"]
    if not isinstance(delivered_raw, list) or not all(
        isinstance(p, list) and len(p) == 2 and all(type(x) is int and x >= 0 for x in p)
        for p in delivered_raw
    ):
        raise _corrupt("capture delivered", "a list of [lane, count] int pairs", delivered_raw)
    delivered = tuple((p[0], p[1]) for p in delivered_raw)
    lanes_raw = obj["lanes"]
    if not isinstance(lanes_raw, list):
        raise _corrupt("manifest lanes", "a list", lanes_raw)
    cid = obj["capture_id"]
    if not isinstance(cid, str) or not _HEX64.fullmatch(cid):
        raise _corrupt("manifest capture_id", "64 lowercase hex digits", cid)
    m = Manifest(
        format_version=FORMAT_VERSION,
        generation=_int(obj, "generation", lo=1),
        engine_version=engine_version,
        schema_digest=schema,
        fingerprint=fp,
        canonical_replicas=_int(obj, "canonical_replicas", lo=1),
        capture=Capture(round_id=rid, reload_count=_int(cap, "reload_count"), delivered=delivered),
        capture_id=cid,
        universal=_entry(obj["universal"], universal=True),
        lanes=tuple(_entry(e, universal=False) for e in lanes_raw),
    )
    lanes = [e.lane for e in m.lanes if e.lane is not None]
    if lanes != sorted(set(lanes)) or any(x >= m.canonical_replicas for x in lanes):
        raise _corrupt("manifest lane ordinals", f"ascending, unique, < {m.canonical_replicas}", lanes)
    if [p[0] for p in delivered] != sorted({p[0] for p in delivered}):
        raise _corrupt("capture delivered lanes", "ascending and unique", delivered)
    want = capture_id(
        generation=m.generation,
        fingerprint=m.fingerprint,
        canonical_replicas=m.canonical_replicas,
        capture=m.capture,
        schema=m.schema_digest,
    )
    if want != m.capture_id:
        raise _corrupt("manifest capture_id", want, m.capture_id, "capture-mismatch")
    # Canonical form: re-encoding must give back exactly the bytes we read.
    if encode_manifest(m) != data:
        raise _corrupt("manifest encoding", "the canonical form", "a non-canonical variant")
    return m


_MANIFEST_KEYS = (
    "format_version",
    "generation",
    "engine_version",
    "schema_digest",
    "fingerprint",
    "canonical_replicas",
    "capture",
    "capture_id",
    "universal",
    "lanes",
)


# ---------------------------------------------------------------- state split / join


def validate_state(state: Any, *, fingerprint: str | None = None) -> tuple[int, int, str | None]:
    """The store's use of the one validator: :func:`zephon_ref.state.validate` (shape, lanes,
    per-lane entries; a partial state holding some lanes is accepted), then the ``fingerprint``
    keyword of ``save()`` against the state's own.  Return (engine_version, C, fingerprint).

    Raises what ``state.validate`` raises (StateFormatError / StateMismatchError) or
    StateFormatError for a disagreeing keyword; never mutates ``state``.
    """
    c = state_schema.validate(state)
    inner_fp = state["fingerprint"]
    if fingerprint is not None and inner_fp is not None and fingerprint != inner_fp:
        raise StateFormatError(expected("fingerprint keyword", f"the state's own {inner_fp!r}", fingerprint))
    return int(state["version"]), c, fingerprint if fingerprint is not None else inner_fp


def capture_of(state: Mapping[str, Any]) -> Capture:
    """The capture of a validated state (lane keys normalised)."""
    emitted = state.get("lane_emitted", {})
    delivered = tuple(sorted((int(k), int(v)) for k, v in emitted.items()))
    return Capture(
        round_id=state.get("last_round_id"),
        reload_count=int(state.get("checkpoint_reload_count", 0)),
        delivered=delivered,
    )


def split_state(state: Mapping[str, Any]) -> tuple[dict[str, Any], dict[int, dict[str, Any]]]:
    """(universal part, {lane: lane slice}) of a validated state.  Pure; no copies of leaves."""
    universal: dict[str, Any] = {k: v for k, v in state.items() if k not in LANE_FIELDS}
    present = [f for f in LANE_FIELDS if f in state]
    universal[LANE_FIELDS_PRESENT] = present
    lanes: dict[int, dict[str, Any]] = {}
    for field in present:
        for raw, value in state[field].items():
            lanes.setdefault(int(raw), {})[field] = value
    return universal, dict(sorted(lanes.items()))


def join_state(universal: Mapping[str, Any], lanes: Mapping[int, Mapping[str, Any]]) -> dict[str, Any]:
    """Inverse of :func:`split_state`; raises CheckpointCorrupt on inconsistent parts."""
    present = universal.get(LANE_FIELDS_PRESENT)
    if not isinstance(present, list) or not all(f in LANE_FIELDS for f in present):
        raise CheckpointCorrupt(
            expected("universal shard lane-field list", f"a subset of {LANE_FIELDS}", present),
            reason="shard-malformed",
        )
    state: dict[str, Any] = {k: v for k, v in universal.items() if k != LANE_FIELDS_PRESENT}
    for field in present:
        state[field] = {}
    for lane in sorted(lanes):
        for field, value in lanes[lane].items():
            if field not in present:
                raise CheckpointCorrupt(
                    expected(f"field of lane {lane} shard", f"one of {present}", field),
                    reason="shard-malformed",
                )
            state[field][lane] = value
    return state

"""Translate a zephon 0.2.0 engine state (``EngineStateV2``) into zephon_ref's engine state.

Theory of operation
-------------------
zephon_ref's engine state was modelled on zephon's ``EngineStateV2`` (notes
section 5), so most fields carry over as they are.  What differs, and what this
module does about it:

* **envelope** — zephon writes no ``schema`` and no ``fingerprint``.  The
  translation adds zephon_ref's schema and the *caller's* fingerprint, which is
  only honest because everything zephon's state does carry about the data
  settings is checked here instead: ``canonical_replicas``, and (given the
  pipeline's work source) the source's seed, chunk size, weights, datasets,
  shuffle knobs and lane assignment; given ``flush_every_k_chunks``, the stored
  epoch boundaries must lie on that K's grid.  The operator chain is not in
  zephon's state and cannot be checked.
* **keys** — zephon's fast path writes int lane/cid keys and tuple cursor
  keys, a JSON round trip turns them into strings and lists; the output always
  has int keys and tuple cursor keys, as ``Engine.state_dict()`` writes them.
* **work chunks** (``WorkChunkStateV3``, v1/v2 migrated) — same fields;
  components become lists, ``total_samples`` is checked.
* **static mixture source** (``StaticMixtureStateV5``) — zephon_ref's schema
  string is added, the dataset ``layout`` (which zephon does not store) is taken
  from the pipeline's own source, ``version``, the duplicate
  ``cursor_positions``/``cursor_epochs`` (which must agree with
  ``cursor_states``) are dropped, and each cursor's ``version`` is removed.
  Token-aware allocation carries its ``token_deficits`` and its primed
  ``token_ratios`` (``[tokens_per_byte, source]``, zephon_ref's shape too) over,
  so the resume continues on zephon's measured ratios; an unprimed zephon
  template (``token_ratios`` None) is refused.  A work-source state of any other shape is passed
  through for the source's own ``load_state_dict`` to judge.
* **engine v1** — the ``"{rank}:"`` prefix of round-robin keys is removed (two
  prefixed keys that disagree are refused), as zephon's migration does.
* ``work_source`` (zephon's unread template state) becomes None.

Consistency checks (a state zephon_ref cannot continue from is refused, never
repaired): every lane has inflight/progress/next-cid/source entries and lies in
``[0, C)``; inflight chunk ids are a contiguous run ending at
``lane_next_cid - 1``; replay cursors, progress and boundaries do not point past
``lane_next_cid``; round-robin keys have zephon's ``worker/active:lanes`` form
and their index is below the number of lanes.

Everything is pure: the input is never modified, errors are
:class:`~zephon_ref.errors.StateFormatError` (cannot be read) or
:class:`~zephon_ref.errors.StateMismatchError` (belongs to another
configuration, or is inconsistent).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from zephon_ref import state as state_schema
from zephon_ref.builder import Builder
from zephon_ref.engine.core import ENGINE_SCHEMA, ENGINE_VERSION
from zephon_ref.errors import ContractError, StateFormatError, StateMismatchError, expected
from zephon_ref.work.base import WORK_CHUNK_VERSION, WorkChunk, WorkSource

__all__ = [
    "ZEPHON_ENGINE_VERSIONS",
    "restore_zephon_state",
    "ZEPHON_STATIC_MIXTURE_VERSION",
    "from_zephon_state",
    "is_zephon_state",
]

#: engine-state versions zephon 0.2.0 writes (2) or migrates (1)
ZEPHON_ENGINE_VERSIONS = (1, 2)
ZEPHON_STATIC_MIXTURE_VERSION = 5
_REQUIRED = ("world", "inflight", "progress", "lane_next_cid", "lane_ws_state")
_RR_KEY = re.compile(r"^(\d+)/(\d+):((?:\d+(?:,\d+)*)?)$")
_RR_KEY_V1 = re.compile(r"^(\d+):(\d+/\d+:(?:\d+(?:,\d+)*)?)$")
# the source settings a zephon state carries that zephon_ref's fingerprint would cover
_SOURCE_IDENTITY = ("seed", "chunk_size", "weights", "component_order", "dataset_ids", "knobs",
                    "shuffle_block_size_spec", "lane_assignment")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


#: keys every zephon_ref engine state carries and no zephon 0.2.0 state has
_REF_ONLY = ("schema", "fingerprint", "integrity")


def is_zephon_state(obj: Any) -> bool:
    """True for a dict that looks like a zephon 0.2.0 engine state (not a zephon_ref one).

    zephon's state has an int ``version`` (1 or 2), the engine's lane tables,
    and none of the keys only zephon_ref writes (``schema``, ``fingerprint``, ``integrity``):
    a zephon_ref state with its ``schema`` removed must not pass for a zephon one, whose
    translation seals it afresh and so would skip the integrity check of its content.
    """
    if not isinstance(obj, Mapping) or any(k in obj for k in _REF_ONLY):
        return False
    version = obj.get("version")
    return _is_int(version) and version in ZEPHON_ENGINE_VERSIONS and all(k in obj for k in _REQUIRED)


def _int(value: Any, what: str, *, minimum: int | None = 0) -> int:
    """An int (or an int written as a string by a JSON round trip)."""
    if isinstance(value, str) and re.fullmatch(r"-?\d+", value):
        value = int(value)
    if not _is_int(value) or (minimum is not None and value < minimum):
        bound = "an int" if minimum is None else f"an int >= {minimum}"
        raise StateFormatError(expected(what, bound, value))
    return int(value)


def _mapping(value: Any, what: str) -> Mapping[Any, Any]:
    if not isinstance(value, Mapping):
        raise StateFormatError(expected(what, "a mapping", type(value).__name__))
    return value


def _int_keys(value: Any, what: str) -> dict[int, Any]:
    out: dict[int, Any] = {}
    for k, v in _mapping(value, what).items():
        ik = _int(k, f"{what} key")
        if ik in out:
            raise StateFormatError(expected(what, "one entry per key", f"key {ik} twice (int and str)"))
        out[ik] = v
    return out


def _seq(value: Any, what: str) -> Sequence[Any]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise StateFormatError(expected(what, "a list or tuple", type(value).__name__))
    return value


# -- work chunks ---------------------------------------------------------------------------------
def _chunk(raw: Any, what: str) -> dict[str, Any]:
    st = _mapping(raw, what)
    version = st.get("version")
    if version not in (1, 2, 3):
        raise StateFormatError(
            expected(f"{what} version", "1, 2 or 3 (WorkChunkStateV3 and its migrations)", version)
        )
    comps: list[list[Any]] = []
    for entry in _seq(st.get("components"), f"{what} components"):
        pair = _seq(entry, f"{what} component entry")
        if len(pair) != 2 or not isinstance(pair[0], str):
            raise StateFormatError(
                expected(f"{what} component entry", "(name, [[dataset, shard, idx], ...])", entry)
            )
        sids = []
        for sid in _seq(pair[1], f"{what} component {pair[0]!r}"):
            parts = _seq(sid, f"{what} sample id")
            if len(parts) != 3:
                raise StateFormatError(expected(f"{what} sample id", "3 ints", sid))
            sids.append([_int(x, f"{what} sample id part") for x in parts])
        comps.append([pair[0], sids])
    names = [c[0] for c in comps]
    order = st.get("component_order")
    order_list = list(names) if order is None else [str(n) for n in _seq(order, f"{what} component_order")]
    if sorted(order_list) != sorted(names):
        raise StateFormatError(expected(f"{what} component_order", f"a permutation of {names}", order_list))
    total = sum(len(c[1]) for c in comps)
    if "total_samples" in st and _int(st["total_samples"], f"{what} total_samples") != total:
        raise StateMismatchError(expected(f"{what} total_samples", f"{total} (the pointers it lists)",
                                          st["total_samples"]))
    seed = st.get("seed")
    if seed is not None:
        seed = _int(seed, f"{what} seed", minimum=None)
    target = st.get("target_mixture") if version >= 2 else None
    if target is not None:
        target = {str(k): float(v) for k, v in _mapping(target, f"{what} target_mixture").items()}
    exhausted = [str(n) for n in _seq(st.get("source_exhausted") or [], f"{what} source_exhausted")] \
        if version >= 3 else []
    out = {
        "version": WORK_CHUNK_VERSION,
        "seed": seed,
        "components": comps,
        "component_order": order_list,
        "total_samples": total,
        "source_exhausted": sorted(exhausted),
        "target_mixture": target,
    }
    try:
        WorkChunk.from_state(out)  # zephon_ref's own checks (sample ids, order, totals)
    except (StateFormatError, StateMismatchError):
        raise
    except (ContractError, KeyError, TypeError, ValueError) as exc:
        raise StateFormatError(f"{what}: not a valid work chunk: {exc}") from exc
    return out


# -- static mixture source -------------------------------------------------------------------------
def _is_static_mixture_v5(st: Mapping[str, Any]) -> bool:
    return "schema" not in st and "cursor_states" in st and "allocation_mode" in st


def _static_mixture(raw: Mapping[str, Any], lane: int, canonical_replicas: int,
                    template: Mapping[str, Any] | None) -> dict[str, Any]:
    what = f"lane {lane} lane_ws_state"
    if raw.get("version") != ZEPHON_STATIC_MIXTURE_VERSION:
        raise StateFormatError(
            expected(
                f"{what} version",
                f"{ZEPHON_STATIC_MIXTURE_VERSION} (StaticMixtureStateV5)",
                raw.get("version"),
            )
        )
    mode = raw.get("allocation_mode")
    if mode not in ("accumulator", "legacy_fixed", "token_aware"):
        raise StateFormatError(expected(f"{what} allocation_mode", "'accumulator', 'legacy_fixed' or "
                                        "'token_aware'", mode))
    token: dict[str, Any] = {"token_deficits": None, "token_ratios": None}
    if mode == "token_aware":
        # zephon's token-aware fields carry over as they are: deficits {name: float} and the primed
        # ratios {name: [tokens_per_byte, source]} (TokenRatio.to_state, zephon_ref's shape too);
        # an unprimed zephon template (token_ratios None) has nothing to continue from
        deficits = _mapping(raw.get("token_deficits"), f"{what} token_deficits")
        ratios = raw.get("token_ratios")
        if ratios is None:
            raise StateFormatError(expected(f"{what} token_ratios", "the primed ratios of a token-aware "
                                            "lane", "None (an unprimed template)"))
        ratios = _mapping(ratios, f"{what} token_ratios")
        token = {"token_deficits": {str(k): float(v) for k, v in deficits.items()},
                 "token_ratios": {str(k): list(v) if isinstance(v, (list, tuple)) else v
                                  for k, v in ratios.items()}}
    else:
        for field in ("token_deficits", "token_ratios"):
            if raw.get(field) is not None:
                raise StateFormatError(
                    expected(f"{what} {field}", "None outside token-aware mode", raw.get(field))
                )
    if _int(raw.get("lane_id"), f"{what} lane_id") != lane:
        raise StateMismatchError(expected(f"{what} lane_id", str(lane), raw.get("lane_id")))
    if _int(raw.get("canonical_replicas"), f"{what} canonical_replicas") != canonical_replicas:
        raise StateMismatchError(expected(f"{what} canonical_replicas", str(canonical_replicas),
                                          raw.get("canonical_replicas")))
    order = [str(n) for n in _seq(raw.get("component_order"), f"{what} component_order")]
    cursor_states = _mapping(raw.get("cursor_states"), f"{what} cursor_states")
    positions = raw.get("cursor_positions")
    epochs = raw.get("cursor_epochs")
    cursors: dict[str, dict[str, Any]] = {}
    for name in order:
        cs = _mapping(cursor_states.get(name), f"{what} cursor_states[{name!r}]")
        if cs.get("version", 1) != 1:
            raise StateFormatError(
                expected(f"{what} cursor_states[{name!r}] version", "1", cs.get("version"))
            )
        pos = _int(cs.get("position"), f"{what} cursor {name!r} position")
        ep = _int(cs.get("epoch"), f"{what} cursor {name!r} epoch")
        # the duplicates zephon writes beside cursor_states must agree with them
        for dup, val in (("cursor_positions", pos), ("cursor_epochs", ep)):
            table = positions if dup == "cursor_positions" else epochs
            if table is not None and name in _mapping(table, f"{what} {dup}") and \
                    _int(_mapping(table, dup)[name], f"{what} {dup}[{name!r}]") != val:
                raise StateMismatchError(expected(f"{what} {dup}[{name!r}]", f"{val} (as in cursor_states)",
                                                  _mapping(table, dup)[name]))
        cur: dict[str, Any] = {"position": pos, "epoch": ep}
        snap = cs.get("block_rng_snapshot")
        if snap is not None:
            snap_m = _mapping(snap, f"{what} cursor {name!r} block_rng_snapshot")
            cur["block_rng_snapshot"] = {
                "rng_state": dict(_mapping(snap_m.get("rng_state"), f"{what} cursor {name!r} rng_state")),
                "block_count": _int(snap_m.get("block_count"), f"{what} cursor {name!r} block_count"),
            }
        cursors[name] = cur
    acc = raw.get("accumulators")
    if mode == "accumulator":
        acc_m = _mapping(acc, f"{what} accumulators")
        acc = {n: float(acc_m[n]) for n in order if n in acc_m}
        if len(acc) != len(order):
            raise StateFormatError(
                expected(f"{what} accumulators", f"one per dataset {order}", sorted(acc_m))
            )
    elif acc is not None:
        raise StateFormatError(expected(f"{what} accumulators", f"None in {mode} mode", acc))
    try:
        out = {
            "schema": "zephon_ref.static_mixture/1",
            "lane_id": lane,
            "canonical_replicas": canonical_replicas,
            "chunk_size_hint": raw["chunk_size_hint"],
            "seed": raw["seed"],
            "chunk_size": raw["chunk_size"],
            "knobs": dict(_mapping(raw["knobs"], f"{what} knobs")),
            "shuffle_block_size_spec": raw.get("shuffle_block_size_spec"),
            "cursor_block_sizes": dict(_mapping(raw["cursor_block_sizes"], f"{what} cursor_block_sizes")),
            "global_chunk_index": _int(raw["global_chunk_index"], f"{what} global_chunk_index"),
            "weights": {str(k): v for k, v in _mapping(raw["weights"], f"{what} weights").items()},
            "component_order": order,
            "dataset_ids": {
                str(k): v for k, v in _mapping(raw["dataset_ids"], f"{what} dataset_ids").items()
            },
            "layout": None,
            "cursor_states": cursors,
            "exhausted_policy": dict(_mapping(raw["exhausted_policy"], f"{what} exhausted_policy")),
            "reshuffle_on_repeat": dict(_mapping(raw["reshuffle_on_repeat"], f"{what} reshuffle_on_repeat")),
            "max_repeats": dict(_mapping(raw["max_repeats"], f"{what} max_repeats")),
            "stop_after_passes": raw["stop_after_passes"],
            "lane_assignment": raw.get("lane_assignment", "modulo"),
            "allocation_mode": mode,
            "accumulators": acc,
        }
    except KeyError as exc:
        raise StateFormatError(
            expected(what, "every StaticMixtureStateV5 field", f"no {exc.args[0]!r}")
        ) from exc
    if template is None:
        raise StateFormatError(f"{what}: a zephon static-mixture state does not store the dataset layout; "
                               "expected the pipeline's work source to supply it, received none")
    if template.get("schema") != out["schema"]:
        raise StateMismatchError(
            expected(
                f"{what}", "a pipeline whose work source is a StaticMixtureWorkSource", template.get("schema")
            )
        )
    diffs = [f for f in _SOURCE_IDENTITY if out[f] != template.get(f)]
    if diffs:
        raise StateMismatchError(
            expected(f"{what} source settings", "this pipeline's work source settings",
                     {f: out[f] for f in diffs})
            + f"; this pipeline has {({f: template.get(f) for f in diffs})!r}")
    out["layout"] = template["layout"]
    # the token-aware fields: zephon's (token-aware), else None as zephon_ref writes them
    for field in ("token_deficits", "token_ratios"):
        if field in template:
            out[field] = token[field]
    return out


# -- the engine state -------------------------------------------------------------------------------
def _cursor_key(raw: Any, what: str) -> tuple[int, int, tuple[int, ...], tuple[int, ...]] | None:
    if raw is None:
        return None
    parts = _seq(raw, what)
    if len(parts) != 4:
        raise StateFormatError(expected(what, "(chunk_id, chunk_offset, lineage, sample_id)", raw))
    lineage = tuple(_int(x, f"{what} lineage") for x in _seq(parts[2], f"{what} lineage"))
    sid = tuple(_int(x, f"{what} sample_id") for x in _seq(parts[3], f"{what} sample_id"))
    if len(sid) != 3:
        raise StateFormatError(expected(f"{what} sample_id", "3 ints", parts[3]))
    return (_int(parts[0], f"{what} chunk_id"), _int(parts[1], f"{what} chunk_offset"), lineage, sid)


def _rr_table(raw: Any, version: int) -> dict[str, int]:
    table = _mapping(raw if raw is not None else {}, "rr_next_idx")
    out: dict[str, int] = {}
    for key, value in table.items():
        k = str(key)
        if version == 1:
            m1 = _RR_KEY_V1.match(k)
            if m1 is None:
                raise StateFormatError(
                    expected("rr_next_idx key (engine v1)", "'rank:worker/active:lanes'", k)
                )
            k = m1.group(2)
        m = _RR_KEY.match(k)
        if m is None:
            raise StateFormatError(expected("rr_next_idx key", "'worker/active:lane,lane,...'", k))
        idx = _int(value, f"rr_next_idx[{k!r}]")
        n = len(m.group(3).split(",")) if m.group(3) else 0
        if idx >= max(1, n):
            raise StateMismatchError(
                expected(f"rr_next_idx[{k!r}]", f"an index < {max(1, n)} (its lane count)", idx)
            )
        if k in out and out[k] != idx:
            raise StateMismatchError(expected(f"rr_next_idx[{k!r}]", "one value after removing rank prefixes",
                                              (out[k], idx)))
        out[k] = idx
    return dict(sorted(out.items()))


def _world(raw: Any, canonical_replicas: int) -> dict[str, Any]:
    w = _mapping(raw, "world")
    c = _int(w.get("canonical_replicas"), "world canonical_replicas", minimum=1)
    if c != canonical_replicas:
        raise StateMismatchError(expected("checkpoint canonical_replicas", str(canonical_replicas), c)
                                 + "; changing canonical_replicas needs a migration")
    out: dict[str, Any] = {"canonical_replicas": c}
    for field in ("world_size", "global_rank", "dp_degree", "dp_group_id"):
        if field in w:
            out[field] = _int(w[field], f"world {field}")
    if "mapping" in w:
        out["mapping"] = {g: [_int(x, "world mapping lane") for x in _seq(lanes, "world mapping lanes")]
                          for g, lanes in sorted(_int_keys(w["mapping"], "world mapping").items())}
    return out


def from_zephon_state(
    state: Mapping[str, Any],
    *,
    fingerprint: str,
    canonical_replicas: int,
    work_source: WorkSource | None = None,
    flush_every_k_chunks: int | None = None,
) -> dict[str, Any]:
    """zephon_ref's engine state (``Engine.state_dict()`` format) for a zephon 0.2.0 state.

    ``fingerprint`` and ``canonical_replicas`` are the restoring pipeline's;
    ``work_source`` (the pipeline's template source) supplies what zephon does not
    store (the dataset layout) and is compared with the settings zephon does
    store; ``flush_every_k_chunks`` (the resolved K) checks the epoch boundaries.
    Raises StateFormatError / StateMismatchError; never modifies ``state``.
    """
    if not is_zephon_state(state):
        got = type(state).__name__ if not isinstance(state, Mapping) else \
            {k: state.get(k) for k in ("schema", "version")}
        raise StateFormatError(
            expected("state", "a zephon 0.2.0 engine state (version 1 or 2, no 'schema')", got)
        )
    version = int(state["version"])
    world = _world(state["world"], canonical_replicas)
    next_cid = {lane: _int(v, f"lane {lane} lane_next_cid")
                for lane, v in _int_keys(state["lane_next_cid"], "lane_next_cid").items()}
    lanes = sorted(next_cid)
    bad = [lane for lane in lanes if lane >= canonical_replicas]
    if bad:
        raise StateMismatchError(expected("checkpoint lanes", f"ids in [0, {canonical_replicas})", bad))
    tables = {f: _int_keys(state[f], f) for f in ("progress", "lane_ws_state")}
    # zephon leaves a lane with no inflight chunk out of ``inflight``
    optional = {f: _int_keys(state.get(f) or {}, f)
                for f in ("inflight", "replay_cursors", "epoch_boundaries", "lane_emitted")}
    for field, table in tables.items():
        if sorted(table) != lanes:
            raise StateMismatchError(
                expected(f"checkpoint {field} lanes", f"{lanes} (those of lane_next_cid)", sorted(table))
            )
    for field, table in optional.items():
        extra = sorted(set(table) - set(lanes))
        if extra:
            raise StateMismatchError(
                expected(f"checkpoint {field} lanes", f"a subset of {lanes}", sorted(table))
            )
    k = flush_every_k_chunks
    templates: dict[int, Mapping[str, Any] | None] = {}
    for lane in lanes:
        templates[lane] = None
        if work_source is not None:
            try:
                templates[lane] = work_source.clone_for_lane(lane, canonical_replicas).state_dict()
            except (ContractError, NotImplementedError, TypeError, ValueError):
                templates[lane] = None

    inflight: dict[int, dict[int, Any]] = {}
    progress: dict[int, dict[str, int]] = {}
    ws_states: dict[int, Any] = {}
    cursors: dict[int, Any] = {}
    bounds: dict[int, list[int]] = {}
    emitted: dict[int, int] = {}
    for lane in lanes:
        nxt = next_cid[lane]
        chunks = {
            cid: _chunk(st, f"lane {lane} inflight chunk {cid}")
            for cid, st in sorted(
                _int_keys(optional["inflight"].get(lane) or {}, f"lane {lane} inflight").items()
            )
        }
        if chunks and list(chunks) != list(range(min(chunks), nxt)):
            raise StateMismatchError(expected(f"lane {lane} inflight chunk ids",
                                              f"a contiguous run ending at lane_next_cid - 1 = {nxt - 1}",
                                              list(chunks)))
        inflight[lane] = chunks
        prog = _mapping(tables["progress"][lane], f"lane {lane} progress")
        try:
            ptr = {"chunk_id": _int(prog["chunk_id"], f"lane {lane} progress chunk_id", minimum=-1),
                   "offset": _int(prog["offset"], f"lane {lane} progress offset")}
        except KeyError as exc:
            raise StateFormatError(
                expected(f"lane {lane} progress", "chunk_id and offset", dict(prog))
            ) from exc
        if ptr["chunk_id"] > nxt:
            raise StateMismatchError(expected(f"lane {lane} progress chunk_id", f"<= lane_next_cid = {nxt}",
                                              ptr["chunk_id"]))
        progress[lane] = ptr
        cur = _cursor_key(optional["replay_cursors"].get(lane), f"lane {lane} replay cursor")
        if cur is not None and cur[0] >= nxt:
            raise StateMismatchError(
                expected(f"lane {lane} replay cursor chunk", f"< lane_next_cid = {nxt}", cur[0])
            )
        cursors[lane] = cur
        raw_b = optional["epoch_boundaries"].get(lane) or []
        bl = [
            _int(b, f"lane {lane} epoch boundary", minimum=1)
            for b in _seq(raw_b, f"lane {lane} epoch_boundaries")
        ]
        if bl != sorted(set(bl)):
            raise StateFormatError(expected(f"lane {lane} epoch_boundaries", "ascending, no repeats", bl))
        if bl and bl[-1] > nxt:
            raise StateMismatchError(
                expected(f"lane {lane} epoch boundaries", f"<= lane_next_cid = {nxt}", bl)
            )
        if k is not None:
            off_grid = [b for b in bl if k == 0 or b % k]
            if off_grid:
                raise StateMismatchError(
                    expected(
                        f"lane {lane} epoch boundaries",
                        "none (this pipeline keeps no epochs)"
                        if k == 0
                        else f"multiples of flush_every_k_chunks={k}",
                        bl,
                    )
                    + "; the checkpoint belongs to a pipeline with another flush_every_k_chunks"
                )
        if bl:
            bounds[lane] = bl
        if lane in optional["lane_emitted"]:
            emitted[lane] = _int(optional["lane_emitted"][lane], f"lane {lane} lane_emitted")
        ws = tables["lane_ws_state"][lane]
        if isinstance(ws, Mapping) and _is_static_mixture_v5(ws):
            ws_states[lane] = _static_mixture(ws, lane, canonical_replicas, templates[lane])
        else:
            ws_states[lane] = ws  # another work source's own format: its load_state_dict judges it
    if state.get("work_config") is not None:
        raise StateFormatError(
            expected("work_config", "None (zephon 0.2.0 never writes one)", state["work_config"])
        )
    last_round = state.get("last_round_id")
    if last_round is not None and not isinstance(last_round, str):
        raise StateFormatError(expected("last_round_id", "a string or None", last_round))
    # In the engine's field order, sealed: this translation checked the state against the
    # pipeline, so it vouches for it (zephon_ref.state.seal; restore then applies every rule).
    out = {
        "schema": ENGINE_SCHEMA,
        "version": ENGINE_VERSION,
        "fingerprint": fingerprint,
        "world": world,
        "inflight": inflight,
        "progress": progress,
        "lane_next_cid": {lane: next_cid[lane] for lane in lanes},
        "lane_ws_state": ws_states,
        "work_source": None,
        "work_config": None,
        "last_round_id": last_round,
        "checkpoint_reload_count": _int(state.get("checkpoint_reload_count", 0), "checkpoint_reload_count"),
        "rr_next_idx": _rr_table(state.get("rr_next_idx"), version),
        "replay_cursors": cursors,
        "epoch_boundaries": bounds,
        "lane_emitted": emitted,
    }
    return state_schema.seal({f.name: out[f.name] for f in state_schema.FIELDS if f.name in out})


def restore_zephon_state(pipeline: Builder, state: Mapping[str, Any]) -> Builder:
    """Restore a zephon 0.2.0 checkpoint into ``pipeline``: translate it (:func:`from_zephon_state`,
    checked against the pipeline's source, canonical replicas and K), validate the result once
    (with zephon's cursor rule: zephon clears a lane's replay cursor once its chunk is evicted),
    and hand it to the pipeline's restore.  The explicit entry point: ``Pipeline.restore`` never
    sniffs for zephon states.  A refusal changes nothing."""
    pipeline._refuse_while_running("restore_zephon_state()")
    translated = from_zephon_state(  # sealed by the translation, which checked it against the pipeline
        state, fingerprint=pipeline.fingerprint(), canonical_replicas=pipeline.world().canonical_replicas,
        work_source=pipeline._source, flush_every_k_chunks=pipeline._resolve_k(warn=False))
    state_schema.validate(translated, strict_cursors=False)
    state_schema.verify_integrity(translated)
    return pipeline._restore_checked(translated)

"""The data identity of a pipeline: the digest a checkpoint carries and a restore checks.

Theory of operation
-------------------
A fingerprint is the sha256 of a canonical JSON document of the *data settings*: the
engine schema, ``canonical_replicas``, ``flush_every_k_chunks``, ``batch(drop_last=...)``,
every operator's plan identity and public knobs (callables by qualified name), and the work
source's type and configuration (what it names configuration in its lane-0 state,
``WorkSource.state_configuration``: for StaticMixtureWorkSource the state without the position
keys, :data:`zephon_ref.work.base.SOURCE_POSITION_KEYS`; for a source whose state is its own,
None).  Execution settings (runner, workers, queue depths) never enter it.

The micro-batch size does not enter it either (:data:`RESUMABLE_KNOBS`): seed 002 promises
that a run resumed with another per-device micro-batch size keeps its global steps ("the
round-robin still cycles the same lanes producing the same data"), and zephon 0.2.0 restores
such a checkpoint and continues exactly.  That holds because ``batch`` is the last operator
and the replay filter cuts before it (seed 000), so no state depends on the batch size: the
per-lane record streams are the same at every size, and a restore rebatches the remainder
from an empty buffer.  Each work source and operator answers for its own
identity (``state_dict``, ``plan_identity``); this module only canonicalises.

What may not live here: the builder, iteration, I/O.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from zephon_ref import state as schema
from zephon_ref.errors import ContractError
from zephon_ref.ops.base import BaseOp
from zephon_ref.ops.batch import Batch
from zephon_ref.ops.grouping import DomainGroups
from zephon_ref.work.base import WorkSource

__all__ = ["RESUMABLE_KNOBS", "describe", "pipeline_fingerprint"]

#: Knobs a checkpoint may be restored across, by operator type: they shape what a consumer
#: receives, never a lane's record stream or the state (see the module docstring).
RESUMABLE_KNOBS: Mapping[type[BaseOp], frozenset[str]] = {Batch: frozenset({"microbatch_size"})}


def describe(value: Any, depth: int = 0) -> Any:
    """A canonical, JSON-able description of an operator knob (callables by qualified name)."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return [describe(v, depth + 1) for v in value]
    if isinstance(value, Mapping):
        return {str(k): describe(v, depth + 1) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, DomainGroups):  # slotted, its map private: name the membership itself
        return {"type": "DomainGroups", "members": describe(value.to_member_map(), depth + 1)}
    if callable(value) and hasattr(value, "__qualname__"):
        return f"callable:{getattr(value, '__module__', '?')}.{value.__qualname__}"
    if depth < 3 and hasattr(value, "__dict__"):
        return {
            "type": f"{type(value).__module__}.{type(value).__qualname__}",
            **{k: describe(v, depth + 1) for k, v in sorted(vars(value).items()) if not k.startswith("_")},
        }
    return f"type:{type(value).__module__}.{type(value).__qualname__}"


def _public_knobs(op: BaseOp) -> dict[str, Any]:
    """An operator's data knobs: the fields of its frozen config (``op.config``, a dataclass of
    :mod:`zephon_ref.ops.knobs` fields) or, for an operator without one, its public attributes."""
    items = {k: v for k, v in vars(op).items()
             if not k.startswith("_") and k not in ("stage_info", "parallelism")}
    cfg = items.get("config")
    if dataclasses.is_dataclass(cfg) and not isinstance(cfg, type):
        del items["config"]
        items.update({f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)})
        # a field digested under a second name too (the operator's FINGERPRINT_ALIASES: alias -> field)
        items.update({a: getattr(cfg, f) for a, f in getattr(type(op), "FINGERPRINT_ALIASES", {}).items()})
    return items


def _op_identity(name: str, op: BaseOp) -> dict[str, Any]:
    resumable = RESUMABLE_KNOBS.get(type(op), frozenset())
    knobs = {k: describe(v) for k, v in sorted(_public_knobs(op).items()) if k not in resumable}
    return {"name": name, "op": op.plan_identity(), "knobs": knobs}


def pipeline_fingerprint(source: WorkSource, ops: Sequence[tuple[str, BaseOp]], *, canonical_replicas: int,
                         flush_every_k_chunks: int) -> str:
    """The digest of a pipeline's data settings (see the module docstring)."""
    batch = next((op for _, op in ops if isinstance(op, Batch)), None)
    try:
        lane0 = source.clone_for_lane(0, 1)
    except ContractError:  # a lane clone given as the template: nothing of its state to describe
        src: Any = {}
    else:
        src_state = lane0.state_dict()
        src = lane0.state_configuration(src_state) if isinstance(src_state, Mapping) else None
    doc = {
        "engine": schema.SCHEMA,
        "canonical_replicas": canonical_replicas,
        "flush_every_k_chunks": flush_every_k_chunks,
        "batch": None if batch is None else [batch.config.drop_last],
        "ops": [_op_identity(n, op) for n, op in ops],
        "work_source": {"type": f"{type(source).__module__}.{type(source).__qualname__}",
                        "config": describe(src)},
    }
    blob = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()

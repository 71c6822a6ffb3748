"""The indexable path: record ``i`` of an indexable plan, computed on its own (no lanes, no chunks).

Theory of operation
-------------------
zephon 0.2.0's ``Pipeline.to_indexable_torch_dataset()`` is a map-style dataset over a plan that
``is_indexable``: every operator declares ``indexable`` and the work source ``supports_indexing()``
(it has ``__len__`` and ``sample_id_at(i)``).  :class:`IndexedView` is its semantics, without torch:

* ``len(view)`` is ``len(source)``;
* ``view.record_at(i)`` reads ``sample_id_at(i)``, fetches that row as a record whose metadata is
  zephon's for this path (lane 0, chunk 0, offset 0, component counts ``{0: 1}``, no lineage), and
  runs each operator's ``process_many`` on the one record, in plan order.  Accumulators are not
  involved (zephon calls only ``process_many`` here: a stateful_transform's ``push`` never runs,
  its ``transform`` does).  Each operator must return exactly one record (a dropped record's
  tombstone counts as one, and goes on to the next operator as zephon's path passes it; the stream
  routes tombstones around operators instead); anything else is a ContractError (a RuntimeError,
  as zephon's).

Refusals: a plan that is not indexable at construction (ContractError naming why; zephon raises
RuntimeError), an index that is not an int in ``[0, len)`` (IndexError / TypeError; zephon passes
any value to the source's ``sample_id_at``, # divergence D-101).

What may not live here: torch (the Dataset wrapper is :mod:`zephon_ref.torch.indexable`), caching,
any state between calls: ``record_at(i)`` depends on ``i`` alone.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

from zephon_ref.engine.plan import FetchOp
from zephon_ref.errors import ConfigTypeError, ContractError, ZephonRefError, expected
from zephon_ref.ops.base import BaseOp
from zephon_ref.types import SampleRecord

__all__ = ["IndexOutOfRange", "IndexedView", "not_indexable_reason"]


class IndexOutOfRange(ZephonRefError, IndexError):
    """An index outside ``[0, len)`` of an indexable view (IndexError ends a Sequence's iteration)."""


def not_indexable_reason(source: Any, ops: Sequence[tuple[str, BaseOp]], *, materialized: bool) -> str | None:
    """Why a plan is not indexable (None when it is), in the order zephon's definition reads."""
    for name, op in ops:
        if not op.traits().indexable:
            return f"operator {name!r} is not indexable (its traits say indexable=False)"
    if materialized:
        return "materialize() makes a plan non-indexable"
    supports = getattr(source, "supports_indexing", None)
    if not (callable(supports) and supports()):
        return f"the work source {type(source).__name__} does not support indexing (supports_indexing())"
    return None


class IndexedView:
    """Record ``i`` of an indexable plan (see the module docstring).  Holds the user's source and
    operators, never mutates them; every call is independent of every other."""

    def __init__(self, source: Any, ops: Sequence[tuple[str, BaseOp]], *, materialized: bool = False) -> None:
        reason = not_indexable_reason(source, ops, materialized=materialized)
        if reason is not None:
            raise ContractError(expected("to_indexable_torch_dataset()", "an indexable pipeline "
                                         "(is_indexable)", f"a pipeline that is not: {reason}"))
        self.source = source
        self.ops = tuple(ops)
        self._fetch = FetchOp(getattr(source, "datasets_by_id", {}))

    def __len__(self) -> int:
        n = len(self.source)
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ConfigTypeError(expected(f"len() of {type(self.source).__name__}", "an int >= 0", n))
        return n

    def record_at(self, index: Any) -> SampleRecord:
        if isinstance(index, bool):
            raise ConfigTypeError(expected("index", "an int", index))
        try:
            i = operator.index(index)
        except TypeError:
            raise ConfigTypeError(expected("index", "an int", index)) from None
        n = len(self)
        if not 0 <= i < n:
            raise IndexOutOfRange(expected("index", f"an int in [0, {n})", i))
        sid = self.source.sample_id_at(i)
        if not (isinstance(sid, tuple) and len(sid) == 3
                and all(isinstance(v, int) and not isinstance(v, bool) for v in sid)):
            raise ConfigTypeError(expected(f"{type(self.source).__name__}.sample_id_at({i})",
                                           "a SampleId (dataset_id, shard_id, index): three ints", sid))
        # zephon's metadata for this path: lane 0, chunk 0, offset 0, component 0
        record: SampleRecord = self._fetch.process_many([(sid, 0, 0, 0, 0)])[0]
        for name, op in self.ops:
            out = op.process_many([record])
            if not (isinstance(out, list) and len(out) == 1 and isinstance(out[0], SampleRecord)):
                got = f"{len(out)} items" if isinstance(out, list) else type(out).__name__
                raise ContractError(expected(f"operator {name!r} on the indexable path",
                                             "exactly one record out for the one record in (1->1)", got))
            record = out[0]
        return record

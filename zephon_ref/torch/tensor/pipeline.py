"""TensorPipeline: build, iterate, checkpoint and restore the tensor implementation.

Theory of operation
-------------------
A :class:`TensorPipeline` holds a compiled :class:`~.config.TensorPlan` and a
work source.  Iterating it clones the source per lane, runs every lane's stream
(:mod:`.stream`) and interleaves them in round robin; it delivers *native
items* ``(lane, entries)``.  :meth:`TensorPipeline.tensors` turns an item into
tensors (:mod:`.collate`), :meth:`TensorPipeline.records` into the reference's
record objects (:mod:`.records`).

Checkpoint (its own format, ``FORMAT``): the configuration's fingerprint and
the number of items delivered.  Every lane's stream, and so the interleaving,
is a pure function of the configuration, so that count names the position
exactly; restore rebuilds the streams and skips that many items (cost: linear
in the delivered prefix, not constant as the reference's replay from inflight
chunks).  A state of another format or configuration, or one past the end of
the stream, is refused with a typed error and changes nothing.

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
from zephon_ref.torch.tensor.chunks import lane_sources
from zephon_ref.torch.tensor.config import (
    MixtureSpec,
    PackSpec,
    TensorPlan,
    UnsupportedKnob,
    compile_chain,
)
from zephon_ref.torch.tensor.records import to_reference
from zephon_ref.torch.tensor.stream import Item, lane_items, round_robin, word_tables

__all__ = ["FORMAT", "TensorPipeline"]

FORMAT = "zephon_ref.tensor/1"


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
        self.fingerprint = hashlib.blake2b(json.dumps(desc, sort_keys=True).encode(), digest_size=16).hexdigest()
        self._skip = 0
        self._delivered = 0
        self._mixture: dict[int, float] | None = None
        mixes = [s for s in self.plan.stages if isinstance(s, MixtureSpec)]
        if mixes:
            if len(mixes) > 1:
                raise UnsupportedKnob(expected("ensure_mixture", "at most one", len(mixes)))
            if source.continues_after_exhaustion():
                raise UnsupportedKnob(expected("work source with ensure_mixture", "no redistributing component",
                                               sorted(source.continues_after_exhaustion())))
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
    def __iter__(self) -> Iterator[Item]:
        C = self.plan.canonical_replicas
        ids = dict(self.source.component_ids())
        datasets = dict(getattr(self.source, "datasets_by_id", {}))
        words = word_tables(self.plan)
        readers = lane_sources(self.source, C)
        streams = [lane_items(self.plan, lane, readers[lane], datasets, ids, self._mixture, words)
                   for lane in range(C)]
        it = round_robin(streams)
        skip, self._delivered = self._skip, 0
        for _ in range(skip):
            if next(it, None) is None:
                raise StateMismatchError(expected("restored position", "an item of this configuration's "
                                                  "stream", f"item {skip} of a shorter stream"))
            self._delivered += 1
        for x in it:
            self._delivered += 1
            yield x

    def records(self, item: Item) -> Any:
        """The reference's delivered object (SampleBatch or SampleRecord) for ``item``."""
        return to_reference(item, pack_max_length=self._pack_max, batched=self.plan.batch is not None)

    def tensors(self, item: Item, *, device: Any = None) -> dict[str, Any]:
        from zephon_ref.torch.tensor.collate import collate

        return collate(item, device=device)

    # -- checkpoint -----------------------------------------------------------------------------
    def checkpoint(self) -> dict[str, Any]:
        return {"format": FORMAT, "fingerprint": self.fingerprint, "delivered": self._delivered}

    def restore(self, state: Any) -> None:
        """Position a fresh iteration at ``state`` (validated first; a refusal changes nothing)."""
        if not isinstance(state, Mapping) or set(state) != {"format", "fingerprint", "delivered"}:
            raise StateFormatError(expected("tensor checkpoint", "a mapping with keys format, fingerprint, "
                                            "delivered", state))
        if state["format"] != FORMAT:
            raise StateFormatError(expected("tensor checkpoint format", FORMAT, state["format"]))
        n = state["delivered"]
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise StateFormatError(expected("tensor checkpoint delivered", "an int >= 0", n))
        if state["fingerprint"] != self.fingerprint:
            raise StateMismatchError(expected("tensor checkpoint fingerprint", self.fingerprint,
                                              state["fingerprint"]))
        self._skip = n
        self._delivered = n

"""WorkChunk and the WorkSource contract.

Theory of operation
-------------------
A work source produces :class:`WorkChunk` objects: lists of sample pointers
grouped by mixture component, in component order.  It does no I/O.  The engine
clones the user's source once per lane (:meth:`WorkSource.clone_for_lane`) and
calls :meth:`WorkSource.next_chunk` on each clone; a clone's
:meth:`~WorkSource.state_dict` must let a fresh clone continue identically.

Invariants:

* Iterating a chunk yields ``(sample_id, component)`` in the smooth weighted
  round-robin order of :func:`~zephon_ref.work.mixture.swrr_order`; a pointer's
  position in that order is its *offset* in the chunk.
* ``source_exhausted`` is a sorted tuple of unique non-empty names, cumulative
  over a lane's chunks (the engine checks cumulativeness).
* ``target_mixture``, when set, is normalised.

A restore hands each lane clone a saved state: :func:`check_source_state` refuses one whose
configuration differs from a fresh clone's (only the positions, :data:`SOURCE_RESTORABLE_KEYS`,
may move), one rule for every implementation that restores zephon_ref states.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from zephon_ref.errors import (
    ConfigError,
    ContractError,
    StateFormatError,
    StateMismatchError,
    expected,
)
from zephon_ref.types import SampleId
from zephon_ref.work.mixture import normalize_weights, swrr_order
from zephon_ref.work.read_config import (
    ComponentOrder,
    MixtureComponent,
    MixtureReadConfig,
    MixtureReadMode,
    SamplesPerComponent,
    SourcedSampleId,
)

__all__ = ["SOURCE_POSITION_KEYS", "SOURCE_RESTORABLE_KEYS", "WORK_CHUNK_VERSION", "ComponentOrder",
           "MixtureComponent", "MixtureReadConfig", "MixtureReadMode", "QuotaStep", "SamplesPerComponent",
           "SharedWalk", "SourcedSampleId", "WorkChunk", "WorkSource", "check_source_state"]

#: Keys of a StaticMixtureWorkSource state that move as the lane advances; every other key
#: is configuration (the fingerprint digests it; a restore requires it unchanged).
SOURCE_POSITION_KEYS = frozenset({"lane_id", "canonical_replicas", "global_chunk_index", "cursor_states",
                                  "accumulators", "token_deficits"})
#: What a restore lets a lane's source state change beyond the positions: zephon restores
#: ``legacy_fixed`` quotas from an old checkpoint into an accumulator source (its own
#: compatibility path, which zephon_ref follows), so the allocation mode may come from the state.
SOURCE_RESTORABLE_KEYS = SOURCE_POSITION_KEYS | {"allocation_mode"}

#: One chunk's quota computation: accumulators before it -> (accumulators after, quotas), or
#: None where the quota rule refuses (the source's ordinary path raises at that chunk).
QuotaStep = Callable[[tuple[float, ...]], "tuple[tuple[float, ...], tuple[int, ...]] | None"]


@runtime_checkable
class SharedWalk(Protocol):
    """One walk of the global chunk order shared by the lane clones its owner passes it to: the
    seam where a faster implementation (:class:`zephon_ref.fast.walk.ChunkWalk`) enters.

    A clone given one must produce exactly the chunks and states it produces walking plainly
    (``properties.shortcuts`` checks it).  ``routing`` answers a ``permute`` routing block
    (``(slot -> lane, lane -> slot)``), ``next_own`` the first global chunk ``>= g`` a lane
    owns, ``jump`` a run of chunks with no other lane's quota to compute (None: walk one).
    """

    def routing(self, seed: int, canonical_replicas: int,
                block: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
        ...

    def next_own(self, seed: int, canonical_replicas: int, lane: int, g: int) -> int:
        ...

    def jump(self, rule: Hashable, step: QuotaStep, g: int, acc: tuple[float, ...], target: int,
             remaining: tuple[int, ...],
             keep: tuple[int, ...]) -> tuple[int, tuple[float, ...], tuple[int, ...]] | None:
        ...

WORK_CHUNK_VERSION = 3
MAX_LANES = 1 << 20  # canonical_replicas bound: a permute block shuffles a list of that many lanes


class WorkChunk:
    """A chunk of sample pointers grouped by component (insertion order is the tie-break)."""

    __slots__ = ("components", "seed", "source_exhausted", "target_mixture")

    def __init__(
        self,
        components: Mapping[str, Sequence[SampleId]],
        seed: int | None = None,
        target_mixture: Mapping[str, float] | None = None,
        source_exhausted: Sequence[str] = (),
    ) -> None:
        if not isinstance(components, Mapping):
            raise ConfigError(
                expected("WorkChunk components", "a mapping name -> list of SampleIds", components)
            )
        names = source_exhausted
        if (
            not isinstance(names, (tuple, list))
            or any(not isinstance(n, str) or not n for n in names)
            or len(set(names)) != len(names)
        ):
            raise ConfigError(
                expected("WorkChunk source_exhausted", "a tuple of unique non-empty names", names)
            )
        self.components: dict[str, list[SampleId]] = {str(k): list(v) for k, v in components.items()}
        self.seed = seed
        self.target_mixture: dict[str, float] | None = (
            None if target_mixture is None
            else normalize_weights(target_mixture, what="WorkChunk target_mixture")
        )
        self.source_exhausted: tuple[str, ...] = tuple(sorted(names))

    def __len__(self) -> int:
        return sum(len(v) for v in self.components.values())

    @property
    def mixture(self) -> dict[str, float]:
        """The counted composition of the non-empty components, normalised."""
        counts = {k: len(v) for k, v in self.components.items() if v}
        return normalize_weights(counts, what="chunk mixture") if counts else {}

    def ordered(self) -> list[tuple[SampleId, str]]:
        """``[(sample_id, component), ...]`` in offset order (computed on each call: the engine
        reads an admitted chunk once, and an inflight chunk kept for replay holds only its
        components)."""
        return list(swrr_order(self.components))

    def __iter__(self) -> Iterator[tuple[SampleId, str]]:
        return swrr_order(self.components)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, WorkChunk):
            return NotImplemented
        return (
            list(self.components.items()) == list(other.components.items())
            and self.seed == other.seed
            and self.target_mixture == other.target_mixture
            and self.source_exhausted == other.source_exhausted
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        sizes = {k: len(v) for k, v in self.components.items()}
        return (
            f"WorkChunk(sizes={sizes}, seed={self.seed}, target_mixture={self.target_mixture}, "
            f"source_exhausted={self.source_exhausted})"
        )

    def state_dict(self) -> dict[str, Any]:
        """A plain, JSON/msgpack-friendly snapshot."""
        return {
            "version": WORK_CHUNK_VERSION,
            "seed": self.seed,
            "components": [
                [k, [[int(a), int(b), int(c)] for a, b, c in v]] for k, v in self.components.items()
            ],
            "component_order": list(self.components),
            "total_samples": len(self),
            "source_exhausted": list(self.source_exhausted),
            "target_mixture": None if self.target_mixture is None else dict(self.target_mixture),
        }

    @classmethod
    def from_state(cls, payload: Mapping[str, Any]) -> WorkChunk:
        """Rebuild a chunk from :meth:`state_dict`; malformed input raises StateFormatError."""
        if not isinstance(payload, Mapping):
            raise StateFormatError(expected("WorkChunk state", "a mapping", type(payload).__name__))
        if payload.get("version") != WORK_CHUNK_VERSION:
            raise StateFormatError(
                expected("WorkChunk state version", str(WORK_CHUNK_VERSION), payload.get("version"))
            )
        try:
            comps: dict[str, list[SampleId]] = {}
            for name, items in payload["components"]:
                sids = []
                for raw in items:
                    if len(raw) != 3:
                        raise StateFormatError(expected(f"SampleId in component {name!r}", "3 ints", raw))
                    sids.append(SampleId(int(raw[0]), int(raw[1]), int(raw[2])))
                comps[str(name)] = sids
            order = payload.get("component_order") or list(comps)
            if sorted(order) != sorted(comps):
                raise StateFormatError(
                    expected("WorkChunk component_order", f"a permutation of {list(comps)}", order)
                )
            comps = {n: comps[n] for n in order}
            chunk = cls(
                comps,
                seed=payload.get("seed"),
                target_mixture=payload.get("target_mixture"),
                source_exhausted=tuple(payload.get("source_exhausted") or ()),
            )
        except StateFormatError:
            raise
        except (KeyError, TypeError, ValueError) as exc:
            raise StateFormatError(f"WorkChunk state is malformed: {exc}") from exc
        total = payload.get("total_samples")
        if total is not None and total != len(chunk):
            raise StateFormatError(expected("WorkChunk total_samples", str(len(chunk)), total))
        return chunk


class WorkSource:
    """Abstract producer of :class:`WorkChunk` objects for one lane.

    Subclasses implement :meth:`next_chunk`, :meth:`component_ids` and usually
    :meth:`state_dict` / :meth:`load_state_dict` (calling :meth:`_verify_base_state`).
    """

    def __init__(self) -> None:
        self._lane: int | None = None
        self._canon: int | None = None
        self._cloned = False

    # -- lane binding ---------------------------------------------------------------
    @property
    def lane_id(self) -> int | None:
        return self._lane

    @property
    def canonical_replicas(self) -> int | None:
        return self._canon

    def clone_for_lane(self, lane_id: int, canonical_replicas: int) -> WorkSource:
        """An independent copy bound to ``lane_id`` of ``canonical_replicas`` lanes."""
        self._check_clone_args(lane_id, canonical_replicas)
        clone = copy.deepcopy(self)
        clone._cloned = True
        clone._lane, clone._canon = int(lane_id), int(canonical_replicas)
        return clone

    def clone_lanes(self, lanes: Iterable[int], canonical_replicas: int) -> dict[int, WorkSource]:
        """One :meth:`clone_for_lane` per lane in ``lanes``."""
        return {lane: self.clone_for_lane(lane, canonical_replicas) for lane in lanes}

    def share_walk(self, walk: SharedWalk | None) -> None:
        """Let this lane clone use a :class:`SharedWalk` its owner shares among the clones whose
        calls it serialises (a speed seam: a source that can skip other lanes' chunks through it
        does; this default ignores it).  The clone's chunks and states are the same either way."""

    def _check_clone_args(self, lane_id: int, canonical_replicas: int) -> None:
        if self._cloned:
            raise ContractError(
                "clone_for_lane: expected the user's unbound work source, received a lane clone "
                f"(lane {self._lane} of {self._canon})"
            )
        for name, v, lo in (("canonical_replicas", canonical_replicas, 1), ("lane_id", lane_id, 0)):
            if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= MAX_LANES:
                raise ConfigError(expected(name, f"an int in [{lo}, {MAX_LANES}]", v))
        if lane_id >= canonical_replicas:
            raise ConfigError(expected("lane_id", f"an int in [0, {canonical_replicas})", lane_id))

    def _require_lane(self) -> tuple[int, int]:
        if self._lane is None or self._canon is None:
            raise ContractError(
                "next_chunk: expected a lane clone (call clone_for_lane(lane_id, canonical_replicas) "
                "first), received the unbound source"
            )
        return self._lane, self._canon

    def _verify_base_state(self, lane_id: Any, canonical_replicas: Any) -> None:
        lane, canon = self._require_lane()
        if canonical_replicas != canon:
            raise StateMismatchError(
                expected("state canonical_replicas", f"{canon} (this source's)", canonical_replicas)
                + "; a different canonical_replicas needs a migration"
            )
        if lane_id != lane:
            raise StateMismatchError(expected("state lane_id", f"{lane} (this clone's lane)", lane_id))

    # -- the contract -----------------------------------------------------------------
    def next_chunk(self) -> WorkChunk | None:
        raise NotImplementedError

    def component_ids(self) -> Mapping[str, int]:
        raise NotImplementedError

    def continues_after_exhaustion(self) -> frozenset[str]:
        return frozenset()

    def chunk_size_hint(self) -> int | None:
        return None

    @property
    def requires_token_priming(self) -> bool:
        return False

    def prime(self, **_: Any) -> None:
        """Driver-side calibration hook; nothing to do for sample-unit sources."""

    def supports_indexing(self) -> bool:
        return False

    def state_dict(self) -> dict[str, Any]:
        return {
            "lane_id": self._lane,
            "canonical_replicas": self._canon,
            "chunk_size_hint": self.chunk_size_hint(),
        }

    def state_configuration(self, state: Mapping[str, Any]) -> dict[str, Any] | None:
        """The configuration inside ``state`` (a lane state of this source), or None.

        The fingerprint digests a fresh lane-0 clone's, and a restore refuses a lane state whose
        configuration differs from a fresh clone's (StateMismatchError) before anything loads.
        None, the default, means the state is the implementation's alone (seed 000: "what goes
        into that last one is up to the implementation"): zephon_ref reads none of it, and the
        source's own :meth:`load_state_dict` checks what it needs, as zephon's does.  A source that
        carries its configuration in its state (:class:`~zephon_ref.work.StaticMixtureWorkSource`)
        returns that part, so another configuration is refused with a typed error.
        """
        return None

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if not isinstance(state, Mapping) or "lane_id" not in state or "canonical_replicas" not in state:
            raise StateFormatError(
                expected("work source state", "a mapping with lane_id and canonical_replicas", state)
            )
        self._verify_base_state(state["lane_id"], state["canonical_replicas"])


def check_source_state(fresh: Any, lane: int, ws_state: Any) -> None:
    """A lane's saved source state must carry the configuration of ``fresh`` (a fresh lane clone of
    the pipeline's source): only the position fields (:data:`SOURCE_RESTORABLE_KEYS`) may differ.
    Nothing is checked for a source whose ``state_configuration`` is None (see it).  Every
    implementation that restores zephon_ref states (the engine, the tensor implementation) calls this.
    """
    whole = fresh.state_dict()
    want = fresh.state_configuration(whole) if isinstance(whole, Mapping) else None
    if want is None:
        return
    if not isinstance(ws_state, Mapping) or set(ws_state) != set(whole):
        raise StateMismatchError(
            expected(
                f"lane {lane} work-source state",
                f"the keys {sorted(whole)}",
                sorted(ws_state) if isinstance(ws_state, Mapping) else ws_state,
            )
        )
    bad = _non_finite(ws_state)
    if bad is not None:
        raise StateFormatError(
            expected(f"lane {lane} work-source {bad}", "a finite number", "NaN or infinity")
        )
    for key in sorted(want):  # the configuration: a key it leaves out is the state's to bring
        if key not in SOURCE_RESTORABLE_KEYS and ws_state[key] != want[key]:
            raise StateMismatchError(expected(f"lane {lane} work-source {key!r}", f"{want[key]!r} (this "
                                              "pipeline's source configuration)", ws_state[key]))


def _non_finite(value: Any, path: str = "state") -> str | None:
    """The path of the first NaN or infinite float in a plain-data value, or None."""
    if isinstance(value, float):
        return None if math.isfinite(value) else path
    if isinstance(value, Mapping):
        items: Iterator[tuple[Any, Any]] = iter(value.items())
    elif isinstance(value, (list, tuple)):
        items = iter(enumerate(value))
    else:
        return None
    for k, v in items:
        found = _non_finite(v, f"{path}.{k}")
        if found is not None:
            return found
    return None

"""The work-source order, computed here: global chunks of sample ids and their owners.

Theory of operation
-------------------
The tensor implementation computes the chunk sequence of a
``StaticMixtureWorkSource`` itself, from the source's *configuration* (the plain
data of a fresh lane clone's ``state_dict()``: weights, chunk size, seed,
policies, shard layout, cursor positions, accumulators) and the datasets' shard
ids and counts.  It never calls the source's allocation or cursor code.

Global chunk ``g`` (the rules of the zephon 0.2.0 notes, section on the static
mixture work source):

1. *quotas* (accumulator mode): per dataset in order ``a = acc + w * chunk_size``,
   ``q = int(a)``, ``acc = a - q``; the missing (surplus) samples go to the largest
   (smallest) accumulators, ties to the earlier dataset, moving the accumulator by
   one each; floats in that order, so quotas agree chunk for chunk;
2. *exhaustion*: a dataset whose epoch cannot fill its quota ends the stream
   (``stop``, a reached ``max_repeats``, or ``stop_after_passes`` reached counting
   it as done), or starts its next epoch and the quotas are recomputed from the
   accumulators saved before step 1 (``repeat``); after the loop the stream also
   ends once every dataset has completed ``stop_after_passes`` passes;
3. *samples*: each dataset's next ``q`` pointers of its epoch order: shards in
   ascending id order, permuted by ``random.Random(seed_e)`` when
   ``shuffle_shards`` (``seed_e = seed + epoch * GOLDEN`` from epoch 1 when
   reshuffling on repeat), offsets ``0..count-1`` within a shard;
4. *owner*: ``g mod C`` (``modulo``) or slot ``g mod C`` of ``0..C-1`` shuffled by
   ``random.Random(seed + (g div C) * GOLDEN)`` (``permute``).

Scope (:func:`own_chunks` returns None otherwise, and the caller reads the
source through its public lane API instead): accumulator allocation, no
``redistribute`` dataset, no within-shard or block shuffle.  Every random
choice comes from an explicitly seeded ``random.Random`` instance.

What may not live here: documents, payloads, lanes' streams.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import repeat
from random import Random  # explicitly seeded instances only
from typing import Any

from zephon_ref.errors import ContractError

__all__ = ["GOLDEN", "GlobalChunks", "own_chunks"]

GOLDEN = 0x9E3779B97F4A7C15

#: a sample pointer ``(dataset_id, shard_id, local_idx)`` as a plain tuple (the reference's
#: ``SampleId`` is a tuple of the same ints; :mod:`.records` spells it out as one)
SamplePointer = tuple[int, int, int]
#: one global chunk: (owner lane, components in dataset order (non-empty only), the chunk's mixture)
Chunk = tuple[int, dict[str, list[SamplePointer]], dict[str, float]]


class _Cursor:
    """One dataset's ``(epoch, position)`` over its epoch order (shard segments)."""

    __slots__ = (
        "base_seed",
        "counts",
        "dataset_id",
        "epoch",
        "ids",
        "position",
        "segments",
        "shuffle",
        "total",
    )

    def __init__(
        self,
        dataset_id: int,
        ids: Sequence[int],
        counts: Sequence[int],
        *,
        seed: int,
        shuffle: bool,
        epoch: int,
        position: int,
        reshuffle: bool,
    ) -> None:
        self.dataset_id, self.ids, self.counts = dataset_id, list(ids), list(counts)
        self.base_seed, self.shuffle = seed, shuffle
        self.total = sum(self.counts)
        self.epoch, self.position = epoch, position
        self.segments = self._segments(reshuffle)

    def _segments(self, reshuffle: bool) -> list[tuple[int, int, int]]:
        """``(start in the epoch order, shard id, count)`` per shard, in visiting order."""
        seed = self.base_seed + self.epoch * GOLDEN if (reshuffle and self.epoch > 0) else self.base_seed
        order = list(range(len(self.ids)))
        if self.shuffle and len(order) > 1:
            Random(seed).shuffle(order)
        out, at = [], 0
        for i in order:
            out.append((at, self.ids[i], self.counts[i]))
            at += self.counts[i]
        return out

    @property
    def remaining(self) -> int:
        return self.total - self.position

    def reset(self, *, reshuffle: bool) -> None:
        self.epoch += 1
        self.position = 0
        self.segments = self._segments(reshuffle)

    def take(self, k: int) -> list[SamplePointer]:
        # precondition: 0 < k <= remaining (the exhaustion pass guaranteed it)
        lo, hi = self.position, self.position + k
        did = self.dataset_id
        out: list[SamplePointer] = []
        for start, shard, count in self.segments:
            a, b = max(lo, start), min(hi, start + count)
            if a < b:
                out.extend(
                    zip(repeat(did, b - a), repeat(shard, b - a), range(a - start, b - start), strict=True)
                )
        self.position = hi
        return out


class GlobalChunks:
    """The global chunk sequence of one source configuration, one chunk per :meth:`next`."""

    __slots__ = (
        "acc",
        "caps",
        "chunk_size",
        "cursors",
        "g",
        "lanes",
        "modulo",
        "names",
        "policy",
        "reshuffle",
        "sap",
        "seed",
        "weights",
        "_perm",
    )

    def __init__(self, state: Mapping[str, Any], datasets: Mapping[str, Any], lanes: int) -> None:
        self.names: list[str] = list(state["component_order"])
        self.weights: dict[str, float] = {n: float(state["weights"][n]) for n in self.names}
        self.chunk_size = int(state["chunk_size"])
        self.seed = int(state["seed"])
        self.policy = {n: str(state["exhausted_policy"][n]) for n in self.names}
        self.reshuffle = {n: bool(state["reshuffle_on_repeat"][n]) for n in self.names}
        self.caps = {n: state["max_repeats"][n] for n in self.names}
        self.sap = state["stop_after_passes"]
        self.acc = {n: float(state["accumulators"][n]) for n in self.names}
        self.modulo = state["lane_assignment"] == "modulo"
        self.lanes = lanes
        self.g = int(state["global_chunk_index"])
        shuffle = bool(state["knobs"]["shuffle_shards"])
        self.cursors: dict[str, _Cursor] = {}
        for n in self.names:
            d, cs = datasets[n], state["cursor_states"][n]
            self.cursors[n] = _Cursor(int(state["dataset_ids"][n]), d.ids().tolist(), d.counts().tolist(),
                                      seed=self.seed, shuffle=shuffle, epoch=int(cs["epoch"]),
                                      position=int(cs["position"]), reshuffle=self.reshuffle[n])
        self._perm: tuple[int, list[int]] = (-1, [])

    def owner(self, g: int) -> int:
        if self.modulo:
            return g % self.lanes
        block, slot = divmod(g, self.lanes)
        if self._perm[0] != block:
            order = list(range(self.lanes))
            Random(self.seed + block * GOLDEN).shuffle(order)
            self._perm = (block, order)
        return self._perm[1][slot]

    def _passes_reached(self, exhausting: str | None = None) -> bool:
        assert self.sap is not None
        for n in self.names:
            cur = self.cursors[n]
            done = cur.epoch + (1 if (n == exhausting or cur.remaining == 0) else 0)
            if done < self.sap:
                return False
        return True

    def _quotas(self) -> dict[str, int]:
        acc, size, names = self.acc, self.chunk_size, self.names
        q: dict[str, int] = {}
        total = 0
        for n in names:
            a = acc[n] + self.weights[n] * size
            k = int(a)
            acc[n] = a - k
            q[n] = k
            total += k
        diff = size - total
        if diff > 0:
            # largest remainder first, ties to the earlier dataset
            for i in sorted(range(len(names)), key=lambda i: (-acc[names[i]], i))[:diff]:
                q[names[i]] += 1
                acc[names[i]] -= 1.0
        elif diff < 0:
            for i in sorted(range(len(names)), key=lambda i: (acc[names[i]], i)):
                if diff >= 0:
                    break
                n = names[i]
                if q[n] > 0:
                    q[n] -= 1
                    acc[n] += 1.0
                    diff += 1
        return q

    def next(self) -> Chunk | None:
        """Global chunk ``g`` (then ``g + 1``), or None at the end; an end changes nothing."""
        while True:
            saved = dict(self.acc)
            q = self._quotas()
            retry = False
            for n in self.names:
                k, cur = q[n], self.cursors[n]
                if cur.remaining >= k:
                    continue
                cap = self.caps[n]
                if (self.policy[n] == "stop" or (cap is not None and cur.epoch >= cap)
                        or (self.sap is not None and self._passes_reached(n))):
                    self.acc = saved
                    return None
                if k > cur.total:
                    self.acc = saved
                    raise ContractError(
                        f"dataset {n!r} ({cur.total} samples) drew a quota of {k} in one chunk: "
                        "more than a full pass, so a repeat cannot fill it"
                    )
                cur.reset(reshuffle=self.reshuffle[n])
                self.acc = saved
                retry = True
                break
            if not retry:
                break
        if self.sap is not None and self._passes_reached():
            self.acc = saved
            return None
        comps = {n: self.cursors[n].take(q[n]) for n in self.names if q[n] > 0}
        total = 0.0
        for v in comps.values():
            total += float(len(v))
        mixture = {n: float(len(v)) / total for n, v in comps.items()}
        g = self.g
        self.g = g + 1
        return self.owner(g), comps, mixture


def own_chunks(source: Any, lanes: int) -> GlobalChunks | None:
    """This module's chunk sequence for ``source``, or None where it does not cover the source."""
    from zephon_ref.work import StaticMixtureWorkSource

    if type(source) is not StaticMixtureWorkSource:
        return None
    state = source.clone_for_lane(0, lanes).state_dict()
    if (state.get("allocation_mode") != "accumulator" or state.get("token_deficits") is not None
            or state["knobs"].get("shuffle_within_shard")
            or any(v is not None for v in state["cursor_block_sizes"].values())
            or any(p not in ("stop", "repeat") for p in state["exhausted_policy"].values())
            or any(cs.get("block_rng_snapshot") is not None for cs in state["cursor_states"].values())):
        return None
    by_name = {d.name: d for d in source.datasets_by_id.values()}
    return GlobalChunks(state, by_name, lanes)

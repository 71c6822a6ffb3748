"""Smooth weighted round robin (SWRR): the one implementation.

Theory of operation
-------------------
A round robin keeps a normalised *target* ``T`` over keys and the *emitted*
mass ``E`` per key.  With ``total = sum(E_j for j in T)`` every target key has::

    deficit_k = T_k * max(1, total) - E_k

and the next key is the one with the largest deficit among the candidates
(:meth:`SmoothWeightedRoundRobin.peek`: every target key;
:meth:`~SmoothWeightedRoundRobin.select`: the available ones), ties to the key
earliest in ``order``.  :meth:`~SmoothWeightedRoundRobin.record` adds emitted
mass (a packed record credits several keys at once; mass of keys outside the
target is kept but does not count toward ``total``).
:meth:`~SmoothWeightedRoundRobin.update_target` swaps the target and keeps the
history; a new key joins the end of ``order``.

Two users, one rule:

* the chunk reader (:func:`interleave`): a chunk's offset order.  Targets are
  each component's share of the chunk, normalised *twice* (zephon 0.2.0
  normalises the already-normalised shares again, and the second division can
  move a share by an ulp, which decides near-ties): ``renormalize=True``;
* ``ensure_mixture`` (zephon_ref/ops/ensure_mixture.py): one instance per lane,
  targets normalised once.

Floats, deliberately, in zephon's order of operations: the selections must agree
bit for bit.  Emission counts in :func:`interleave` are integers below 2**53, so
their sums are exact; only ``T_k * total`` rounds, identically on every run.
Nothing here knows about lanes, records or chunks.
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Iterator, Mapping, Sequence
from itertools import repeat
from typing import Generic, TypeVar

__all__ = ["SmoothWeightedRoundRobin", "interleave"]

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")


class SmoothWeightedRoundRobin(Generic[K]):
    """Deficit round robin over keys ``K`` with float weights (see the module docstring)."""

    __slots__ = ("emitted", "index", "order", "target")

    def __init__(self, target: Mapping[K, float], order: Sequence[K], *, renormalize: bool = False) -> None:
        # precondition: weights are finite; keys with weight <= 0 are left out of the target
        total = sum(w for w in target.values() if w > 0)
        self.target: dict[K, float] = {}
        self.order: list[K] = []
        if total > 0:
            self.target = {k: w / total for k, w in target.items() if w > 0}
            if renormalize:
                again = 0.0
                for v in self.target.values():
                    again += v
                self.target = {k: v / again for k, v in self.target.items()}
            self.order = [k for k in order if k in self.target]
        self.index: dict[K, int] = {k: i for i, k in enumerate(self.order)}
        self.emitted: dict[K, float] = {}

    def _scale(self) -> float:
        # sum over the target in its own order (the order of float additions is zephon's)
        total = sum(map(self.emitted.get, self.target, repeat(0.0)))
        return max(1.0, total)

    def deficits(self) -> dict[K, float]:
        eff = self._scale()
        return {k: self.target[k] * eff - self.emitted.get(k, 0.0) for k in self.target}

    def best_of(self, keys: list[K], *, scale: float | None = None) -> K | None:
        """The best of ``keys``; precondition: target keys, listed in ``order``.

        ``scale`` is ``max(1, total)`` when the caller knows ``total`` exactly (see
        :func:`interleave`); by default it is summed from ``emitted``.
        """
        if not keys:
            return None
        if len(keys) == 1:
            return keys[0]
        eff = self._scale() if scale is None else scale
        target, emitted = self.target, self.emitted
        best = keys[0]
        best_d = target[best] * eff - emitted.get(best, 0.0)
        for k in keys[1:]:  # keys are in `order`, so strict > sends ties to the earlier key
            d = target[k] * eff - emitted.get(k, 0.0)
            if d > best_d:
                best, best_d = k, d
        return best

    def peek(self) -> K | None:
        """The key the round robin wants next (None with an empty target)."""
        return self.best_of([k for k in self.order if k in self.target])

    def select(self, available: Collection[K]) -> K | None:
        """The best key among ``available`` target keys."""
        return self.best_of([k for k in self.order if k in available and k in self.target])

    def record(self, contributions: Mapping[K, float]) -> None:
        for k, w in contributions.items():
            self.emitted[k] = self.emitted.get(k, 0.0) + w

    def update_target(self, new: Mapping[K, float]) -> None:
        """Adopt ``new`` (normalised once), keeping the emission history."""
        total = sum(w for w in new.values() if w > 0)
        if total <= 0:
            self.target = {}
            return
        self.target = {k: w / total for k, w in new.items() if w > 0}
        for k in new:
            if k not in self.index:
                self.index[k] = len(self.order)
                self.order.append(k)


def interleave(components: Mapping[str, Sequence[T]]) -> Iterator[tuple[T, str]]:
    """Yield ``(item, component)`` for every item of ``components`` in SWRR order.

    Targets are each non-empty component's share of the items (normalised twice,
    as zephon's chunk reader does); a component leaves the candidates when it is
    chosen and found empty, and keeps counting toward ``total``.
    """
    order = [name for name, items in components.items() if len(items) > 0]
    if len(order) <= 1:
        for name in order:
            for item in components[name]:
                yield item, name
        return
    rr = SmoothWeightedRoundRobin({n: float(len(components[n])) for n in order}, order, renormalize=True)
    pos = dict.fromkeys(order, 0)
    alive = list(order)  # still believed to hold items, in tie-break order
    emitted = 0  # every key is a target key and every emission weighs 1: total == emitted, exactly
    while alive:
        best = rr.best_of(alive, scale=float(max(1, emitted)))  # alive: target keys in order
        assert best is not None
        items = components[best]
        i = pos[best]
        if i >= len(items):
            alive.remove(best)
            continue
        pos[best] = i + 1
        rr.emitted[best] = rr.emitted.get(best, 0.0) + 1.0  # record({best: 1.0})
        emitted += 1
        yield items[i], best

"""MixtureSpec and the smooth weighted round robin that defines within-chunk offsets.

Theory of operation
-------------------
:class:`MixtureSpec` normalises positive weights by their sum, keeping insertion
order.  :func:`swrr_order` is the interleave the engine uses to read a chunk:
at each step every component still believed to have items gets
``deficit_k = T_k * max(1, total) - E_k`` (``total`` is the emissions of all
target components so far) and the largest deficit wins, ties to the earlier
component.  A component is dropped only when it is chosen and found empty.

Floating point here is deliberate: the targets are IEEE quotients exactly as
zephon 0.2.0 computes them, so the interleave (and hence every chunk offset)
agrees bit for bit.  All emission counts are integers held in floats below 2**53,
so the sums are exact; only ``T_k * total`` rounds, identically on every run.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, TypeVar

from zephon_ref.errors import ConfigError, ConfigTypeError, expected

__all__ = ["MixtureSpec", "normalize_weights", "swrr_order"]

T = TypeVar("T")


def normalize_weights(weights: Mapping[str, Any], *, what: str = "MixtureSpec") -> dict[str, float]:
    """Positive weights divided by their (left-to-right float) sum, insertion order kept."""
    if not isinstance(weights, Mapping):
        raise ConfigTypeError(expected(what, "a mapping name -> positive weight", type(weights).__name__))
    if not weights:
        raise ConfigError(expected(what, "at least one component", dict(weights)))
    total = 0.0
    vals: dict[str, float] = {}
    for name, raw in weights.items():
        try:
            v = float(raw)
        except (TypeError, ValueError) as exc:
            raise ConfigError(expected(f"{what} weight for {name!r}", "a positive number", raw)) from exc
        if not v > 0.0 or v == float("inf"):
            raise ConfigError(expected(f"{what} weight for {name!r}", "a finite number > 0", raw))
        total += v
        vals[str(name)] = v
    return {k: v / total for k, v in vals.items()}


class MixtureSpec:
    """Mixture weights over named components (normalised eagerly)."""

    __slots__ = ("_normalized", "weights")

    def __init__(self, weights: Mapping[str, Any]) -> None:
        self._normalized = normalize_weights(weights)
        self.weights = dict(weights)

    @property
    def normalized(self) -> dict[str, float]:
        return dict(self._normalized)

    def validate_for(self, components: Sequence[str]) -> None:
        """Refuse a spec whose names differ from ``components``."""
        names = list(components)
        missing = [n for n in names if n not in self._normalized]
        if missing:
            raise ConfigError(expected("mixture", f"weights for every dataset {names}", f"missing {missing}"))
        known = set(names)
        extra = [n for n in self._normalized if n not in known]
        if extra:
            raise ConfigError(expected("mixture", f"only the datasets {names}", f"unknown components {extra}"))

    def normalized_for(self, components: Sequence[str]) -> dict[str, float]:
        self.validate_for(components)
        return {n: self._normalized[n] for n in components}

    def __repr__(self) -> str:
        return f"MixtureSpec({self.weights!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MixtureSpec) and self._normalized == other._normalized

    __hash__ = None  # type: ignore[assignment]


def swrr_order(components: Mapping[str, Sequence[T]]) -> Iterator[tuple[T, str]]:
    """Yield ``(item, component)`` for every item, in smooth weighted round-robin order.

    Targets are each non-empty component's share of the items, in mapping order.
    """
    order = [name for name, items in components.items() if len(items) > 0]
    if not order:
        return
    if len(order) == 1:
        only = order[0]
        for item in components[only]:
            yield item, only
        return
    shares = normalize_weights({n: len(components[n]) for n in order}, what="chunk mixture")
    # zephon normalises the already-normalised shares once more; the second division
    # can move a share by an ulp, which decides near-ties, so do the same
    share_sum = 0.0
    for n in order:
        share_sum += shares[n]
    target = {n: shares[n] / share_sum for n in order}
    emitted = dict.fromkeys(order, 0.0)
    pos = dict.fromkeys(order, 0)
    alive = list(order)  # still believed to hold items, in tie-break order
    while alive:
        total = 0.0
        for n in order:  # every target component counts, drained or not
            total += emitted[n]
        scale = max(1.0, total)
        best = alive[0]
        best_def = target[best] * scale - emitted[best]
        for n in alive[1:]:
            d = target[n] * scale - emitted[n]
            if d > best_def:  # strict: ties go to the earlier component
                best, best_def = n, d
        i = pos[best]
        items = components[best]
        if i >= len(items):
            alive.remove(best)
            continue
        pos[best] = i + 1
        emitted[best] += 1.0
        yield items[i], best

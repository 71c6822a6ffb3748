"""MixtureSpec, weight normalisation, and the chunk reader's interleave.

Theory of operation
-------------------
:class:`MixtureSpec` normalises positive weights by their sum, keeping insertion
order.  :func:`swrr_order` is the interleave the engine uses to read a chunk (a
pointer's position in it is its offset); the smooth weighted round robin itself
lives in :mod:`zephon_ref.swrr`, shared with ``ensure_mixture``.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, TypeVar

from zephon_ref.errors import ConfigError, ConfigTypeError, expected
from zephon_ref.swrr import interleave

__all__ = ["MixtureSpec", "normalize_weights", "swrr_order"]

T = TypeVar("T")


def normalize_weights(weights: Mapping[str, Any], *, what: str = "MixtureSpec") -> dict[str, float]:
    """Positive weights divided by their (left-to-right float) sum, insertion order kept.

    Refused (nothing is built): a non-mapping, no components, a non-str name, a
    weight that is not a real number (str, bool, None...), a weight that is not
    finite or not > 0, a sum that overflows, and a share that underflows to 0.
    """
    if not isinstance(weights, Mapping):
        raise ConfigTypeError(expected(what, "a mapping name -> positive weight", type(weights).__name__))
    if not weights:
        raise ConfigError(expected(what, "at least one component", dict(weights)))
    total = 0.0
    vals: dict[str, float] = {}
    for name, raw in weights.items():
        if not isinstance(name, str):
            raise ConfigTypeError(expected(f"{what} component name", "a str", name))
        if isinstance(raw, str):  # a ValueError, as zephon's float(weight) raises for text
            raise ConfigError(expected(f"{what} weight for {name!r}", "a real number > 0, not text", raw))
        if isinstance(raw, bool) or not isinstance(raw, numbers.Real):
            raise ConfigTypeError(expected(f"{what} weight for {name!r}", "a real number > 0", raw))
        v = float(raw)
        if not (v > 0.0 and math.isfinite(v)):
            raise ConfigError(expected(f"{what} weight for {name!r}", "a finite number > 0", raw))
        total += v
        vals[name] = v
    if not math.isfinite(total):
        raise ConfigError(expected(f"{what} weights", "a finite sum (scale the weights down)",
                                   f"weights summing past the float range: {dict(weights)}"))
    shares = {k: v / total for k, v in vals.items()}
    tiny = [k for k, v in shares.items() if v <= 0.0]
    if tiny:
        raise ConfigError(expected(f"{what} weights", "shares > 0 after normalisation",
                                   f"{tiny} underflowing to 0 against the sum {total!r}"))
    return shares


class MixtureSpec:
    """Mixture weights over named components (normalised eagerly).

    ``weights`` is a mapping or, as zephon 0.2.0 takes it, anything ``dict()`` takes: (name,
    weight) pairs.  A refusal raises the builtin zephon raises for the same input: TypeError for
    what ``dict()`` cannot iterate or a weight that is not a number, ValueError for a malformed
    pair, a text weight, and a weight or sum that does not normalise to positive finite shares.
    """

    __slots__ = ("_normalized", "_shown", "weights")

    def __init__(self, weights: Mapping[str, Any]) -> None:
        if not isinstance(weights, Mapping):
            weights = _pairs(weights)
        self._normalized = normalize_weights(weights)
        self.weights = dict(weights)
        #: the dict ``normalized`` returns, one object for the spec's life as in zephon; the
        #: spec reads only its own copy, so a caller's edit of it changes no share
        self._shown = dict(self._normalized)

    @property
    def normalized(self) -> dict[str, float]:
        return self._shown

    def validate_for(self, components: Sequence[str]) -> None:
        """Refuse a spec whose names differ from ``components``."""
        names = list(components)
        missing = [n for n in names if n not in self._normalized]
        if missing:
            raise ConfigError(expected("mixture", f"weights for every dataset {names}", f"missing {missing}"))
        known = set(names)
        extra = [n for n in self._normalized if n not in known]
        if extra:
            raise ConfigError(
                expected("mixture", f"only the datasets {names}", f"unknown components {extra}")
            )

    def normalized_for(self, components: Sequence[str]) -> dict[str, float]:
        self.validate_for(components)
        return {n: self._normalized[n] for n in components}

    def __repr__(self) -> str:
        return f"MixtureSpec(weights={self.weights!r})"  # zephon 0.2.0's repr

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MixtureSpec) and self._normalized == other._normalized

    __hash__ = None  # type: ignore[assignment]


def _pairs(weights: Any) -> dict[Any, Any]:
    """``dict(weights)`` for a non-mapping, refusals typed as ``dict()`` types them."""
    want = "a mapping name -> positive weight, or (name, weight) pairs"
    try:
        return dict(weights)
    except TypeError:
        raise ConfigTypeError(expected("MixtureSpec", want, type(weights).__name__)) from None
    except ValueError:
        raise ConfigError(expected("MixtureSpec", want, weights)) from None


def swrr_order(components: Mapping[str, Sequence[T]]) -> Iterator[tuple[T, str]]:
    """Yield ``(item, component)`` for every item, in smooth weighted round-robin order.

    The chunk reader's interleave; the rule lives in :func:`zephon_ref.swrr.interleave`.
    """
    return interleave(components)

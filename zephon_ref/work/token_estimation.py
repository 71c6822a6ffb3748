"""Token estimation: what a sample pointer is expected to cost in tokens.

Theory of operation
-------------------
A work source rations sample *pointers* and never reads payloads, so a mixture
stated in tokens can only be kept through an estimated cost per pointer::

    cost(dataset, shard) = max(1, bytes_per_row(dataset, shard) * tokens_per_byte(dataset))

``bytes_per_row`` is the shard's byte size over its row count (a shard without
rows or bytes falls back to the dataset's mean, itself at least 1); the byte
size of a shard comes from :meth:`Dataset.raw_bytes` (sampled payload bytes for
in-memory shards, the file size for JSONL shards).  A dataset with no bytes at
all costs ``max(1, tokens_per_byte)`` per row, with a RuntimeWarning.

``tokens_per_byte`` is *pinned*: :class:`TokenEstimation` with ``primer`` a
positive number (one ratio for every dataset) or a mapping naming every dataset.
zephon 0.2.0 can also *measure* the ratios with a calibration pass through the
pipeline's tokenizer (``primer="measure"``, or a mapping that leaves datasets
out); zephon_ref refuses that at the builder call (docs/divergences.md).

What may not live here: the allocation itself (static_mixture.py), I/O beyond
reading a dataset's byte sizes.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from zephon_ref.errors import ConfigError, ConfigTypeError, expected
from zephon_ref.work.dataset import Dataset

__all__ = ["DEFAULT_FALLBACK_TOKENS_PER_BYTE", "TokenCostTable", "TokenEstimation"]

DEFAULT_FALLBACK_TOKENS_PER_BYTE = 0.25


def _positive_ratio(v: Any) -> bool:
    return (not isinstance(v, bool) and isinstance(v, (int, float))
            and math.isfinite(v) and v > 0)


def _positive_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


@dataclass(frozen=True, slots=True)
class TokenEstimation:
    """How per-dataset tokens/byte ratios are obtained (same fields as zephon's).

    Passing one to ``StaticMixtureWorkSource(token_estimation=...)`` selects the
    token-aware allocation.  zephon_ref needs the ratios pinned: ``primer`` a
    positive number, or a mapping ``{dataset: tokens_per_byte}`` naming every
    dataset of the source.  ``"measure"`` is accepted here (it is a valid zephon
    configuration) and refused by the work source.
    """

    primer: str | Mapping[str, float] | float = "measure"
    measure: Callable[[Any], int] | None = None
    calibration_samples: int = 2048
    calibration_shards_min: int = 4
    calibration_shards_max: int = 16
    fallback_tokens_per_byte: float = DEFAULT_FALLBACK_TOKENS_PER_BYTE

    def __post_init__(self) -> None:
        p = self.primer
        if isinstance(p, str):
            if p != "measure":
                raise ConfigError(
                    expected("primer", "'measure', a mapping name -> tokens/byte, or a number > 0", p)
                )
        elif isinstance(p, Mapping):
            if not p:
                raise ConfigError(expected("primer", "a non-empty mapping name -> tokens/byte", dict(p)))
            for name, value in p.items():
                if not isinstance(name, str):
                    raise ConfigTypeError(expected("primer key", "a dataset name (str)", name))
                if not _positive_ratio(value):
                    raise ConfigError(expected(f"primer[{name!r}]", "a finite tokens/byte ratio > 0", value))
            object.__setattr__(self, "primer", {str(k): float(v) for k, v in p.items()})
        elif _positive_ratio(p):
            object.__setattr__(self, "primer", float(p))
        elif isinstance(p, bool) or not isinstance(p, (int, float)):
            raise ConfigTypeError(
                expected("primer", "'measure', a mapping name -> tokens/byte, or a number > 0", p)
            )
        else:
            raise ConfigError(expected("primer", "a finite tokens/byte ratio > 0", p))
        if self.measure is not None and not callable(self.measure):
            raise ConfigTypeError(expected("measure", "None or a callable payload -> int", self.measure))
        for arg in ("calibration_samples", "calibration_shards_min", "calibration_shards_max"):
            if not _positive_int(getattr(self, arg)):
                raise ConfigError(expected(arg, "an int > 0", getattr(self, arg)))
        if self.calibration_shards_max < self.calibration_shards_min:
            raise ConfigError(expected("calibration_shards_max", f">= calibration_shards_min "
                                       f"({self.calibration_shards_min})", self.calibration_shards_max))
        if not _positive_ratio(self.fallback_tokens_per_byte):
            raise ConfigError(expected("fallback_tokens_per_byte", "a finite number > 0",
                                       self.fallback_tokens_per_byte))

    def pinned_ratios(self, names: Sequence[str]) -> dict[str, float]:
        """``{dataset: tokens_per_byte}`` for ``names``, or ConfigError if any needs measuring."""
        p = self.primer
        if isinstance(p, float):
            return dict.fromkeys(names, p)
        if isinstance(p, Mapping):
            unknown = [n for n in p if n not in names]
            if unknown:
                raise ConfigError(
                    expected(
                        "token_estimation.primer",
                        f"keys among the dataset names {list(names)}",
                        f"unknown {unknown}",
                    )
                )
            missing = [n for n in names if n not in p]
            if not missing:
                return {n: float(p[n]) for n in names}
            why = f"no ratio for {missing}"
        else:
            why = "'measure'"
        raise ConfigError(expected(
            "token_estimation.primer",
            "pinned ratios for every dataset (a number, or a mapping naming each of "
            f"{list(names)}); zephon_ref does not run zephon's calibration pass", why,
        ))


class TokenCostTable:
    """Estimated tokens per drawn pointer, per (dataset, shard); immutable once built."""

    __slots__ = ("_by_shard", "_mean")

    def __init__(self, datasets: Sequence[Dataset], ratios: Mapping[str, float]) -> None:
        self._by_shard: dict[str, dict[int, float]] = {}
        self._mean: dict[str, float] = {}
        no_bytes = []
        for d in datasets:
            ratio = ratios[d.name]
            rows = d.counts().tolist()
            raw = d.raw_bytes().tolist()
            total_rows, total_bytes = sum(rows), sum(raw)
            if total_rows <= 0 or total_bytes <= 0:
                no_bytes.append(d.name)
                self._by_shard[d.name] = {}
                self._mean[d.name] = max(1.0, ratio)
                continue
            self._by_shard[d.name] = {
                sid: max(1.0, (b / n) * ratio)
                for sid, n, b in zip(d.ids().tolist(), rows, raw, strict=True) if n > 0 and b > 0
            }
            self._mean[d.name] = max(1.0, max(1.0, total_bytes / total_rows) * ratio)
        if no_bytes:
            warnings.warn(
                f"token-aware mixture: datasets {sorted(no_bytes)} have no byte sizes; each of their rows "
                "is costed at max(1, tokens_per_byte)", RuntimeWarning, stacklevel=3,
            )

    def cost(self, name: str, shard_id: int) -> float:
        """Estimated delivered tokens of one row of ``shard_id`` in dataset ``name`` (>= 1)."""
        got = self._by_shard[name].get(shard_id)
        return self._mean[name] if got is None else got

    def mean_cost(self, name: str) -> float:
        return self._mean[name]

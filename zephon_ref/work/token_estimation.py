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

``tokens_per_byte`` (a :class:`TokenRatio`, with its provenance) is *pinned*
(``primer`` a positive number, or a mapping naming the dataset) or *measured* by
the calibration pass :func:`prime_token_ratios` (``primer="measure"``, the default,
and every dataset a mapping leaves out), zephon 0.2.0's definition:

1. census: shards chosen by ``random.Random((seed << 16) ^ (dataset_id + 1))``
   (as many as the row-weighted spread of per-shard bytes/row asks, within
   ``calibration_shards_min..max``), each read at evenly spaced rows (every row up
   to 65536), each row sized by :func:`content_bytes`;
2. ``calibration_samples`` draws with replacement, probability proportional to a
   row's size, by ``numpy.random.default_rng((seed << 24) ^ (dataset_id + 1))``;
3. each drawn row counted (``measure(payload)``, or the pipeline's tokenizer
   through a counting callable the builder passes); the Hansen-Hurwitz mean of
   tokens/byte, rebased from payload bytes onto the shards' raw bytes;
4. a dataset that cannot be measured (empty, no counts for half the draws, a
   failing ``measure``) gets ``fallback_tokens_per_byte`` (rebased the same way when
   the census succeeded), provenance ``"fallback"``, with a RuntimeWarning.

Every step is a function of the seed, the datasets and the counter: the same
inputs give the same ratios in every process, and the ratios go into the
checkpoint, so a resume never re-measures (static_mixture.py).  zephon's process
pool and node-local file cache are execution machinery (they change no ratio)
and are not modelled here.

What may not live here: the allocation itself (static_mixture.py), I/O beyond
reading a dataset's byte sizes and the calibration rows through the dataset.
"""

from __future__ import annotations

import math
import random  # seeded instances only: never the global generator
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from zephon_ref.errors import ConfigError, ConfigTypeError, StateFormatError, expected
from zephon_ref.types import SampleId
from zephon_ref.work.dataset import Dataset, content_bytes

__all__ = [
    "DEFAULT_FALLBACK_TOKENS_PER_BYTE",
    "PerShardTokenCost",
    "TextCounting",
    "TokenCostTable",
    "TokenEstimation",
    "TokenRatio",
    "prime_token_ratios",
]

DEFAULT_FALLBACK_TOKENS_PER_BYTE = 0.25

RatioSource = Literal["measured", "pinned", "fallback"]
_SOURCES = ("measured", "pinned", "fallback")
#: census: rows read per shard at most; target relative error of the payload/raw rebase
_CENSUS_MAX_ROWS = 65536
_CENSUS_TARGET_REL_ERR = 0.03
#: a dataset's measurement must count at least this share of its draws
_MIN_COVERAGE = 0.5


@dataclass(frozen=True, slots=True)
class TokenRatio:
    """One dataset's tokens/byte ratio and where it came from (zephon's record, same names)."""

    tokens_per_byte: float
    source: RatioSource

    def __post_init__(self) -> None:
        if self.source not in _SOURCES:
            raise ConfigError(expected("TokenRatio.source", "'measured', 'pinned' or 'fallback'",
                                       self.source))
        r = self.tokens_per_byte
        if not _positive_ratio(r):
            raise ConfigError(expected("TokenRatio.tokens_per_byte", "a finite number > 0", r))
        object.__setattr__(self, "tokens_per_byte", float(r))

    def to_state(self) -> list[Any]:
        """The checkpoint's shape: ``[tokens_per_byte, source]``."""
        return [float(self.tokens_per_byte), self.source]

    @classmethod
    def from_state(cls, raw: Any) -> TokenRatio:
        """Inverse of :meth:`to_state`; a bare number (an older zephon_ref state) reads as pinned."""
        if _positive_ratio(raw):
            return cls(float(raw), "pinned")
        if not isinstance(raw, (list, tuple)) or len(raw) != 2:
            raise StateFormatError(expected("token ratio state", "[tokens_per_byte, source]", raw))
        ratio, source = raw
        try:
            return cls(float(ratio), source)
        except (ConfigError, TypeError, ValueError) as exc:
            raise StateFormatError(expected("token ratio state", "[a ratio > 0, a known source]",
                                            raw)) from exc


def _positive_ratio(v: Any) -> bool:
    return (not isinstance(v, bool) and isinstance(v, (int, float))
            and math.isfinite(v) and v > 0)


def _positive_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


@dataclass(frozen=True, slots=True)
class TokenEstimation:
    """How per-dataset tokens/byte ratios are obtained (same fields as zephon's).

    Passing one to ``StaticMixtureWorkSource(token_estimation=...)`` selects the
    token-aware allocation.  ``primer`` pins ratios: a positive number for every dataset, or
    a mapping ``{dataset: tokens_per_byte}``; ``"measure"`` (the default) and every dataset a
    mapping leaves out are measured by :func:`prime_token_ratios` (the source's ``prime()``).
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

    def pinned(self, names: Sequence[str]) -> dict[str, TokenRatio]:
        """The pinned ratios among ``names`` (ConfigError for a mapping key that names no dataset);
        the names missing from the result are measured by :func:`prime_token_ratios`."""
        p = self.primer
        if isinstance(p, float):
            return dict.fromkeys(names, TokenRatio(p, "pinned"))
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
            return {n: TokenRatio(float(p[n]), "pinned") for n in names if n in p}
        return {}


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


class PerShardTokenCost(TokenCostTable):
    """zephon's name and signature for the cost table: ``datasets`` by name, ratios as
    :class:`TokenRatio`; ``cost(name, sample_id)`` reads the shard from the pointer."""

    __slots__ = ()

    def __init__(self, datasets: Mapping[str, Dataset], ratios: Mapping[str, TokenRatio]) -> None:
        super().__init__(list(datasets.values()), {n: ratios[n].tokens_per_byte for n in datasets})

    def cost(self, name: str, sample_id: SampleId | int) -> float:
        """Estimated delivered tokens of the row ``sample_id`` (a pointer, or a shard id) points at."""
        shard = sample_id if isinstance(sample_id, int) else int(sample_id[1])
        return TokenCostTable.cost(self, name, shard)


# -- the calibration pass ----------------------------------------------------------------------------
#: a counter maps one calibration payload to its delivered tokens (None: cannot be measured)
Counter = Callable[[Any], "int | None"]


@dataclass(frozen=True, slots=True)
class _Census:
    sizes: dict[tuple[int, int], int]  # (shard, offset) -> content bytes
    payload_total: float
    raw_total: float


def _shard_count(dataset: Dataset, lo: int, hi: int) -> int:
    """Shards to census: (cv / 3%)^2 clamped to [lo, hi], cv the row-weighted spread of bytes/row."""
    rows = dataset.counts().astype(float)
    raw = dataset.raw_bytes().astype(float)
    ok = rows > 0
    cv = 0.0
    if ok.any():
        per_row = raw[ok] / rows[ok]
        mean = float(np.average(per_row, weights=rows[ok]))
        if mean > 0:
            cv = math.sqrt(float(np.average((per_row - mean) ** 2, weights=rows[ok]))) / mean
    want = lo if cv <= 0 else max(lo, min(hi, math.ceil((cv / _CENSUS_TARGET_REL_ERR) ** 2)))
    return min(want, int(dataset.ids().size))


def _census(dataset: Dataset, dataset_id: int, est: TokenEstimation, seed: int) -> _Census | None:
    ids, rows, raw = dataset.ids().tolist(), dataset.counts().tolist(), dataset.raw_bytes().tolist()
    if not ids:
        return None
    n = _shard_count(dataset, est.calibration_shards_min, est.calibration_shards_max)
    positions = sorted(random.Random((seed << 16) ^ (dataset_id + 1)).sample(range(len(ids)), n))
    sizes: dict[tuple[int, int], int] = {}
    payload_total = raw_total = 0.0
    for pos in positions:  # ascending shard position (zephon sums in completion order: same terms)
        count = int(rows[pos])
        if count <= 0:
            continue
        shard = int(ids[pos])
        step = max(1, math.ceil(count / _CENSUS_MAX_ROWS))
        offsets = range(0, count, step)
        total = 0
        for off in offsets:
            size = content_bytes(dataset.get(shard, off))
            sizes[(shard, off)] = size
            total += size
        payload_total += (total / len(offsets)) * count
        raw_total += float(raw[pos])
    if payload_total <= 0 or raw_total <= 0:
        return None
    return _Census(sizes, payload_total, raw_total)


def _draws(census: _Census, dataset_id: int, n: int, seed: int) -> list[tuple[tuple[int, int], int]]:
    """``n`` draws with replacement, probability proportional to size: (row, times drawn), row order."""
    rows = sorted(r for r, size in census.sizes.items() if size > 0)
    assert rows and n > 0  # invariant: a census has payload_total > 0, so some row has bytes
    weights = np.array([census.sizes[r] for r in rows], dtype=float)
    rng = np.random.default_rng((seed << 24) ^ (dataset_id + 1))
    drawn = rng.choice(len(rows), size=n, replace=True, p=weights / weights.sum())
    times = np.bincount(drawn, minlength=len(rows))
    return [(rows[i], int(times[i])) for i in range(len(rows)) if times[i] > 0]


def _replayed(counting: TextCounting, replay: Callable[[Any, SampleId], list[Any]], dataset: Dataset,
              dataset_id: int, draws: list[tuple[tuple[int, int], int]]
              ) -> Callable[[Any, int, int], int | None]:
    """A counter of raw rows: the operators ahead of tokenize replayed, every payload they give
    counted (a dropped row counts 0 tokens); the plan voted on the first rows' replayed payloads."""
    prefix: list[Any] = []
    for (shard, off), _ in draws[:_PLAN_ROWS]:
        try:
            prefix.extend(replay(dataset.get(shard, off), SampleId(dataset_id, shard, off)))
        except Exception:  # noqa: BLE001 - counted (and skipped) when the row is measured
            continue
    plan = counting.plan(prefix)

    def count(payload: Any, shard: int, off: int) -> int | None:
        total = 0
        for p in replay(payload, SampleId(dataset_id, shard, off)):
            got = plan(p)
            if got is None:
                return None
            total += got
        return total
    return count


def _at_row(count: Counter) -> Callable[[Any, int, int], int | None]:
    return lambda payload, shard, off: count(payload)


def _fallback(est: TokenEstimation, census: _Census | None) -> TokenRatio:
    r = est.fallback_tokens_per_byte
    if census is not None:
        r *= census.payload_total / census.raw_total
    return TokenRatio(r, "fallback")


# -- counting delivered tokens (zephon 0.2.0's text counting, for the calibration pass) -----------------
_TEXT_KEYS = ("text", "content", "document", "body", "markdown", "raw_content")
_TOKEN_KEYS = ("input_ids", "tokens", "token_ids")
_MISSING = object()
#: a dataset's counting plan is chosen from its first drawn rows
_PLAN_ROWS = 8


def _lookup(payload: Any, path: tuple[str, ...] | None) -> Any:
    value = payload
    for key in path or ():
        if not isinstance(value, Mapping) or key not in value:
            return _MISSING
        value = value[key]
    return value


def _text(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            return None
    return None


def _token_array_length(value: Any) -> int | None:
    if isinstance(value, np.ndarray):
        return int(value.size) if np.issubdtype(value.dtype, np.integer) else None
    if isinstance(value, (list, tuple)):
        head = value[0] if value else None
        return len(value) if isinstance(head, int) and not isinstance(head, bool) else None
    return None


def _text_key(payload: Any) -> str | None:
    """A mapping's likely text field: a known body key first, else the only (or longest) text."""
    if not isinstance(payload, Mapping):
        return None
    for key in _TEXT_KEYS:
        if key in payload and _text(payload[key]) is not None:
            return key
    texts = {k: t for k, v in payload.items() if isinstance(k, str) and (t := _text(v)) is not None}
    if not texts:
        return None
    return max(texts, key=lambda k: (len(texts[k]), k))


@dataclass(frozen=True, slots=True)
class TextCounting:
    """How the calibration pass counts a payload's delivered tokens: zephon 0.2.0's text counting
    (the tokenize operator's settings, or the defaults where the pipeline has none).

    ``tokenizer``: an HF-style callable (``tok([text], add_special_tokens=...)["input_ids"]``), or
    None for zephon's built-in tokenizer (one token per whitespace-separated word).  A dataset's
    plan is voted from its first drawn rows (:meth:`plan`): token arrays (``field``, or
    ``input_ids`` / ``tokens`` / ``token_ids``, or the payload itself) are counted by length,
    text is tokenized and bracketed by the special tokens the operator adds."""

    tokenizer: Any = None
    field: str | None = None
    missing_field: str = "error"
    max_length: int | None = None
    truncation: bool = False
    split_long_samples: bool = False
    special_tokens: str = "bos_eos"
    #: the pipeline's operators ahead of the tokenize operator, replayed on each calibration row:
    #: (raw payload, sample id) -> the payloads tokenize would see (none: the row is dropped)
    replay: Callable[[Any, SampleId], list[Any]] | None = None
    #: the name of an operator ahead of tokenize that cannot be replayed (measuring refuses)
    unreplayable: str | None = None

    def _raw_tokens(self, text: str) -> int:
        if self.tokenizer is None:
            return len(text.split())
        own = self.special_tokens == "tokenizer_default"
        return len(list(self.tokenizer([text], add_special_tokens=own)["input_ids"][0]))

    def delivered(self, raw: int) -> int:
        """Delivered tokens of a text of ``raw`` content tokens (specials, truncation, splitting)."""
        if self.special_tokens == "tokenizer_default":
            return min(raw, self.max_length) if self.truncation and self.max_length is not None else raw
        specials = (self.special_tokens in ("bos_eos", "bos")) + (self.special_tokens in ("bos_eos", "eos"))
        if not self.split_long_samples and self.truncation and self.max_length is not None:
            raw = min(raw, self.max_length - specials)
        return raw + specials

    def plan(self, payloads: Sequence[Any]) -> Counter:
        """The counter for one dataset, voted from ``payloads`` (its first drawn rows)."""
        path = tuple(self.field.split(".")) if self.field else None
        token_votes: dict[tuple[str, ...], int] = {}
        text_votes: dict[tuple[str, ...], int] = {}
        for p in payloads:
            tpath: tuple[str, ...] | None = None
            if path is not None:
                tpath = path if _token_array_length(_lookup(p, path)) is not None else None
            elif _token_array_length(p) is not None:
                tpath = ()
            elif isinstance(p, Mapping):
                tpath = next(((k,) for k in _TOKEN_KEYS if _token_array_length(p.get(k)) is not None), None)
            if tpath is not None:
                token_votes[tpath] = token_votes.get(tpath, 0) + 1
                continue
            vote: tuple[str, ...] | None
            if path is not None:
                vote = path if _text(_lookup(p, path)) is not None else None
            else:
                key = _text_key(p)
                vote = (key,) if key is not None else (() if _text(p) is not None else None)
            if vote is not None:
                text_votes[vote] = text_votes.get(vote, 0) + 1
        if token_votes and sum(token_votes.values()) >= sum(text_votes.values()):
            best = max(token_votes.items(), key=lambda kv: kv[1])[0]  # first of the most common
            return lambda payload: _token_array_length(_lookup(payload, best)) or None
        if path is None and text_votes:
            def rank(p: tuple[str, ...]) -> int:
                return len(_TEXT_KEYS) - _TEXT_KEYS.index(p[0]) if len(p) == 1 and p[0] in _TEXT_KEYS else 0
            path = max(text_votes, key=lambda p: (text_votes[p], rank(p)))
        return lambda payload: self._count_text(payload, path)

    def _count_text(self, payload: Any, path: tuple[str, ...] | None) -> int | None:
        if path is not None and isinstance(payload, Mapping):
            value = _lookup(payload, path)
            if value is _MISSING:
                if self.missing_field == "error":
                    raise ConfigError(expected("calibration payload", f"a {self.field!r} field (the "
                                               "tokenize operator's missing_field='error')",
                                               sorted(map(repr, payload))))
                value = ""
            text = _text(value)
        else:
            text = _text(_lookup(payload, path)) if path else None
            text = text if text is not None else _text(payload)
        if text is None:
            return None
        return self.delivered(self._raw_tokens(text)) or None


def _measure(dataset: Dataset, dataset_id: int, est: TokenEstimation,
             count: Counter | TextCounting | None, seed: int) -> tuple[TokenRatio, str | None]:
    census = _census(dataset, dataset_id, est, seed)
    if census is None:
        return _fallback(est, None), "dataset is empty or unsized"
    draws = _draws(census, dataset_id, est.calibration_samples, seed)
    if count is None:
        count = TextCounting()  # zephon's default: its built-in tokenizer over the likely text field
    if isinstance(count, TextCounting) and count.unreplayable is not None:
        raise ConfigError(expected(
            "token-aware calibration through the operators ahead of tokenize",
            "operators whose traits say calibration_replayable (or TokenEstimation(measure=...), or "
            "pinned ratios)", f"{count.unreplayable!r}"))
    counter: Callable[[Any, int, int], int | None]
    if isinstance(count, TextCounting):
        replay = count.replay
        if replay is None:
            counter = _at_row(count.plan([dataset.get(shard, off) for (shard, off), _ in draws[:_PLAN_ROWS]]))
        else:
            counter = _replayed(count, replay, dataset, dataset_id, draws)
    else:
        counter = _at_row(count)
    weighted, measured_draws = 0.0, 0
    for (shard, off), times in draws:
        try:
            got = counter(dataset.get(shard, off), shard, off)
        except ConfigError:
            raise  # a row the run would refuse too (a missing field under missing_field='error')
        except Exception as exc:  # noqa: BLE001 - zephon's contract: a failing count means fallback
            if est.measure is None:
                continue  # a text row that fails to count is skipped (coverage decides)
            return _fallback(est, census), f"counting failed: {type(exc).__name__}: {exc}"
        if got is None:
            continue
        weighted += times * got / census.sizes[(shard, off)]
        measured_draws += times
    total = sum(t for _, t in draws)
    if measured_draws < _MIN_COVERAGE * total:
        return _fallback(est, census), f"measured only {measured_draws}/{total} draws"
    ratio = weighted / measured_draws * census.payload_total / census.raw_total
    if not _positive_ratio(ratio):
        return _fallback(est, census), f"measured ratio {ratio!r} is not positive"
    return TokenRatio(ratio, "measured"), None


def _measure_callable(measure: Callable[[Any], int]) -> Counter:
    def count(payload: Any) -> int | None:
        got = int(measure(payload))
        return got if got > 0 else None  # non-positive: unmeasurable, not zero tokens
    return count


def prime_token_ratios(
    *,
    datasets: Sequence[Dataset],
    dataset_ids: Mapping[str, int],
    estimation: TokenEstimation,
    count: Counter | TextCounting | None = None,
    seed: int = 0,
) -> dict[str, TokenRatio]:
    """Every dataset's :class:`TokenRatio`: pinned ones from ``estimation.primer``, the rest measured
    (the module docstring's calibration pass).  ``count``: the pipeline's token counting (a
    :class:`TextCounting`, from its tokenize operator; used when ``estimation.measure`` is None;
    None: zephon's defaults, :class:`TextCounting()`); ``seed``: the work source's seed.
    Deterministic in its inputs; reads the calibration rows through the datasets and nothing else."""
    by_name = {d.name: d for d in datasets}
    ratios: dict[str, TokenRatio] = dict(estimation.pinned(list(dataset_ids)))
    counter: Counter | TextCounting | None = (
        _measure_callable(estimation.measure) if estimation.measure is not None else count)
    reasons: dict[str, str] = {}
    for name in dataset_ids:
        if name in ratios:
            continue
        if name not in by_name:
            ratios[name], reasons[name] = TokenRatio(estimation.fallback_tokens_per_byte, "fallback"), \
                "dataset not found"
            continue
        ratio, why = _measure(by_name[name], int(dataset_ids[name]), estimation, counter, seed)
        ratios[name] = ratio
        if why is not None:
            reasons[name] = why
    if reasons:
        warnings.warn(
            f"token-aware mixture priming fell back for {len(reasons)} dataset(s): "
            + "; ".join(f"{n}: {ratios[n].tokens_per_byte:.6f} tokens/byte ({why})"
                        for n, why in sorted(reasons.items()))
            + "; pin ratios with TokenEstimation(primer={...}) or pass measure=",
            RuntimeWarning, stacklevel=2)
    return {n: ratios[n] for n in dataset_ids}

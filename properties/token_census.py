"""Token estimation: a pipeline's measured tokens/byte ratios against a plain definition.

Theory of operation
-------------------
A token-aware source (``StaticMixtureWorkSource(token_estimation=TokenEstimation(...))``) whose
ratios are not pinned measures them once, before its first chunk: a census of shards and rows, draws
proportional to row size, each drawn row counted through the pipeline's counting prefix (the operators
ahead of its first tokenize, replayed on the row, then tokenize's counting), a Hansen-Hurwitz mean
rebased from payload bytes onto the shards' raw bytes, or the fallback ratio when too few draws
count (zephon 0.2.0's definition: zephon_ref/work/token_estimation.py, and the reference notes).
Those ratios drive the whole allocation and go into every checkpoint, so a wrong one changes the
stream in a way no other row can tell from right: they are the subject here.

:func:`plain_ratios` is that definition written out again, short and by eye, from the case's
literal corpus alone: the census (shard count from the row-weighted spread of bytes per row, shards
chosen by ``random.Random((seed << 16) ^ (dataset_id + 1))``), the draws
(``numpy.random.default_rng((seed << 24) ^ (dataset_id + 1))``, with replacement, proportional to
size), the counting (the case's prefix function applied to the row, whitespace words plus the special
tokens tokenize adds, truncation; a dropped row counts 0 tokens, an unreadable one is not counted;
a ``measure=`` callable counts the raw row, and its first failure means fallback), the coverage rule
(at least half the draws counted), the rebase, and fallback for a ratio of 0 (every counted row
dropped).  It shares no code with the implementation.

:func:`census_problems` builds the case's pipeline with the adapter's library (its ``impl``: a module
with zephon's drop-in API, ``Pipeline`` and ``work.TokenEstimation``), delivers one item (which primes
the source; the stream may end first when the prefix drops every row), and compares every dataset's
ratio and provenance in the checkpoint (``lane_ws_state[lane]["token_ratios"]``, on every lane) with the
plain ones, relative tolerance 1e-9, and every fallback's reason in the priming warning. The cases
(:func:`census_cases`) draw the estimation knobs (``primer`` "measure" or a mapping pinning some
datasets, ``calibration_samples``, ``calibration_shards_min/max``, ``fallback_tokens_per_byte``), the
counting (the pipeline's tokenize with each special-tokens mode, truncation or splitting; no tokenize,
zephon's default counting; a ``measure=`` callable that counts, returns 0 for some rows, or raises for
some), and a counting prefix (``map_transform`` ahead of tokenize that grows texts, drops rows, blanks
them, or makes them unreadable for a drawn share of rows, all of them included: coverage met and not
met).

``python -m properties.conformance`` runs it as its ``token estimation`` row [token_estimation]:
the fixed examples :data:`FIXED_CASES` first, then the drawn ones.
"""

from __future__ import annotations

import importlib
import math
import random
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from hypothesis import strategies as st

__all__ = ["FIXED_CASES", "CensusCase", "census_cases", "census_problems", "plain_ratios",
           "token_estimation_check"]

_WORDS = ("a", "bb", "ccc", "dddd", "hello", "world", "x")
#: coverage: at least this share of the draws must be counted; census: target relative error
_COVERAGE = 0.5
_TARGET = 0.03
_SPECIALS = {"bos_eos": 2, "bos": 1, "eos": 1, "none": 0, "tokenizer_default": 0}


@dataclass(frozen=True)
class CensusCase:
    """A token-aware source and its counting, as literals.

    ``datasets``: ``(name, shards)``, each shard a tuple of row texts (a row is ``{"text": t}``);
    ``estimation``: TokenEstimation's keywords but ``measure``; ``counting``: ``"tokenize"`` (the
    pipeline's tokenize, ``tokenize`` its knobs), ``"default"`` (no tokenize: zephon's default
    counting) or a measure callable's name (:data:`MEASURES`); ``prefix``: ``(name, k)`` of a
    ``map_transform`` ahead of tokenize (:data:`PREFIXES`), affecting rows of ``k``-divisible word
    counts, or None."""

    datasets: tuple[tuple[str, tuple[tuple[str, ...], ...]], ...]
    seed: int
    estimation: Mapping[str, Any]
    counting: str = "tokenize"
    tokenize: Mapping[str, Any] = field(default_factory=dict)
    prefix: tuple[str, int] | None = None
    lanes: int = 1


def _hit(text: str, k: int) -> bool:
    return len(text.split()) % k == 0


def _grow(k: int) -> Callable[[Any], Any]:
    return lambda p: {"text": p["text"] + " tail end"} if _hit(p["text"], k) else p


def _drop(k: int) -> Callable[[Any], Any]:
    return lambda p: None if _hit(p["text"], k) else p


def _blank(k: int) -> Callable[[Any], Any]:
    return lambda p: {"text": ""} if _hit(p["text"], k) else p


def _unreadable(k: int) -> Callable[[Any], Any]:
    return lambda p: {"text": 7} if _hit(p["text"], k) else p  # not text: calibration cannot count it


#: prefix name -> k -> the map_transform function
PREFIXES: dict[str, Callable[[int], Callable[[Any], Any]]] = {
    "grow": _grow, "drop": _drop, "blank": _blank, "unreadable": _unreadable}


def _words(p: Any) -> int:
    return len(p["text"].split()) + 1


def _zero_some(k: int) -> Callable[[Any], int]:
    return lambda p: 0 if _hit(p["text"], k) else _words(p)


def _raise_some(k: int) -> Callable[[Any], int]:
    def measure(p: Any) -> int:
        if _hit(p["text"], k):
            raise ValueError(f"cannot count {p['text']!r}")
        return _words(p)
    return measure


#: measure name -> the callable (``zero_some:K`` and ``raise_some:K`` with their k)
def _measure(name: str) -> Callable[[Any], int]:
    kind, _, k = name.partition(":")
    return {"words": lambda _k: _words, "zero_some": _zero_some, "raise_some": _raise_some}[kind](int(k or 1))


MEASURES = ("words", "zero_some", "raise_some")


# -- the plain definition -----------------------------------------------------------------------------

def _size(text: Any) -> int:
    return len(text.encode("utf-8")) if isinstance(text, str) else 8


def _tokens_of(case: CensusCase, payload: Any) -> int | None:
    """Delivered tokens of one payload tokenize sees (None: not countable)."""
    text = payload.get("text") if isinstance(payload, dict) else None
    if not isinstance(text, str):
        return None
    raw = len(text.split())
    tk = case.tokenize if case.counting == "tokenize" else {}
    mode = tk.get("special_tokens", "bos_eos")
    cap = tk.get("max_length") if tk.get("truncation") else None
    if mode == "tokenizer_default":
        got = raw if cap is None else min(raw, cap)
    else:
        got = (raw if cap is None or tk.get("split_long_samples") else min(raw, cap - _SPECIALS[mode])) \
            + _SPECIALS[mode]
    return got or None


def _count_row(case: CensusCase, text: str) -> int | None:
    """Tokens of one drawn row as the calibration pass counts it (None: not counted; ValueError
    from a failing measure propagates)."""
    payload = {"text": text}
    if case.counting not in ("tokenize", "default"):
        got = int(_measure(case.counting)(payload))
        return got if got > 0 else None
    if case.counting == "tokenize" and case.prefix is not None:  # replayed only ahead of a tokenize
        name, k = case.prefix
        out = PREFIXES[name](k)(payload)
        if out is None:
            return 0  # dropped by the prefix: 0 tokens
        payload = out
    return _tokens_of(case, payload)


def plain_ratios(case: CensusCase) -> dict[str, tuple[float, str, str | None]]:
    """Every dataset's ``(tokens_per_byte, provenance, fallback reason or None)``, by the definition."""
    est = dict(case.estimation)
    primer = est.get("primer", "measure")
    fallback = float(est.get("fallback_tokens_per_byte", 0.25))
    out: dict[str, tuple[float, str, str | None]] = {}
    for dataset_id, (name, shards) in enumerate(case.datasets):
        if isinstance(primer, Mapping) and name in primer:
            out[name] = (float(primer[name]), "pinned", None)
            continue
        rows = [len(s) for s in shards]
        # an in-memory shard's bytes: the mean of every (len // 64)-th row, times its rows
        raw = [int(sum(_size(t) for t in s[::max(1, len(s) // 64)]) / len(s[::max(1, len(s) // 64)])
                   * len(s)) if s else 0 for s in shards]
        # the census: as many shards as the spread of bytes per row asks, within min..max
        live = [(r, b) for r, b in zip(rows, raw, strict=True) if r > 0]
        mean = sum(b for _, b in live) / sum(r for r, _ in live) if live else 0.0
        spread = 0.0
        if live and mean > 0:
            var = sum(r * (b / r - mean) ** 2 for r, b in live) / sum(r for r, _ in live)
            spread = math.sqrt(var) / mean
        lo, hi = int(est.get("calibration_shards_min", 4)), int(est.get("calibration_shards_max", 16))
        want = lo if spread <= 0 else max(lo, min(hi, math.ceil((spread / _TARGET) ** 2)))
        chosen = sorted(random.Random((case.seed << 16) ^ (dataset_id + 1)).sample(range(len(shards)),
                                                                                 min(want, len(shards))))
        sizes: dict[tuple[int, int], int] = {}
        payload_total = raw_total = 0.0
        for s in chosen:
            if not shards[s]:
                continue
            for off, t in enumerate(shards[s]):  # every row (shards here are far below 65,536 rows)
                sizes[(s, off)] = _size(t)
            payload_total += sum(_size(t) for t in shards[s])  # the mean row times the rows
            raw_total += raw[s]
        if payload_total <= 0 or raw_total <= 0:
            out[name] = (fallback, "fallback", "dataset is empty or unsized")
            continue
        rebase = payload_total / raw_total
        keys = sorted(k for k, v in sizes.items() if v > 0)
        p = np.array([sizes[k] for k in keys], dtype=float)
        picks = np.random.default_rng((case.seed << 24) ^ (dataset_id + 1)).choice(
            len(keys), size=int(est.get("calibration_samples", 2048)), replace=True, p=p / p.sum())
        n = int(est.get("calibration_samples", 2048))
        tokens_per_byte: list[tuple[int, float]] = []  # (times drawn, tokens/byte) of each counted row
        failed: str | None = None
        for i in sorted(set(picks.tolist())):
            (s, off), times = keys[i], int((picks == i).sum())
            try:
                got = _count_row(case, shards[s][off])
            except ValueError as exc:
                failed = f"counting failed: ValueError: {exc}"
                break
            if got is not None:
                tokens_per_byte.append((times, got / sizes[(s, off)]))
        counted = sum(t for t, _ in tokens_per_byte)
        if failed is not None:
            out[name] = (fallback * rebase, "fallback", failed)
        elif counted < _COVERAGE * n:
            out[name] = (fallback * rebase, "fallback", f"measured only {counted}/{n} draws")
        else:
            ratio = sum(t * r for t, r in tokens_per_byte) / counted * rebase
            out[name] = ((ratio, "measured", None) if ratio > 0 else  # every counted row dropped: 0 tokens
                         (fallback * rebase, "fallback", f"measured ratio {ratio!r} is not positive"))
    return out


# -- the implementation's ratios ----------------------------------------------------------------------

def _build(mod: Any, case: CensusCase, execution: Mapping[str, Any]) -> Any:
    datasets = [mod.Dataset.from_dict(name, {i: mod.InMemoryShard([{"text": t} for t in shard])
                                             for i, shard in enumerate(shards)})
                for name, shards in case.datasets]
    kw = dict(case.estimation)
    if case.counting not in ("tokenize", "default"):
        kw["measure"] = _measure(case.counting)
    src = mod.StaticMixtureWorkSource(datasets, {name: 1.0 for name, _ in case.datasets}, chunk_size=2,
                                      seed=case.seed, exhausted_policy="stop",
                                      token_estimation=mod.work.TokenEstimation(**kw))
    p = mod.Pipeline(src)
    if case.prefix is not None:
        name, k = case.prefix
        p = p.map_transform(PREFIXES[name](k))
    if case.counting == "tokenize":
        p = p.tokenize(field="text", missing_field="empty", **dict(case.tokenize))
    return p.batch(2, drop_last=False).options(**{**dict(execution), "canonical_replicas": case.lanes})


def census_problems(adapter: Any, case: CensusCase) -> list[str]:
    """Differences between the ratios ``adapter``'s pipeline measured for ``case`` and the plain ones."""
    mod = importlib.import_module(adapter.impl)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        p = _build(mod, case, getattr(adapter, "execution", None) or {})
        it = iter(p)
        try:
            next(it, None)  # primes the source (a prefix may drop every row: then the stream ends)
            state = p.checkpoint()
        finally:
            close = getattr(it, "close", None)
            if close is not None:
                close()
    primed = " ".join(str(w.message) for w in seen if "priming fell back" in str(w.message))
    want = plain_ratios(case)
    problems = []
    for lane, ws in sorted(state["lane_ws_state"].items()):
        got = ws["token_ratios"]
        for name, (ratio, source, why) in want.items():
            g = got.get(name)
            if g is None or g[1] != source or not math.isclose(g[0], ratio, rel_tol=1e-9):
                problems.append(f"lane {lane}, dataset {name!r}: estimated {g!r}, the plain definition "
                                f"{[ratio, source]!r}" + (f" ({why})" if why else ""))
            elif why is not None and f"{name}: {ratio:.6f} tokens/byte ({why}" not in primed:
                problems.append(f"dataset {name!r} fell back ({why}); the priming warning says "
                                f"{primed[:300]!r}")
    return problems


def token_estimation_check(adapter: Any, case: CensusCase) -> list[str]:
    """The ``token estimation`` row of the conformance CLI: :func:`census_problems`."""
    return census_problems(adapter, case)


# -- the cases ----------------------------------------------------------------------------------------

@st.composite
def _shard(draw: st.DrawFn, rows: int) -> tuple[str, ...]:
    words = st.lists(st.sampled_from(_WORDS), min_size=1, max_size=9)  # "" rows: the fixed cases, "blank"
    return tuple(" ".join(draw(words)) for _ in range(rows))


@st.composite
def census_cases(draw: st.DrawFn) -> CensusCase:
    """Token-aware sources with measured (and some pinned) datasets, every counting path."""
    names = ("web", "code", "books")[: draw(st.integers(1, 3))]
    datasets = []
    for name in names:
        counts = draw(st.lists(st.integers(0, 12), min_size=1, max_size=5))
        counts[0] = max(counts[0], 2 - sum(counts[1:]))  # two rows at least: a 2-sample chunk's quota
        datasets.append((name, tuple(draw(_shard(c)) for c in counts)))
    lo = draw(st.integers(1, 4))
    est: dict[str, Any] = {
        "calibration_samples": draw(st.sampled_from([1, 7, 64, 2048])),
        "calibration_shards_min": lo,
        "calibration_shards_max": lo + draw(st.sampled_from([0, 1, 12])),
        "fallback_tokens_per_byte": draw(st.sampled_from([0.25, 0.5, 1.5])),
    }
    if len(names) > 1 and draw(st.booleans()):
        est["primer"] = {names[0]: draw(st.sampled_from([0.2, 0.75]))}
    counting = draw(st.sampled_from(["tokenize", "tokenize", "tokenize", "default", *MEASURES]))
    if counting in ("zero_some", "raise_some"):
        counting = f"{counting}:{draw(st.integers(1, 4))}"
    tk: dict[str, Any] = {}
    prefix = None
    if counting == "tokenize":
        mode = draw(st.sampled_from(["none", "truncation", "split"]))
        tk["special_tokens"] = draw(st.sampled_from(sorted(_SPECIALS)))
        if mode != "none":
            tk["max_length"] = draw(st.integers(3, 8))
            tk["truncation" if mode == "truncation" else "split_long_samples"] = True
    if draw(st.booleans()):
        prefix = (draw(st.sampled_from(sorted(PREFIXES))), draw(st.integers(1, 3)))
    return CensusCase(datasets=tuple(datasets), seed=draw(st.integers(0, 2**16)), estimation=est,
                      counting=counting, tokenize=tk, prefix=prefix, lanes=draw(st.integers(1, 2)))


# -- fixed examples -----------------------------------------------------------------------------------

_FIXED_CORPUS = (
    ("web", (("hello world a", "bb ccc", "x x x x", "", "dddd hello"), ("a bb ccc dddd world",) * 3)),
    ("code", (("x", "x x", "x x x", "x x x x"), ("hello",), ("bb bb", "world world world"))),
)

#: run before the drawn cases: the counting prefix replayed ahead of tokenize on every measured
#: dataset, coverage met (the weighting of the counted draws decides the ratio) and not met (fallback)
FIXED_CASES: tuple[CensusCase, ...] = (
    CensusCase(_FIXED_CORPUS, seed=3, estimation={"calibration_samples": 64}, counting="tokenize",
               tokenize={"special_tokens": "bos_eos"}, prefix=("grow", 2)),
    CensusCase(_FIXED_CORPUS, seed=5, estimation={"calibration_samples": 64, "calibration_shards_min": 2},
               counting="tokenize", tokenize={"special_tokens": "none", "max_length": 4, "truncation": True},
               prefix=("drop", 3), lanes=2),
    CensusCase(_FIXED_CORPUS, seed=7, estimation={"calibration_samples": 64}, counting="tokenize",
               tokenize={"special_tokens": "eos"}, prefix=("unreadable", 1)),
    CensusCase(_FIXED_CORPUS, seed=9, estimation={"calibration_samples": 64}, counting="raise_some:4"),
    # a shard of 130 rows is sized from every second row: the payload/raw rebase is not 1
    CensusCase((("web", (tuple(" ".join(["hello"] * (i % 7)) + " x" * (i % 2 * 5) for i in range(130)),
                         ("a bb", "ccc"))),), seed=1, estimation={"calibration_samples": 256},
               counting="tokenize", tokenize={"special_tokens": "bos"}, prefix=("blank", 3)),
)


def fixed_cases() -> tuple[CensusCase, ...]:
    return FIXED_CASES

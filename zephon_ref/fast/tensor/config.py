"""The tensor implementation's configuration: what it accepts, what it refuses, at build time.

Theory of operation
-------------------
:func:`compile_chain` turns the builder-style chain ``[(method, kwargs), ...]``
(the names of :class:`zephon_ref.pipeline.Pipeline`'s methods) and the data
options into one frozen :class:`TensorPlan`.  It is the only place that decides
whether the tensor implementation can reproduce a configuration: every knob it
does not implement exactly is refused here with :class:`UnsupportedKnob` (a
:class:`~zephon_ref.errors.ConfigError`), before any data moves, and
:data:`REFUSED_KNOBS` lists them for the docs and the property adapter.
Execution settings (runner, workers, queue depths, placement, parallelism) are
accepted and ignored: they never reach the data path.

What may not live here: data, state, torch.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from zephon_ref.errors import ConfigError, ConfigTypeError, expected

__all__ = [
    "REFUSED_KNOBS",
    "BatchSpec",
    "MapSpec",
    "MixtureSpec",
    "PackSpec",
    "ShuffleSpec",
    "TensorPlan",
    "TokenizeSpec",
    "UnsupportedKnob",
    "compile_chain",
]

#: What the tensor implementation refuses (see docs/tensor.md); everything else in the
#: supported operators is reproduced exactly.
REFUSED_KNOBS: tuple[str, ...] = (
    "ensure_mixture(weight_by other than 'auto' / 'samples', warn_tolerance); with a source whose "
    "exhausted_policy redistributes; and, found while running (UnsupportedKnob then), a target whose "
    "component set changes within a flush epoch or a record outside the target (retirement groups, "
    "obsolete records)",
    "any operator other than map_transform, tokenize, pack_sequences, shuffle, ensure_mixture, batch",
    "map_transform or tokenize after pack_sequences / shuffle / ensure_mixture; more than one pack_sequences",
    "pack_sequences(algorithm='wrap')",
    "pack_sequences(tokens_field other than 'auto', length_fn, shuffle_strategy, pack_payloads other than "
    "'keep_list', homogeneity other than 'none', candidate_pool_size, max_candidate_age, groups)",
    "tokenize(a tokenizer other than the built-in HashTokenizer, padding, truncation, special_tokens other "
    "than 'bos_eos', missing_field, preserve_upstream_payload, add_attention_mask=False, tokenizer_id)",
    "options world_size / global_rank / dp_degree / dp_group_id / mapping_strategy (one participant only)",
)

_EXECUTION = frozenset({"placement", "parallelism"})
_EXEC_OPTIONS = frozenset({"runner", "max_workers", "queue_size", "prefetch", "deterministic", "workers"})


class UnsupportedKnob(ConfigError):
    """A configuration the reference accepts but the tensor implementation cannot reproduce exactly."""


@dataclass(frozen=True, slots=True)
class MapSpec:
    fn: Callable[[Any], Any]
    drop_none: bool = True
    max_batch: int = 64


@dataclass(frozen=True, slots=True)
class TokenizeSpec:
    field: str
    max_length: int | None
    split_long_samples: bool
    tokenizer: Any  # a zephon_ref.ops.tokenize.HashTokenizer (a plain frozen dataclass: its knobs only)
    max_batch: int = 64


@dataclass(frozen=True, slots=True)
class PackSpec:
    max_length: int
    num_bins: int
    best_fit: bool = False
    fullest: bool = False
    min_sequence_length: int = 1
    max_sequences_per_bin: int | None = None
    drop_oversized: bool = True


@dataclass(frozen=True, slots=True)
class ShuffleSpec:
    buffer_size: int
    seed: int = 0
    algorithm: str = "streaming"
    growth: float = 1.5


@dataclass(frozen=True, slots=True)
class MixtureSpec:
    max_buffer_size: int | None = 1000
    drain_target_ratio: float = 0.8
    obsolete_drain_rate: float = 0.1
    by_samples: bool = False
    mixture: tuple[tuple[str | int, float], ...] | None = None


@dataclass(frozen=True, slots=True)
class BatchSpec:
    microbatch_size: int
    drop_last: bool = True


Stage = MapSpec | TokenizeSpec | PackSpec | ShuffleSpec | MixtureSpec


@dataclass(frozen=True, slots=True)
class TensorPlan:
    """Record-level stages (in order), an optional batch, lanes and the flush period."""

    stages: tuple[Stage, ...]
    batch: BatchSpec | None
    canonical_replicas: int
    k: int


def _int(name: str, value: Any, *, minimum: int, allow_none: bool = False) -> Any:
    if value is None and allow_none:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise ConfigTypeError(expected(name, f"an int >= {minimum}", value))
    if value < minimum:
        raise ConfigError(expected(name, f"an int >= {minimum}", value))
    return value


def _bool(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ConfigTypeError(expected(name, "a bool", value))
    return value


def _refuse(what: str, value: Any) -> UnsupportedKnob:
    return UnsupportedKnob(expected(what, "a knob the tensor implementation reproduces exactly "
                                    "(docs/tensor.md lists the refused ones)", value))


def _only(method: str, kwargs: Mapping[str, Any], allowed: set[str]) -> None:
    for key in sorted(kwargs):
        if key not in allowed and key not in _EXECUTION:
            raise _refuse(f"{method}({key}=...)", kwargs[key])


def _map(kw: Mapping[str, Any]) -> MapSpec:
    fn = kw.get("transform_fn", kw.get("fn"))
    _only("map_transform", {k: v for k, v in kw.items() if k not in ("fn", "transform_fn")},
          {"drop_none", "max_batch"})
    if not callable(fn):
        raise ConfigTypeError(expected("map_transform fn", "a callable payload -> payload | None", fn))
    return MapSpec(fn, _bool("drop_none", kw.get("drop_none", True)),
                   _int("map_transform max_batch", kw.get("max_batch", 64), minimum=1))


def _tokenize(kw: Mapping[str, Any]) -> TokenizeSpec:
    from zephon_ref.ops.tokenize import (
        HashTokenizer,  # the tokenizer's definition (a value), not the operator
    )

    _only("tokenize", kw, {"tokenizer", "field", "max_length", "split_long_samples", "truncation",
                           "special_tokens", "add_attention_mask", "max_batch"})
    tok = kw.get("tokenizer")
    tok = HashTokenizer() if tok is None else tok
    if type(tok) is not HashTokenizer:
        raise _refuse("tokenize(tokenizer)", tok)
    field = kw.get("field")
    if not isinstance(field, str):
        raise ConfigTypeError(expected("tokenize field", "a str", field))
    max_length = _int("tokenize max_length", kw.get("max_length"), minimum=1, allow_none=True)
    split = _bool("split_long_samples", kw.get("split_long_samples", False))
    if kw.get("special_tokens", "bos_eos") != "bos_eos":
        raise _refuse("tokenize(special_tokens)", kw.get("special_tokens"))
    if kw.get("add_attention_mask", True) is not True:
        raise _refuse("tokenize(add_attention_mask)", kw.get("add_attention_mask"))
    truncation = kw.get("truncation", False)
    if truncation is not False and not (truncation is True and split):
        raise _refuse("tokenize(truncation)", truncation)
    if split and max_length is None:
        raise ConfigError(expected("tokenize max_length", "an int when split_long_samples=True", None))
    if not split and max_length is not None:
        raise _refuse("tokenize(max_length without split_long_samples)", max_length)
    return TokenizeSpec(
        field, max_length, split, tok, _int("tokenize max_batch", kw.get("max_batch", 64), minimum=1)
    )


def _pack(kw: Mapping[str, Any]) -> PackSpec:
    _only(
        "pack_sequences",
        kw,
        {
            "max_length",
            "num_bins",
            "algorithm",
            "flush_strategy",
            "min_sequence_length",
            "max_sequences_per_bin",
            "drop_oversized",
        },
    )
    algorithm = kw.get("algorithm", "first_fit")
    if algorithm not in ("first_fit", "best_fit"):
        raise _refuse("pack_sequences(algorithm)", algorithm)
    flush = kw.get("flush_strategy", "fifo")
    if flush not in ("fifo", "fullest"):
        raise ConfigError(expected("pack_sequences flush_strategy", "'fifo' or 'fullest'", flush))
    drop = kw.get("drop_oversized")
    return PackSpec(
        max_length=_int("pack max_length", kw.get("max_length"), minimum=1),
        num_bins=_int("pack num_bins", kw.get("num_bins"), minimum=1),
        best_fit=algorithm == "best_fit",
        fullest=flush == "fullest",
        min_sequence_length=_int("min_sequence_length", kw.get("min_sequence_length", 1), minimum=0),
        max_sequences_per_bin=_int("max_sequences_per_bin", kw.get("max_sequences_per_bin"), minimum=1,
                                   allow_none=True),
        drop_oversized=True if drop is None else _bool("drop_oversized", drop),
    )


def _shuffle(kw: Mapping[str, Any]) -> ShuffleSpec:
    _only("shuffle", kw, {"buffer_size", "seed", "algorithm", "warmup_growth"})
    size = kw.get("buffer_size")
    size = 8192 if size is None else _int("shuffle buffer_size", size, minimum=1)
    algorithm = kw.get("algorithm", "streaming")
    if algorithm not in ("streaming", "block", "block_warmup"):
        raise ConfigError(expected("shuffle algorithm", "'streaming', 'block' or 'block_warmup'", algorithm))
    growth = kw.get("warmup_growth", 1.5)
    if isinstance(growth, bool) or not isinstance(growth, (int, float)):
        raise ConfigTypeError(expected("warmup_growth", "a finite number > 1.0", growth))
    try:
        g = float(growth)
    except OverflowError:
        g = math.inf
    if not (g > 1.0 and math.isfinite(g)):
        raise ConfigError(expected("warmup_growth", "a finite number > 1.0", growth))
    return ShuffleSpec(size, _int("shuffle seed", kw.get("seed", 0), minimum=0), algorithm, g)


def _ratio(name: str, value: Any, lo: float, hi: float, *, lo_open: bool, hi_open: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigTypeError(expected(name, "a number", value))
    if not ((value > lo if lo_open else value >= lo) and (value < hi if hi_open else value <= hi)):
        raise ConfigError(
            expected(name, f"a number in {'(' if lo_open else '['}{lo}, {hi}{')' if hi_open else ']'}", value)
        )
    return float(value)


def _mixture(kw: Mapping[str, Any]) -> MixtureSpec:
    _only("ensure_mixture", kw, {"max_buffer_size", "drain_target_ratio", "obsolete_drain_rate", "weight_by",
                                 "mixture"})
    weight_by = kw.get("weight_by", "auto")
    if weight_by not in ("auto", "samples"):
        raise _refuse("ensure_mixture(weight_by)", weight_by)
    mix = kw.get("mixture")
    pairs: tuple[tuple[str | int, float], ...] | None = None
    if mix is not None:
        if not isinstance(mix, Mapping) or not mix:
            raise ConfigError(expected("mixture", "a non-empty mapping component -> weight", mix))
        out = []
        for key, w in mix.items():
            if isinstance(key, bool) or not isinstance(key, (str, int)) or (isinstance(key, int) and key < 0):
                raise ConfigTypeError(expected("mixture key", "a component name (str) or id (int >= 0)", key))
            if isinstance(w, bool) or not isinstance(w, (int, float)) or not (math.isfinite(w) and w >= 0):
                raise ConfigError(expected(f"mixture[{key!r}]", "a finite number >= 0", w))
            out.append((key, float(w)))
        if not sum(w for _, w in out) > 0:
            raise ConfigError(expected("mixture", "weights with a finite sum > 0", dict(mix)))
        pairs = tuple(out)
    return MixtureSpec(
        max_buffer_size=_int("max_buffer_size", kw.get("max_buffer_size", 1000), minimum=1, allow_none=True),
        drain_target_ratio=_ratio(
            "drain_target_ratio", kw.get("drain_target_ratio", 0.8), 0, 1, lo_open=True, hi_open=True
        ),
        obsolete_drain_rate=_ratio(
            "obsolete_drain_rate", kw.get("obsolete_drain_rate", 0.1), 0, 1, lo_open=False, hi_open=False
        ),
        by_samples=weight_by == "samples",
        mixture=pairs,
    )


def compile_chain(chain: Sequence[tuple[str, Mapping[str, Any]]], options: Mapping[str, Any]) -> TensorPlan:
    """The plan for ``chain`` under ``options``, or a typed refusal (nothing is built on refusal)."""
    stages: list[Stage] = []
    batch: BatchSpec | None = None
    for method, kw in chain:
        if batch is not None:
            raise _refuse(f"{method} after batch", method)
        if method == "map_transform":
            stages.append(_map(kw))
        elif method == "tokenize":
            stages.append(_tokenize(kw))
        elif method == "pack_sequences":
            stages.append(_pack(kw))
        elif method == "shuffle":
            stages.append(_shuffle(kw))
        elif method == "ensure_mixture":
            stages.append(_mixture(kw))
        elif method == "batch":
            _only("batch", kw, {"microbatch_size", "drop_last"})
            batch = BatchSpec(_int("microbatch_size", kw.get("microbatch_size"), minimum=1),
                              _bool("drop_last", kw.get("drop_last", True)))
        else:
            raise _refuse("operator", method)
    packs = [s for s in stages if isinstance(s, PackSpec)]
    kinds = [type(s).__name__ for s in stages]
    record_level = [isinstance(s, (MapSpec, TokenizeSpec)) for s in stages]
    if (
        len(packs) > 1
        or record_level != sorted(record_level, reverse=True)
        or (
            packs and any(isinstance(s, (ShuffleSpec, MixtureSpec)) for s in stages[: stages.index(packs[0])])
        )
    ):
        raise _refuse("operator order (record-level operators first, at most one pack_sequences, before any "
                      "shuffle)", kinds)
    for key in sorted(options):
        if key not in _EXEC_OPTIONS and key not in ("canonical_replicas", "flush_every_k_chunks"):
            if key == "world_size" and options[key] == 1:
                continue
            raise _refuse(f"option {key}", options[key])
    lanes = _int("canonical_replicas", options.get("canonical_replicas", 1), minimum=1)
    k = _int("flush_every_k_chunks", options.get("flush_every_k_chunks"), minimum=0, allow_none=True)
    monotone = not any(isinstance(s, (PackSpec, ShuffleSpec, MixtureSpec)) for s in stages)
    if k is None:
        k = 0 if monotone else 8
    elif monotone:
        k = 0  # the reference warns and uses 0: a monotone plan has nothing to flush
    elif k == 0:
        raise ConfigError(expected("flush_every_k_chunks", "> 0 for a plan with a reordering operator", 0))
    return TensorPlan(tuple(stages), batch, lanes, k)

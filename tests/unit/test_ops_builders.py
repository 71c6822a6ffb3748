"""Builder arguments: a bad value gets a typed error naming the argument, at the builder call
(house rule 7), or, for what only a user callback's result reveals, at the record that shows it.

Each regression test is named after what it protects.  The last tests throw a list of odd
values at every argument of every operator builder and allow only three endings: a
ZephonRefError at the call, a ZephonRefError at iteration, or a run that completes (output,
checkpoint, fingerprint and explain all work).
"""

from __future__ import annotations

import math
import warnings
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from properties import generator as gen
from properties.opkit import rec, run
from properties.pipelines import crc_tokens
from zephon_ref.errors import ConfigError, ConfigTypeError, ZephonRefError
from zephon_ref.ops import MapTransform, PackSequences, Shuffle, Tokenize
from zephon_ref.ops.shuffle import BlockWarmupAccumulator
from zephon_ref.pipeline import Pipeline
from zephon_ref.work import Dataset, InMemoryShard, StaticMixtureWorkSource


def _source(seed: int = 0) -> StaticMixtureWorkSource:
    rows = [{"text": " ".join(f"w{j}" for j in range(1 + i % 7))} for i in range(24)]
    return StaticMixtureWorkSource([Dataset.from_dict("web", {0: InMemoryShard(rows)})], {"web": 1.0},
                                   chunk_size=4, seed=seed)


def _pipe() -> Pipeline:
    return Pipeline(_source()).map_transform(crc_tokens)


def _push(state: list[Any], recs: list[Any]) -> tuple[list[Any], list[Any]]:
    return state, recs


# -- shuffle ----------------------------------------------------------------------------------


@pytest.mark.parametrize("growth", [math.inf, math.nan, -math.inf, 2**2000])
def test_block_warmup_growth_must_be_finite_at_the_builder(growth: float) -> None:
    # inf used to pass the builder and raise OverflowError at the first full block
    with pytest.raises(ConfigError, match="warmup_growth: expected a finite number > 1.0"):
        _pipe().shuffle(4, algorithm="block_warmup", warmup_growth=growth)
    with pytest.raises(ConfigError, match="warmup_growth"):
        BlockWarmupAccumulator(4, growth=growth)


def test_block_warmup_huge_finite_growth_jumps_to_buffer_size_without_overflow() -> None:
    acc = BlockWarmupAccumulator(40, growth=1e308)
    blocks = [len(b) for b, _ in acc.push_many([rec(0, 0, i) for i in range(85)])]
    assert blocks == [2, 40, 40]  # W = 40 // 16 = 2, then capped at buffer_size at once


@pytest.mark.parametrize("seed", [-1, -(2**40)])
def test_negative_seeds_are_refused_like_the_source_refuses_them(seed: int) -> None:
    with pytest.raises(ConfigError, match="seed: expected an int >= 0"):
        _pipe().shuffle(4, seed=seed)
    with pytest.raises(ConfigError, match="shuffle_seed: expected an int >= 0"):
        _pipe().pack_sequences(64, num_bins=2, shuffle_strategy="random", shuffle_seed=seed)
    with pytest.raises(ConfigError, match="seed: expected an int >= 0"):
        _source(seed)


# -- pack_sequences: length_fn ------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["x", 2.5, True, None, [3]])
def test_length_fn_returning_a_non_int_is_a_typed_error_naming_length_fn(bad: Any) -> None:
    p = _pipe().pack_sequences(64, num_bins=2, length_fn=lambda r: bad)
    with pytest.raises(ConfigTypeError, match=r"length_fn\(record .*\): expected an int >= 0, received"):
        list(p)


def test_length_fn_returning_a_negative_length_is_refused_not_packed_past_max_length() -> None:
    # -1 used to be accepted: bins then took thousands of tokens into max_length 64
    p = _pipe().pack_sequences(64, num_bins=2, length_fn=lambda r: -1)
    with pytest.raises(ConfigError, match=r"length_fn\(record .*\): expected an int >= 0, received -1"):
        list(p)


def test_length_fn_may_return_a_numpy_int() -> None:
    op = PackSequences(10, num_bins=1, length_fn=lambda r: np.int64(4))
    out = run(op, [[rec(0, 0, i) for i in range(5)]])
    assert [r.meta.tags["_packing_metadata"]["total_length"] for r in out] == [8, 8, 4]


def test_a_negative_precomputed_length_in_the_token_field_is_refused() -> None:
    with pytest.raises(ConfigError, match="field 'input_ids': expected a length >= 0"):
        run(PackSequences(10, num_bins=1), [[rec(0, 0, 0, payload={"input_ids": -3})]])


@pytest.mark.parametrize("knob", ["candidate_pool_size", "max_candidate_age", "groups"])
def test_zephon_knobs_of_modes_not_implemented_are_refused_unless_none(knob: str) -> None:
    _pipe().pack_sequences(64, num_bins=2, **{knob: None})
    with pytest.raises(ConfigError, match=f"{knob}: expected None"):
        _pipe().pack_sequences(64, num_bins=2, **{knob: 8})


# -- stateful_transform, map_transform ----------------------------------------------------------


@pytest.mark.parametrize(
    ("kw", "err"),
    [
        ({"parallelism": 0}, ConfigError),
        ({"parallelism": -3}, ConfigError),
        ({"parallelism": 1.0}, ConfigTypeError),
        ({"preserves_cursor_order": "no"}, ConfigTypeError),
        ({"indexable": 1}, ConfigTypeError),
        ({"name": ""}, ConfigTypeError),
        ({"name": 3}, ConfigTypeError),
        ({"placement": None}, ConfigTypeError),
    ],
)
def test_stateful_transform_arguments_are_checked_at_the_builder(kw: dict[str, Any], err: type) -> None:
    args: dict[str, Any] = {"name": "s", "init_state": list, "push": _push, **kw}
    with pytest.raises(err, match=next(iter(kw))):
        _pipe().stateful_transform(**args)


@pytest.mark.parametrize(
    ("where", "bad"),
    [
        ("push", None),
        ("push", "xy"),
        ("flush", None),
        ("flush", [{"a": 1}]),
        ("transform", 5),
        ("transform", ["r"]),
    ],
)
def test_stateful_callback_results_must_be_lists_of_records(where: str, bad: Any) -> None:
    kw: dict[str, Any] = {"init_state": list, "push": _push, "should_flush": lambda s: True}
    if where == "push":
        kw["push"] = lambda s, r: (s, bad)
    else:
        kw[where] = lambda *_: bad
    with pytest.raises(ConfigTypeError, match=f"stateful_transform {where}"):
        list(_pipe().stateful_transform("s", **kw))


@pytest.mark.parametrize(("value", "err"), [(0, ConfigError), (-2, ConfigError), (2.5, ConfigTypeError),
                                            (True, ConfigTypeError)])
def test_map_transform_parallelism_zero_is_refused_not_read_as_the_default(value: Any, err: type) -> None:
    with pytest.raises(err, match="parallelism"):
        _pipe().map_transform(lambda x: x, parallelism=value)


def test_map_transform_parallelism_none_is_the_default_four() -> None:
    op = _pipe().map_transform(lambda x: x)._ops[-1][1]
    assert isinstance(op, MapTransform) and op.traits().parallelism == 4


@pytest.mark.parametrize(
    "builder", ["map_transform", "tokenize", "pack_sequences", "shuffle", "stateful_transform"]
)
def test_placement_and_parallelism_are_validated_at_the_builder(builder: str) -> None:
    base: dict[str, dict[str, Any]] = {
        "map_transform": {"transform_fn": lambda x: x}, "tokenize": {"field": "text"},
        "pack_sequences": {"max_length": 64, "num_bins": 2}, "shuffle": {"buffer_size": 4},
        "stateful_transform": {"name": "s", "init_state": list, "push": _push},
    }
    start = Pipeline(_source()) if builder == "tokenize" else _pipe()
    with pytest.raises(ConfigTypeError, match="placement"):
        getattr(start, builder)(**base[builder], placement=7)
    with pytest.raises(ConfigError, match="parallelism"):
        getattr(start, builder)(**base[builder], parallelism=0)
    getattr(start, builder)(**base[builder], placement="local", parallelism=2)  # a runner tag is fine


# -- odd objects in choice arguments --------------------------------------------------------------


class _EqRaises:
    def __eq__(self, other: object) -> bool:
        raise RuntimeError("__eq__ called")

    __hash__ = object.__hash__


@pytest.mark.parametrize("odd", [np.array([1, 2]), _EqRaises(), ["random"]])
def test_odd_objects_in_choice_arguments_get_typed_errors_not_their_own_eq(odd: Any) -> None:
    cases: list[Callable[[], Any]] = [
        lambda: Tokenize(field="text", padding=odd),
        lambda: PackSequences(64, num_bins=2, pack_payloads=odd),
        lambda: PackSequences(64, num_bins=2, algorithm=odd),
        lambda: PackSequences(64, num_bins=2, shuffle_strategy=odd),
        lambda: Shuffle(4, algorithm=odd),
        lambda: _pipe().tokenize(field="text", tokenizer_id=odd),
    ]
    for make in cases:
        with pytest.raises(ZephonRefError):
            make()


def test_tokenize_return_tensors_and_use_fast() -> None:
    for bad, err in (("torch", ConfigError), ("PT", ConfigError), (5, ConfigTypeError)):
        with pytest.raises(err, match="return_tensors: expected one of None, 'pt', 'np', 'numpy', 'tf'"):
            Tokenize(field="text", return_tensors=bad)  # zephon: ValueError at the first record (D-62)
    for ok in (None, "pt", "np", "numpy", "tf"):
        assert Tokenize(field="text", return_tensors=ok).config.return_tensors == ok
    with pytest.raises(ConfigTypeError, match="use_fast"):
        Tokenize(field="text", use_fast="yes")
    Tokenize(
        field="text", use_fast=False
    )  # an HF loading hint: accepted, no effect on the built-in tokenizer


# -- every argument of every builder against odd values -------------------------------------------

ODD: list[Any] = [
    None,
    True,
    False,
    0,
    1,
    -1,
    2,
    -3,
    10**30,
    -(10**30),
    2**64,
    0.0,
    0.5,
    1.5,
    -1.5,
    1e308,
    math.inf,
    -math.inf,
    math.nan,
    "",
    "x",
    "auto",
    "random",
    b"x",
    [],
    [1],
    {},
    {"a": 1},
    (),
    (1,),
    set(),
    object(),
    _EqRaises(),
    np.int64(2),
    np.float64(2.0),
    np.array([1, 2]),
    # callables that *return* odd values (a callable that raises propagates its own error, by design)
    lambda *a, **k: None,
    lambda *a, **k: "x",
    lambda *a, **k: -1,
    lambda *a, **k: 5,
]

#: per builder method, the keywords it needs and every keyword it takes: the knobs the API generator
#: derives from its signature and its config's knob() domains (properties.generator), not a list kept here
BASE_KWARGS: dict[str, dict[str, Any]] = {
    "map_transform": {"transform_fn": lambda x: x},
    "stateful_transform": {"name": "s", "init_state": list, "push": _push},
    "tokenize": {"field": "text"},
    "pack_sequences": {"max_length": 24, "num_bins": 2},
    "shuffle": {"buffer_size": 4},
    "batch": {"microbatch_size": 2},
    "pack_flat": {"max_length": 24, "num_bins": 2, "pad_token_id": 0},
    "decode_text": {},
}
BUILDERS: dict[str, tuple[dict[str, Any], list[str]]] = {
    m: (base, [k.name for k in gen.api()[m].knobs]) for m, base in BASE_KWARGS.items()
}
# arguments that matter only in another mode are tried in that mode
MODE = {
    ("shuffle", "warmup_growth"): {"algorithm": "block_warmup"},
    ("shuffle", "seed"): {"algorithm": "block"},
    ("pack_sequences", "shuffle_seed"): {"shuffle_strategy": "random"},
    ("pack_flat", "shuffle_seed"): {"shuffle_strategy": "random"},
    **{(b, k): {"algorithm": "best_fit_wrap", "num_bins": None}
       for b in ("pack_sequences", "pack_flat") for k in ("candidate_pool_size", "max_candidate_age")},
    **{(b, "groups"): {"homogeneity": "group"} for b in ("pack_sequences", "pack_flat")},
}


def outcome(builder: str, arg: str, value: Any) -> str:
    base, _ = BUILDERS[builder]
    kw = {**base, **MODE.get((builder, arg), {}), arg: value}
    p = Pipeline(_source()) if builder == "tokenize" else _pipe()
    try:
        getattr(p, builder)(**kw)
    except ZephonRefError:
        return "typed at the call"
    if builder == "tokenize":
        p.pack_sequences(64, algorithm="wrap")
    p.options(runner="inline", canonical_replicas=2, flush_every_k_chunks=1)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            list(p)
            p.checkpoint()
    except ZephonRefError:
        return "typed later"
    p.fingerprint()
    p.explain()
    return "accepted"


@pytest.mark.parametrize("builder", sorted(BUILDERS))
def test_every_argument_of_every_builder_ends_typed_or_runs(builder: str) -> None:
    """Any other exception fails the test, naming the argument and the value."""
    tally: Counter[str] = Counter()
    for arg in BUILDERS[builder][1]:
        for value in ODD:
            try:
                tally[outcome(builder, arg, value)] += 1
            except Exception as exc:  # noqa: BLE001 (the point: report which value escaped untyped)
                pytest.fail(f"{builder}({arg}={value!r}) raised untyped {type(exc).__name__}: {exc}")
    assert tally["typed at the call"] > 0 and tally["accepted"] > 0, tally


def test_ensure_mixture_arguments_end_typed_or_run() -> None:
    """weight_by results are checked where they are used (typed, at iteration); an unknown
    mixture component and bad placement / parallelism are refused at the builder call."""
    for value in (lambda r: None, lambda r: "x"):
        p = _pipe().ensure_mixture(weight_by=value).options(runner="inline", canonical_replicas=2)
        with pytest.raises(ZephonRefError, match="weight_by"):
            list(p)
    with pytest.raises(ZephonRefError, match="unknown"):
        _pipe().ensure_mixture(mixture={"a": 1})
    with pytest.raises(ZephonRefError):
        _pipe().ensure_mixture(placement=7)
    with pytest.raises(ZephonRefError):
        _pipe().ensure_mixture(parallelism=0)

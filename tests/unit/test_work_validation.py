"""Bad input at the work layer's public entry points: typed errors at the call, nothing changed.

Each test is named after what it protects.  Errors are zephon_ref's (ConfigError is a
ValueError, ConfigTypeError a TypeError) and their messages say what was expected and
what was received.
"""

from __future__ import annotations

import json
import math
import os
import warnings

import pytest

from properties.sources import read_chunks
from zephon_ref.errors import ConfigError, ConfigTypeError, ZephonRefError
from zephon_ref.io import Dataset, InMemoryShard
from zephon_ref.work import MixtureSpec, StaticMixtureWorkSource

# -- (a) JSONL: one definition of a row for counting and reading ---------------------------------


def _write(tmp_path, name, data: bytes):
    d = tmp_path / name
    d.mkdir()
    (d / "a.jsonl").write_bytes(data)
    return d


def _all_rows(ds):
    return [ds.get(int(sid), i) for sid, n in zip(ds.ids(), ds.counts(), strict=True) for i in range(int(n))]


@pytest.mark.parametrize("sep", [b"\n", b"\r\n", b"\r"])
def test_jsonl_row_count_equals_rows_read_for_every_newline_convention(tmp_path, sep):
    rows = [{"i": i} for i in range(40)]
    d = _write(tmp_path, "x", b"".join(json.dumps(r).encode() + sep for r in rows))
    ds = Dataset.from_path("x", d)
    assert len(ds) == 40
    assert _all_rows(ds) == rows


@pytest.mark.parametrize("blank", ["\u00a0", "\x1c", "\u2028", " \t", "\u3000"])
def test_jsonl_whitespace_only_lines_are_not_rows_when_counting_or_reading(tmp_path, blank):
    d = _write(tmp_path, "x", f'{{"i": 0}}\n{blank}\n{{"i": 1}}\n'.encode())
    ds = Dataset.from_path("x", d)
    assert len(ds) == 2
    assert _all_rows(ds) == [{"i": 0}, {"i": 1}]


def test_jsonl_leading_byte_order_mark_is_skipped(tmp_path):
    d = _write(tmp_path, "x", b'\xef\xbb\xbf{"i": 0}\n{"i": 1}\n')
    assert _all_rows(Dataset.from_path("x", d)) == [{"i": 0}, {"i": 1}]


@pytest.mark.parametrize("data,where", [
    (b'{"i": 0}\n{"i":\n', "line 2"),
    (b'{"i": 0}\n\n{"i": "\xff"}\n', "line 3"),
    (b'{"i": 0}\n\xef\xbb\xbf{"i": 1}\n', "line 2"),  # a BOM inside the file is not whitespace
])
def test_jsonl_malformed_rows_are_refused_at_from_path_naming_file_and_line(tmp_path, data, where):
    d = _write(tmp_path, "x", data)
    with pytest.raises(ConfigError, match=where) as info:
        Dataset.from_path("x", d)
    assert "a.jsonl" in str(info.value) and "expected" in str(info.value)


def test_jsonl_directory_named_like_a_shard_is_refused_typed(tmp_path):
    d = _write(tmp_path, "x", b'{"i": 0}\n')
    (d / "b.jsonl").mkdir()
    with pytest.raises(ConfigError, match="b.jsonl"):
        Dataset.from_path("x", d)


def test_jsonl_dangling_link_is_refused_typed(tmp_path):
    d = _write(tmp_path, "x", b'{"i": 0}\n')
    os.symlink(tmp_path / "nowhere", d / "b.jsonl")
    with pytest.raises(ConfigError, match="b.jsonl"):
        Dataset.from_path("x", d)


@pytest.mark.parametrize("path", [3, None, b"/tmp"])
def test_from_path_refuses_a_non_path_typed(path):
    with pytest.raises((ConfigTypeError, ConfigError), match="path"):
        Dataset.from_path("x", path)


@pytest.mark.parametrize("shard", [3, None, object(), "abc", 2.5])
def test_from_dict_refuses_a_non_shard_typed(shard):
    with pytest.raises(ConfigTypeError, match="shard 0 of dataset 'x'"):
        Dataset.from_dict("x", {0: shard})


# -- (c) MixtureSpec ------------------------------------------------------------------------------


@pytest.mark.parametrize("weights", [
    {"a": 1e308, "b": 1e308, "c": 1e308},  # the sum overflows: shares would be 0
    {"a": math.inf}, {"a": math.nan, "b": 1}, {"a": "2"}, {"a": True}, {"a": 1, "b": False},
    {"a": 0}, {"a": -1}, {"a": 5e-324, "b": 1e308},  # a share that underflows to 0
    {"a": None}, {"a": [1]}, {1: 1.0},
])
def test_mixture_spec_refuses_weights_that_do_not_normalise_to_positive_finite_shares(weights):
    with pytest.raises(ZephonRefError, match="expected") as info:
        MixtureSpec(weights)
    assert isinstance(info.value, (ValueError, TypeError))


def test_mixture_spec_accepts_large_but_summable_weights_exactly():
    spec = MixtureSpec({"a": 1e300, "b": 3e300})
    assert spec.normalized == {"a": 0.25, "b": 0.75}


# -- (b) legacy_fixed with stop_after_passes ------------------------------------------------------


def test_legacy_fixed_len_agrees_with_the_stream():
    ds = [Dataset.from_dict("a", {0: InMemoryShard(list(range(30)))}),
          Dataset.from_dict("b", {0: InMemoryShard(list(range(20)))})]
    for kw in ({}, {"stop_after_passes": 2}, {"exhausted_policy": "repeat", "max_repeats": 1}):
        src = StaticMixtureWorkSource(
            ds, {"a": 0.6, "b": 0.4}, chunk_size=5, allocation_mode="legacy_fixed", **kw
        )
        n = len(src)
        got = sum(len(c) for c in read_chunks(src.clone_for_lane(0, 1), 10_000))
        assert got == n, (kw, got, n)


# -- (d) ensure_mixture(mixture=...) --------------------------------------------------------------


@pytest.mark.parametrize("mixture,err", [
    ({"a": math.inf, "b": 1}, ConfigError), ({"a": math.nan, "b": 1}, ConfigError), ({"a": -1}, ConfigError),
    ({"a": 0, "b": 0}, ConfigError), ({"a": 1e308, "b": 1e308}, ConfigError), ({"a": "1"}, ConfigTypeError),
    ({"a": True}, ConfigTypeError), ({"a": None}, ConfigTypeError), ({(1, 2): 1.0}, ConfigTypeError),
    ({-1: 1.0}, ConfigTypeError), ({}, ConfigError), ([("a", 1)], ConfigError),
])
def test_ensure_mixture_refuses_weights_that_cannot_be_a_target(mixture, err):
    from zephon_ref.ops.ensure_mixture import EnsureMixture

    with pytest.raises(err, match="mixture"):
        EnsureMixture(mixture=mixture)


def _pipeline(**kw):
    from zephon_ref.pipeline import Pipeline

    ds = [Dataset.from_dict("a", {0: InMemoryShard([{"input_ids": [1, 2]}] * 20)}),
          Dataset.from_dict("b", {0: InMemoryShard([{"input_ids": [3]}] * 20)})]
    return Pipeline(StaticMixtureWorkSource(ds, {"a": 1, "b": 1}, chunk_size=4, **kw))


def test_pipeline_ensure_mixture_refuses_unknown_component_names_at_the_builder_call():
    p = _pipeline()
    before = list(p._ops)
    with pytest.raises(ConfigError, match="unknown"):
        p.ensure_mixture(mixture={"a": 1, "zz": 1})
    with pytest.raises(ConfigError, match="unknown"):
        p.ensure_mixture(mixture={0: 1, 7: 1})
    assert p._ops == before  # a refused call adds nothing
    p.ensure_mixture(mixture={"a": 1, 1: 2})  # names and ids of the source are accepted
    assert len(p._ops) == len(before) + 1


def test_pipeline_ensure_mixture_refuses_sample_weights_with_a_token_aware_source():
    from zephon_ref.work import TokenEstimation

    p = _pipeline(token_estimation=TokenEstimation(primer=0.25))
    with pytest.raises(ConfigError, match="samples"):
        p.ensure_mixture(weight_by="samples")
    p.ensure_mixture(weight_by="auto")


# -- (e) every argument of the entry points: arbitrary values end typed or work -------------------

from hypothesis import HealthCheck, example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from zephon_ref.synthetic import synthetic_corpus  # noqa: E402
from zephon_ref.work import TokenEstimation  # noqa: E402

ANY = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    st.text(max_size=8),
    st.binary(max_size=4),
    st.lists(st.integers(-3, 3), max_size=3),
    st.tuples(st.integers(-3, 3)),
    st.dictionaries(
        st.sampled_from(["a", "b", "zz", ""]),
        st.one_of(st.floats(), st.integers(), st.text(max_size=2), st.none()),
        max_size=3,
    ),
    st.sampled_from(
        ["auto", "global", "stop", "repeat", "redistribute", "modulo", "permute", "measure", "legacy_fixed"]
    ),
    st.builds(object),
)


def _two():
    return [Dataset.from_dict("a", {0: InMemoryShard([{"t": "x"}] * 30)}),
            Dataset.from_dict("b", {0: InMemoryShard([{"t": "yy"}] * 20)})]


def _use_source(src):
    clone = src.clone_for_lane(0, 2)
    for _ in range(30):
        ch = clone.next_chunk()
        if ch is None:
            break
        list(ch)
    clone.state_dict()
    try:
        len(src)
    except TypeError as exc:  # documented: len() of an unbounded source
        assert "unbounded" in str(exc)


def _use_dataset(d):
    for sid, n in zip(d.ids().tolist(), d.counts().tolist(), strict=True):
        for i in range(n):
            d.get(sid, i)
    d.raw_bytes()
    _use_source(StaticMixtureWorkSource([d], {d.name: 1}, chunk_size=1))


def _source_arg(arg):
    def make(v):
        if arg in ("datasets", "mixture"):
            a = {"datasets": _two(), "mixture": {"a": 1, "b": 1}, arg: v}
            return StaticMixtureWorkSource(a["datasets"], a["mixture"], chunk_size=4)
        return StaticMixtureWorkSource(_two(), {"a": 1, "b": 1}, **{"chunk_size": 4, arg: v})
    return make, _use_source


def _corpus_arg(arg):
    base = {} if arg == "layout" else {"layout": {"a": (5, 3)}}
    return lambda v: synthetic_corpus(**base, **{arg: v})


def _estimation_arg(arg):
    base = {} if arg == "primer" else {"primer": 0.25}
    return lambda v: TokenEstimation(**base, **{arg: v})


ENTRY_POINTS = {
    **{
        f"StaticMixtureWorkSource({a}=)": _source_arg(a)
        for a in (
            "datasets",
            "mixture",
            "chunk_size",
            "seed",
            "shuffle_shards",
            "shuffle_within_shard",
            "shuffle_block_size",
            "exhausted_policy",
            "reshuffle_on_repeat",
            "max_repeats",
            "stop_after_passes",
            "lane_assignment",
            "token_estimation",
            "allocation_mode",
        )
    },
    "clone_for_lane(lane_id=)": (
        lambda v: StaticMixtureWorkSource(_two(), {"a": 1, "b": 1}, chunk_size=4).clone_for_lane(v, 2),
        lambda c: c.next_chunk(),
    ),
    "clone_for_lane(canonical_replicas=)": (
        lambda v: StaticMixtureWorkSource(_two(), {"a": 1, "b": 1}, chunk_size=4).clone_for_lane(0, v),
        lambda c: c.next_chunk(),
    ),
    "Dataset.from_dict(name=)": (lambda v: Dataset.from_dict(v, {0: InMemoryShard([1, 2])}), _use_dataset),
    "Dataset.from_dict(shards=)": (lambda v: Dataset.from_dict("a", v), _use_dataset),
    "Dataset.from_dict(shards={0: v})": (lambda v: Dataset.from_dict("a", {0: v}), _use_dataset),
    "Dataset.from_path(path=)": (lambda v: Dataset.from_path("a", v), _use_dataset),
    "InMemoryShard(rows=)": (lambda v: Dataset.from_dict("a", {0: InMemoryShard(v)}), _use_dataset),
    "MixtureSpec(weights=)": (lambda v: MixtureSpec(v), lambda m: m.normalized),
    "MixtureSpec({'a': v})": (
        lambda v: MixtureSpec({"a": v, "b": 1}),
        lambda m: _use_source(StaticMixtureWorkSource(_two(), m, chunk_size=4)),
    ),
    **{
        f"synthetic_corpus({a}=)": (_corpus_arg(a), lambda c: [_use_dataset(d) for d in c.datasets])
        for a in ("seed", "layout", "vocab_size", "mean_log_words", "max_words")
    },
    **{
        f"TokenEstimation({a}=)": (
            _estimation_arg(a),
            lambda te: _use_source(
                StaticMixtureWorkSource(_two(), {"a": 1, "b": 1}, chunk_size=4, token_estimation=te)
            ),
        )
        for a in (
            "primer",
            "measure",
            "calibration_samples",
            "calibration_shards_min",
            "calibration_shards_max",
            "fallback_tokens_per_byte",
        )
    },
}


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.differing_executors],
)
@given(value=ANY)
# found by the dev profile: MixtureSpec({'a': 3.6e307, 'b': 1}) left b a share so small that len() overflowed
@example(value=3.5953862697246315e+307)
def test_work_entry_points_refuse_bad_values_typed_or_work(entry, value):
    """No value passed to a work-layer argument ends in an untyped exception, at the call or later."""
    make, use = ENTRY_POINTS[entry]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            obj = make(value)
        except ZephonRefError as exc:
            assert "expected" in str(exc) or "first chunk" in str(exc)
            return
        try:
            use(obj)
        except ZephonRefError:
            return


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.integers(1, 30), min_size=1, max_size=3),
    st.lists(st.sampled_from([1, 2, 3, 0.5]), min_size=3, max_size=3),
    st.integers(3, 12),
    st.sampled_from(["passes", "cap", "stop", "mixed"]),
    st.integers(1, 3),
    st.integers(0, 5),
)
def test_legacy_fixed_len_equals_the_stream_at_any_point(sizes, weights, chunk_size, mode, n, read_first):
    names = [f"d{i}" for i in range(len(sizes))]
    data = [Dataset.from_dict(nm, {0: InMemoryShard([0] * (sz + chunk_size))}) for nm, sz in zip(names, sizes,
                                                                                                   strict=True)]
    kw = {
        "passes": {"stop_after_passes": n},
        "cap": {"exhausted_policy": "repeat", "max_repeats": n},
        "stop": {"exhausted_policy": "stop"},
        "mixed": {"exhausted_policy": {nm: ("stop" if i == 0 else "repeat") for i, nm in enumerate(names)}},
    }[mode]
    try:
        src = StaticMixtureWorkSource(data, dict(zip(names, weights, strict=False)), chunk_size=chunk_size,
                                      allocation_mode="legacy_fixed", **kw)
    except ConfigError:
        return  # chunk_size too small for one sample of every component
    clone = src.clone_for_lane(0, 1)
    read_chunks(clone, read_first)
    expect = len(clone)
    assert sum(len(c) for c in read_chunks(clone, 100_000)) == expect

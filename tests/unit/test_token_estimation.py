"""Token-aware allocation: TokenEstimation validation, the cost table, state and refusals."""

from __future__ import annotations

import math

import pytest

from properties.sources import read_chunks
from zephon_ref.errors import ConfigError, ConfigTypeError, StateMismatchError
from zephon_ref.work import Dataset, InMemoryShard, StaticMixtureWorkSource, TokenEstimation
from zephon_ref.work.dataset import content_bytes
from zephon_ref.work.token_estimation import TokenCostTable


def _no_warning():
    import contextlib
    import warnings

    @contextlib.contextmanager
    def cm():
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            yield
    return cm()


def ds(name, *shards):
    """``shards``: (rows, bytes per row) pairs; every row's text is that many bytes."""
    return Dataset.from_dict(
        name, {i: InMemoryShard([{"text": "x" * b} for _ in range(n)]) for i, (n, b) in enumerate(shards)})


@pytest.mark.parametrize("primer,err", [
    ("measured", ConfigError), (0, ConfigError), (-1.0, ConfigError), (math.inf, ConfigError),
    (math.nan, ConfigError), (True, ConfigTypeError), (None, ConfigTypeError), ([0.3], ConfigTypeError),
    ({"a": 0}, ConfigError), ({"a": "0.3"}, ConfigError), ({"a": True}, ConfigError), ({}, ConfigError),
    ({1: 0.3}, ConfigTypeError),
])
def test_token_estimation_refuses_bad_primer(primer, err):
    with pytest.raises(err, match="primer"):
        TokenEstimation(primer=primer)


@pytest.mark.parametrize("kw", [
    {"calibration_samples": 0}, {"calibration_samples": "8"}, {"calibration_shards_min": 0},
    {"calibration_shards_min": 5, "calibration_shards_max": 4}, {"fallback_tokens_per_byte": 0.0},
    {"fallback_tokens_per_byte": math.nan}, {"measure": 3},
])
def test_token_estimation_refuses_bad_knobs(kw):
    with pytest.raises((ConfigError, ConfigTypeError), match=next(iter(kw))):
        TokenEstimation(primer=0.25, **kw)


def test_a_measuring_primer_waits_for_prime_and_measures_deterministically():
    data = [ds("a", (20, 4)), ds("b", (20, 8))]
    for te in (TokenEstimation(measure=lambda p: len(p["text"])), TokenEstimation(primer={"a": 0.3})):
        src = StaticMixtureWorkSource(data, {"a": 1, "b": 1}, chunk_size=4, token_estimation=te)
        assert src.requires_token_priming
        with _no_warning():
            src.prime()  # measure=, or zephon's default counting (one token per word, plus BOS/EOS)
        again = StaticMixtureWorkSource(data, {"a": 1, "b": 1}, chunk_size=4, token_estimation=te)
        with _no_warning():
            again.prime()
        assert not src.requires_token_priming and src.token_ratios() == again.token_ratios()
    got = src.token_ratios()
    assert got is not None and got["a"].source == "pinned" and got["b"].source == "measured"
    assert got["b"].tokens_per_byte == pytest.approx(3 / 8)  # "xxxxxxxx": 1 word + 2 specials over 8 bytes
    empty = [ds("a", (20, 4)), Dataset.from_dict("b", {0: InMemoryShard([{"n": 1}] * 9)})]
    src = StaticMixtureWorkSource(empty, {"a": 1, "b": 1}, chunk_size=4,
                                  token_estimation=TokenEstimation(primer={"a": 0.3}))
    with pytest.warns(RuntimeWarning, match="fell back"):
        src.prime()  # no text to count: the fallback ratio, said
    got = src.token_ratios()
    assert got is not None and got["b"].source == "fallback"


def test_cost_table_charges_shard_bytes_per_row_times_ratio_at_least_one():
    d = ds("a", (10, 40), (5, 2), (0, 9))
    table = TokenCostTable([d], {"a": 0.25})
    assert table.cost("a", 0) == 10.0  # 40 bytes x 0.25
    assert table.cost("a", 1) == 1.0  # 0.5 clamps to 1
    assert table.cost("a", 2) == table.mean_cost("a") == (10 * 40 + 5 * 2) / 15 * 0.25  # empty shard
    assert content_bytes({"k": ["ab", b"xyz", 3, None]}) == 2 + 3 + 8 + 8


def test_token_deficits_give_the_cheaper_dataset_more_samples_and_declare_the_token_target():
    # equal token weights; b's rows cost 4x a's, so a gets ~4x the samples
    src = StaticMixtureWorkSource([ds("a", (400, 8)), ds("b", (400, 32))], {"a": 1, "b": 1}, chunk_size=50,
                                  exhausted_policy="repeat", token_estimation=TokenEstimation(primer=0.5))
    chunks = read_chunks(src.clone_for_lane(0, 1), 20)
    na = sum(len(c.components.get("a", [])) for c in chunks)
    nb = sum(len(c.components.get("b", [])) for c in chunks)
    assert na + nb == 1000 and na == 4 * nb
    assert all(c.target_mixture == {"a": 0.5, "b": 0.5} for c in chunks)


def _src(**kw):
    return StaticMixtureWorkSource([ds("a", (30, 8), (17, 20)), ds("b", (25, 12))], {"a": 0.6, "b": 0.4},
                                   chunk_size=7, seed=3, shuffle_block_size=5, stop_after_passes=3, **kw)


def test_token_state_round_trips_mid_stream():
    te = TokenEstimation(primer={"a": 0.3, "b": 0.9})
    whole = read_chunks(_src(token_estimation=te).clone_for_lane(1, 2), 100)
    first = _src(token_estimation=te).clone_for_lane(1, 2)
    head = read_chunks(first, 4)
    state = first.state_dict()
    assert state["allocation_mode"] == "token_aware" and state["accumulators"] is None
    assert state["token_ratios"] == {"a": [0.3, "pinned"], "b": [0.9, "pinned"]}  # zephon's shape
    again = _src(token_estimation=te).clone_for_lane(1, 2)
    again.load_state_dict(state)
    assert head + read_chunks(again, 100) == whole and len(whole) > 6


def test_restore_across_mixture_units_is_refused_and_changes_nothing():
    te = TokenEstimation(primer=0.3)
    tok = _src(token_estimation=te).clone_for_lane(0, 1)
    samp = _src().clone_for_lane(0, 1)
    read_chunks(tok, 2)
    read_chunks(samp, 2)
    before_tok, before_samp = tok.state_dict(), samp.state_dict()
    with pytest.raises(StateMismatchError, match="allocation_mode"):
        tok.load_state_dict(before_samp)
    with pytest.raises(StateMismatchError, match="allocation_mode"):
        samp.load_state_dict(before_tok)
    assert tok.state_dict() == before_tok and samp.state_dict() == before_samp


def test_token_liveness_refuses_a_repeat_dataset_too_small_for_two_chunks_of_draws():
    # equal costs: each dataset draws half of 10 per chunk; the bound is min(10, ceil(0.5*10*2)) = 10
    with pytest.raises(ConfigError, match="token-aware"):
        StaticMixtureWorkSource([ds("a", (9, 4)), ds("b", (50, 4))], {"a": 1, "b": 1}, chunk_size=10,
                                exhausted_policy="repeat", token_estimation=TokenEstimation(primer=0.25))
    StaticMixtureWorkSource([ds("a", (10, 4)), ds("b", (50, 4))], {"a": 1, "b": 1}, chunk_size=10,
                            exhausted_policy="repeat", token_estimation=TokenEstimation(primer=0.25))


def test_token_ratio_round_trips_and_refuses_bad_values():
    from zephon_ref.errors import StateFormatError
    from zephon_ref.work.token_estimation import TokenRatio

    r = TokenRatio(0.4, "measured")
    assert r.to_state() == [0.4, "measured"] and TokenRatio.from_state(r.to_state()) == r
    assert TokenRatio.from_state(0.3) == TokenRatio(0.3, "pinned")  # an older zephon_ref state
    for bad in ((0.0, "measured"), (math.nan, "pinned"), (0.3, "guessed")):
        with pytest.raises(ConfigError):
            TokenRatio(*bad)  # type: ignore[arg-type]
    for raw in ([0.3], [0.3, "guessed"], "x", [-1, "pinned"]):
        with pytest.raises(StateFormatError):
            TokenRatio.from_state(raw)


def test_per_shard_token_cost_is_the_cost_table_under_zephons_signature():
    from zephon_ref.types import SampleId
    from zephon_ref.work.token_estimation import PerShardTokenCost, TokenRatio

    d = ds("a", (10, 40), (5, 2))
    zt = PerShardTokenCost({"a": d}, {"a": TokenRatio(0.25, "measured")})
    table = TokenCostTable([d], {"a": 0.25})
    assert zt.cost("a", SampleId(0, 0, 3)) == table.cost("a", 0) and zt.cost("a", SampleId(0, 1, 0)) == \
        table.cost("a", 1)
    assert zt.mean_cost("a") == table.mean_cost("a")


def test_a_restore_keeps_the_checkpoints_ratios_and_never_measures():
    data = [ds("a", (20, 4)), ds("b", (20, 8))]

    def build(measure):
        return StaticMixtureWorkSource(data, {"a": 1, "b": 1}, chunk_size=4,
                                       token_estimation=TokenEstimation(measure=measure))
    first = build(lambda p: len(p["text"]))
    first.prime()
    lane = first.clone_for_lane(0, 1)
    head = read_chunks(lane, 3)
    state = lane.state_dict()
    rest = read_chunks(lane, 5)
    calls = []
    other = build(lambda p: calls.append(p) or 1)  # would measure other ratios
    resumed = other.clone_for_lane(0, 1)
    resumed.load_state_dict(state)
    assert read_chunks(resumed, 5) == rest and head and calls == []
    assert resumed.token_ratios() == first.token_ratios()

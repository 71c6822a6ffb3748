"""The ``token estimation`` row (properties.token_census): a token-aware source's measured ratios equal
the plain definition on drawn cases, and the row fails on planted bugs in the calibration pass (the
counting prefix's replay, the weighting of the counted draws), by its fixed cases and by drawn ones."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from properties import conformance
from properties.adapters import ADAPTERS
from properties.profiles import examples
from properties.token_census import FIXED_CASES, CensusCase, census_cases, census_problems, plain_ratios
from zephon_ref.work import token_estimation as te

INLINE = ADAPTERS["inline"]


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(census_cases())
def test_measured_ratios_equal_the_plain_definition(case: CensusCase) -> None:
    assert census_problems(INLINE, case) == []


def test_the_fixed_cases_measure_through_the_prefix_and_fall_back() -> None:
    """The fixed cases reach both sides of the coverage rule, and a failing measure."""
    kinds = {(src, (why or "").split(" ")[0]) for c in FIXED_CASES for src, why in
             ((r[1], r[2]) for r in plain_ratios(c).values())}
    assert {("measured", ""), ("fallback", "measured"), ("fallback", "counting")} <= kinds
    for case in FIXED_CASES:
        assert census_problems(INLINE, case) == [], case
    # and a shard sized from every second row, so the payload/raw rebase is not 1 (2,843 vs 2,182 bytes)
    big = FIXED_CASES[-1].datasets[0][1][0]
    assert len(big) > 128 and sum(map(len, big)) != int(sum(map(len, big[::2])) / len(big[::2]) * len(big))


def _plant_replay_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    """The census's counting prefix raises for every row (token_estimation.py's `got = plan(p)` made
    `pass`, mutant of the issue-32 sample): every replayed row is skipped, the estimate falls back."""
    def replayed(counting: Any, replay: Any, dataset: Any, dataset_id: int, draws: Any) -> Any:
        def count(payload: Any, shard: int, off: int) -> int | None:
            raise UnboundLocalError("cannot access local variable 'got'")
        return count
    monkeypatch.setattr(te, "_replayed", replayed)


def _plant_a_draw_counted_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    """The weighting of the counted draws is off: the first drawn row weighs one draw more."""
    plain = te._draws

    def draws(census: Any, dataset_id: int, n: int, seed: int) -> Any:
        got = plain(census, dataset_id, n, seed)
        return [(got[0][0], got[0][1] + 1), *got[1:]] if got else got
    monkeypatch.setattr(te, "_draws", draws)


@pytest.mark.parametrize("plant", [_plant_replay_fails, _plant_a_draw_counted_twice])
def test_the_row_fails_on_a_planted_bug(plant: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    row = conformance._run_cases(INLINE, "token estimation", 20, True, lambda: None)
    assert row.failure is None and row.passed == 20 + len(FIXED_CASES), row
    plant(monkeypatch)
    row = conformance._run_cases(INLINE, "token estimation", 20, True, lambda: None)
    assert row.failure is not None and "fixed case" in row.failure and "plain definition" in row.failure, row
    # and without the fixed cases, by drawn ones
    monkeypatch.setattr(conformance, "CASE_FIXED", {})
    row = conformance._run_cases(INLINE, "token estimation", 100, True, lambda: None)
    assert row.failure is not None and "plain definition" in row.failure, row


def test_an_implementation_without_token_estimation_skips_the_row() -> None:
    assert "token_estimation" not in ADAPTERS["zephon"].features
    (row,) = conformance.run_suite(ADAPTERS["zephon"], examples=1, only=["token estimation"])
    assert row.skipped is not None and "token_estimation" in row.skipped and row.examples == 0

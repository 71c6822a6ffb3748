"""The rows' fixed regression examples (properties/regressions.py): pinned draws, refused drift."""

from __future__ import annotations

import pytest
from hypothesis import strategies as st

from properties import conformance, regressions
from properties.adapters import adapter
from properties.regressions import PinnedData, Regression, UnpinnedDraw


def test_pinned_data_returns_pins_and_refuses_an_unpinned_draw() -> None:
    data = PinnedData({"cut": 3}, row="x")
    assert data.draw(st.integers(0, 9), label="cut") == 3
    assert data.unused() == []
    with pytest.raises(UnpinnedDraw, match="'topology'"):
        data.draw(st.integers(), label="topology")
    with pytest.raises(UnpinnedDraw, match="None"):
        data.draw(st.integers())


def _row(monkeypatch: pytest.MonkeyPatch, reg: Regression) -> conformance.Row | None:
    monkeypatch.setitem(regressions.REGRESSIONS, "resume at cuts", (reg,))
    _, check = conformance.PROPERTIES["resume at cuts"]
    return conformance._run_regressions(adapter("inline"), "resume at cuts", check,
                                        conformance._Counter(lambda: None))


def test_every_row_with_regressions_passes_them() -> None:
    for name in regressions.REGRESSIONS:
        _, check = conformance.PROPERTIES[name]
        c = conformance._Counter(lambda: None)
        assert conformance._run_regressions(adapter("inline"), name, check, c) is None
        assert c.passed == c.runs == len(regressions.regressions_for(name)) >= 1, name


def test_a_stale_pin_fails_the_row(monkeypatch: pytest.MonkeyPatch) -> None:
    good = Regression(regressions.SHUFFLE_TWO_LANES, {"cuts": [1]})
    assert _row(monkeypatch, good) is None
    stale = _row(monkeypatch, Regression(regressions.SHUFFLE_TWO_LANES, {"cuts": [1], "topology": 1}))
    assert stale is not None and "received no draw of ['topology']" in (stale.failure or ""), stale
    missing = _row(monkeypatch, Regression(regressions.SHUFFLE_TWO_LANES, {}))
    assert missing is not None and "labelled 'cuts'" in (missing.failure or ""), missing
    assert missing.found_at == 1 and "[regression example 1 of the row" in (missing.failure or "")

"""The conformance suite's long run measures zephon 0.2.0's inflight growth (issue 21).

zephon's adapter declines every multi-lane ensure_mixture configuration (docs/divergences.md), which
is what the long run's pipeline is; the row then runs the same pipeline without ensure_mixture
instead of skipping, so zephon's round-robin feeding shows its growth in the table.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

pytest.importorskip("zephon", reason="zephon 0.2.0 (the conformance extra) is not installed")

from properties import conformance  # noqa: E402
from properties.adapters import adapter  # noqa: E402

pytestmark = pytest.mark.conformance


def test_zephon_long_run_is_measured_without_the_mixture_it_declines() -> None:
    zephon = adapter("zephon")
    assert zephon.unsupported(conformance.long_run_config(2_000)) is not None
    assert zephon.unsupported(conformance.long_run_config(2_000, mixture=False)) is None
    row = conformance._long_run(zephon, 2_000)
    assert row.skipped is None and row.passed == 1, row
    assert "round-robin feeding (no bound)" in (row.note or "") and "without ensure_mixture" in (
        row.note or ""
    ), row
    growth = re.search(r"inflight (\d+) chunks after \d+ items, (\d+) after", row.note or "")
    assert growth is not None, row.note
    assert int(growth[2]) > int(growth[1]), row.note  # the worst lane's inflight chunks grew over the run


def test_long_run_is_skipped_only_when_both_configurations_are_declined() -> None:
    class Declines:
        name = "declines"
        features = frozenset({"engine_state"})

        def unsupported(self, cfg: Any) -> str:
            return "nothing supported"

    row = conformance._long_run(Declines(), 2_000)
    assert row.skipped == "nothing supported" and row.examples == 0

"""The rows that close the suite's blind spots (issue 32 item 4): each passes on zephon_ref and
catches the bug planted for it (a canary, patched in for the test only)."""

from __future__ import annotations

from typing import Any

import pytest

from properties import conformance
from properties.adapters import load_adapter
from zephon_ref.coordination import protocol


def _row(name: str, examples: int) -> conformance.Row:
    (row,) = conformance.run_suite(load_adapter("inline"), examples=examples, only=[name], shrink_seconds=5)
    return row


# -- aggregation --------------------------------------------------------------------------------------

def test_the_aggregation_row_passes_on_zephon_ref() -> None:
    row = _row("aggregation", 40)
    assert row.failure is None and row.skipped is None and row.passed >= 40, row


def test_the_aggregation_row_catches_a_leader_closing_on_a_subset_of_ranks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def lanes_only(self: Any) -> bool:  # planted: every lane reported, by whichever ranks
        covered = set().union(*self.lanes_of_rank.values()) if self.lanes_of_rank else set()
        return bool(covered == set(range(self.world.canonical_replicas)))

    monkeypatch.setattr(protocol.Coverage, "complete", lanes_only)
    row = _row("aggregation", 40)
    assert row.failure is not None and "peers" in row.failure, row
    assert row.found_at is not None and row.found_at <= 20, row


def test_an_adapter_without_round_machines_skips_the_row() -> None:
    (row,) = conformance.run_suite(load_adapter("zephon"), examples=2, only=["aggregation"])
    assert row.skipped == "the adapter lacks the 'aggregation' feature"

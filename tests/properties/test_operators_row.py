"""The ``operators`` row over the operators that read payloads of their own (issue 32): decode_text
(bytes fields), expand_chat and tokenize_chat (conversations; the tiny offline HF tokenizer) and
map_batch (after a drawn batch call).  The row passes on zephon_ref, and a one-line bug planted in
each operator (patched in for the test only) is caught, at the example the test bounds."""

from __future__ import annotations

from typing import Any

import pytest

from properties import conformance
from properties import generator as gen
from properties.hf_tokenizer import AVAILABLE

NEW = ("decode_text", "expand_chat", "tokenize_chat", "map_batch")
needs_hf = pytest.mark.skipif(not AVAILABLE, reason="tokenize_chat needs the hf extra (transformers)")


def _row(method: str, examples: int) -> conformance.Row:
    with conformance._shrink_cap(5):
        return conformance._run_operators(examples, True, lambda: None, methods=[method])


@pytest.mark.parametrize("method", [pytest.param(m, marks=needs_hf) if m == "tokenize_chat" else m
                                    for m in NEW])
def test_the_row_draws_the_method_and_passes_on_zephon_ref(method: str) -> None:
    assert method in gen.drawn_methods()
    row = _row(method, 30)  # 60 cases (the row runs twice the examples per method)
    assert row.failure is None and row.passed == row.examples == 60, row


def test_decode_text_that_skips_an_empty_document_without_a_tombstone_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from zephon_ref.ops.decode_text import DecodeText

    process = DecodeText.process_many

    def planted(self: DecodeText, elems: list[Any]) -> list[Any]:
        # planted: `if not new.get("text"): continue` (an empty document skipped, its offset never closed)
        return [r for r in process(self, elems) if r.meta.tombstone or r.payload.get("text", "-") != ""]

    monkeypatch.setattr(DecodeText, "process_many", planted)
    row = _row("decode_text", 30)
    assert row.failure is not None and "never closed" in row.failure, row
    assert row.found_at is not None and row.found_at <= 20, row


def test_expand_chat_that_drops_an_unanswered_chat_without_tombstones_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import zephon_ref.ops.expand_chat as mod

    monkeypatch.setattr(mod, "tombstones_for_record", lambda rec: [])  # planted: no answered query -> nothing
    row = _row("expand_chat", 30)
    assert row.failure is not None and "never closed" in row.failure, row
    assert row.found_at is not None and row.found_at <= 10, row


def test_expand_chat_whose_every_child_closes_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    import zephon_ref.ops.expand_chat as mod

    spawn = mod.spawn_child

    def planted(meta: Any, idx: int, *, is_last_child: bool = False, **kw: Any) -> Any:
        return spawn(meta, idx, is_last_child=True, **kw)  # planted: `i == last` became `True`

    monkeypatch.setattr(mod, "spawn_child", planted)
    row = _row("expand_chat", 30)
    assert row.failure is not None and "closed" in row.failure, row
    assert row.found_at is not None and row.found_at <= 20, row


@needs_hf
def test_tokenize_chat_that_drops_an_unsupervised_record_without_tombstones_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import zephon_ref.ops.tokenize_chat as mod

    monkeypatch.setattr(mod, "tombstones_for_record", lambda rec: [])  # planted: too short -> nothing
    row = _row("tokenize_chat", 30)
    assert row.failure is not None and "never closed" in row.failure, row
    assert row.found_at is not None and row.found_at <= 10, row


def test_map_batch_that_drops_a_batch_without_tombstones_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    import zephon_ref.ops.map_batch as mod

    monkeypatch.setattr(mod, "tombstones_for_record", lambda rec: [])  # planted: None -> the batch vanishes
    row = _row("map_batch", 30)
    assert row.failure is not None and "never closed" in row.failure and "map_batch" in row.failure, row
    assert row.found_at is not None and row.found_at <= 60, row  # within the row's 60 cases


def test_an_accumulator_that_denies_its_pending_data_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The mutation sample's survivor ops/base.py `return bool(self._buffers)` -> `return None` (the
    all-lanes answer of the counting accumulator) and a lane answer that is always False."""
    from zephon_ref.ops.base import CountingAccumulator

    lane_answer = CountingAccumulator.has_pending_data
    monkeypatch.setattr(CountingAccumulator, "has_pending_data",
                        lambda self, lane_id=None: None if lane_id is None else lane_answer(self, lane_id))
    row = _row("batch", 10)
    assert row.failure is not None and "has_pending_data() is None" in row.failure, row
    monkeypatch.setattr(CountingAccumulator, "has_pending_data",
                        lambda self, lane_id=None: lane_answer(self) if lane_id is None else False)
    row = _row("batch", 10)
    assert row.failure is not None and "no pending data" in row.failure, row


@pytest.mark.parametrize("method", ["pack_sequences", "pack_flat"])
def test_wrap_closing_an_offset_ahead_of_a_buffered_sibling_is_caught_by_the_fixed_case(
    method: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Divergence D-2's old rule planted (an empty closing child tombstoned at once): the method's fixed
    case (properties.op_units.regression_cases), run before any drawn one, fails."""
    from properties.op_units import regression_cases
    from zephon_ref.lineage import tombstones_for_record
    from zephon_ref.ops.pack import PackingAccumulator

    old_rule = staticmethod(lambda g, rec: tombstones_for_record(rec))
    monkeypatch.setattr(PackingAccumulator, "_close_empty", old_rule)
    row = _row(method, 1)
    fixed = len(regression_cases(method))
    assert row.failure is not None and "before its fragment" in row.failure and row.found_at <= fixed, row


def test_an_epoch_reset_that_reads_other_lanes_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The mutation sample's survivor ops/batch.py `lane_id is None` -> `is not None` in try_epoch_reset:
    a lane's stalled flush then waits on other lanes' older records (seed 002: its answer is its own)."""
    from zephon_ref.ops.batch import BatchAccumulator

    def planted(self: Any, boundary_chunk_id: int, lane_id: int | None = None) -> bool:
        lanes = sorted(self._buffers) if lane_id is not None else [lane_id]  # planted: inverted
        held = [r for lane in lanes for r in self._buffers.get(lane, ())]
        return all(r.meta.chunk_id >= boundary_chunk_id for r in held)

    monkeypatch.setattr(BatchAccumulator, "try_epoch_reset", planted)
    row = _row("batch", 100)
    assert row.failure is not None and "beside other lanes" in row.failure, row

"""zephon_ref's dropped-data counts against what zephon 0.2.0 logs for the same drops.

zephon 0.2.0 logs (logging, WARNING, logger ``zephon._internal.ops.pack_sequences``) one line
for first/best_fit's oversized documents at the end-of-data flush and one for wrap's trailing
tokens at each flush that drops, totals over every lane; zephon_ref counts per lane into the
run's ledger (``Pipeline.dropped()``), warns when a lane starts dropping of a kind and gives the
totals at the close (``phase="total"``), also for the partial batch under ``drop_last=True``
(docs/divergences.md, "Dropped data").  The totals must agree, through the query and through
the closing warnings.
"""

from __future__ import annotations

import logging
import re
import warnings
from typing import Any

import pytest

zephon = pytest.importorskip("zephon", reason="zephon 0.2.0 (the conformance extra) is not installed")

import zephon_ref  # noqa: E402
from zephon_ref.errors import DataDroppedWarning  # noqa: E402

pytestmark = pytest.mark.conformance

CASES = [
    ("first_fit", {"num_bins": 2}, 16, 8),
    ("best_fit", {"num_bins": 3}, 12, 5),
    ("wrap", {}, 16, 8),
    ("wrap", {}, 20, 3),
]


def _build(
    mod: Any, algorithm: str, knobs: dict[str, Any], max_length: int, chunk: int, drop_last: bool
) -> Any:
    rows = [{"input_ids": list(range((i * 7) % 29 + 1))} for i in range(60)]
    ds = mod.Dataset.from_dict("a", {0: mod.InMemoryShard(rows)})
    src = mod.StaticMixtureWorkSource([ds], {"a": 1.0}, chunk_size=chunk, seed=0)
    p = mod.Pipeline(src)
    p.pack_sequences(max_length, algorithm=algorithm, **knobs)
    p.batch(3, drop_last=drop_last)
    return p.options(runner="inline", canonical_replicas=2)


def _zephon_totals(caplog: pytest.LogCaptureFixture, *args: Any) -> dict[str, tuple[int, int]]:
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="zephon"):
        list(_build(zephon, *args, drop_last=False))
    over = [
        (int(d), int(t))
        for d, t in re.findall(r"dropped (\d+) document\(s\) \((\d+) token\(s\)\)", caplog.text)
    ]
    tail = [int(t) for t in re.findall(r"dropping (\d+) trailing token\(s\)", caplog.text)]
    return {"oversized": (sum(d for d, _ in over), sum(t for _, t in over)), "wrap_tail": (0, sum(tail))}


@pytest.mark.parametrize("algorithm,knobs,max_length,chunk", CASES)
def test_dropped_totals_equal_zephons_log(
    caplog: pytest.LogCaptureFixture, algorithm: str, knobs: dict[str, Any], max_length: int, chunk: int
) -> None:
    want = _zephon_totals(caplog, algorithm, knobs, max_length, chunk)
    p = _build(zephon_ref, algorithm, knobs, max_length, chunk, drop_last=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        list(p)
    got = p.dropped()
    over = [t for t in got if t.cause == "oversized"]
    assert (sum(t.records for t in over), sum(t.tokens or 0 for t in over)) == want["oversized"]
    assert sum(t.tokens or 0 for t in got if t.cause == "wrap_tail") == want["wrap_tail"][1]
    assert want["oversized"][0] or want["wrap_tail"][1], "the case should drop something"
    warned = [w.message for w in caught if isinstance(w.message, DataDroppedWarning)]
    closing = {w.cause: (w.records, w.tokens or 0) for w in warned if w.phase == "total"}
    assert closing.get("oversized", (0, 0)) == want["oversized"]
    assert closing.get("wrap_tail", (0, 0))[1] == want["wrap_tail"][1]
    starts = [(w.lane, w.cause) for w in warned if w.phase == "start"]
    assert len(starts) == len(set(starts)) == len(got)  # one per lane and kind

"""Hypothesis properties that hold for every built-in operator.

* lineage, reset, no pending data (properties.op_units, over every operator call the API
  generator draws): per base offset exactly one closing contributor/tombstone over push +
  flush, after every other fragment of that offset; ``flush(reset=True, lane_id=L)`` leaves
  lane L like a fresh accumulator and does not touch other lanes; nothing pending after it;
* split independence: outputs do not depend on how the input is cut into
  ``push_many`` calls (streaming shuffle, packers without shuffle_strategy, batch);
* lane isolation: a lane's output from pushes mixing lanes equals its output from
  the same pushes restricted to that lane (every operator with per-record state).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from properties.op_units import OpCase, op_cases, unit_problems
from properties.opkit import rec, run, split
from zephon_ref.lineage import spawn_child
from zephon_ref.ops import (
    Batch,
    EnsureMixture,
    MapTransform,
    PackSequences,
    Shuffle,
    Tokenize,
)
from zephon_ref.ops.base import BaseOp
from zephon_ref.ops.stateful import StatefulTransform
from zephon_ref.types import SampleBatch, SampleRecord

SETTINGS = settings(max_examples=40, deadline=None, database=None)


@st.composite
def streams(draw: st.DrawFn) -> list[SampleRecord]:
    """Per-lane increasing chunks; some records fanned out into children."""
    lanes = draw(st.lists(st.integers(0, 3), min_size=1, max_size=3, unique=True))
    out: list[SampleRecord] = []
    next_chunk = dict.fromkeys(lanes, 0)
    for _ in range(draw(st.integers(1, 6))):
        lane = draw(st.sampled_from(lanes))
        c = next_chunk[lane]
        next_chunk[lane] += 1
        for o in range(draw(st.integers(1, 5))):
            n = draw(st.integers(0, 14))
            r = rec(lane, c, o, n_tokens=n, comp=draw(st.integers(0, 2)))
            pieces = draw(st.integers(1, 3))
            if pieces == 1:
                out.append(r)
            else:
                for i in range(pieces):
                    meta = spawn_child(r.meta, i, is_last_child=(i == pieces - 1))
                    ids = r.payload["input_ids"][i::pieces]
                    out.append(SampleRecord(meta, {"input_ids": ids, "mask": [1] * len(ids)}))
    return out


def _texts(recs: list[SampleRecord]) -> list[SampleRecord]:
    return [SampleRecord(r.meta, {"text": " ".join(["w"] * len(r.payload["input_ids"]))}) for r in recs]


OPS: dict[str, Callable[[], BaseOp]] = {
    "map": lambda: MapTransform(lambda p: None if len(p["input_ids"]) % 4 == 1 else p),
    "tokenize_split": lambda: Tokenize(field="text", max_length=3, split_long_samples=True),
    "shuffle_streaming": lambda: Shuffle(5, seed=3),
    "shuffle_block": lambda: Shuffle(4, seed=3, algorithm="block"),
    "first_fit": lambda: PackSequences(10, num_bins=2),
    "best_fit": lambda: PackSequences(10, num_bins=3, algorithm="best_fit", flush_strategy="fullest"),
    "wrap": lambda: PackSequences(10, algorithm="wrap"),
    "wrap_capped": lambda: PackSequences(10, algorithm="wrap", max_sequences_per_bin=2),
    "mixture_bounded": lambda: EnsureMixture(
        max_buffer_size=4, weight_by="samples", mixture={0: 1.0, 1: 2.0}
    ),
    "mixture_strict": lambda: EnsureMixture(max_buffer_size=None, mixture={0: 1.0, 1: 1.0, 2: 1.0}),
    "batch_keep": lambda: Batch(3, drop_last=False),
}


def _flat(out: list[Any]) -> list[SampleRecord]:
    res: list[SampleRecord] = []
    for x in out:
        res.extend(x.records if isinstance(x, SampleBatch) else [x])
    return res


def _prep(name: str, recs: list[SampleRecord]) -> list[SampleRecord]:
    # wrap sees empty closing children too: their closer waits for a buffered sibling (divergence D-2)
    return _texts(recs) if name.startswith("tokenize") else recs


@settings(max_examples=200, deadline=None, database=None)
@given(op_cases())
def test_every_drawn_operator_closes_once_resets_its_lane_and_keeps_nothing_after_a_flush(
        case: OpCase) -> None:
    """Exactly-once closure, flush resets the lane, no pending data after a flush: over every
    operator call the API generator draws (properties.op_units), random-order packers and
    block_warmup among them, fed fan-out, split documents and empty / exactly-max_length records."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        problems = unit_problems(case)
    assert problems == [], case.describe()


def _key(out: list[Any]) -> list[Any]:
    return [
        (r.meta.lane_id, r.meta.cursor, r.meta.contributors, r.meta.tombstone, r.payload)
        for r in _flat(out)
    ]


SPLIT_FREE = ["shuffle_streaming", "first_fit", "best_fit", "wrap", "wrap_capped", "batch_keep", "map"]


@SETTINGS
@given(streams(), st.lists(st.integers(0, 60), max_size=5), st.sampled_from(SPLIT_FREE))
def test_output_does_not_depend_on_push_boundaries(
    recs: list[SampleRecord], cuts: list[int], name: str
) -> None:
    whole = run(OPS[name](), [recs])
    pieces = run(OPS[name](), split(recs, cuts))
    assert _key(whole) == _key(pieces)


def _hold(state: list[SampleRecord], recs: list[SampleRecord]) -> tuple[list[SampleRecord], list[Any]]:
    return state + recs, []


LANE_OPS: dict[str, Callable[[], BaseOp]] = {
    **OPS,
    "first_fit_random": lambda: PackSequences(10, num_bins=2, shuffle_strategy="random", shuffle_seed=7),
    "best_fit_random": lambda: PackSequences(10, num_bins=3, algorithm="best_fit", shuffle_strategy="random"),
    "wrap_random": lambda: PackSequences(10, algorithm="wrap", shuffle_strategy="random"),
    "first_fit_length": lambda: PackSequences(10, num_bins=2, shuffle_strategy="length"),
    "shuffle_block_warmup": lambda: Shuffle(6, seed=2, algorithm="block_warmup"),
    "batch_drop": lambda: Batch(2),
    "stateful": lambda: StatefulTransform("hold", init_state=list, push=_hold, flush=lambda s: s[::-1],
                                          should_flush=lambda s: len(s) >= 3, preserves_cursor_order=False),
}


@SETTINGS
@given(streams(), st.lists(st.integers(0, 60), max_size=4), st.sampled_from(sorted(LANE_OPS)))
def test_a_lane_gets_what_it_would_get_alone(recs: list[SampleRecord], cuts: list[int], name: str) -> None:
    """Seed 002: an operator holding per-record state is lane-aware.  Each lane's output from
    pushes that mix lanes equals its output from the same pushes restricted to that lane."""
    recs = _prep(name, recs)
    pushes = split(recs, cuts)
    mixed = _flat(run(LANE_OPS[name](), pushes))
    for lane in sorted({r.meta.lane_id for r in recs}):
        alone = run(LANE_OPS[name](), [[r for r in p if r.meta.lane_id == lane] for p in pushes])
        assert _key([r for r in mixed if r.meta.lane_id == lane]) == _key(alone), f"{name}: lane {lane}"

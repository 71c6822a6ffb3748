"""The faster operators (zephon_ref.fast.ops) equal the plain ones (properties.fast_ops), and a
pipeline run with them plugged in at the engine seam has the same stream, checkpoints and
fingerprint as the plain run.  Planted differences in each faster path are caught."""

from __future__ import annotations

import warnings
import zlib
from typing import Any

import pytest
from hypothesis import HealthCheck, find, given, settings

from properties.fast_ops import FastOpCase, fast_op_cases, fast_ops_problems
from properties.profiles import examples
from zephon_ref.codec import pack
from zephon_ref.fast.ops import FastOps, FastTokenize
from zephon_ref.ops import HashTokenizer, PackSequences, Shuffle, Tokenize

_HEALTH = [HealthCheck.filter_too_much, HealthCheck.too_slow]


@settings(max_examples=examples(200), suppress_health_check=_HEALTH)
@given(fast_op_cases())
def test_fast_operators_equal_the_plain_operators(case: FastOpCase) -> None:
    assert fast_ops_problems(case) == []


def test_fast_ops_swaps_exactly_the_plain_tokenize() -> None:
    fast = FastOps()
    tok = Tokenize(field="text")
    assert type(fast.operator(tok)) is FastTokenize
    assert fast.operator(tok).config is tok.config  # the knobs are the plain operator's, once
    for other in (Shuffle(4), PackSequences(8, num_bins=2)):
        assert fast.operator(other) is other

    class Mine(Tokenize):  # a user's subclass keeps its own methods
        pass

    mine = Mine(field="text")
    assert fast.operator(mine) is mine


def test_fast_tokenize_shares_one_int_object_per_id() -> None:
    """What the 64-lane benchmark needs (issue 22); the plain tokenizer makes fresh ints."""
    from properties.opkit import rec, run

    recs = [rec(0, 0, 0, payload={"text": "hello world hello " * 3})]
    out = run(FastOps().operator(Tokenize(HashTokenizer(), field="text", special_tokens="none")), [recs])
    ids = out[0].payload["input_ids"]
    assert ids == [zlib.crc32(w.encode()) % 32000 + 3 for w in ("hello world hello " * 3).split()]
    assert ids[0] is ids[2] is ids[3]


def _plant_tokenize_truncation(monkeypatch: pytest.MonkeyPatch) -> None:
    """The faster tokenize keeps one token too many under truncation (the plain path is right)."""
    plain = Tokenize._hf_kwargs

    def off_by_one(self: Any) -> dict[str, Any]:
        kw = plain(self)
        if "max_length" in kw:
            kw["max_length"] += 1
        return kw

    monkeypatch.setattr(FastTokenize, "_hf_kwargs", off_by_one)


def _plant_tokenize_split_on_spaces(monkeypatch: pytest.MonkeyPatch) -> None:
    """The faster tokenize splits words on single spaces (tabs, newlines and space runs differ)."""
    from zlib import crc32

    def encode(self: Any, tok: Any, text: str) -> list[int]:
        return [crc32(w.encode("utf-8")) % tok.vocab_size + tok.offset for w in text.split(" ") if w]

    monkeypatch.setattr(FastTokenize, "_encode", encode)


@pytest.mark.parametrize("plant", [_plant_tokenize_truncation, _plant_tokenize_split_on_spaces])
def test_a_planted_difference_in_a_fast_path_is_found(plant: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    plant(monkeypatch)
    found = find(fast_op_cases(), lambda c: bool(fast_ops_problems(c)),
                 settings=settings(max_examples=2000, database=None, suppress_health_check=_HEALTH))
    assert fast_ops_problems(found), found


# -- the whole pipeline: the seam changes no stream, checkpoint or fingerprint ----------------------


def _pipeline(lanes: int) -> Any:
    from zephon_ref.pipeline import Pipeline
    from zephon_ref.synthetic import synthetic_corpus
    from zephon_ref.work import StaticMixtureWorkSource

    corpus = synthetic_corpus(layout={"web": (120, 80), "code": (60,), "books": (40,)}, seed=3)
    source = StaticMixtureWorkSource(list(corpus.datasets), {"web": 3, "code": 2, "books": 1}, chunk_size=16,
                                     seed=2)
    return (Pipeline(source).tokenize(field="text", max_length=24, split_long_samples=True)
            .pack_sequences(32, num_bins=3).shuffle(16, seed=1).batch(2)
            .options(runner="inline", canonical_replicas=lanes))


def _digest(batch: Any) -> Any:
    return [(r.meta, r.payload) for r in batch.records]


def _run(lanes: int, fast: bool, cuts: tuple[int, ...], runner: str) -> tuple[list[Any], list[bytes], str]:
    """The delivered stream, the encoded checkpoint at each cut and the fingerprint: ``iter(pipe)``
    (the plain operators) or :func:`zephon_ref.fast.ops.iterate` (FastOps at the engine seam)."""
    from zephon_ref.fast.ops import iterate

    pipe = _pipeline(lanes).options(runner=runner)
    out: list[Any] = []
    states: list[bytes] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i, b in enumerate(iterate(pipe) if fast else iter(pipe)):
            out.append(_digest(b))
            if i in cuts:
                states.append(pack(pipe.checkpoint()))
    return out, states, pipe.fingerprint()


@pytest.mark.parametrize(("lanes", "runner"), [(1, "inline"), (3, "inline"), (3, "threads")])
def test_a_pipeline_with_fast_ops_has_the_plain_stream_checkpoints_and_fingerprint(lanes: int,
                                                                                   runner: str) -> None:
    cuts = (0, 5, 17, 40)
    plain = _run(lanes, False, cuts, runner)
    fast = _run(lanes, True, cuts, runner)
    assert len(plain[0]) > 40 and plain[0] == fast[0]
    assert len(plain[1]) == len(cuts) and plain[1] == fast[1]  # byte-identical checkpoints
    assert plain[2] == fast[2]


def test_engine_refuses_a_faster_that_is_not_one() -> None:
    from zephon_ref.errors import ConfigTypeError

    with pytest.raises(ConfigTypeError, match="faster"):
        _pipeline(1).engine(faster=object())  # type: ignore[arg-type]


@pytest.mark.parametrize("plant", [_plant_tokenize_truncation, _plant_tokenize_split_on_spaces])
def test_the_conformance_fast_ops_row_fails_on_a_planted_difference(plant: Any,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from properties import conformance
    from properties.adapters import ADAPTERS

    row = conformance._run_cases(ADAPTERS["inline"], "fast ops", 100, True, lambda: None)
    assert row.failure is None and row.passed == 100
    plant(monkeypatch)
    row = conformance._run_cases(ADAPTERS["inline"], "fast ops", 300, True, lambda: None)
    assert row.failure is not None and "plain" in row.failure, row

"""The faster operators (zephon_ref.fast.ops) equal the plain ones (properties.fast_ops), and a
pipeline run with them plugged in at the engine seam (``options(faster_ops=True)`` on the facade,
or :func:`zephon_ref.fast.ops.iterate`) has the same stream, checkpoints and fingerprint as the
plain run, and resumes from its checkpoints with or without them.  Planted differences in each
faster path are caught."""

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


def _run(lanes: int, how: str, cuts: tuple[int, ...], runner: str, *,
         restore: dict[str, Any] | None = None) -> tuple[list[Any], list[bytes], str]:
    """The delivered stream, the encoded checkpoint at each cut and the fingerprint, the run
    ``how``: ``"plain"`` (``iter(pipe)``, the plain operators), ``"iterate"``
    (:func:`zephon_ref.fast.ops.iterate`) or ``"option"`` (the facade's ``faster_ops=True``);
    from ``restore`` when given (then the cuts count items after it)."""
    from zephon_ref.fast.ops import iterate

    pipe = _pipeline(lanes).options(runner=runner, faster_ops=how == "option")
    if restore is not None:
        pipe.restore(restore)
    out: list[Any] = []
    states: list[bytes] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i, b in enumerate(iterate(pipe) if how == "iterate" else iter(pipe)):
            out.append(_digest(b))
            if i in cuts:
                states.append(pack(pipe.checkpoint()))
    return out, states, pipe.fingerprint()


LANES_RUNNERS = [(1, "inline"), (3, "inline"), (1, "threads"), (3, "threads")]


@pytest.mark.parametrize("how", ["iterate", "option"])
@pytest.mark.parametrize(("lanes", "runner"), LANES_RUNNERS)
def test_a_pipeline_with_fast_ops_has_the_plain_stream_checkpoints_and_fingerprint(lanes: int, runner: str,
                                                                                   how: str) -> None:
    cuts = (0, 5, 17, 40)
    plain = _run(lanes, "plain", cuts, runner)
    fast = _run(lanes, how, cuts, runner)
    assert len(plain[0]) > 40 and plain[0] == fast[0]
    assert len(plain[1]) == len(cuts) and plain[1] == fast[1]  # byte-identical checkpoints
    assert plain[2] == fast[2]


def _count_calls(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Count the calls of the plain Tokenize.process_many and of FastTokenize.process_many (its own,
    not inherited), by class name."""
    calls = {"Tokenize": 0, "FastTokenize": 0}
    for cls in (Tokenize, FastTokenize):
        def counted(self: Any, elems: list[Any], _name: str = cls.__name__,
                    _method: Any = cls.__dict__["process_many"]) -> list[Any]:
            calls[_name] += 1
            return _method(self, elems)

        monkeypatch.setattr(cls, "process_many", counted)
    return calls


@pytest.mark.parametrize(("lanes", "runner"), LANES_RUNNERS)
def test_the_facade_option_runs_the_fast_path_and_the_default_does_not(
        lanes: int, runner: str, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _count_calls(monkeypatch)
    plain = _run(lanes, "plain", (), runner)
    n = calls["Tokenize"]
    assert n > 0 and calls["FastTokenize"] == 0  # the default stays plain
    fast = _run(lanes, "option", (), runner)
    # every tokenize call of the run went through the fast path (none fell back to the plain one)
    assert calls == {"Tokenize": n, "FastTokenize": n} and fast[0] == plain[0]


@pytest.mark.parametrize("runner", ["inline", "threads"])
def test_a_planted_fast_path_difference_reaches_the_facade_stream(runner: str,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The option's items come from FastTokenize: a wrong fast id shows in the stream (and only there)."""
    plain = _run(3, "plain", (), runner)
    monkeypatch.setattr(FastTokenize, "_encode", lambda self, tok, text: [tok.offset] * len(text.split()))
    assert _run(3, "plain", (), runner)[0] == plain[0]
    assert _run(3, "option", (), runner)[0] != plain[0]


def _head(lanes: int, how: str, runner: str, cut: int) -> tuple[list[Any], dict[str, Any]]:
    """The first ``cut + 1`` items of a run and the checkpoint after them."""
    head: list[Any] = []
    pipe = _pipeline(lanes).options(runner=runner, faster_ops=how == "option")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i, b in enumerate(pipe):
            head.append(_digest(b))
            if i == cut:
                break
        return head, pipe.checkpoint()


@pytest.mark.parametrize("resume", ["plain", "option"])
@pytest.mark.parametrize(("lanes", "runner"), [(1, "inline"), (3, "inline"), (3, "threads")])
def test_a_checkpoint_taken_with_fast_ops_resumes_with_or_without_them(
        lanes: int, runner: str, resume: str, monkeypatch: pytest.MonkeyPatch) -> None:
    cut, cuts = 17, (0, 6, 30)
    whole = _run(lanes, "plain", (), runner)[0]
    plain_head, plain_state = _head(lanes, "plain", runner, cut)
    head, state = _head(lanes, "option", runner, cut)
    assert head == plain_head == whole[:cut + 1] and pack(state) == pack(plain_state)
    reference = _run(lanes, "plain", cuts, runner, restore=plain_state)  # plain, resumed plainly
    calls = _count_calls(monkeypatch)
    tail = _run(lanes, resume, cuts, runner, restore=state)
    used, unused = ("FastTokenize", "Tokenize") if resume == "option" else ("Tokenize", "FastTokenize")
    assert calls[used] > 0 and calls[unused] == 0  # the resumed run takes the path it asked for
    assert head + tail[0] == whole  # the uninterrupted stream, nothing skipped or repeated
    assert len(tail[1]) == len(cuts) and tail[1] == reference[1]  # byte-identical checkpoints after it
    assert tail[2] == reference[2]


def test_a_bad_faster_ops_value_is_refused_typed_and_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    from zephon_ref.errors import ConfigTypeError

    calls = _count_calls(monkeypatch)
    pipe = _pipeline(1)
    before = pipe.runtime_options()
    for bad in ("yes", 1, None):
        with pytest.raises(ConfigTypeError) as info:
            pipe.options(faster_ops=bad)
        assert isinstance(info.value, TypeError)
        assert str(info.value) == f"faster_ops: expected a bool, received {bad!r}"
        assert pipe.runtime_options() == before
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert len(list(pipe)) > 40
    assert calls["FastTokenize"] == 0 < calls["Tokenize"]


def test_engine_refuses_a_faster_that_is_not_one() -> None:
    from zephon_ref.errors import ConfigTypeError

    with pytest.raises(ConfigTypeError, match="faster"):
        _pipeline(1).engine(faster=object())  # type: ignore[arg-type]


@pytest.mark.parametrize("plant", [_plant_tokenize_truncation, _plant_tokenize_split_on_spaces])
def test_the_conformance_fast_ops_row_fails_on_a_planted_difference(plant: Any,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from properties.conformance import rows_around_a_plant

    clean, planted = rows_around_a_plant("fast ops", 100, lambda: plant(monkeypatch))
    assert clean.failure is None and clean.passed == 100
    assert planted.failure is not None and "plain" in planted.failure, planted

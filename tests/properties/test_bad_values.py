"""Bad values at every public entry point (house rules 6 and 7).

For every public argument of every public entry point (datasets, shards, MixtureSpec,
every StaticMixtureWorkSource keyword, Pipeline, every builder method and keyword,
every options key, restore, save/load_checkpoint, for_worker), an arbitrary value is
substituted into an otherwise valid call.  The call must either

* raise a ZephonRefError that also derives from the builtin a caller expects and
  whose message says what was expected, and leave the pipeline as it was (rule 6), or
* give a working object whose first items come out, or fail with such a typed error
  while they are drawn ("typed later").

Anything else (an untyped exception, a vague message, a hang, a refused call that
changed the pipeline) fails.  An exception raised *inside* a drawn user callable is
the user's own and propagates.  ``python -m properties.fuzz --report`` prints the
per-entry-point counts; ``ZEPHON_FUZZ_EXAMPLES`` raises the example count per entry
point.
"""

from __future__ import annotations

import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from properties.fuzz import (
    ACCEPTED,
    ENTRY_POINTS,
    OMIT,
    TYPED_CALL,
    EntryPoint,
    base_pipeline,
    classify,
    finish,
    fuzz_settings,
    report_bad_values,
)
from zephon_ref.errors import ConfigError, ZephonRefError

IDS = [ep.label for ep in ENTRY_POINTS]


@pytest.mark.parametrize("ep", ENTRY_POINTS, ids=IDS)
@fuzz_settings(20)
@given(data=st.data())
def test_bad_value_is_refused_typed_or_works(ep: EntryPoint, data: st.DataObject) -> None:
    value = data.draw(ep.values(), label=ep.label)
    out = classify(ep, value)
    assert not out.failed, f"{ep.name}({ep.arg}={value!r}) -> {out.line()}"


@pytest.mark.parametrize("ep", ENTRY_POINTS, ids=IDS)
def test_the_valid_baseline_is_accepted(ep: EntryPoint) -> None:
    """The harness can pass: with a valid value every entry point works (not typed by accident)."""
    assert classify(ep, ep.valid).kind == ACCEPTED, ep.label


BOUND_S = 10.0


@pytest.mark.parametrize("key,value", [("canonical_replicas", 10_000)])
def test_size_arguments_are_bounded(key: str, value: int) -> None:
    """canonical_replicas has no upper bound: 10,000 lanes cost over a minute before the first
    item (the fuzzer caps it at 64).  The first item must come within BOUND_S, or the value be
    refused up front with a typed error."""
    p = base_pipeline().batch(2)
    t0 = time.perf_counter()
    try:
        finish(p, **{key: value})
    except ZephonRefError:
        return
    ep = EntryPoint("Pipeline.options", key, lambda c, v: finish(p, **{key: v}),
                    lambda q: next(iter(q)), lambda: None)
    out = classify(ep, value, timeout=BOUND_S)
    assert not out.failed and time.perf_counter() - t0 < BOUND_S, out.line()


# -- the checks can fail -------------------------------------------------------------------------
def _fake(call, use=lambda r: r, setup=lambda: None, pipeline_of=None) -> EntryPoint:
    return EntryPoint("fake", "x", call, use, setup, pipeline_of)


def test_an_untyped_error_is_flagged() -> None:
    assert classify(_fake(lambda c, v: {}[v]), "k").kind == "UNTYPED"
    assert classify(_fake(lambda c, v: v, use=lambda r: r.nope), 1).kind == "UNTYPED"


def test_a_vague_typed_error_is_flagged() -> None:
    def raise_vague(c, v):
        raise ConfigError("bad")

    assert classify(_fake(raise_vague), 1).kind == "VAGUE"
    assert classify(_fake(lambda c, v: (_ for _ in ()).throw(ConfigError("x: expected 1, received 2"))),
                    1).kind == TYPED_CALL


def test_a_hang_is_flagged() -> None:
    def spin(c, v):
        while True:
            pass

    assert classify(_fake(spin), 1, timeout=0.2).kind == "HANG"


def test_a_refusal_that_changes_the_pipeline_is_flagged() -> None:
    def half_applied(p, v):
        p.shuffle(3)  # a side effect, then the refusal
        raise ConfigError("x: expected something, received nothing")

    ep = _fake(half_applied, setup=lambda: base_pipeline(), pipeline_of=lambda p: p)
    assert classify(ep, 1).kind == "CHANGED-ON-REFUSAL"


def test_an_error_inside_a_user_callable_is_the_users() -> None:
    ep = next(e for e in ENTRY_POINTS if e.name == "Pipeline.map_transform" and e.arg == "fn")

    def boom(payload):
        raise KeyError("user")

    assert classify(ep, boom).kind == "user code raised"
    assert OMIT is not None


@pytest.mark.slow
def test_report_table(capsys: pytest.CaptureFixture[str]) -> None:
    """The counting harness (``pytest -m slow -s``): the table the lead quotes."""
    tally = report_bad_values(25)
    assert sum(sum(c.values()) for c in tally.counts.values()) > 0

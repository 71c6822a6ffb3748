"""The API generator draws every builder method, keyword and value class (issue 32, item 1).

Under the ci profile (derandomized) every (method, knob, value class) of every data method is
drawn by the operator row's generator, and every one that the end-to-end pipelines may draw is
drawn by :func:`properties.strategies.pipeline_configs`; a public builder method with no declared
knobs (and no reason in ``NOT_DATA``), or a keyword with no declared domain, fails by name.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings

from properties import generator as gen
from properties.op_units import _probe
from properties.pipelines import PipelineConfig
from properties.strategies import (
    END_TO_END_EXCLUDED,
    END_TO_END_RARELY_DRAWN,
    END_TO_END_SKIPS,
    END_TO_END_UNDRAWN,
    pipeline_configs,
)
from zephon_ref.ops import knobs as K


def DRAW(n: int) -> settings:
    return settings(max_examples=n, deadline=None, database=None, derandomize=True, phases=[Phase.generate],
                    suppress_health_check=list(HealthCheck))


def test_every_public_builder_method_has_declared_knobs_or_a_reason() -> None:
    assert gen.undeclared() == []


def test_a_method_without_declared_knobs_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    from zephon_ref.pipeline import Pipeline

    def pack_new(self: Any, max_length: int) -> Any:  # a new operator whose config is not declared yet
        return self

    monkeypatch.setattr(Pipeline, "pack_new", pack_new, raising=False)
    got = gen.undeclared()
    assert len(got) == 1 and got[0].startswith("Pipeline.pack_new: no config declares its knobs"), got


def test_a_keyword_without_a_domain_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    from zephon_ref.pipeline import Pipeline

    original = Pipeline.batch

    def batch(self: Any, microbatch_size: int, *, drop_last: bool = True, placement: str = "auto",
              pad_to: int = 0) -> Any:
        return original(self, microbatch_size, drop_last=drop_last, placement=placement)

    monkeypatch.setattr(Pipeline, "batch", batch)
    assert gen.undeclared() == ["Pipeline.batch(pad_to=...): no declared domain"]


def test_a_config_that_declares_its_knobs_is_drawn_with_nothing_else_to_edit(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """An operator added later (its config names its builder method): drawn with every class."""
    import zephon_ref.ops.batch as batch_mod
    from zephon_ref.pipeline import Pipeline

    @dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
    class FlatConfig:
        BUILDER = "pack_flat"
        max_length: int = K.knob(domain=K.Int(1))
        mode: str = K.knob("a", K.Choice(("a", "b")))

    FlatConfig.__module__ = batch_mod.__name__  # as if declared beside the operator

    def pack_flat(self: Any, max_length: int, *, mode: str = "a") -> Any:
        FlatConfig(max_length=max_length, mode=mode)
        return self

    monkeypatch.setattr(batch_mod, "FlatConfig", FlatConfig, raising=False)
    monkeypatch.setattr(Pipeline, "pack_flat", pack_flat, raising=False)
    assert gen.undeclared() == []
    method = gen.api()["pack_flat"]
    cov = gen.Coverage()
    validate = gen.refused_by_builder(_probe)

    @DRAW(40)
    @given(gen.op_call(method, validate=validate, coverage=cov))
    def draw(call: tuple[str, dict[str, Any]]) -> None:
        pass

    draw()
    assert {k: n for k, n in cov.counts.items() if k[0] == "pack_flat" and n == 0} == {}


def _method_coverage(method: gen.Method, n: int) -> gen.Coverage:
    cov = gen.Coverage()
    validate = gen.refused_by_builder(_probe)

    @DRAW(n)
    @given(gen.op_call(method, ctx={"components": ("web", "code", "books")}, validate=validate, coverage=cov,
                       mode_aware=True))
    def draw(call: tuple[str, dict[str, Any]]) -> None:
        pass

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        draw()
    return cov


@pytest.mark.parametrize("method", gen.drawn_methods())
def test_the_operator_row_draws_every_value_class_of_every_knob(method: str) -> None:
    cov = _method_coverage(gen.api()[method], 150)
    zeros = [(m, k, c) for (m, k, c), n in sorted(cov.counts.items()) if m == method and n == 0]
    never = [row for row in zeros if row not in gen.NOT_YET_DRAWN_ROWS]
    assert never == [], f"never drawn in 150 derandomized calls: {never}"
    stale = [row for row in gen.NOT_YET_DRAWN_ROWS if row[0] == method and row not in zeros]
    assert stale == [], f"drawn now: remove from properties.generator.NOT_YET_DRAWN_ROWS: {stale}"


def test_the_methods_not_drawn_yet_are_named_with_reasons_and_really_undrawn() -> None:
    """The gaps are a table with reasons, not silence: each names a real data method, and no
    pipeline draws it (an entry that is drawn now is stale and fails)."""
    api = gen.api()
    assert set(gen.NOT_YET_DRAWN_METHODS) <= set(api)
    reasons = (*gen.NOT_YET_DRAWN_METHODS.values(), *gen.NOT_YET_DRAWN_ROWS.values(),
               *END_TO_END_UNDRAWN.values(), *END_TO_END_RARELY_DRAWN.values())
    assert all(len(why) > 20 for why in reasons)
    assert not set(gen.drawn_methods()) & set(gen.NOT_YET_DRAWN_METHODS)


def test_the_end_to_end_pipelines_draw_every_class_they_may() -> None:
    gen.reset_seen()

    @DRAW(500)
    @given(pipeline_configs())
    def draw(cfg: PipelineConfig) -> None:
        pass

    draw()
    cov = gen.seen()
    never = [
        (m, k, c) for (m, k, c) in cov.zeros()
        if m not in END_TO_END_SKIPS and m not in gen.NOT_YET_DRAWN_METHODS
        and c not in END_TO_END_EXCLUDED.get(m, {}).get(k, ()) and (m, k, c) not in gen.NOT_YET_DRAWN_ROWS
        and (m, k) not in END_TO_END_RARELY_DRAWN and (m, k, c) not in END_TO_END_UNDRAWN
    ]
    assert never == [], f"never drawn in 500 derandomized pipelines: {never}"
    stale = [row for row in END_TO_END_UNDRAWN if row not in cov.zeros()]
    assert stale == [], f"drawn now: remove from properties.strategies.END_TO_END_UNDRAWN: {stale}"
    undrawn = {m for m, n in cov.calls.items() if n == 0}
    assert undrawn == set(END_TO_END_SKIPS) | set(gen.NOT_YET_DRAWN_METHODS), undrawn


def test_the_coverage_table_names_every_row_and_the_zeros() -> None:
    cov = gen.Coverage()
    cov.add("shuffle", {"algorithm": "block_warmup"}, gen.api()["shuffle"].knobs)
    text = cov.format()
    row = f"{'shuffle':<20} {'algorithm':<26} {repr('block_warmup'):<34} {1:>8}"
    assert row in text
    assert f"{len(cov.counts)} (method, knob, value class) rows, {len(cov.zeros())} never drawn" in text
    assert ("shuffle", "algorithm", "'block'") in cov.zeros()

"""The engine's public tombstone observer (``Pipeline.engine(on_tombstone=...)``): it sees every
tombstone that reaches the tail, once and in tail order, changes nothing the engine delivers or
checkpoints, is off by default, and a bad argument is refused before anything changes."""

from __future__ import annotations

import warnings
import zlib
from typing import Any

import pytest

from properties.pipelines import PipelineConfig, build_pipeline
from sim.checker import admitted_from_source, check_lineage
from zephon_ref.engine.core import Engine
from zephon_ref.errors import ConfigTypeError
from zephon_ref.types import SampleRecord


def drop_some(row: dict[str, Any]) -> dict[str, Any] | None:
    """Drops about a quarter of the rows (crc of their tokens): each drop becomes a tombstone."""
    return None if zlib.crc32(repr(row["input_ids"]).encode()) % 4 == 0 else row


CFG = PipelineConfig(
    [
        ("map_transform", {"transform_fn": drop_some}),
        ("pack_sequences", {"max_length": 96, "num_bins": 3}),
        ("batch", {"microbatch_size": 2, "drop_last": False}),
    ],
    layout={"web": (30, 20), "code": (15,), "books": (10,)},
    source_kwargs={"chunk_size": 6, "seed": 2},
    options={"runner": "inline", "canonical_replicas": 2},
)


def drive(engine: Engine) -> list[Any]:
    """Step the engine to the end (deliver when it can, else admit and run every stage)."""
    out = []
    while not engine.finished:
        x = engine.deliver()
        if x is not None:
            out.append(x)
            continue
        engine.step()
    return out


def test_the_observer_sees_every_tombstone_once_and_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    plain = build_pipeline("zephon_ref", CFG)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = drive(plain.engine())
        want_state = plain.local_state()

    # what the engine's own (private) tombstone handler consumed, to compare the observer with
    handled: list[SampleRecord] = []
    real = Engine._complete

    def spy(self: Engine, t: SampleRecord) -> None:
        handled.append(t)
        real(self, t)
    monkeypatch.setattr(Engine, "_complete", spy)

    seen: list[SampleRecord] = []
    watched = build_pipeline("zephon_ref", CFG)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = drive(watched.engine(on_tombstone=seen.append))
        got_state = watched.local_state()
    assert got == want and got_state == want_state  # an observer only
    assert seen, "the configuration was chosen to drop rows"
    assert all(t.meta.tombstone for t in seen)
    assert [id(t) for t in seen] == [id(t) for t in handled]  # each once, in tail order
    c = CFG.options["canonical_replicas"]
    report = check_lineage(admitted_from_source(watched._source, range(c), c), got, seen)
    assert report.ok, report.describe()
    # without the observed tombstones the dropped rows' offsets are lost: they are what closes them
    assert not check_lineage(admitted_from_source(watched._source, range(c), c), got, []).ok


def test_the_observer_is_off_by_default() -> None:
    p = build_pipeline("zephon_ref", CFG)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        engine = p.engine()
    assert engine._tombstone_observer is None


def test_a_non_callable_observer_is_refused_and_changes_nothing() -> None:
    p = build_pipeline("zephon_ref", CFG)
    with pytest.raises(ConfigTypeError, match="on_tombstone") as err:
        p.engine(on_tombstone=[])  # type: ignore[arg-type]
    assert isinstance(err.value, TypeError) and "received" in str(err.value)
    assert p._engine is None  # nothing was built
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert drive(p.engine())  # the pipeline is as it was

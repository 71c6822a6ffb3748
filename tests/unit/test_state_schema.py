"""zephon_ref.state: one schema for every reader, and restore() refusing every inconsistent state.

Each refusal is a reproducer from the reliability issue (defect 8) or a rule of the schema's
docstring; each test also shows that the unmutated state is accepted, so none passes vacuously.
"""

from __future__ import annotations

import copy
import importlib
from collections.abc import Callable
from typing import Any

import pytest

from properties.pipelines import PipelineConfig, build_pipeline, item_view
from zephon_ref import state as schema
from zephon_ref import windows
from zephon_ref.checkpoint import schema as store_schema
from zephon_ref.errors import StateFormatError, StateMismatchError, ZephonRefError

CFG = PipelineConfig(
    chain=[("pack_sequences", {"max_length": 48, "algorithm": "first_fit", "num_bins": 4}),
           ("shuffle", {"buffer_size": 8, "seed": 3}), ("batch", {"microbatch_size": 2})],
    layout={"web": (24, 12), "code": (12,), "books": (8,)}, source_kwargs={"chunk_size": 8, "seed": 1},
    options={"runner": "inline", "canonical_replicas": 2, "flush_every_k_chunks": 2})
CUT = 5
# the package re-exports the function merge(), which shadows the module as an attribute
merge_module = importlib.import_module("zephon_ref.coordination.merge")


def _taken() -> tuple[dict[str, Any], list[Any]]:
    p = build_pipeline("zephon_ref", CFG)
    items = [item_view(x) for x in p]
    q = build_pipeline("zephon_ref", CFG)
    it = iter(q)
    for _ in range(CUT):
        next(it)
    return q.checkpoint(), items


@pytest.fixture(scope="module")
def taken() -> tuple[dict[str, Any], list[Any]]:
    return _taken()


def test_every_reader_uses_the_one_field_list() -> None:
    assert store_schema.LANE_FIELDS is schema.LANE_FIELDS
    assert store_schema.UNIVERSAL_FIELDS is schema.UNIVERSAL_FIELDS
    assert store_schema.KNOWN_ENGINE_VERSIONS is schema.ACCEPTED_VERSIONS
    assert (
        merge_module.LANE_FIELDS is schema.LANE_FIELDS
        and merge_module.REQUIRED_LANE_FIELDS is schema.REQUIRED_LANE_FIELDS
    )
    assert set(schema.LANE_FIELDS) | set(schema.UNIVERSAL_FIELDS) == {f.name for f in schema.FIELDS}


def test_a_real_checkpoint_has_exactly_the_schema_fields(taken: tuple[dict[str, Any], list[Any]]) -> None:
    ck, _ = taken
    assert set(ck) == {f.name for f in schema.FIELDS}
    assert schema.validate(ck) == 2


def _lane(ck: dict[str, Any]) -> Any:
    return next(iter(ck["progress"]))


MUTATIONS: dict[str, tuple[Callable[[dict[str, Any]], None], type[ZephonRefError]]] = {
    "rr_next_idx=5": (lambda c: c.__setitem__("rr_next_idx", 5), StateFormatError),
    "checkpoint_reload_count=None": (
        lambda c: c.__setitem__("checkpoint_reload_count", None),
        StateFormatError,
    ),
    "epoch_boundaries=7": (lambda c: c.__setitem__("epoch_boundaries", 7), StateFormatError),
    "replay_cursors={}": (lambda c: c.__setitem__("replay_cursors", {}), StateMismatchError),
    "cursor None after deliveries": (
        lambda c: c["replay_cursors"].__setitem__(_lane(c), None),
        StateFormatError,
    ),
    "unknown key": (lambda c: c.__setitem__("extra", 1), StateFormatError),
    "version 1": (lambda c: c.__setitem__("version", 1), StateFormatError),
    "next cid not after inflight": (lambda c: c["lane_next_cid"].__setitem__(_lane(c), 99), StateFormatError),
    "unsorted boundaries": (lambda c: c["epoch_boundaries"].__setitem__(_lane(c), [4, 2]), StateFormatError),
    "negative emitted": (lambda c: c["lane_emitted"].__setitem__(_lane(c), -1), StateFormatError),
    "progress bool": (lambda c: c["progress"].__setitem__(_lane(c), True), StateFormatError),
    "lane out of range": (
        lambda c: c["progress"].__setitem__(7, {"chunk_id": 0, "offset": 0}),
        StateFormatError,
    ),
}


@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_validate_refuses(name: str, taken: tuple[dict[str, Any], list[Any]]) -> None:
    ck, items = taken
    mutate, error = MUTATIONS[name]
    bad = copy.deepcopy(ck)
    mutate(bad)
    bad = schema.seal(bad)  # vouched for: the consistency rule itself must refuse it
    p = build_pipeline("zephon_ref", CFG)
    with pytest.raises(error):
        p.restore(bad)
    # the refusal changed nothing: the pipeline still runs from the start, and ck still restores
    assert [item_view(x) for x in p] == items
    assert [item_view(x) for x in build_pipeline("zephon_ref", CFG).restore(ck)] == items[CUT:]


def _inflight_chunk(ck: dict[str, Any]) -> dict[str, Any]:
    lane = _lane(ck)
    return next(iter(ck["inflight"][lane].values()))  # type: ignore[no-any-return]


def _first_sid(ck: dict[str, Any]) -> list[int]:
    return _inflight_chunk(ck)["components"][0][1][0]  # type: ignore[no-any-return]


SOURCE_MUTATIONS: dict[str, Callable[[dict[str, Any]], None]] = {  # each with the check that must fire
    "another seed": lambda c: c["lane_ws_state"][_lane(c)].__setitem__("seed", 99),
    "other weights": lambda c: c["lane_ws_state"][_lane(c)].__setitem__(
        "weights", {"web": 1.0, "code": 0.0, "books": 0.0}
    ),
    "stop_after_passes -1": lambda c: c["lane_ws_state"][_lane(c)].__setitem__("stop_after_passes", -1),
    "max_repeats -1": lambda c: c["lane_ws_state"][_lane(c)].__setitem__(
        "max_repeats", {"web": -1, "code": None, "books": None}
    ),
    "knob string": lambda c: c["lane_ws_state"][_lane(c)]["knobs"].__setitem__("shuffle_shards", "no"),
    "cursor_block_sizes -1": lambda c: c["lane_ws_state"][_lane(c)].__setitem__(
        "cursor_block_sizes", {"web": -1, "code": None, "books": None}
    ),
    "local_idx -1": lambda c: _first_sid(c).__setitem__(2, -1),
    "shard that does not exist": lambda c: _first_sid(c).__setitem__(1, 999),
}


@pytest.mark.parametrize("name", sorted(SOURCE_MUTATIONS))
def test_restore_refuses_a_state_of_another_configuration(name: str,
                                                          taken: tuple[dict[str, Any], list[Any]]) -> None:
    ck, items = taken
    bad = copy.deepcopy(ck)
    SOURCE_MUTATIONS[name](bad)
    bad = schema.seal(bad)  # vouched for: the configuration / dataset checks must refuse it
    p = build_pipeline("zephon_ref", CFG)
    with pytest.raises(StateMismatchError, match="work-source|sample of|row of dataset"):
        p.restore(bad)
    assert [item_view(x) for x in p] == items


def test_a_replay_target_that_never_reappears_is_refused_not_dropped(
        taken: tuple[dict[str, Any], list[Any]]) -> None:
    """A forged cursor (right chunk, offset and sample, another lineage) passes every static
    check; replay must then refuse once the target's epoch is over instead of silently
    dropping the lane's whole remaining stream."""
    ck, _ = taken
    bad = copy.deepcopy(ck)
    lane = _lane(bad)
    cid, off, lineage, sid = bad["replay_cursors"][lane]
    bad["replay_cursors"][lane] = (cid, off, (*tuple(lineage), 97), sid)
    bad = schema.seal(bad)
    q = build_pipeline("zephon_ref", CFG).restore(bad)
    with pytest.raises(StateMismatchError, match="never reappeared"):
        list(q)


@pytest.mark.parametrize("path", [("lane_ws_state", "global_chunk_index"), ("lane_ws_state", "accumulators"),
                                  ("progress", "offset")])
def test_an_altered_position_is_refused_by_the_integrity_digest(
        path: tuple[str, str], taken: tuple[dict[str, Any], list[Any]]) -> None:
    """Position fields cannot be checked against the pipeline in O(1): the digest refuses them."""
    ck, items = taken
    bad = copy.deepcopy(ck)
    lane = _lane(bad)
    field, key = path
    value = bad[field][lane][key]
    bad[field][lane][key] = {k: 0.5 for k in value} if isinstance(value, dict) else value + 1
    p = build_pipeline("zephon_ref", CFG)
    with pytest.raises(StateMismatchError, match="integrity"):
        p.restore(bad)
    assert [item_view(x) for x in p] == items


def test_the_digest_survives_json_and_store_round_trips_and_seal_vouches(
        taken: tuple[dict[str, Any], list[Any]], tmp_path: Any) -> None:
    import json

    from zephon_ref.checkpoint import store

    ck, items = taken
    via_json = json.loads(json.dumps(ck))
    schema.verify_integrity(via_json)
    assert [item_view(x) for x in build_pipeline("zephon_ref", CFG).restore(via_json)] == items[CUT:]
    store.save(ck, tmp_path)
    schema.verify_integrity(store.load(tmp_path))
    unsealed = {**ck, "integrity": None}
    with pytest.raises(StateMismatchError, match="unsealed"):
        build_pipeline("zephon_ref", CFG).restore(unsealed)
    build_pipeline("zephon_ref", CFG).restore(schema.seal(unsealed))  # an explicit vouch is accepted


def test_a_token_aware_pipeline_resumes_exactly_at_every_cut() -> None:
    """token_deficits move during a run (a position field): a mid-run checkpoint of a
    token-aware source restores and continues exactly."""
    from zephon_ref.work import TokenEstimation

    cfg = PipelineConfig(
        chain=[("batch", {"microbatch_size": 2})],
        layout={"web": (20, 10), "code": (10,)},
        weights={"web": 0.7, "code": 0.3},
        source_kwargs={"chunk_size": 6, "seed": 2, "token_estimation": TokenEstimation(primer=0.25)},
        options={"runner": "inline", "canonical_replicas": 2},
    )
    items = [item_view(x) for x in build_pipeline("zephon_ref", cfg)]
    assert len(items) > 6
    for cut in range(0, len(items), 3):
        p = build_pipeline("zephon_ref", cfg)
        it = iter(p)
        for _ in range(cut):
            next(it)
        ck = p.checkpoint()
        it.close()
        assert [item_view(x) for x in build_pipeline("zephon_ref", cfg).restore(ck)] == items[cut:], cut


def test_the_mid_window_rule_is_one_function_warning_at_the_callers_line(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A whole state warns when all C delivered counts are known and unequal (zephon 0.2.0's rule);
    a single participant's checkpoint() and a merge both ask windows.warn_if_mid_window, and the
    warning points at the line that called them."""
    import sys
    import warnings

    def warned(call: Callable[[], Any]) -> list[warnings.WarningMessage]:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            call()
        return [w for w in caught if "checkpoint taken mid-window" in str(w.message)]

    assert not warned(lambda: windows.warn_if_mid_window({0: 2, 1: 2}, 2, stacklevel=1))
    assert not warned(lambda: windows.warn_if_mid_window({0: 1}, 2, stacklevel=1))  # a count unknown
    (w,) = warned(lambda: windows.warn_if_mid_window({0: 3, 1: 2}, 2, stacklevel=1))
    assert "expected equal" in str(w.message) and "received counts in [2..3] across 2 lanes" in str(w.message)
    assert issubclass(w.category, RuntimeWarning)

    q = build_pipeline("zephon_ref", CFG)
    it = iter(q)
    for _ in range(CUT):  # 5 items over 2 lanes: 3 and 2 delivered
        next(it)
    state = q.local_state()  # the state checkpoint() returns, asked without a warning
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        here = sys._getframe().f_lineno
        q.checkpoint()
        merge_module.merge([state])
    got = [(w.filename, w.lineno) for w in caught if "checkpoint taken mid-window" in str(w.message)]
    assert got == [(__file__, here + 1), (__file__, here + 2)]

    calls: list[tuple[dict[int, int], int]] = []
    monkeypatch.setattr(windows, "warn_if_mid_window",
                        lambda counts, c, *, stacklevel: calls.append((dict(counts), c)))
    q.checkpoint()
    merge_module.merge([state])
    assert calls == [(state["lane_emitted"], 2)] * 2

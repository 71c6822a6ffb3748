"""Restore of one validated state into many pipelines (``zephon_ref.state.validated`` and
``Pipeline.restore(ValidatedState)``): the same resumed streams as ``restore(dict)``, every
refusal unchanged (same type, same message), and nothing that changes the snapshot after
its checks."""

from __future__ import annotations

import copy
import dataclasses
import warnings
from typing import Any

import pytest

from properties.pipelines import PipelineConfig
from properties.topology import merged_checkpoint, participants, run_lockstep
from zephon_ref import state as schema
from zephon_ref.errors import StateFormatError, StateMismatchError, ZephonRefError

LAYOUT = {"web": (30, 22), "code": (16,), "books": (9,)}
CHAIN = [("pack_sequences", {"max_length": 160, "num_bins": 2}), ("shuffle", {"buffer_size": 4, "seed": 2}),
         ("batch", {"microbatch_size": 1})]


def cfg(c: int = 8, seed: int = 7) -> PipelineConfig:
    return PipelineConfig(
        CHAIN,
        layout=LAYOUT,
        source_kwargs={"chunk_size": 3, "seed": seed, "exhausted_policy": "repeat", "max_repeats": 2},
        options={"runner": "inline", "canonical_replicas": c, "flush_every_k_chunks": 2},
    )


def cut_state(c: int = 8, steps: int = 5) -> dict[str, Any]:
    pipes = participants(cfg(c), 4, 1)
    run_lockstep(pipes, steps)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return merged_checkpoint(pipes)


def restored(state: Any, d: int, w: int, c: int = 8) -> list[Any]:
    pipes = participants(cfg(c), d, w)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for p in pipes:
            p.restore(state)
    return pipes


@pytest.mark.parametrize("d,w", [(4, 1), (1, 1), (3, 2)])
@pytest.mark.parametrize("steps", [1, 11])
def test_validated_restore_resumes_exactly_like_a_dict_restore(d: int, w: int, steps: int) -> None:
    state = cut_state(steps=steps)
    want, _ = run_lockstep(restored(copy.deepcopy(state), d, w))
    frozen = schema.validated(state)
    got, _ = run_lockstep(restored(frozen, d, w))
    assert want and got == want


def test_checkpoint_before_iteration_returns_the_whole_state() -> None:
    state = cut_state()
    frozen = schema.validated(state)
    assert frozen.lanes == tuple(range(8)) and frozen.digest == state["integrity"]
    p_dict, p_frozen = restored(copy.deepcopy(state), 4, 1)[1], restored(frozen, 4, 1)[1]
    assert p_frozen.checkpoint() == p_dict.checkpoint() == state
    assert p_frozen.local_state() == state
    clone = p_frozen.for_worker(0, 1)  # the pending restore travels with a copy
    assert clone.checkpoint() == state


def test_state_for_copies_only_the_given_lanes() -> None:
    state = cut_state()
    frozen = schema.validated(state)
    part = frozen.state_for((2, 3))
    for name in schema.REQUIRED_LANE_FIELDS:
        assert sorted(schema.lane_key(k, "k", 8) for k in part[name]) == [2, 3]
        assert part[name][2] == state[name][2]
    part[schema.REQUIRED_LANE_FIELDS[0]][2] = "changed"  # a fresh copy each time
    assert (
        frozen.state_for((2,))[schema.REQUIRED_LANE_FIELDS[0]][2] == state[schema.REQUIRED_LANE_FIELDS[0]][2]
    )


def test_the_snapshot_cannot_be_changed_after_its_checks() -> None:
    state = cut_state()
    frozen = schema.validated(state)
    want, _ = run_lockstep(restored(copy.deepcopy(state), 4, 1))
    state["progress"][0]["offset"] += 5  # the caller's dict changes after validation...
    state["lane_next_cid"][1] = 10**6
    state["fingerprint"] = "x" * 64
    with pytest.raises(dataclasses.FrozenInstanceError):
        frozen.digest = "0" * 64  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        frozen._state = {}  # type: ignore[misc]
    assert copy.deepcopy(frozen) is frozen
    frozen.state()["progress"][0]["offset"] += 7  # a read hands out a copy: editing it changes nothing
    frozen.state_for([0])["lane_next_cid"][0] = 10**6
    got, _ = run_lockstep(restored(frozen, 4, 1))
    assert got == want  # ...and the snapshot does not see it


def _refusal(fn: Any) -> tuple[type, str]:
    with pytest.raises(ZephonRefError) as info:
        fn()
    return type(info.value), str(info.value)


def _bad_states() -> list[tuple[str, dict[str, Any]]]:
    base = cut_state()
    out = []
    s = copy.deepcopy(base)
    s["progress"][0]["offset"] += 1  # edited without a seal: integrity refuses
    out.append(("tampered", s))
    s = copy.deepcopy(base)
    s["integrity"] = None
    out.append(("unsealed", s))
    s = copy.deepcopy(base)
    s["lane_next_cid"][3] = -1
    out.append(("bad lane, sealed", schema.seal(s)))
    s = copy.deepcopy(base)
    s["schema"] = "other/1"
    out.append(("schema", schema.seal(s)))
    s = copy.deepcopy(base)
    del s["inflight"][5]
    out.append(("missing lane slice", schema.seal(s)))
    s = copy.deepcopy(base)
    s["fingerprint"] = "f" * 64
    out.append(("fingerprint", schema.seal(s)))
    s = copy.deepcopy(base)
    s["world"] = {**s["world"], "canonical_replicas": 16}
    out.append(("canonical_replicas", schema.seal(s)))
    s = copy.deepcopy(base)
    for name in schema.LANE_FIELDS:  # a valid state without lane 6: the owner's load refuses
        if isinstance(s.get(name), dict):
            s[name].pop(6, None)
    out.append(("owned lane absent", schema.seal(s)))
    s = copy.deepcopy(base)
    ws = s["lane_ws_state"][2]
    key = next(k for k in sorted(ws) if k not in schema.SOURCE_RESTORABLE_KEYS)
    ws[key] = "not this source's" if not isinstance(ws[key], str) else ws[key] + "!"
    out.append(("source configuration", schema.seal(s)))
    return out


@pytest.mark.parametrize("case", range(9))
def test_every_refusal_is_unchanged(case: int) -> None:
    name, bad = _bad_states()[case]
    before = copy.deepcopy(bad)
    want = _refusal(lambda: restored(copy.deepcopy(bad), 4, 1))

    def frozen_path() -> None:
        restored(schema.validated(bad), 4, 1)

    got = _refusal(frozen_path)
    assert got == want, name
    assert issubclass(got[0], (StateFormatError, StateMismatchError)), name
    assert bad == before  # a refusal changes nothing


def test_a_refused_restore_leaves_the_pipeline_as_it_was() -> None:
    state = cut_state()
    bad = copy.deepcopy(state)
    bad["fingerprint"] = "f" * 64
    frozen_bad = schema.validated(schema.seal(bad))
    p = participants(cfg(), 4, 1)[0]
    fresh = p.local_state()
    with pytest.raises(StateMismatchError):
        p.restore(frozen_bad)
    assert p.local_state() == fresh

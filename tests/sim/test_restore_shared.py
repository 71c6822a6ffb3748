"""sim.restore_shared.SharedRestore: one merged state validated once and restored into many pipelines
gives the same resumed streams as restoring the whole state into each, every refusal unchanged (same
type, same message), and nothing that changes its copy after its checks."""

from __future__ import annotations

import copy
import warnings
from typing import Any

import pytest

from properties.pipelines import PipelineConfig
from properties.topology import merged_checkpoint, participants, run_lockstep
from sim.restore_shared import SharedRestore
from zephon_ref import state as schema
from zephon_ref.errors import StateFormatError, StateMismatchError, ZephonRefError
from zephon_ref.work.base import SOURCE_RESTORABLE_KEYS

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
    """Every participant restores ``state`` (a dict: the whole state; a SharedRestore: its own lanes)."""
    pipes = participants(cfg(c), d, w)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for p in pipes:
            p.restore(state.for_lanes(p.world().owned_lanes) if isinstance(state, SharedRestore) else state)
    return pipes


@pytest.mark.parametrize("d,w", [(4, 1), (1, 1), (3, 2)])
@pytest.mark.parametrize("steps", [1, 11])
def test_shared_restore_resumes_exactly_like_a_whole_state_restore(d: int, w: int, steps: int) -> None:
    state = cut_state(steps=steps)
    want, _ = run_lockstep(restored(copy.deepcopy(state), d, w))
    got, _ = run_lockstep(restored(SharedRestore(state), d, w))
    assert want and got == want


def test_a_slice_holds_only_the_given_lanes_and_is_sealed() -> None:
    state = cut_state()
    shared = SharedRestore(state)
    assert shared.whole() == state
    part = shared.for_lanes((2, 3))
    schema.validate(part)
    schema.verify_integrity(part)
    for name in schema.REQUIRED_LANE_FIELDS:
        assert sorted(schema.lane_key(k, "k", 8) for k in part[name]) == [2, 3]
        assert part[name][2] == state[name][2]
    part[schema.REQUIRED_LANE_FIELDS[0]][2] = "changed"  # a fresh copy each time
    assert (
        shared.for_lanes((2,))[schema.REQUIRED_LANE_FIELDS[0]][2] == state[schema.REQUIRED_LANE_FIELDS[0]][2]
    )


def test_the_copy_cannot_be_changed_after_its_checks() -> None:
    state = cut_state()
    shared = SharedRestore(state)
    want, _ = run_lockstep(restored(copy.deepcopy(state), 4, 1))
    state["progress"][0]["offset"] += 5  # the caller's dict changes after validation...
    state["lane_next_cid"][1] = 10**6
    state["fingerprint"] = "x" * 64
    shared.whole()["progress"][0]["offset"] += 7  # a read hands out a copy: editing it changes nothing
    shared.for_lanes([0])["lane_next_cid"][0] = 10**6
    got, _ = run_lockstep(restored(shared, 4, 1))
    assert got == want  # ...and the shared copy does not see it


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
    key = next(k for k in sorted(ws) if k not in SOURCE_RESTORABLE_KEYS)
    ws[key] = "not this source's" if not isinstance(ws[key], str) else ws[key] + "!"
    out.append(("source configuration", schema.seal(s)))
    return out


@pytest.mark.parametrize("case", range(9))
def test_every_refusal_is_unchanged(case: int) -> None:
    name, bad = _bad_states()[case]
    before = copy.deepcopy(bad)
    want = _refusal(lambda: restored(copy.deepcopy(bad), 4, 1))

    def shared_path() -> None:
        restored(SharedRestore(bad), 4, 1)

    got = _refusal(shared_path)
    if name == "owned lane absent":
        # the message lists the lanes the restored state holds: all but 6 there, the owner's own here
        assert got[0] is want[0] and "owned lane 6" in got[1] and "owned lane 6" in want[1], (got, want)
    else:
        assert got == want, name
    assert issubclass(got[0], (StateFormatError, StateMismatchError)), name
    assert bad == before  # a refusal changes nothing


def test_a_refused_restore_leaves_the_pipeline_as_it_was() -> None:
    state = cut_state()
    bad = copy.deepcopy(state)
    bad["fingerprint"] = "f" * 64
    shared_bad = SharedRestore(schema.seal(bad))
    p = participants(cfg(), 4, 1)[0]
    fresh = p.local_state()
    with pytest.raises(StateMismatchError):
        p.restore(shared_bad.for_lanes(p.world().owned_lanes))
    assert p.local_state() == fresh

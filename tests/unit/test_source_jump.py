"""The shared quota timeline's jump over other lanes' chunks equals the one-by-one walk.

StaticMixtureWorkSource skips the chunks other lanes own by jumping through a process-wide
quota timeline (zephon_ref/work/static_mixture.py, module docstring).  Here every lane of
many random configurations (policies, stop_after_passes, max_repeats, block shuffles, tiny
datasets that run out often, modulo and permute routing) is read with jumps on and off, in
a random interleaving of lanes, with restores from earlier states, from states whose
accumulators are off the timeline, and with a tiny timeline window: every chunk and every
state_dict must be equal, and the jump must actually have been taken.
"""

from __future__ import annotations

import random
import warnings
from typing import Any

import pytest

from zephon_ref.errors import ZephonRefError
from zephon_ref.work import Dataset, InMemoryShard, StaticMixtureWorkSource
from zephon_ref.work import static_mixture as sm


def _ds(name: str, sizes: list[int]) -> Dataset:
    return Dataset.from_dict(name, {i: InMemoryShard([{"i": j} for j in range(n)]) for i, n in enumerate(sizes)})


def _config(rng: random.Random) -> dict[str, Any]:
    names = ["a", "b", "c"][: rng.randint(1, 3)]
    kw: dict[str, Any] = {
        "datasets": [_ds(n, [rng.randint(1, 30) for _ in range(rng.randint(1, 3))]) for n in names],
        "mixture": {n: rng.choice([0.1, 0.25, 0.3, 1.0, 2.0, 0.7]) for n in names},
        "chunk_size": rng.randint(1, 12),
        "seed": rng.randint(0, 99),
        "lane_assignment": rng.choice(["permute", "modulo"]),
        "shuffle_within_shard": rng.random() < 0.3,
        "shuffle_block_size": rng.choice([None, None, 2, 5]),
    }
    policy = rng.choice(["default", "sap", "repeat_cap", "stop", "mixed", "redistribute"])
    if policy == "sap":
        kw["exhausted_policy"], kw["stop_after_passes"] = "repeat", rng.randint(1, 3)
    elif policy == "repeat_cap":
        kw["exhausted_policy"], kw["stop_after_passes"], kw["max_repeats"] = "repeat", None, rng.randint(0, 3)
    elif policy == "stop":
        kw["exhausted_policy"], kw["stop_after_passes"] = "stop", None
    elif policy == "mixed":
        kw["exhausted_policy"] = {n: rng.choice(["stop", "repeat"]) for n in names}
        kw["stop_after_passes"], kw["max_repeats"] = None, rng.randint(1, 2)
    elif policy == "redistribute":  # no jump (the quotas depend on the cursors): the walk must still agree
        kw["exhausted_policy"] = {n: rng.choice(["redistribute", "repeat"]) for n in names}
        kw["stop_after_passes"], kw["max_repeats"] = None, 2
    return kw


def _chunk(c: Any) -> Any:
    return None if c is None else (c.components, c.seed, c.target_mixture, c.source_exhausted)


def _run_case(case: int, counter: list[int]) -> bool:
    rng = random.Random(case)
    kw = _config(rng)
    lanes = rng.choice([1, 2, 3, 5, 8, 16])
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fast, slow = StaticMixtureWorkSource(**kw), StaticMixtureWorkSource(**kw)
    except ZephonRefError:
        return False  # a refused configuration (too small a dataset for its quota): nothing to compare
    slow._jumps = False
    a = [fast.clone_for_lane(i, lanes) for i in range(lanes)]
    b = [slow.clone_for_lane(i, lanes) for i in range(lanes)]
    saved: list[tuple[int, dict[str, Any]]] = []
    done = [False] * lanes
    for _ in range(40 * lanes):
        if all(done):
            break
        lane = rng.choice([i for i in range(lanes) if not done[i]])
        r = rng.random()
        if r < 0.05 and saved:
            # restore a lane from an earlier state of its own (behind the timeline, or re-anchoring it)
            i, st = rng.choice(saved)
            a[i], b[i] = fast.clone_for_lane(i, lanes), slow.clone_for_lane(i, lanes)
            a[i].load_state_dict(st)
            b[i].load_state_dict(st)
            done[i] = False
            continue
        if r < 0.08:
            # accumulators off the timeline (a state from elsewhere): the lane must walk and still agree
            st = a[lane].state_dict()
            if st["accumulators"]:
                n = sorted(st["accumulators"])[0]
                st["accumulators"][n] = st["accumulators"][n] * 0.5 + 0.125
                a[lane], b[lane] = fast.clone_for_lane(lane, lanes), slow.clone_for_lane(lane, lanes)
                a[lane].load_state_dict(st)
                b[lane].load_state_dict(st)
        try:
            got_a: Any = _chunk(a[lane].next_chunk())
        except ZephonRefError as exc:
            got_a = type(exc).__name__
        try:
            got_b: Any = _chunk(b[lane].next_chunk())
        except ZephonRefError as exc:
            got_b = type(exc).__name__
        assert got_a == got_b, (case, lane, kw, lanes)
        sa, sb = a[lane].state_dict(), b[lane].state_dict()
        assert sa == sb, (case, lane, kw, lanes)
        if got_a is None or isinstance(got_a, str):
            done[lane] = True
        elif rng.random() < 0.2:
            saved.append((lane, sa))
    counter[1] += 1
    return True


@pytest.mark.parametrize("window", [None, 3])
def test_jump_equals_the_walk(monkeypatch: pytest.MonkeyPatch, window: int | None) -> None:
    monkeypatch.setattr(sm, "_TIMELINES", {})
    if window is not None:  # a tiny window: lanes fall behind it, re-anchor it, trim it
        monkeypatch.setattr(sm, "TIMELINE_WINDOW", window)
    counter = [0, 0]
    real = sm._QuotaTimeline.jump

    def counting(self: Any, *args: Any) -> Any:
        out = real(self, *args)
        counter[0] += out is not None
        return out

    monkeypatch.setattr(sm._QuotaTimeline, "jump", counting)
    ran = sum(_run_case(case, counter) for case in range(150))
    assert ran >= 100, ran  # most configurations are accepted
    assert counter[0] > 1000, counter  # the jump was really taken (else this test proves nothing)


def test_jump_crosses_many_chunks_for_many_lanes() -> None:
    """512 lanes: a lane's next chunk is reached in one jump, with the walk's exact state."""
    kw: dict[str, Any] = {"datasets": [_ds("web", [3000, 2000]), _ds("code", [2500]), _ds("books", [900])],
                          "mixture": {"web": 0.6, "code": 0.3, "books": 0.1}, "chunk_size": 8, "seed": 1}
    fast, slow = StaticMixtureWorkSource(**kw), StaticMixtureWorkSource(**kw)
    slow._jumps = False
    for lane in (0, 17, 511):
        x, y = fast.clone_for_lane(lane, 512), slow.clone_for_lane(lane, 512)
        for _ in range(3):
            assert _chunk(x.next_chunk()) == _chunk(y.next_chunk())
            assert x.state_dict() == y.state_dict()
            assert x.global_chunk_index == y.global_chunk_index > 0

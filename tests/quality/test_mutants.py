"""Hand-made mutants of zephon_ref that the property suite (the resume machine and its
invariants) must catch within the ci example budget; a surviving mutant fails the build.

Each mutant is applied by monkeypatch, then the resume machine runs against the inline
adapter with derandomized examples (the same examples on every run, as under the ci
profile).  Catching means the machine raises (a differing item, a broken invariant, a
crash); a clean run means the mutant survived.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from properties import machines
from properties.adapters import adapter
from properties.machines import resume_machine
from properties.profiles import examples
from zephon_ref.checkpoint import codec
from zephon_ref.engine import completion, core, stage
from zephon_ref.lineage import tombstones_for_record
from zephon_ref.ops import replay_filter, shuffle

#: the ci budget of each mutant's machine run (derandomized: the same examples every run)
BUDGET = examples(160)
# no shrinking: catching is what counts here, and shrinking a stateful failure costs minutes
SETTINGS = settings(max_examples=BUDGET, stateful_step_count=15, deadline=None, database=None, derandomize=True,
                    print_blob=False, report_multiple_bugs=False, phases=[Phase.explicit, Phase.generate],
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _filter_drops_one_too_many(mp: pytest.MonkeyPatch) -> None:
    """The replay filter also drops the first record after its target."""
    def push_many(self: Any, elems: Any) -> Any:
        extra = self.__dict__.setdefault("_mutant_extra", set())
        out = []
        for rec in elems:
            lane = rec.meta.lane_id
            target = self._pending.get(lane)
            if rec.meta.tombstone:
                out.append(rec)
            elif target is not None:
                if rec.meta.cursor == target:
                    del self._pending[lane]
                    extra.add(lane)
                out.extend(tombstones_for_record(rec))
            elif lane in extra:
                extra.discard(lane)
                out.extend(tombstones_for_record(rec))
            else:
                out.append(rec)
        return [(out, 0)] if out else []
    mp.setattr(replay_filter.ReplayFilterAccumulator, "push_many", push_many)


def _eviction_ignores_pinning(mp: pytest.MonkeyPatch) -> None:
    """Per-epoch eviction forgets cursor pinning (it may evict the last delivered record's chunk)."""
    orig = completion.LaneTracker._evict_epochs
    mp.setattr(completion.LaneTracker, "_evict_epochs", lambda self, pinned_cid: orig(self, None))


def _shuffle_reseeded_on_restore(mp: pytest.MonkeyPatch) -> None:
    """The streaming shuffle draws a new seed when the engine is restored."""
    orig = shuffle.Shuffle.accumulator

    def accumulator(self: Any, *, deterministic: bool, ctx: dict[str, Any]) -> Any:
        acc = orig(self, deterministic=deterministic, ctx=ctx)
        if ctx.get("replay_targets") and hasattr(acc, "seed"):
            acc.seed += 1
        return acc
    mp.setattr(shuffle.Shuffle, "accumulator", accumulator)


def _mux_restarts_at_lane_0(mp: pytest.MonkeyPatch) -> None:
    """After a restore the tail multiplexer starts at the first lane, not where it stopped."""
    orig = core.Engine._start_index
    mp.setattr(core.Engine, "_start_index", lambda self: 0 if self._targets else orig(self))


def _bytes_follow_insertion_order(mp: pytest.MonkeyPatch) -> None:
    """The codec stops sorting map keys: checkpoint bytes depend on dict insertion order."""
    mp.setattr(codec, "_key_sort", lambda key: (0, 0))
    mp.setattr(codec, "_first", lambda kv: 0)  # the fast path for all-str / all-int keys sorts by this


def _sentinel_splits_every_lane(mp: pytest.MonkeyPatch) -> None:
    """zephon 0.2.0's grouping: a sentinel of any lane pushes every lane's collected records, so
    an operator that emits per push (ensure_mixture) sees a lane's records split by other lanes."""
    def enqueue(self: Any, elems: Any) -> Any:
        out: list[Any] = []
        regular: list[Any] = []
        for e in elems:
            if stage.is_sentinel(e):
                if regular:
                    self._push(regular, out)
                    regular = []
                self._sentinel(e, out)
            else:
                regular.append(e)
        if regular:
            self._push(regular, out)
        return out
    mp.setattr(stage.OpStage, "enqueue", enqueue)


MUTANTS: dict[str, Callable[[pytest.MonkeyPatch], None]] = {
    "replay filter drops one record too many": _filter_drops_one_too_many,
    "eviction ignores cursor pinning": _eviction_ignores_pinning,
    "shuffle reseeded on restore": _shuffle_reseeded_on_restore,
    "tail multiplexer restarts at lane 0 after restore": _mux_restarts_at_lane_0,
    "checkpoint bytes depend on dict insertion order": _bytes_follow_insertion_order,
    "a sentinel splits every lane's push": _sentinel_splits_every_lane,
}


def caught(mp: pytest.MonkeyPatch) -> tuple[BaseException | None, int]:
    """The machine's failure under the mutant (None: it survived), and the examples it took."""
    mp.setattr(machines, "_REFERENCE", {})  # references computed under this engine, not reused
    machine = resume_machine(adapter("inline"))
    try:
        run_state_machine_as_test(machine, settings=SETTINGS)
    except Exception as exc:  # noqa: BLE001 - any failure of the machine is the mutant caught
        return exc, machine.started
    return None, machine.started


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_mutant_is_caught(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    MUTANTS[name](monkeypatch)
    exc, started = caught(monkeypatch)
    assert exc is not None, f"mutant survived {started} derandomized machine examples: {name!r}"
    print(f"{name}: caught at example {started}: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}")

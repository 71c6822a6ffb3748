"""Property: over any interleaving of N participants' steps, with crashes, absent
ranks, storage faults and clock jumps, a round either gives every finisher
exactly merge(all states) or fails cleanly with a typed error; no result that
misses a lane is ever published."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.cluster import Cluster, topology_states
from sim.storage import FailingBackend
from zephon_ref import codec
from zephon_ref.coordination.merge import merge
from zephon_ref.coordination.protocol import Abort, Finish, RoundConfig, Sleep, machine_for
from zephon_ref.errors import AggregationError, ZephonRefError

pytestmark = pytest.mark.filterwarnings("ignore:checkpoint taken mid-window")

TOPOLOGIES = [
    # (C, world_size, dp_degree, workers)
    (2, 1, 1, 2),
    (4, 2, 2, 1),
    (6, 3, 3, 1),
    (8, 4, 2, 2),
    (5, 2, 1, 2),
    (8, 4, 4, 1),
]


@st.composite
def scenarios(draw: st.DrawFn) -> dict[str, object]:
    topo = draw(st.sampled_from(TOPOLOGIES))
    n_fault_kinds = draw(st.integers(0, 3))
    return {
        "topo": topo,
        "seed": draw(st.integers(0, 2**16)),
        "schedule": draw(st.lists(st.integers(0, 2**16), min_size=1, max_size=60)),
        "crash": draw(st.lists(st.tuples(st.integers(0, 120), st.integers(0, 7)), max_size=2))
        if n_fault_kinds >= 1
        else [],
        "absent": draw(st.sets(st.integers(0, 7), max_size=1)) if n_fault_kinds >= 2 else set(),
        "io_faults": draw(st.sets(st.integers(0, 150), max_size=3))
        if n_fault_kinds >= 3
        else set(),
        "jumps": draw(st.lists(st.tuples(st.integers(0, 120), st.integers(1, 400)), max_size=2)),
        "late_start": draw(st.lists(st.integers(0, 7), max_size=2)),
    }


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sc=scenarios())
def test_any_interleaving_gives_the_full_merge_or_a_clean_failure(sc: dict[str, object]) -> None:
    c, ws, dp, workers = sc["topo"]  # type: ignore[misc]
    states = topology_states(
        sc["seed"], canonical_replicas=c, world_size=ws, dp_degree=dp, workers=workers  # type: ignore[arg-type]
    )
    want = merge(list(states.values()))
    store = FailingBackend()
    io_faults: set[int] = sc["io_faults"]  # type: ignore[assignment]
    store.fail = lambda op, key: store.ops in io_faults
    cl = Cluster(backend=store)
    keys = sorted(states)
    absent = {keys[i % len(keys)] for i in sc["absent"]}  # type: ignore[attr-defined]
    for r, w in keys:
        if (r, w) in absent:
            continue
        cfg = RoundConfig(
            namespace="run-0",
            rank=r,
            worker=w,
            world_size=ws,
            token=f"t{r}x{w}",
            timeout=2000,
            poll=25,
            stale_grace=500,
            round_id="rid" if (r, w) == (0, 0) else None,
        )
        cl.add(f"{r}/{w}", machine_for(states[(r, w)], cfg))
    late = {cl.members[i % len(cl.members)].name for i in sc["late_start"]} if cl.members else set()  # type: ignore[attr-defined]
    crash = {step: idx for step, idx in sc["crash"]}  # type: ignore[attr-defined]
    jumps = dict(sc["jumps"])  # type: ignore[call-overload]
    schedule: list[int] = sc["schedule"]  # type: ignore[assignment]
    crashed: set[str] = set()

    for step in range(20_000):
        if not cl.live():
            break
        if step in crash and cl.live():
            victim = cl.live()[crash[step] % len(cl.live())]
            cl.crash(victim)
            crashed.add(victim.name)
        if step in jumps:
            cl.advance(jumps[step])
        ready = [
            p for p in cl.runnable() if not (p.name in late and not p.started and cl.now < 300)
        ]
        if not ready:
            if not cl.advance():
                cl.advance(300)
            continue
        cl.step(ready[schedule[step % len(schedule)] % len(ready)])
        # Invariant at every step: a published result is the full merge.
        for key, value in store.data.items():
            if key.endswith(".outcome") and value[:1] == b"R":
                assert codec.decode(value[1:]) == want
    else:  # pragma: no cover
        raise AssertionError("round did not terminate")

    outcomes = {p.name: p.outcome for p in cl.members if not p.crashed}
    for name, out in outcomes.items():
        assert out is not None, name
        if isinstance(out, Finish):
            assert out.merged == want
            assert out.round_id == "rid"
        else:
            assert isinstance(out, Abort)
            assert isinstance(out.error, ZephonRefError)
            assert isinstance(out.error, (AggregationError, RuntimeError))
    clean = not absent and not crashed and not io_faults
    if clean:
        assert all(isinstance(o, Finish) for o in outcomes.values()), outcomes
        assert sorted(store.data) == ["run-0/rid.outcome"]
    # A failed round leaves nothing readable as a result.
    lead = next((p for p in cl.members if p.name == "0/0"), None)
    if (
        lead is not None
        and isinstance(lead.outcome, Abort)
        and getattr(lead.outcome.error, "waiting_for", "") != "acks"
    ):
        assert not any(v[:1] == b"R" for v in store.data.values())
    assert all(
        not isinstance(p.pending, Sleep) or p.crashed for p in cl.members if p.outcome is None
    )

"""Shortcuts of the reference checked against their plain definitions (house rule 8).

Theory of operation
-------------------
The reference keeps one algorithmic shortcut: a :class:`zephon_ref.fast.walk.ChunkWalk`, one walk
of the global chunk order shared by the lane clones its owner passes it to (the engine's
lanes, the simulated world's ranks).  Its invariant is that a clone given a walk produces
exactly the chunks and states of the same clone walking plainly.  :func:`shared_walk_problems`
checks that on one drawn :class:`WalkCase`: every lane of a source is read twice, once
through one shared walk (tiny or default window) and once plainly, in one drawn interleaving
of lanes, with restores from earlier states of a lane, states whose accumulators lie off the
walk's quota chain (tampered: a state from elsewhere), and a lane brought back after the
others moved on.  Every chunk, every refusal and every ``state_dict`` must be equal, and at
the end the union of the lanes' chunks read plainly must be the global sequence of one
unrouted clone (each chunk once), so a routing bug that loses chunks in both paths is seen too.

:func:`walk_cases` is the Hypothesis strategy; ``tests/properties/test_shortcuts.py`` runs it.
Nothing here changes the data path.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

__all__ = ["WalkCase", "WalkReport", "run_walk_case", "shared_walk_problems", "walk_cases"]

_POLICIES = ("default", "sap", "repeat_cap", "stop", "mixed", "redistribute")


@dataclass(frozen=True)
class WalkCase:
    """A source configuration, a lane count and a script of lane operations, as literals.

    ``script`` entries: ``("next", lane)``, ``("restore", lane, k)`` (the lane's k-th saved
    state, modulo how many it has), ``("tamper", lane)`` (reload the lane from its own
    state with one accumulator moved off the chain).
    """

    layout: Mapping[str, tuple[int, ...]]
    weights: Mapping[str, float]
    lanes: int
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    script: tuple[tuple[Any, ...], ...] = ()
    window: int | None = None  # the shared walk's window (None: the default)


@dataclass
class WalkReport:
    problems: list[str]
    jumps: int = 0  # chunks the shared path crossed by jumping (a case that never jumps checks little)
    chunks: int = 0


def _source(case: WalkCase) -> Any:
    from zephon_ref.work import Dataset, InMemoryShard, StaticMixtureWorkSource

    datasets = [
        Dataset.from_dict(n, {i: InMemoryShard([{"i": j} for j in range(k)]) for i, k in enumerate(sizes)})
        for n, sizes in case.layout.items()
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return StaticMixtureWorkSource(datasets, dict(case.weights), **dict(case.kwargs))


def _chunk(c: Any) -> Any:
    return None if c is None else (c.components, c.seed, c.target_mixture, c.source_exhausted)


def _next(clone: Any) -> Any:
    from zephon_ref.errors import ZephonRefError

    try:
        return _chunk(clone.next_chunk())
    except ZephonRefError as exc:
        return type(exc).__name__


def _tampered(state: dict[str, Any]) -> dict[str, Any] | None:
    acc = state.get("accumulators")
    if not acc:
        return None
    n = sorted(acc)[0]
    out = dict(state)
    out["accumulators"] = {**acc, n: acc[n] * 0.5 + 0.125}
    return out


class _CountingWalk:
    """Builds a ChunkWalk that counts the jumps it serves (the check's own instrument)."""

    @staticmethod
    def make(window: int | None) -> Any:
        from zephon_ref.fast.walk import ChunkWalk

        class Counting(ChunkWalk):
            jumps = 0

            def jump(self, *args: Any, **kwargs: Any) -> Any:
                out = super().jump(*args, **kwargs)
                type(self).jumps += out is not None
                return out

        return Counting() if window is None else Counting(window=window)


def run_walk_case(case: WalkCase, *, max_chunks: int = 1000) -> WalkReport:
    """Run ``case`` through a shared walk and plainly; see the module docstring."""
    from zephon_ref.errors import ZephonRefError

    try:
        src = _source(case)
    except ZephonRefError:
        return WalkReport([])  # a refused configuration: nothing to compare
    C = case.lanes
    walk = _CountingWalk.make(case.window)
    report = WalkReport([])

    def fresh(lane: int) -> tuple[Any, Any]:
        shared = src.clone_for_lane(lane, C)
        shared.share_walk(walk)
        return shared, src.clone_for_lane(lane, C)

    pairs = [fresh(lane) for lane in range(C)]
    saved: list[list[dict[str, Any]]] = [
        [] for _ in range(C)
    ]  # saved[l][k]: lane l's state after its chunk k
    plain_chunks: list[list[Any]] = [[] for _ in range(C)]
    done = [False] * C
    tampered = False

    def step(lane: int) -> None:
        shared, plain = pairs[lane]
        g0 = shared.global_chunk_index
        got_s, got_p = _next(shared), _next(plain)
        if got_s != got_p:
            report.problems.append(
                f"lane {lane}: shared walk gave {got_s!r}, the plain walk {got_p!r} "
                f"(global chunk {g0} -> {shared.global_chunk_index} vs {plain.global_chunk_index})"
            )
        st_s, st_p = shared.state_dict(), plain.state_dict()
        if st_s != st_p:
            diff = sorted(k for k in st_p if st_s.get(k) != st_p[k])
            report.problems.append(f"lane {lane}: states differ after a chunk in {diff}")
        if isinstance(got_p, tuple):
            report.chunks += 1
            plain_chunks[lane].append(got_p)
            saved[lane].append(st_p)
        else:
            done[lane] = True

    def reload(lane: int, state: dict[str, Any]) -> None:
        pairs[lane] = fresh(lane)
        for clone in pairs[lane]:
            clone.load_state_dict(state)
        done[lane] = False

    for op in case.script:
        if report.problems:
            break
        lane = op[1] % C
        if op[0] == "next":
            if not done[lane]:
                step(lane)
        elif op[0] == "restore" and saved[lane]:
            k = op[2] % len(saved[lane])
            reload(lane, saved[lane][k])
            # the lane reads its chunks after k again: keep the record of the first reading up to k
            del plain_chunks[lane][k + 1:], saved[lane][k + 1:]
        elif op[0] == "tamper":
            bad = _tampered(pairs[lane][1].state_dict())
            if bad is not None:
                reload(lane, bad)
                tampered = True  # the lane's future changed on purpose: no union check
    # every lane to its end (bounded), then the union against one unrouted clone
    for lane in range(C):
        for _ in range(max_chunks):
            if done[lane] or report.problems:
                break
            step(lane)
    report.jumps = type(walk).jumps
    if not report.problems and not tampered and all(done):
        report.problems.extend(_union_problems(src, C, plain_chunks, pairs))
    return report


def _union_problems(src: Any, lanes: int, got: list[list[Any]], pairs: list[tuple[Any, Any]]) -> list[str]:
    """The lanes' chunks, each lane from its start, are the global sequence's chunks routed to it,
    and the shared walk's routing agrees with the plain routing on every one of them."""
    whole = src.clone_for_lane(0, 1)
    plain_router = pairs[0][1]
    shared_router = pairs[0][0]
    expected: list[list[Any]] = [[] for _ in range(lanes)]
    problems = []
    g = 0
    while True:
        c = _next(whole)
        if not isinstance(c, tuple):
            break
        owner = plain_router.lane_for_chunk(g)
        if shared_router.lane_for_chunk(g) != owner:
            problems.append(f"global chunk {g}: shared routing says lane {shared_router.lane_for_chunk(g)}, "
                            f"plain routing {owner}")
        expected[owner].append(c)
        g += 1
    problems.extend(
        f"lane {lane}: read {len(got[lane])} chunks, the global sequence routes {len(expected[lane])} "
        "to it (or they differ)"
        for lane in range(lanes)
        if got[lane] != expected[lane]
    )
    return problems[:5]


def shared_walk_problems(case: WalkCase) -> list[str]:
    """What differs between the shared walk and the plain walk on ``case`` (empty: nothing)."""
    return run_walk_case(case).problems


@st.composite
def walk_cases(draw: st.DrawFn) -> WalkCase:
    """Small sources that run out often, 1-16 lanes, both routings, every exhaustion policy."""
    names = ["a", "b", "c"][: draw(st.integers(1, 3), label="datasets")]
    layout = {n: tuple(draw(st.lists(st.integers(1, 30), min_size=1, max_size=3), label=f"{n} shards"))
              for n in names}
    weights = {n: draw(st.sampled_from([0.1, 0.25, 0.3, 0.7, 1.0, 2.0]), label=f"{n} weight") for n in names}
    kw: dict[str, Any] = {
        "chunk_size": draw(st.integers(1, 12), label="chunk_size"),
        "seed": draw(st.integers(0, 99), label="seed"),
        "lane_assignment": draw(st.sampled_from(["permute", "modulo"]), label="lane_assignment"),
        "shuffle_within_shard": draw(st.booleans(), label="shuffle_within_shard"),
        "shuffle_block_size": draw(st.sampled_from([None, None, 2, 5]), label="shuffle_block_size"),
    }
    policy = draw(st.sampled_from(_POLICIES), label="policy")
    if policy == "sap":
        kw["exhausted_policy"], kw["stop_after_passes"] = "repeat", draw(st.integers(1, 3))
    elif policy == "repeat_cap":
        kw["exhausted_policy"], kw["stop_after_passes"], kw["max_repeats"] = (
            "repeat",
            None,
            draw(st.integers(0, 3)),
        )
    elif policy == "stop":
        kw["exhausted_policy"], kw["stop_after_passes"] = "stop", None
    elif policy == "mixed":
        kw["exhausted_policy"] = {n: draw(st.sampled_from(["stop", "repeat"])) for n in names}
        kw["stop_after_passes"], kw["max_repeats"] = None, draw(st.integers(1, 2))
    elif policy == "redistribute":  # no jump (the quotas depend on the cursors): the walk must still agree
        kw["exhausted_policy"] = {n: draw(st.sampled_from(["redistribute", "repeat"])) for n in names}
        kw["stop_after_passes"], kw["max_repeats"] = None, 2
    lanes = draw(st.sampled_from([1, 2, 3, 5, 8, 16]), label="lanes")
    lane = st.integers(0, lanes - 1)
    op = st.one_of(
        st.tuples(st.just("next"), lane),
        st.tuples(st.just("restore"), lane, st.integers(0, 20)),
        st.tuples(st.just("tamper"), lane),
    )
    weighted = st.one_of(st.tuples(st.just("next"), lane), st.tuples(st.just("next"), lane), op)
    script = tuple(draw(st.lists(weighted, max_size=12 * lanes), label="script"))
    window = draw(st.sampled_from([None, 2, 3, 7]), label="window")
    return WalkCase(layout=layout, weights=weights, lanes=lanes, kwargs=kw, script=script, window=window)

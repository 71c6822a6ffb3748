"""The exhaustive explorer: exact interleaving counts, the state graph, a planted deadlock and its
witness, bounds."""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence

import pytest

from sim.choices import Choices, Decision, ReplayChoices, decode_decisions
from sim.explore import (
    START,
    ExplorationIncomplete,
    NondeterministicScenario,
    ScenarioFailed,
    explore,
)
from zephon_ref.errors import ConfigError

# -- interleavings: each participant takes k_i steps; which one steps next is the decision --


def interleavings(steps: Sequence[int]) -> Callable[[Choices], Hashable]:
    def scenario(choices: Choices) -> Hashable:
        done = [0] * len(steps)
        choices.observe(tuple(done))
        while True:
            ready = [p for p in range(len(steps)) if done[p] < steps[p]]
            if not ready:
                return tuple(done)
            done[choices.choose("step", ready)] += 1
            choices.observe(tuple(done))

    return scenario


@pytest.mark.parametrize("steps", [(3, 3), (2, 2, 2), (1, 2, 3), (3, 3, 3)])
def test_every_interleaving_is_explored_exactly_once(steps: tuple[int, ...]) -> None:
    report = explore(interleavings(steps), is_final=lambda state: state == steps)
    multinomial = math.factorial(sum(steps)) // math.prod(math.factorial(k) for k in steps)
    lattice = math.prod(k + 1 for k in steps)
    edges = sum(k * lattice // (k + 1) for k in steps)
    assert report.paths == multinomial
    assert report.distinct_states == lattice
    assert report.transitions == edges
    assert (report.terminal_states, report.final_states) == (1, 1)
    assert report.longest_run == sum(steps) - 1  # the last step has one option: not a decision
    assert report.acyclic and report.complete and report.limit is None
    assert report.deadlocks == () and report.ok


def test_the_state_graph_holds_states_and_labelled_transitions() -> None:
    report = explore(interleavings((2, 2)), is_final=lambda state: state == (2, 2))
    graph = report.graph
    assert graph.edges[(0, 0), (1, 0)]["decisions"] == ((Decision("step", 2, 0),),)
    assert graph.edges[(0, 0), (0, 1)]["decisions"] == ((Decision("step", 2, 1),),)
    assert graph.edges[(2, 0), (2, 1)]["decisions"] == ((),)  # A is done: B's step is forced
    assert graph.nodes[(2, 2)] == {"terminal": True, "final": True}
    sinks = [state for state in graph.nodes if graph.out_degree(state) == 0]
    assert sinks == [(2, 2)]


# -- a planted deadlock: two participants take two locks in opposite orders ------------------

PROGRAMS = {
    "A": (("acquire", 1), ("acquire", 2), ("release", 2), ("release", 1)),
    "B": (("acquire", 2), ("acquire", 1), ("release", 1), ("release", 2)),
    "B-same-order": (("acquire", 1), ("acquire", 2), ("release", 2), ("release", 1)),
}


def locks(second: str) -> Callable[[Choices], Hashable]:
    programs = {"A": PROGRAMS["A"], "B": PROGRAMS[second]}

    def scenario(choices: Choices) -> Hashable:
        pc = {"A": 0, "B": 0}
        owner: dict[int, str] = {}

        def key() -> tuple[int, int, str, str]:
            return (pc["A"], pc["B"], owner.get(1, "-"), owner.get(2, "-"))

        def enabled(p: str) -> bool:
            if pc[p] == len(programs[p]):
                return False
            op, lock = programs[p][pc[p]]
            return op == "release" or lock not in owner

        choices.observe(key())
        while True:
            ready = [p for p in ("A", "B") if enabled(p)]
            if not ready:
                return key()
            p = choices.choose("step", ready)
            op, lock = programs[p][pc[p]]
            if op == "acquire":
                owner[lock] = p
            else:
                del owner[lock]
            pc[p] += 1
            choices.observe(key())

    return scenario


def _count_paths(second: str) -> int:
    # Independent of the explorer: plain recursion over the same lock model.
    programs = {"A": PROGRAMS["A"], "B": PROGRAMS[second]}

    def count(pc: dict[str, int], owner: dict[int, str]) -> int:
        ready = []
        for p in ("A", "B"):
            if pc[p] < 4:
                op, lock = programs[p][pc[p]]
                if op == "release" or lock not in owner:
                    ready.append(p)
        if not ready:
            return 1
        total = 0
        for p in ready:
            op, lock = programs[p][pc[p]]
            new_owner = dict(owner)
            if op == "acquire":
                new_owner[lock] = p
            else:
                del new_owner[lock]
            total += count({**pc, p: pc[p] + 1}, new_owner)
        return total

    return count({"A": 0, "B": 0}, {})


def _all_done(state: tuple[int, int, str, str]) -> bool:
    return state[:2] == (4, 4)


def test_a_planted_deadlock_is_found_with_its_shortest_witness() -> None:
    report = explore(locks("B"), is_final=_all_done)
    assert report.paths == _count_paths("B")
    assert not report.ok and report.complete
    assert [d.state for d in report.deadlocks] == [(1, 1, "A", "B")]
    deadlock = report.deadlocks[0]
    # A takes lock 1, then B takes lock 2: nobody can move.
    assert deadlock.witness == (Decision("step", 2, 0), Decision("step", 2, 1))
    assert report.graph.nodes[deadlock.state] == {"terminal": True, "final": False}
    assert report.graph.out_degree(deadlock.state) == 0
    assert report.terminal_states == 2 and report.final_states == 1
    # The witness is a real run: it replays, from its string form, into the deadlock.
    replay = ReplayChoices(decode_decisions(deadlock.encoded()))
    assert locks("B")(replay) == deadlock.state
    replay.finish()


def test_the_same_locks_taken_in_one_order_never_deadlock() -> None:
    report = explore(locks("B-same-order"), is_final=_all_done)
    assert report.ok and report.paths == _count_paths("B-same-order")
    assert report.terminal_states == report.final_states == 1


# -- decisions of each kind branch as many ways as they have outcomes ------------------------


def test_chance_and_integer_branch_on_their_outcomes_and_start_is_a_node() -> None:
    def scenario(choices: Choices) -> Hashable:
        fault = choices.chance("fault", 1, 1000)
        latency = choices.integer("latency", 2, 4)
        return (fault, latency)

    report = explore(scenario, is_final=lambda state: True)
    assert report.paths == 6 and report.terminal_states == 6
    assert sorted(report.graph.successors(START)) == [
        (False, 2),
        (False, 3),
        (False, 4),
        (True, 2),
        (True, 3),
        (True, 4),
    ]
    assert report.graph.nodes[START]["final"] is False
    assert report.ok


# -- bounds, failures and nondeterminism --------------------------------------------------


def test_max_paths_gives_a_typed_error_or_a_partial_report() -> None:
    with pytest.raises(ExplorationIncomplete) as info:
        explore(interleavings((3, 3)), is_final=lambda s: s == (3, 3), max_paths=5)
    assert info.value.report.paths == 5
    assert (info.value.report.complete, info.value.report.limit) == (False, "max_paths")
    report = explore(interleavings((3, 3)), is_final=lambda s: s == (3, 3), max_paths=5, strict=False)
    assert report == info.value.report and not report.ok
    with pytest.raises(ConfigError):
        explore(interleavings((1, 1)), is_final=lambda s: True, max_paths=0)


def test_max_depth_cuts_an_unbounded_scenario() -> None:
    def coins(choices: Choices) -> Hashable:
        heads = 0
        choices.observe(heads)
        while True:  # never ends on its own
            heads += choices.choose("coin", [0, 1])
            choices.observe(heads)

    with pytest.raises(ExplorationIncomplete, match="max_depth"):
        explore(coins, is_final=lambda s: False, max_depth=5)

    def careless(choices: Choices) -> Hashable:
        try:
            return coins(choices)
        except Exception:  # a model of error handling must not swallow the cut
            return "swallowed"

    report = explore(careless, is_final=lambda s: True, max_depth=3, strict=False)
    assert report.limit == "max_depth" and "swallowed" not in report.graph
    report = explore(coins, is_final=lambda s: False, max_depth=5, strict=False)
    assert report.paths == 2**5 and report.limit == "max_depth"
    assert report.deadlocks == ()  # a cut run proves nothing about its last state
    assert not report.ok


def test_a_failing_scenario_stops_with_its_run() -> None:
    class PlantedBug(AssertionError):
        pass

    def scenario(choices: Choices) -> Hashable:
        done = {"A": 0, "B": 0, "C": 0}
        while True:
            ready = [p for p in done if done[p] < 2]
            if not ready:
                return tuple(done.values())
            p = choices.choose("step", ready)
            if p == "C" and done["A"] == 2 and done["B"] == 0:
                raise PlantedBug("C before B")
            done[p] += 1

    with pytest.raises(ScenarioFailed, match="PlantedBug") as info:
        explore(scenario, is_final=lambda s: True)
    # The first failing path in lexicographic order: A, A, then C out of [B, C].
    expected = (Decision("step", 3, 0), Decision("step", 3, 0), Decision("step", 2, 1))
    assert info.value.decisions == expected
    assert decode_decisions(info.value.encoded) == expected
    assert isinstance(info.value.__cause__, PlantedBug)
    with pytest.raises(PlantedBug):
        scenario(ReplayChoices(expected))


def test_a_scenario_that_is_not_a_function_of_its_decisions_is_refused() -> None:
    runs = [0]

    def scenario(choices: Choices) -> Hashable:
        runs[0] += 1
        first = choices.choose("x", range(2 if runs[0] == 1 else 3))
        second = choices.choose("y", range(2))
        return (first, second)

    with pytest.raises(NondeterministicScenario, match="decision 0"):
        explore(scenario, is_final=lambda s: True)

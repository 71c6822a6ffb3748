"""Exhaustive exploration of small scopes, and the state graph it builds.

Theory of operation
-------------------
:func:`explore` runs a *scenario* -- a function ``scenario(choices) -> final
state key`` that makes every decision through the :class:`~sim.choices.Choices`
it is given -- once per path through its decisions, in lexicographic order of
the decision indices (TigerBeetle's exhaustigen, matklad's "generate all the
things"): the first run takes index 0 everywhere; after each run the explorer
finds the deepest decision that still has an untried outcome, and the next run
is forced through the same prefix up to it, then that outcome, then index 0
again.  The scenario is re-run from scratch each time (stateless model
checking), so it must be a deterministic function of its decisions; a run
that asks for a different label or outcome count inside a forced prefix raises
:class:`NondeterministicScenario`.  Decisions with one outcome are not
decisions (see ``sim.choices``), so a round of participants that each take k
steps has exactly the multinomial number of paths.

The state graph.  The scenario calls ``choices.observe(key)`` with a hashable
key of its model's state after each step, and returns the final key.  The
explorer keeps a ``networkx.DiGraph``: a node per distinct key (plus
:data:`START` if a decision comes before the first observation), an edge
``s -> t`` whenever a run observed ``t`` right after ``s``, labelled with the
set of decision tuples taken between the two observations.  A node where some
run ended is *terminal*.  The check "no reachable non-final state lacks a
successor" is the deadlock check: every node with no outgoing edge that
``is_final`` does not accept is reported as a :class:`Deadlock` with a
*witness*, the shortest (then lexicographically first) run that ended there --
a real decision sequence that :class:`~sim.choices.ReplayChoices` replays.

Bounds.  ``max_paths`` caps the runs and ``max_depth`` the decisions per run;
when either is hit the exploration is incomplete: :class:`ExplorationIncomplete`
(carrying the partial report) when ``strict``, else a report with
``complete=False`` and ``limit`` naming the bound.  An exception inside the
scenario stops the exploration with :class:`ScenarioFailed`, which carries the
failing run's decisions and their encoded string.

What may not live here: the models themselves (tests and ``sim`` modules
write scenarios), randomness of any kind.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

import networkx as nx

from zephon_ref.errors import ConfigError, ContractError, expected

from .choices import BaseChoices, Choices, Decision, encode_decisions

__all__ = [
    "START",
    "Deadlock",
    "ExhaustiveChoices",
    "ExplorationIncomplete",
    "ExplorationReport",
    "NondeterministicScenario",
    "ScenarioFailed",
    "explore",
]


@dataclass(frozen=True, slots=True)
class _Start:
    def __repr__(self) -> str:
        return "START"


#: The graph node for "before the first observation", used when a scenario
#: decides something before it reports its first state.
START: Hashable = _Start()


class NondeterministicScenario(ContractError):
    """A re-run of the scenario asked for different decisions on a forced prefix."""


class _DepthExceeded(BaseException):
    """Internal: a run made more than ``max_depth`` decisions.

    A BaseException, like Hypothesis's StopTest, so a scenario that models
    error handling with ``except Exception`` cannot swallow the cut."""


class ScenarioFailed(ContractError):
    """The scenario raised; ``decisions`` is the failing run, ``encoded`` its string."""

    def __init__(self, message: str, *, decisions: tuple[Decision, ...]) -> None:
        super().__init__(message)
        self.decisions = decisions
        self.encoded = encode_decisions(decisions)


@dataclass(frozen=True, slots=True)
class Deadlock:
    """A reachable state that is not final and has no successor, and a run that reaches it."""

    state: Hashable
    witness: tuple[Decision, ...]

    def encoded(self) -> str:
        """The witness as a decision string (for ``ReplayChoices`` / ``reproduce_command``)."""
        return encode_decisions(self.witness)


@dataclass(frozen=True, slots=True)
class ExplorationReport:
    """What an exploration saw.

    ``graph`` is the explorer's ``networkx.DiGraph`` handed over to the caller:
    node attributes ``terminal`` and ``final`` (bools), edge attribute
    ``decisions`` (a sorted tuple of the decision tuples that took that edge).
    """

    paths: int
    distinct_states: int
    transitions: int
    terminal_states: int
    final_states: int
    longest_run: int
    acyclic: bool
    deadlocks: tuple[Deadlock, ...]
    complete: bool
    limit: str | None
    graph: Any = field(compare=False, repr=False)

    @property
    def ok(self) -> bool:
        """Complete, and no reachable non-final state lacks a successor."""
        return self.complete and not self.deadlocks


class ExplorationIncomplete(ContractError):
    """A bound (``max_paths`` or ``max_depth``) stopped the exploration; ``report`` is partial."""

    def __init__(self, message: str, *, report: ExplorationReport) -> None:
        super().__init__(message)
        self.report = report


def _decision_key(decisions: tuple[Decision, ...]) -> tuple[tuple[str, int, int], ...]:
    return tuple((d.label, d.n, d.index) for d in decisions)


class _Graph:
    """The state graph under construction, plus each terminal node's witness."""

    def __init__(self) -> None:
        self.graph: Any = nx.DiGraph()
        self.witness: dict[Hashable, tuple[Decision, ...]] = {}

    def node(self, state: Hashable) -> None:
        if state not in self.graph:
            self.graph.add_node(state, terminal=False, final=False)

    def edge(self, source: Hashable, target: Hashable, decisions: tuple[Decision, ...]) -> None:
        self.node(source)
        self.node(target)
        if self.graph.has_edge(source, target):
            self.graph.edges[source, target]["decisions"].add(decisions)
        else:
            self.graph.add_edge(source, target, decisions={decisions})

    def ended(self, state: Hashable, run: tuple[Decision, ...]) -> None:
        self.node(state)
        self.graph.nodes[state]["terminal"] = True
        best = self.witness.get(state)
        # Shortest witness first, then the lexicographically smallest indices.
        if best is None or (len(run), _decision_key(run)) < (len(best), _decision_key(best)):
            self.witness[state] = run


class ExhaustiveChoices(BaseChoices):
    """The exhaustive backend: one run, forced through ``prefix`` then index 0.

    ``expected`` holds the ``(label, n)`` the previous run saw at each forced
    position, to detect a nondeterministic scenario.  Used by :func:`explore`;
    constructing one by hand gives a single forced run (``graph=None``).
    """

    __slots__ = ("_current", "_expected", "_graph", "_mark", "_max_depth", "_prefix")

    def __init__(
        self,
        prefix: Sequence[int] = (),
        *,
        expected_kinds: Sequence[tuple[str, int]] = (),
        max_depth: int | None = None,
        graph: _Graph | None = None,
    ) -> None:
        super().__init__()
        self._prefix = tuple(prefix)
        self._expected = tuple(expected_kinds)
        self._max_depth = max_depth
        self._graph = graph
        self._current: Hashable = START
        self._mark = 0

    def _below(self, label: str, n: int) -> int:
        position = len(self._record)
        if self._max_depth is not None and position >= self._max_depth:
            raise _DepthExceeded
        if position < len(self._expected) and self._expected[position] != (label, n):
            was_label, was_n = self._expected[position]
            raise NondeterministicScenario(
                f"scenario is not deterministic: decision {position} was ({was_label!r}, n={was_n}) "
                f"on an earlier run with the same prefix, now ({label!r}, n={n})"
            )
        if position < len(self._prefix):
            index = self._prefix[position]
            assert 0 <= index < n, (position, index, n)
            return index
        return 0

    def observe(self, state: Hashable) -> None:
        if self._graph is None:
            return
        pending = tuple(self._record[self._mark :])
        if self._current is START and not pending:
            self._graph.node(state)  # the first observation, before any decision: the start state
        else:
            self._graph.edge(self._current, state, pending)
        self._current = state
        self._mark = len(self._record)

    def _end(self, final: Hashable) -> None:
        assert self._graph is not None
        pending = tuple(self._record[self._mark :])
        if final != self._current or pending:
            if self._current is START and not pending:
                self._graph.node(final)
            else:
                self._graph.edge(self._current, final, pending)
        self._graph.ended(final, tuple(self._record))


def _check_bound(what: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(expected(what, "an int >= 1", value))
    return value


def explore(
    scenario: Callable[[Choices], Hashable],
    *,
    is_final: Callable[[Any], bool],
    max_paths: int = 100_000,
    max_depth: int = 1_000,
    strict: bool = True,
) -> ExplorationReport:
    """Run ``scenario`` once per path through its decisions and check the state graph.

    Returns an :class:`ExplorationReport`; raises :class:`ExplorationIncomplete`
    when a bound is hit and ``strict``, :class:`ScenarioFailed` when the
    scenario raises, :class:`NondeterministicScenario` when it is not a
    function of its decisions.
    """
    _check_bound("explore max_paths", max_paths)
    _check_bound("explore max_depth", max_depth)
    built = _Graph()
    prefix: tuple[int, ...] = ()
    kinds: tuple[tuple[str, int], ...] = ()
    paths = 0
    longest = 0
    limit: str | None = None
    while True:
        choices = ExhaustiveChoices(prefix, expected_kinds=kinds, max_depth=max_depth, graph=built)
        try:
            final = scenario(choices)
        except _DepthExceeded:
            limit = "max_depth"
        except (NondeterministicScenario, ExplorationIncomplete):
            raise
        except Exception as exc:
            run = choices.record
            raise ScenarioFailed(
                f"scenario raised {type(exc).__name__}: {exc} -- after {len(run)} decisions; "
                f"replay with ReplayChoices({encode_decisions(run)!r})",
                decisions=run,
            ) from exc
        else:
            choices._end(final)
        run = choices.record
        paths += 1
        longest = max(longest, len(run))
        if limit == "max_depth" and strict:
            break
        # Backtrack: the deepest decision with an untried outcome.
        position = len(run) - 1
        while position >= 0 and run[position].index + 1 >= run[position].n:
            position -= 1
        if position < 0:
            break
        if paths >= max_paths:
            limit = "max_paths"
            break
        prefix = tuple(d.index for d in run[:position]) + (run[position].index + 1,)
        kinds = tuple((d.label, d.n) for d in run[: position + 1])
    report = _report(built, is_final, paths=paths, longest=longest, limit=limit)
    if limit is not None and strict:
        raise ExplorationIncomplete(
            f"exploration stopped at its {limit} bound after {paths} paths "
            f"({max_paths=}, {max_depth=}); the report covers the paths run so far",
            report=report,
        )
    return report


def _report(
    built: _Graph, is_final: Callable[[Any], bool], *, paths: int, longest: int, limit: str | None
) -> ExplorationReport:
    graph = built.graph
    deadlocks: list[Deadlock] = []
    final_count = 0
    terminal_count = 0
    for state in graph.nodes:  # insertion order: the order the runs discovered them
        attrs = graph.nodes[state]
        final = state is not START and bool(is_final(state))
        attrs["final"] = final
        final_count += final
        terminal_count += bool(attrs["terminal"])
        # A sink that no run ended at is where a run was cut at max_depth: not a verdict.
        if graph.out_degree(state) == 0 and not final and state in built.witness:
            deadlocks.append(Deadlock(state, built.witness[state]))
    for _, _, attrs in graph.edges(data=True):
        attrs["decisions"] = tuple(sorted(attrs["decisions"], key=_decision_key))
    return ExplorationReport(
        paths=paths,
        distinct_states=graph.number_of_nodes(),
        transitions=graph.number_of_edges(),
        terminal_states=terminal_count,
        final_states=final_count,
        longest_run=longest,
        acyclic=bool(nx.is_directed_acyclic_graph(graph)),
        deadlocks=tuple(deadlocks),
        complete=limit is None,
        limit=limit,
        graph=graph,
    )

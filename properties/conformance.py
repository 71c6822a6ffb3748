"""Run the whole property suite against one implementation and print a table.

Theory of operation
-------------------
``python -m properties.conformance --impl NAME --examples N`` resolves ``NAME``
(``inline``, ``threads``, ``zephon``, ``tensor`` or ``module:attr``) to an adapter
(:func:`properties.adapters.load_adapter`) and runs every property of the suite
against it under Hypothesis with ``N`` examples each, cheap and high-yield rows
first (a row's feature in brackets; an adapter without it skips the row, saying why):

* ``oracle``: the implementation's stream equals zephon_ref's (inline runner), item for
  item in the normal form (:mod:`properties.normal_form`), and with [remap] so does each
  participant's delivered sequence under a drawn topology.  The failure shows the first
  differing item from both sides.  An implementation that passes it is checked by the
  resume, remap and machine rows against zephon_ref's stream as well (not only its own).
  For ``inline`` (zephon_ref itself) the row asks for a second opinion: zephon 0.2.0's
  stream, on the configurations where zephon has no documented divergence (the ``zephon``
  adapter's ``unsupported()``), skipped when zephon is not installed;
* ``lineage``: no skip, no duplicate, nothing changed, against plain definitions that
  trust nothing the pipeline computed (:mod:`properties.lineage`): one consumer's
  timeline through drawn checkpoints and restores (and, with [remap], a remap at the
  last cut) must close every offset its lane admits exactly once (or discard it as the
  configuration documents), name only admitted offsets with their samples, keep cursors
  unique per lane and deliver each sample's tokens; with [engine_state] the run that
  delivered the last item holds nothing inflight; with [tombstones] an uninterrupted run's
  delivered records and tombstones close every admitted offset exactly once;
* ``tamper refused`` [engine_state]: a checkpoint dict with one field changed, dropped
  or swapped between two lanes is refused by ``build(state=...)`` with a
  ``ZephonRefError`` (or the adapter's ``refusal_errors``) before anything changes (the
  dict is untouched, and the untampered checkpoint still resumes the stream);
* ``resume at cuts``: checkpoint at a drawn cut schedule, restore each into a fresh run;
* ``resume machine``: the stateful machine (:func:`properties.machines.resume_machine`),
  every rule the adapter's features allow;
* ``settings invariance`` [runners]: drawn execution settings never change the stream;
* ``lane remap`` [remap]: restore under a drawn topology, per-lane streams unchanged (with a drawn
  micro-batch size change, seed 002: per-lane records unchanged);
* ``cross-lane order`` [remap, merged_checkpoint]: N -> M -> N ranks (a cut mid-step, then one at a
  global-step boundary, with a micro-batch change in M): every participant delivers what the
  oracle's uninterrupted participant delivers from that frontier on (:mod:`properties.cross_lane`);
* ``bounded inflight`` / ``eviction safety`` [engine_state]: at every item's checkpoint, at the
  depth of drawn execution settings with [runners];
* ``checkpoint bytes`` [deterministic_checkpoints]: two runs to the same cut encode
  (zephon_ref's codec) to the same bytes, and so does a copy with every dict
  rebuilt in reverse insertion order;
* ``corrupt refused`` [durable]: a flipped bit in a saved checkpoint is refused,
  typed, and the live run carries on;
* ``shared walk`` [shared_walk]: zephon_ref's one shortcut, the chunk walk that the lanes
  of one engine (or every rank of a simulated world) share
  (:class:`zephon_ref.fast.walk.ChunkWalk`), gives every lane exactly the chunks and states
  of the plain per-lane walk, over drawn sources, interleavings, restores and tampered
  states (:func:`properties.shortcuts.shared_walk_problems`);
* ``fast ops`` [fast_ops]: zephon_ref's faster operators (:class:`zephon_ref.fast.ops.FastOps`:
  tokenize with the built-in tokenizer, interned ids) gives the plain operator's records,
  refusals and warnings on drawn operators and records (:func:`properties.fast_ops.fast_ops_check`);
* ``fast codec`` [fast_codec]: zephon_ref's faster encoder (:class:`zephon_ref.fast.codec.FastCodec`,
  plugged in at ``codec=`` by sim.scale and the benchmarks) gives the plain codec's bytes, decoded
  values and refusals on drawn values and real 64-lane states
  (:func:`properties.fast_codec.fast_codec_check`);
* ``token estimation`` [token_estimation]: a token-aware source's measured tokens/byte ratios (the
  calibration pass through the pipeline's counting prefix: a map_transform ahead of tokenize replayed
  on each drawn row, tokenize's counting, or a ``measure=`` callable; coverage met and not met), with
  their provenance and fallback reasons, against a plain definition from the case's literal corpus
  (:mod:`properties.token_census`; its fixed cases first);
* ``torch`` [torch]: the stateful torch datasets' state at every position of a pass and of a
  resumed pass (the state before its first item too), under 0, 1 and 2 DataLoader workers, against
  the oracle's stream (:mod:`properties.torch_row`; at most ``EXAMPLES_CAP`` examples);
* ``aggregation`` [aggregation]: the round machines of the implementation
  (``adapter.round_machine``) through TP/PP peers, a missing or late rank, a crashed or failing
  leader, against the promises of seed 000 (:mod:`properties.aggregation`);
* ``operators`` [operators] (2x the examples per data method: a case is cheap): the unit properties
  (:mod:`properties.op_units`: exactly-once closure, flush resets the lane, no pending data after
  a flush) over every operator call the API generator draws (:mod:`properties.generator`), fed
  fan-out, split documents, empty and exactly-max_length records, single-record epochs, and
  reset flushes after any prefix; and payload values (tokenize's ids, padding and attention mask
  against a plain definition of its knobs; a ``labels`` field kept aligned with the tokens by every
  operator, packers' slices included); each method's fixed examples
  (:func:`properties.op_units.regression_cases`) run before its drawn ones;
* ``long run`` [engine_state]: one run of at least :func:`long_run_items` items (2,000
  under the ``ci`` and ``dev`` profiles, 100,000 under ``nightly``) keeps every lane's
  inflight chunks within :func:`sim.invariants.inflight_bound` and passes the lineage
  row's checks at its end.

Configurations come from :func:`properties.machines.machine_configs`: the fixed
regression configurations, small drawn ones and long-range ones (a cut in the first
half of a long-range stream has at least two flush epochs after it).  Every operator
knob is drawn (:func:`properties.strategies.pipeline_configs`, from :mod:`properties.generator`);
``--coverage`` prints, and ``--json`` writes, how many drawn calls took each (method, knob, value
class).  Before its drawn examples, a row runs its fixed regression examples
(:mod:`properties.regressions`: a configuration and every draw of the check pinned), on top of the
``--examples`` budget and counted in its columns: the bugs they stand for are caught whatever the
strategies draw (a failing one is reported as is, not shrunk).

Each row says how many examples ran (shrinking included), how many passed, the
examples per minute on this machine (wall time, shown only), and, when the property
failed, the minimal configuration Hypothesis shrank to and the first problem.
Shrinking stops after ``--shrink-seconds`` per row (Hypothesis's own cap on shrink
time, lowered while the suite runs), so a failing row reports within a bounded time.

Exit status: 0 every property passed (or was skipped with a reason), 1 a property
failed, 2 usage or bad input (an unknown option value, ``--examples`` below 1, an
unknown ``--property``, an ``--impl`` that is not importable or not an adapter): one
line on stderr naming what was expected and what was received, no traceback.
``--json FILE`` also writes the results for a machine (see :func:`results_json`);
progress per property goes to stderr (tqdm) when it is a terminal, unless ``--quiet``.

``--jobs N`` runs the rows in up to N worker processes (:func:`run_suite_parallel`): one
process per row, each row derandomized as in one process, so the table, the coverage and the
JSON do not depend on N (wall and CPU times aside); a worker that dies is a failing row naming
its exit; Ctrl-C ends the workers and exits 130.  Every row reports its user + system CPU
seconds (``cpu_seconds`` in the JSON), the cost to compare on a shared machine.
"""

from __future__ import annotations

import contextlib
import copy
import json
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, Verbosity, assume, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from hypothesis.stateful import run_state_machine_as_test

from properties import invariants as inv
from properties import profiles
from properties.adapters import ADAPTERS, load_adapter, not_an_adapter
from properties.cross_lane import (
    batch_size,
    cross_lane_problems,
    lane_record_problems,
    lane_records,
    with_microbatch,
)
from properties.lineage import (
    closure_problems,
    expected_lanes,
    final_state_problems,
    lineage_problems,
)
from properties.machines import machine_configs, resume_machine
from properties.normal_form import lanes_of
from properties.pipelines import PipelineConfig
from properties.regressions import PinnedData, UnpinnedDraw, regressions_for
from properties.strategies import Topology, cut_schedules, execution_settings, topologies
from zephon_ref.exits import OneLineArgumentParser, int_at_least, writable_path

__all__ = ["CASE_ROWS", "LONG_RUN", "ORDER", "PROPERTIES", "Mismatch", "Row", "long_run_items", "main",
           "results_json", "run_suite"]

#: the reference implementation every other one is compared with
ORACLE = ADAPTERS["inline"]
#: shrinking stops after this many seconds per row (the command's --shrink-seconds)
SHRINK_SECONDS = 30.0
#: long-run items per profile (properties.profiles)
LONG_RUN = {"ci": 2_000, "dev": 2_000, "nightly": 100_000}


@dataclass(frozen=True, slots=True)
class Row:
    prop: str
    examples: int
    passed: int
    failure: str | None = None  # "minimal config :: first problem"
    skipped: str | None = None
    seconds: float = 0.0  # wall time (reported only: never decides anything)
    note: str | None = None  # something measured that does not fail the row (shown in the table)
    found_at: int | None = None  # the example (1-based) that first failed, before shrinking
    unsupported: tuple[tuple[str, int], ...] = ()  # configurations the adapter declined: (reason, count)
    config: str | None = None  # the minimal failing configuration
    ours: str | None = None  # the first differing item: the implementation's ...
    theirs: str | None = None  # ... and the reference's (zephon_ref, or the implementation's own run)
    cpu_seconds: float = 0.0  # user + sys CPU of the row (its process and the children it waited for)


class Mismatch(AssertionError):
    """A stream that differs from its reference: the message, and the first differing item of each."""

    def __init__(self, message: str, ours: Any, theirs: Any) -> None:
        super().__init__(message)
        self.ours, self.theirs = repr(ours)[:2000], repr(theirs)[:2000]


class _Counter:
    def __init__(self, tick: Callable[[], None]) -> None:
        self.runs = self.passed = 0
        self.found_at: int | None = None
        self.unsupported: dict[str, int] = {}
        self.last = ""
        self.tick = tick


Check = Callable[[Any, PipelineConfig, st.DataObject], None]


@dataclass
class _Context:
    """What the rows share: whether the implementation passed the oracle row (then the resume rows
    compare with zephon_ref's stream too)."""

    use_oracle: bool = False


CTX = _Context()


# -- runs ---------------------------------------------------------------------------------------------

def _full(adapter: Any, cfg: PipelineConfig, **execution: Any) -> list[Any]:
    run = adapter.build(cfg, **execution)
    try:
        return list(run.deliver(1_000_000))
    finally:
        run.close()


_REFERENCE: dict[str, list[Any]] = {}


def _oracle_stream(cfg: PipelineConfig) -> list[Any]:
    """zephon_ref's (inline) uninterrupted stream of ``cfg`` (kept for the last 64 configurations)."""
    key = cfg.describe()
    if key not in _REFERENCE:
        _REFERENCE[key] = _full(ORACLE, cfg)
        if len(_REFERENCE) > 64:
            del _REFERENCE[next(iter(_REFERENCE))]
    return _REFERENCE[key]


def _reference(adapter: Any, cfg: PipelineConfig) -> list[Any]:
    """The stream the resume rows compare with: zephon_ref's once the oracle row passed, else the
    implementation's own uninterrupted run."""
    return _oracle_stream(cfg) if CTX.use_oracle else _full(adapter, cfg)


def _checkpoints(adapter: Any, cfg: PipelineConfig, cuts: Sequence[int]) -> tuple[list[Any], dict[int, Any]]:
    """One run: its items and a checkpoint at each cut (cut = items delivered before it)."""
    run = adapter.build(cfg)
    items: list[Any] = []
    cks: dict[int, Any] = {}
    try:
        for cut in sorted(set(cuts)):
            items += run.deliver(cut - len(items)) if cut > len(items) else []
            cks[min(cut, len(items))] = copy.deepcopy(run.checkpoint())
        items += run.deliver(1_000_000)
    finally:
        run.close()
    return items, cks


def _first_difference(ours: Sequence[Any], theirs: Sequence[Any], what: str, *, ours_name: str,
                      theirs_name: str, offset: int = 0) -> None:
    """Raise a :class:`Mismatch` at the first item where ``ours`` and ``theirs`` differ."""
    if list(ours) == list(theirs):
        return
    at = next(
        (i for i in range(min(len(ours), len(theirs))) if ours[i] != theirs[i]), min(len(ours), len(theirs))
    )
    a = ours[at] if at < len(ours) else "<the stream ended>"
    b = theirs[at] if at < len(theirs) else "<the stream ended>"
    raise Mismatch(f"{what}: item {offset + at} differs ({ours_name} delivered {len(ours)}, {theirs_name} "
                   f"{len(theirs)}): {ours_name} {a!r:.300} | {theirs_name} {b!r:.300}", a, b)


# -- the rows -----------------------------------------------------------------------------------------

def _oracle(adapter: Any, cfg: PipelineConfig, data: st.DataObject) -> None:
    if isinstance(adapter, _SecondOpinion):  # zephon_ref itself, against zephon 0.2.0
        _first_difference(_oracle_stream(cfg), _full(ADAPTERS["zephon"], cfg), "the stream",
                          ours_name="zephon_ref", theirs_name="zephon 0.2.0")
        return
    _first_difference(_full(adapter, cfg), _oracle_stream(cfg), "the stream", ours_name=adapter.name,
                      theirs_name="zephon_ref")
    if "remap" in frozenset(adapter.features):
        topology: Topology = data.draw(
            topologies(int(cfg.options.get("canonical_replicas", 1))), label="topology"
        )
        cut = data.draw(st.integers(0, len(_oracle_stream(cfg))), label="cut")
        got = _participant_streams(adapter, cfg, topology, cut)
        want = _participant_streams(ORACLE, cfg, topology, cut)
        assert len(got) == len(want), f"{topology}: {len(got)} participants, zephon_ref has {len(want)}"
        for i, (a, b) in enumerate(zip(got, want, strict=True)):
            _first_difference(
                a,
                b,
                f"participant {i} of {topology} restored at {cut}",
                ours_name=adapter.name,
                theirs_name="zephon_ref",
            )


@dataclass(frozen=True)
class _SecondOpinion:
    """zephon_ref inline as seen by its oracle row: the configurations zephon 0.2.0 declares a
    documented divergence for are declined (and counted), the rest compared with zephon's stream."""

    name: str = "inline"
    features: frozenset[str] = frozenset()

    def unsupported(self, cfg: PipelineConfig) -> str | None:
        reason = ADAPTERS["zephon"].unsupported(cfg)
        return None if reason is None else f"zephon 0.2.0 (the second opinion): {reason}"


def _second_opinion() -> str | None:
    """Why zephon_ref's own oracle row cannot run (zephon 0.2.0, its second opinion, is missing)."""
    try:
        import zephon  # noqa: F401
    except ImportError:
        return (
            "the implementation is the oracle (zephon_ref inline), and zephon 0.2.0, its second opinion, is "
            "not installed (pip install -e '.[conformance]')"
        )
    return None


def _participant_streams(adapter: Any, cfg: PipelineConfig, topology: Topology, cut: int) -> list[list[Any]]:
    _, cks = _checkpoints(adapter, cfg, [cut])
    out = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        runs = adapter.participants(cfg, topology, copy.deepcopy(cks[min(cks)]))
    for run in runs:
        out.append(run.deliver(1_000_000))
        run.close()
    return out


def _lineage(adapter: Any, cfg: PipelineConfig, data: st.DataObject) -> None:
    """One consumer's timeline: deliver to each drawn cut, checkpoint, restore into a fresh run
    (or, at the last cut with [remap], into a drawn topology's participants), to the end."""
    features = frozenset(adapter.features)
    exp = expected_lanes(cfg)
    total = sum(len(ch) for chunks in exp.lanes.values() for ch in chunks)  # >= the items delivered
    cuts = data.draw(
        st.lists(st.integers(0, max(total, 1)), max_size=3, unique=True).map(sorted), label="cuts"
    )
    remap = "remap" in features and bool(cuts) and data.draw(st.booleans(), label="remap at the last cut")
    items: list[Any] = []
    run = adapter.build(cfg)
    final_states: list[Any] = []
    try:
        for i, cut in enumerate(cuts):
            if cut > len(items):
                items += run.deliver(cut - len(items))
            state = copy.deepcopy(run.checkpoint())
            run.close()
            if remap and i == len(cuts) - 1:
                topology = data.draw(
                    topologies(int(cfg.options.get("canonical_replicas", 1))), label="topology"
                )
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    parts = adapter.participants(cfg, topology, state)
                for p in parts:
                    items += p.deliver(1_000_000)
                    p.close()
                run = None
                break
            run = adapter.build(cfg, state=state)
        if run is not None:
            items += run.deliver(1_000_000)
            if "engine_state" in features:
                final_states.append(run.checkpoint())
    finally:
        if run is not None:
            run.close()
    where = f"through cuts {cuts}" + (" and a remap at the last" if remap else "")
    problems = lineage_problems(cfg, items, expected=exp)
    if "tombstones" in features:
        observed, tombstones = adapter.observe(cfg)
        problems += [f"an uninterrupted run with its tombstones: {p}"
                     for p in closure_problems(cfg, observed, tombstones, expected=exp)]
    for state in final_states:
        problems += final_state_problems(state, what="the checkpoint after the last item")
    assert not problems, f"{where}: {problems[0]}" + (
        f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    )


def _tamper_candidates(state: dict[str, Any]) -> list[tuple[str, Callable[[dict[str, Any]], bool]]]:
    """Every top-level field: drop it, and change one leaf inside it; every per-lane table with two
    lanes whose entries differ: swap them.  Each edit returns False when it changed nothing."""
    out: list[tuple[str, Callable[[dict[str, Any]], bool]]] = []

    def drop(key: str) -> Callable[[dict[str, Any]], bool]:
        def edit(s: dict[str, Any]) -> bool:
            del s[key]
            return True
        return edit

    def change(path: tuple[Any, ...]) -> Callable[[dict[str, Any]], bool]:
        def edit(s: dict[str, Any]) -> bool:
            node: Any = s
            for p in path[:-1]:
                node = node[p]
            node[path[-1]] = _changed(node[path[-1]])
            return True
        return edit

    def swap(key: str, a: Any, b: Any) -> Callable[[dict[str, Any]], bool]:
        def edit(s: dict[str, Any]) -> bool:
            s[key][a], s[key][b] = s[key][b], s[key][a]
            return bool(s[key][a] != s[key][b])
        return edit

    for key in sorted(state, key=str):
        out.append((f"dropped {key!r}", drop(key)))
        leaves = list(_leaves(state[key], (key,)))
        for path in leaves[:1] + leaves[-1:] if len(leaves) > 1 else leaves:
            out.append((f"changed {'/'.join(map(str, path))} ({state_at(state, path)!r:.40})", change(path)))
        value = state[key]
        if isinstance(value, dict) and len(value) >= 2 and all(isinstance(k, int) for k in value):
            lanes = sorted(value)
            a, b = lanes[0], lanes[-1]
            if value[a] != value[b]:
                out.append((f"swapped {key!r} between lanes {a} and {b}", swap(key, a, b)))
    return out


def state_at(state: Any, path: tuple[Any, ...]) -> Any:
    node = state
    for p in path:
        node = node[p]
    return node


def _leaves(value: Any, path: tuple[Any, ...]) -> Iterator[tuple[Any, ...]]:
    if isinstance(value, dict):
        for k in value:
            yield from _leaves(value[k], (*path, k))
    elif isinstance(value, list) and value:
        for i, v in enumerate(value):
            yield from _leaves(v, (*path, i))
    else:
        yield path


def _changed(value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value * 2 + 1
    if isinstance(value, str):
        return value + "0" if not value[-1:].isdigit() else value[:-1] + str((int(value[-1]) + 1) % 10)
    if value is None:
        return 0
    if isinstance(value, (list, tuple)):
        return type(value)([*value, 0])
    if isinstance(value, dict):
        return {**value, "tampered": 1}
    return None


def _tamper_refused(adapter: Any, cfg: PipelineConfig, data: st.DataObject) -> None:
    from zephon_ref.errors import ZephonRefError

    typed = getattr(adapter, "refusal_errors", None) or (ZephonRefError,)

    ref = _reference(adapter, cfg)
    cut = data.draw(st.integers(0, len(ref)), label="cut")
    _, cks = _checkpoints(adapter, cfg, [cut])
    state = cks[min(cks)]
    if not isinstance(state, dict):
        raise AssertionError(f"an engine_state checkpoint: expected a dict, received {type(state).__name__}")
    candidates = _tamper_candidates(state)
    # every candidate on every example would cost a restore each: draw about a third of them (at least
    # 6), as positions in a fixed range (a runner that admits ahead on threads gives states of varying
    # shape, and what is drawn must not depend on them)
    picks = data.draw(st.lists(st.integers(0, 10_000), min_size=6, max_size=12), label="edits")
    picks = sorted({p % len(candidates) for p in picks} | set(range(0, len(candidates), 3)))
    for i in picks:
        what, edit = candidates[i]
        tampered = copy.deepcopy(state)
        if not edit(tampered) or tampered == state:
            continue
        before = copy.deepcopy(tampered)
        try:
            run = adapter.build(cfg, state=tampered)
            try:
                run.deliver(1)
            finally:
                run.close()
        except typed:
            pass
        except Exception as exc:  # noqa: BLE001 - an untyped refusal is the failure
            raise AssertionError(f"checkpoint after {cut} items, {what}: refused with {type(exc).__name__}, "
                                 f"not a {' or '.join(t.__name__ for t in typed)}: {exc}") from exc
        else:
            raise AssertionError(f"checkpoint after {cut} items, {what}: restored without a refusal")
        assert tampered == before, (
            f"checkpoint after {cut} items, {what}: the refused restore changed the dict"
        )
    run = adapter.build(cfg, state=copy.deepcopy(state))
    rest = run.deliver(1_000_000)
    run.close()
    problems = inv.resume_problems(ref, rest, cut=cut)
    assert not problems, f"after the refusals, the untampered checkpoint at {cut}: {problems[0]}"


def _resume_at_cuts(adapter: Any, cfg: PipelineConfig, data: st.DataObject) -> None:
    ref = _reference(adapter, cfg)
    cuts = data.draw(cut_schedules(len(ref)), label="cuts")
    items, cks = _checkpoints(adapter, cfg, cuts)
    _first_difference(items, ref, "an uninterrupted run with checkpoints", ours_name=adapter.name,
                      theirs_name="zephon_ref" if CTX.use_oracle else "its own run")
    for cut, state in cks.items():
        run = adapter.build(cfg, state=copy.deepcopy(state))
        rest = run.deliver(1_000_000)
        run.close()
        _first_difference(rest, ref[cut:], f"restored at {cut}", ours_name=adapter.name,
                          theirs_name="zephon_ref" if CTX.use_oracle else "its uninterrupted run", offset=cut)


def _settings_invariance(adapter: Any, cfg: PipelineConfig, data: st.DataObject) -> None:
    own = _runner(
        adapter, cfg
    )  # a drawn setting that is the adapter's own default would compare a run with itself
    execution = data.draw(execution_settings().filter(lambda e: e != {"runner": own}), label="execution")
    problems = inv.settings_invariance_problems({"a: default": _reference(adapter, cfg),
                                                 f"b: {execution}": _full(adapter, cfg, **execution)})
    assert not problems, problems[0]


def _lane_remap(adapter: Any, cfg: PipelineConfig, data: st.DataObject) -> None:
    ref = _reference(adapter, cfg)
    cut = data.draw(st.integers(0, len(ref)), label="cut")
    topology: Topology = data.draw(
        topologies(int(cfg.options.get("canonical_replicas", 1))), label="topology"
    )
    # seed 002: a micro-batch size change with the remap keeps every lane's records (batch(8) ->
    # batch(4) with a dp_degree change); the records are compared then, not the items
    size = batch_size(cfg)
    new_size = size if size is None else data.draw(
        st.sampled_from(sorted({max(1, size // 2), size, 2 * size})), label="micro-batch after the remap")
    target = cfg if new_size == size or new_size is None else with_microbatch(cfg, new_size)
    items, cks = _checkpoints(adapter, cfg, [cut])
    rest: list[Any] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        runs = adapter.participants(target, topology, copy.deepcopy(cks[min(cks)]))
    for run in runs:
        rest += run.deliver(1_000_000)
        run.close()
    if target is cfg:
        problems = inv.lane_stream_problems(lanes_of(ref[:cut] + rest), lanes_of(ref), exact=True)
    else:  # with drop_last the lane's end may differ by less than a batch (its last incomplete one)
        problems = lane_record_problems(lane_records(ref[:cut] + rest), lane_records(ref),
                                        f"batch({size}) -> batch({new_size})",
                                        slack=max(size or 1, new_size or 1))
    assert not problems, f"remapped at {cut} to {topology}: {problems[0]}"


def _cross_lane_order(adapter: Any, cfg: PipelineConfig, data: st.DataObject) -> None:
    if "remap" not in frozenset(adapter.features):
        raise AssertionError(f"{adapter.name}: the cross-lane order row needs the 'remap' feature too")
    problems = cross_lane_problems(adapter, ORACLE, cfg, data)
    assert not problems, problems[0]


def _torch(adapter: Any, cfg: PipelineConfig, data: st.DataObject) -> None:
    from properties.torch_row import torch_problems

    problems = torch_problems(adapter, cfg, data, _oracle_stream)
    assert not problems, problems[0]


def _every_cut(adapter: Any, cfg: PipelineConfig, every: int = 1,
               **execution: Any) -> tuple[list[Any], list[Any]]:
    run = adapter.build(cfg, **execution)
    items: list[Any] = []
    cks = [copy.deepcopy(run.checkpoint())]
    try:
        while got := run.deliver(every):
            items += got
            cks.append(copy.deepcopy(run.checkpoint()))
    finally:
        run.close()
    return items, cks


def _runner(adapter: Any, cfg: PipelineConfig) -> str:
    """The runner the adapter runs ``cfg`` with (its execution settings win over the configuration's)."""
    return str(
        {**dict(cfg.options), **dict(getattr(adapter, "execution", None) or {})}.get("runner") or "inline"
    )


def _inflight_problems(adapter: Any, cfg: PipelineConfig, cks: Sequence[Any], *, every: int = 1,
                       execution: dict[str, Any] | None = None) -> list[str]:
    """The first checkpoint (of ``cks``, one every ``every`` items) that breaks the inflight bound
    (:func:`properties.invariants.adapter_inflight_checker`: the bound, where and how it applies)
    at the window of the runner and queue size the run had (``execution`` over the adapter's)."""
    check = inv.adapter_inflight_checker(adapter, cfg, execution=execution)
    for i, ck in enumerate(cks):
        problems = check(ck)
        if problems:
            return [f"after {i * every} items: {problems[0]}"]
    return []


def _bounded_inflight(adapter: Any, cfg: PipelineConfig, data: st.DataObject) -> None:
    # with [runners], at the depth of drawn execution settings (runner, queue size, workers): the
    # bound is the one of the window actually in force, never a looser one; without, the adapter's own
    # (drawn as a constant, so a regression example's pin of "execution" is drawn by every adapter)
    runners = "runners" in frozenset(adapter.features)
    execution: dict[str, Any] = data.draw(execution_settings() if runners else st.just({}), label="execution")
    _, cks = _every_cut(adapter, cfg, **execution)
    problems = _inflight_problems(adapter, cfg, cks, execution=execution)
    assert not problems, (f"under {execution}: " if execution else "") + problems[0]


def _eviction_safety(adapter: Any, cfg: PipelineConfig, data: st.DataObject) -> None:
    items, cks = _every_cut(adapter, cfg)
    cuts = [(i, inv.lane_cut(ck)) for i, ck in enumerate(cks)]
    pinned = [frozenset((int(lane), int(c[0])) for lane, c in (ck.get("replay_cursors") or {}).items()
                        if c is not None) for ck in cks]
    problems = inv.eviction_safety_problems(cuts, [inv.needs_of(v) for v in items], pinned=pinned)
    assert not problems, problems[0]


def _checkpoint_bytes(adapter: Any, cfg: PipelineConfig, data: st.DataObject) -> None:
    from zephon_ref import codec

    n = len(_full(adapter, cfg))
    cut = data.draw(st.integers(0, n), label="cut")
    states = [_checkpoints(adapter, cfg, [cut])[1][cut] for _ in range(2)]
    encodings = {f"run {i + 1} after {cut} items": codec.encode(state) for i, state in enumerate(states)}
    encodings[f"run 1 after {cut} items, dicts reversed"] = codec.encode(inv.reversed_dicts(states[0]))
    problems = inv.checkpoint_bytes_problems(encodings)
    assert not problems, problems[0]


def _corrupt_refused(adapter: Any, cfg: PipelineConfig, data: st.DataObject) -> None:
    from zephon_ref.errors import ZephonRefError

    ref = _full(adapter, cfg)
    cut = data.draw(st.integers(0, len(ref)), label="cut")
    run = adapter.build(cfg)
    try:
        got = run.deliver(cut)
        with tempfile.TemporaryDirectory(prefix="zephon-ref-conformance-") as tmp:
            adapter.save(run, Path(tmp))
            files = sorted(f for f in Path(tmp).rglob("*") if f.is_file())
            # positions in fixed ranges: what is drawn must not depend on the (timing-dependent) files
            victim = files[data.draw(st.integers(0, 10_000), label="file") % len(files)]
            blob = bytearray(victim.read_bytes())
            blob[data.draw(st.integers(0, 1 << 20), label="byte") % len(blob)] ^= 1 << data.draw(
                st.integers(0, 7)
            )
            victim.write_bytes(bytes(blob))
            try:
                adapter.load(cfg, Path(tmp)).close()
            except ZephonRefError:
                pass
            else:
                raise AssertionError(f"a flipped bit in {victim.name} loaded")
        got += run.deliver(1_000_000)  # the live run carries on, unchanged
    finally:
        run.close()
    assert got == ref, "the live run changed after a refused load"


def long_run_items() -> int:
    """Items the ``long run`` row delivers under the active Hypothesis profile (:data:`LONG_RUN`)."""
    return LONG_RUN[profiles.active()]


def long_run_config(items: int, *, mixture: bool = True) -> PipelineConfig:
    """A packing + shuffle + ensure_mixture + batch(drop_last=False) pipeline of four lanes whose
    corpus gives at least ``items`` micro-batches (measured: about 136 per unit of scale).

    ``mixture=False`` leaves ensure_mixture out (the same corpus then gives more items): the long
    run of an implementation that declines the mixture configuration (zephon 0.2.0 declines every
    multi-lane ensure_mixture, docs/divergences.md), so that its inflight growth is still measured.
    """
    scale = max(1, -(-items // 120))
    layout = {"web": (200 * scale, 150 * scale), "code": (400 * scale,), "books": (250 * scale,)}
    chain: list[tuple[str, dict[str, Any]]] = [
        ("pack_sequences", {"max_length": 96, "algorithm": "first_fit", "num_bins": 3}),
        ("shuffle", {"buffer_size": 8, "seed": 3}),
        *([("ensure_mixture", {})] if mixture else []),
        ("batch", {"microbatch_size": 2, "drop_last": False})]
    return PipelineConfig(
        chain=chain, layout=layout, weights={"web": 0.5, "code": 0.3, "books": 0.2},
        source_kwargs={"chunk_size": 8, "seed": 1, "exhausted_policy": "stop"},
        options={"runner": "inline", "canonical_replicas": 4, "flush_every_k_chunks": 2})


def _long_run(adapter: Any, items: int) -> Row:
    """One run of at least ``items`` items: inflight bounded at (about) 500 evenly spaced
    checkpoints, the lineage row's checks at the end."""
    t0 = time.perf_counter()
    cfg = long_run_config(items)
    declined = adapter.unsupported(cfg)
    if declined is not None:  # the same run without ensure_mixture, so the growth is still measured
        cfg = long_run_config(items, mixture=False)
        reason = adapter.unsupported(cfg)
        if reason is not None:
            return Row("long run", 0, 0, skipped=reason)
    every = max(1, items // 500)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got, cks = _every_cut(adapter, cfg, every)
    problems = [] if len(got) >= items else [f"expected at least {items} items, the run delivered {len(got)}"]
    problems += _inflight_problems(adapter, cfg, cks, every=every)
    note = None
    if (
        inv.adapter_feeding(adapter, cfg) != "demand"
    ):  # round robin has no bound (issue 21): report how it grew
        worst = 0
        points = []
        for i, ck in enumerate(cks):
            counts, _ = inv.inflight_observation(ck)
            worst = max([worst, *counts.values()])
            points.append((i * every, worst))
        note = f"{len(got)} items, round-robin feeding (no bound): {inv.inflight_growth(points)}"
    problems += lineage_problems(cfg, got) + final_state_problems(
        cks[-1], what="the checkpoint after the last item"
    )
    seconds = time.perf_counter() - t0
    if problems:
        return Row("long run", 1, 0, failure=f"{len(got)} items of {cfg.describe()} :: {problems[0]}",
                   config=cfg.describe(), seconds=seconds)
    if declined is not None:
        note = f"{note or f'{len(got)} items'}; without ensure_mixture (declined: {declined[:80]})"
    return Row("long run", 1, 1, seconds=seconds, note=note or f"{len(got)} items")


#: property name -> (feature it needs or None, check)
PROPERTIES: dict[str, tuple[str | None, Check]] = {
    "oracle": (None, _oracle),
    "lineage": (None, _lineage),
    "tamper refused": ("engine_state", _tamper_refused),
    "resume at cuts": (None, _resume_at_cuts),
    "settings invariance": ("runners", _settings_invariance),
    "lane remap": ("remap", _lane_remap),
    "cross-lane order": ("merged_checkpoint", _cross_lane_order),
    "bounded inflight": ("engine_state", _bounded_inflight),
    "eviction safety": ("engine_state", _eviction_safety),
    "checkpoint bytes": ("deterministic_checkpoints", _checkpoint_bytes),
    "corrupt refused": ("durable", _corrupt_refused),
    "torch": ("torch", _torch),
}
#: the order of the table: cheap, high-yield rows first
ORDER = (
    "oracle",
    "lineage",
    "tamper refused",
    "resume at cuts",
    "resume machine",
    "settings invariance",
    "lane remap",
    "cross-lane order",
    "bounded inflight",
    "eviction safety",
    "checkpoint bytes",
    "corrupt refused",
    "shared walk",
    "fast ops",
    "fast codec",
    "token estimation",
    "torch",
    "aggregation",
    "operators",
    "long run",
)


def _settings(examples: int, seed_free: bool) -> settings:
    # no explain phase: it replays variations of the minimal example, and the table reports the last one run
    return settings(max_examples=examples, deadline=None, database=None, derandomize=seed_free,
                    report_multiple_bugs=False, print_blob=False, stateful_step_count=12,
                    verbosity=Verbosity.quiet,  # the table reports; Hypothesis's own prints would interleave
                    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink],
                    suppress_health_check=list(HealthCheck))


@contextlib.contextmanager
def _shrink_cap(seconds: float) -> Iterator[None]:
    """Lower Hypothesis's own cap on shrink time (engine.MAX_SHRINKING_SECONDS) while rows run."""
    from hypothesis.internal.conjecture import engine

    old = engine.MAX_SHRINKING_SECONDS
    engine.MAX_SHRINKING_SECONDS = seconds  # type: ignore[assignment]
    try:
        yield
    finally:
        engine.MAX_SHRINKING_SECONDS = old


def _first_line(exc: BaseException) -> str:
    inner = getattr(exc, "exceptions", None)
    if inner:  # a FlakyFailure or an exception group: say so, and show the first underlying error
        return f"{type(exc).__name__} (not reproducible on replay) of " + _first_line(inner[0])
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:600]


def _mismatch_of(exc: BaseException) -> Mismatch | None:
    if isinstance(exc, Mismatch):
        return exc
    inner = getattr(exc, "exceptions", None)
    return _mismatch_of(inner[0]) if inner else None


def _run_property(adapter: Any, name: str, check: Check, examples: int, derandomize: bool,
                  tick: Callable[[], None]) -> Row:
    c = _Counter(tick)

    @_settings(examples, derandomize)
    @given(cfg=machine_configs(), data=st.data())
    def prop(cfg: PipelineConfig, data: st.DataObject) -> None:
        reason = adapter.unsupported(cfg)
        if reason is not None:
            c.unsupported[reason[:160]] = c.unsupported.get(reason[:160], 0) + 1
        assume(reason is None)
        c.runs += 1
        c.tick()
        c.last = cfg.describe()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                check(adapter, cfg, data)
        except BaseException:
            if c.found_at is None:
                c.found_at = c.runs
            raise
        c.passed += 1

    failed = _run_regressions(adapter, name, check, c)
    if failed is not None:
        return failed
    try:
        prop()
    except Unsatisfiable as exc:
        return Row(name, c.runs, c.passed, skipped=f"no supported configuration ({_first_line(exc)})",
                   unsupported=_declined(c))
    except Exception as exc:  # noqa: BLE001 - any failure is a row of the table
        m = _mismatch_of(exc)
        return Row(name, c.runs, c.passed, failure=f"{c.last} :: {_first_line(exc)}", config=c.last,
                   ours=m.ours if m else None, theirs=m.theirs if m else None, found_at=c.found_at,
                   unsupported=_declined(c))
    return Row(name, c.runs, c.passed, unsupported=_declined(c))


def _run_regressions(adapter: Any, name: str, check: Check, c: _Counter) -> Row | None:
    """Run ``name``'s fixed regression examples (:mod:`properties.regressions`) before its drawn ones, on
    top of the row's budget: the failing row of the first that fails (it is not shrunk: it is fixed), else
    None.  An example the adapter declines counts as declined, as a drawn one does."""
    for i, reg in enumerate(regressions_for(name), 1):
        reason = adapter.unsupported(reg.cfg)
        if reason is not None:
            c.unsupported[reason[:160]] = c.unsupported.get(reason[:160], 0) + 1
            continue
        c.runs += 1
        c.tick()
        c.last = reg.cfg.describe()
        data = PinnedData(reg.draws, row=name)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                check(adapter, reg.cfg, data)  # type: ignore[arg-type]
            if data.unused():
                raise UnpinnedDraw(f"regression example of row {name!r}: expected every pinned value drawn, "
                                   f"received no draw of {data.unused()}")
        except Exception as exc:  # noqa: BLE001 - any failure is a row of the table
            m = _mismatch_of(exc)
            where = f"{c.last} [regression example {i} of the row, draws {dict(reg.draws)!r}]"
            return Row(name, c.runs, c.passed, failure=f"{where} :: {_first_line(exc)}", config=where,
                       ours=m.ours if m else None, theirs=m.theirs if m else None, found_at=c.runs,
                       unsupported=_declined(c))
        c.passed += 1
    return None


def _run_shared_walk(examples: int, derandomize: bool, tick: Callable[[], None]) -> Row:
    """The ``shared walk`` row: the engine's shared chunk walk against the plain walk (its own draws)."""
    from properties.shortcuts import WalkCase, shared_walk_problems, walk_cases

    c = _Counter(tick)

    @_settings(examples, derandomize)
    @given(case=walk_cases())
    def prop(case: WalkCase) -> None:
        c.runs += 1
        c.tick()
        c.last = repr(case)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a drawn source's documented drops: not this row's subject
            problems = shared_walk_problems(case)
        if problems and c.found_at is None:
            c.found_at = c.runs
        assert not problems, problems[0]
        c.passed += 1

    try:
        prop()
    except Exception as exc:  # noqa: BLE001 - any failure is a row of the table
        return Row("shared walk", c.runs, c.passed, failure=f"{c.last} :: {_first_line(exc)}", config=c.last,
                   found_at=c.found_at)
    return Row("shared walk", c.runs, c.passed)


#: rows whose examples are not pipeline configurations, each in its own module (imported when it
#: runs): name -> (the feature it needs, "module:strategy" of its cases, "module:check", the check
#: taking (adapter, case) and returning the problems found)
CASE_ROWS: dict[str, tuple[str, str, str]] = {
    "aggregation": ("aggregation", "properties.aggregation:round_cases",
                    "properties.aggregation:round_problems"),
    "fast ops": ("fast_ops", "properties.fast_ops:fast_op_cases", "properties.fast_ops:fast_ops_check"),
    "fast codec": ("fast_codec", "properties.fast_codec:codec_values",
                   "properties.fast_codec:fast_codec_check"),
    "token estimation": ("token_estimation", "properties.token_census:census_cases",
                         "properties.token_census:token_estimation_check"),
}
#: a row of CASE_ROWS -> "module:function" giving its fixed cases, checked before the drawn ones (on top
#: of the budget, counted in the row's columns; a failing one is reported as is, not shrunk)
CASE_FIXED: dict[str, str] = {"token estimation": "properties.token_census:fixed_cases"}


def _resolve(spec: str) -> Any:
    import importlib

    module, attr = spec.split(":")
    return getattr(importlib.import_module(module), attr)


def rows_around_a_plant(name: str, clean: int, plant: Callable[[], None],
                        planted: int = 300) -> tuple[Row, Row]:
    """The case row ``name`` against the inline adapter (derandomized, no progress output) on
    ``clean`` examples, then ``plant()`` (a test's planted bug), then the row again on ``planted``
    examples: the tests that show a row can fail assert the first passes and the second fails."""
    from properties.adapters import ADAPTERS

    before = _run_cases(ADAPTERS["inline"], name, clean, True, lambda: None)
    plant()
    return before, _run_cases(ADAPTERS["inline"], name, planted, True, lambda: None)


def _run_cases(adapter: Any, name: str, examples: int, derandomize: bool, tick: Callable[[], None]) -> Row:
    """A row of :data:`CASE_ROWS`: its own drawn cases, each checked against ``adapter``."""
    _, strategy, check_spec = CASE_ROWS[name]
    cases, check = _resolve(strategy), _resolve(check_spec)
    c = _Counter(tick)
    fixed = _resolve(CASE_FIXED[name])() if name in CASE_FIXED else ()
    for i, case in enumerate(fixed, 1):
        c.runs += 1
        c.tick()
        c.last = f"{case!r} [fixed case {i} of the row]"
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                problems = check(adapter, case)
        except Exception as exc:  # noqa: BLE001 - any failure is a row of the table
            problems = [_first_line(exc)]
        if problems:
            return Row(name, c.runs, c.passed, failure=f"{c.last} :: {problems[0]}", config=c.last,
                       found_at=c.runs)
        c.passed += 1

    @_settings(examples, derandomize)
    @given(case=cases())
    def prop(case: Any) -> None:
        c.runs += 1
        c.tick()
        c.last = repr(case)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            problems = check(adapter, case)
        if problems and c.found_at is None:
            c.found_at = c.runs
        assert not problems, problems[0]
        c.passed += 1
    try:
        prop()
    except Exception as exc:  # noqa: BLE001 - any failure is a row of the table
        return Row(name, c.runs, c.passed, failure=f"{c.last} :: {_first_line(exc)}", config=c.last,
                   found_at=c.found_at)
    return Row(name, c.runs, c.passed)


def _run_operators(examples: int, derandomize: bool, tick: Callable[[], None], *,
                   methods: Sequence[str] | None = None) -> Row:
    """The ``operators`` row: the operator unit properties over drawn operator calls (its own draws),
    twice ``examples`` per data method of the builder (a case costs milliseconds); ``methods``: only
    these (the planted-bug tests)."""
    from properties import generator as gen
    from properties.op_units import op_cases, unit_problems

    c = _Counter(tick)
    try:
        for method in gen.drawn_methods() if methods is None else methods:
            _run_operator_cases(c, method, 2 * examples, derandomize, op_cases, unit_problems)
    except Exception as exc:  # noqa: BLE001 - any failure is a row of the table
        return Row("operators", c.runs, c.passed, failure=f"{c.last} :: {_first_line(exc)}", config=c.last,
                   found_at=c.found_at)
    return Row("operators", c.runs, c.passed)


def _run_operator_cases(c: _Counter, method: str, examples: int, derandomize: bool, op_cases: Any,
                        unit_problems: Any) -> None:
    from properties.op_units import OpCase, regression_cases

    def check(case: OpCase, label: str) -> None:
        c.runs += 1
        c.tick()
        c.last = label
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # documented drops: not this row's subject
            problems = unit_problems(case)
        if problems and c.found_at is None:
            c.found_at = c.runs
        assert not problems, problems[0]
        c.passed += 1

    def prop(case: OpCase) -> None:
        check(case, case.describe())

    for case, why in regression_cases(method):  # the fixed examples first (counted as examples)
        check(case, f"{case.describe()} [fixed example: {why}]")
    _settings(examples, derandomize)(given(case=op_cases(methods=[method]))(prop))()


def _declined(c: _Counter) -> tuple[tuple[str, int], ...]:
    return tuple(sorted(c.unsupported.items(), key=lambda kv: (-kv[1], kv[0])))


def _run_machine(adapter: Any, examples: int, derandomize: bool, tick: Callable[[], None]) -> Row:
    machine = resume_machine(adapter, oracle=ORACLE if CTX.use_oracle else None, on_start=tick)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            run_state_machine_as_test(machine, settings=_settings(examples, derandomize))
    except Exception as exc:  # noqa: BLE001
        return Row("resume machine", machine.started, machine.started - 1,
                   failure=f"{machine.last_config} :: {_first_line(exc)}", config=machine.last_config)
    return Row("resume machine", machine.started, machine.started)


class _Progress:
    """A tqdm bar per row on stderr (off when stderr is not a terminal, or quiet)."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.bar: Any = None

    def start(self, name: str, total: int) -> None:
        if self.enabled:
            try:
                from tqdm import tqdm
            except ImportError:  # progress is a convenience: without tqdm the table still prints
                self.enabled = False
                return
            self.bar = tqdm(total=total, desc=f"{name:<20}", unit="ex", file=sys.stderr, leave=False)

    def tick(self) -> None:
        if self.bar is not None:
            self.bar.update(1)

    def stop(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def run_suite(adapter: Any, *, examples: int, derandomize: bool = True, only: Sequence[str] = (),
              progress: bool = False, shrink_seconds: float = SHRINK_SECONDS,
              long_items: int | None = None) -> list[Row]:
    """Every property (or those named in ``only``) against ``adapter``; one row each, in :data:`ORDER`."""
    features = frozenset(getattr(adapter, "features", frozenset()))
    bar = _Progress(progress)
    CTX.use_oracle = False
    import logging

    quiet = logging.getLogger("zephon")  # zephon 0.2.0 logs its packing drops: the table reports instead
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        return _run_rows(adapter, features, bar, examples, derandomize, only, shrink_seconds, long_items)
    finally:
        quiet.setLevel(level)
        CTX.use_oracle = False


def _run_rows(adapter: Any, features: frozenset[str], bar: _Progress, examples: int, derandomize: bool,
              only: Sequence[str], shrink_seconds: float, long_items: int | None) -> list[Row]:
    rows: list[Row] = []
    with _shrink_cap(shrink_seconds):
        for name in ORDER:
            if only and name not in only:
                continue
            t0, cpu0 = time.perf_counter(), _cpu()
            bar.start(name, 1 if name == "long run" else examples)
            try:
                if name == "resume machine":
                    row = _run_machine(adapter, examples, derandomize, bar.tick)
                elif name == "long run":
                    row = (
                        Row(name, 0, 0, skipped="the adapter lacks the 'engine_state' feature")
                        if "engine_state" not in features
                        else _long_run(adapter, long_items or long_run_items())
                    )
                elif name == "shared walk":
                    row = (_run_shared_walk(examples, derandomize, bar.tick) if "shared_walk" in features
                           else Row(name, 0, 0, skipped="the adapter lacks the 'shared_walk' feature "
                                                        "(zephon_ref's own shortcut)"))
                elif name in CASE_ROWS:
                    feature = CASE_ROWS[name][0]
                    row = (_run_cases(adapter, name, examples, derandomize, bar.tick) if feature in features
                           else Row(name, 0, 0, skipped=f"the adapter lacks the {feature!r} feature"))
                elif name == "operators":
                    row = (_run_operators(examples, derandomize, bar.tick) if "operators" in features
                           else Row(name, 0, 0, skipped="the adapter lacks the 'operators' feature "
                                                        "(its operators are not zephon_ref's)"))
                elif name == "oracle" and adapter is ORACLE and _second_opinion() is not None:
                    row = Row(name, 0, 0, skipped=_second_opinion())
                else:
                    feature, check = PROPERTIES[name]
                    if feature is not None and feature not in features:
                        row = Row(name, 0, 0, skipped=f"the adapter lacks the {feature!r} feature")
                    elif name == "torch" and _torch_unavailable() is not None:
                        row = Row(name, 0, 0, skipped=_torch_unavailable())
                    else:
                        subject = _SecondOpinion() if name == "oracle" and adapter is ORACLE else adapter
                        row = _run_property(subject, name, check, _row_examples(name, examples), derandomize,
                                            bar.tick)
            finally:
                bar.stop()
            if name == "oracle" and row.skipped is None and row.failure is None and adapter is not ORACLE:
                CTX.use_oracle = True  # from now on the resume rows compare with zephon_ref's stream too
            rows.append(Row(name, row.examples, row.passed, row.failure, row.skipped,
                            row.seconds or time.perf_counter() - t0, row.note, row.found_at, row.unsupported,
                            row.config, row.ours, row.theirs, _cpu() - cpu0))
    return rows


def _cpu() -> float:
    """User + system CPU seconds of this process and of the children it has waited for (the torch
    row's DataLoader workers): a row's cost on a shared machine, where wall time is noisy."""
    import resource

    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


# -- --jobs N: the rows in worker processes -----------------------------------------------------------

#: CPU seconds of each row of ``--impl inline --examples 100 --skip torch`` (2026-12-06, 2 shared
#: cores): ``--jobs`` starts the dearest rows first, so the slowest one (eviction safety, about half
#: of the total) does not start last.  Only the launch order: the results never depend on it.
ROW_COST: dict[str, float] = {
    "eviction safety": 181, "operators": 30, "cross-lane order": 29, "lane remap": 24, "resume machine": 14,
    "tamper refused": 13, "bounded inflight": 12, "checkpoint bytes": 11, "oracle": 10,
    "settings invariance": 8.5, "resume at cuts": 6.6, "lineage": 6.5, "corrupt refused": 5.9,
    "long run": 3.6, "aggregation": 3.0, "shared walk": 2.1, "fast ops": 2.6, "token estimation": 1.7,
    "fast codec": 1.5,
}


def _one_row(adapter: Any, name: str, examples: int, derandomize: bool, shrink_seconds: float,
             long_items: int | None, use_oracle: bool) -> Row:
    """One row, as :func:`run_suite` runs it, in this (worker) process: ``use_oracle`` says whether
    the implementation passed the oracle row (the resume rows then compare with zephon_ref too)."""
    features = frozenset(getattr(adapter, "features", frozenset()))
    import logging

    logging.getLogger("zephon").setLevel(logging.ERROR)  # as run_suite: the table reports zephon's drops
    CTX.use_oracle = use_oracle
    return _run_rows(adapter, features, _Progress(False), examples, derandomize, [name], shrink_seconds,
                     long_items)[0]


def _worker(conn: Any, impl: str, name: str, examples: int, derandomize: bool, shrink_seconds: float,
            long_items: int | None, use_oracle: bool) -> None:
    """A worker process's body: run one row, send back (row, coverage, library versions).  SIGINT
    is ignored here: on Ctrl-C the parent ends its workers itself."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from properties import generator as gen

    gen.reset_seen()  # this row's draws only (a forked worker inherits the parent's counts)
    try:
        row = _one_row(load_adapter(impl), name, examples, derandomize, shrink_seconds, long_items,
                       use_oracle)
    except Exception as exc:  # noqa: BLE001 - a row that cannot even start is a failure of the row
        row = Row(name, 0, 0, failure=f"the worker could not run the row :: {_first_line(exc)}")
    conn.send((row, gen.seen(), _versions()))
    conn.close()


def _dead_worker(name: str, code: int | None) -> Row:
    why = f"signal {-code}" if code is not None and code < 0 else f"exit code {code}"
    return Row(name, 0, 0, failure=f"the worker process running this row died ({why}) before reporting a "
                                   f"result :: rerun it alone: --property {name!r} --jobs 1")


def run_suite_parallel(impl: str, *, jobs: int, examples: int, derandomize: bool = True,
                       only: Sequence[str] = (), progress: bool = False,
                       shrink_seconds: float = SHRINK_SECONDS, long_items: int | None = None,
                       ) -> tuple[list[Row], dict[str, str]]:
    """:func:`run_suite` with the rows in up to ``jobs`` worker processes (one process per row, the
    adapter loaded there from ``impl``); the rows in :data:`ORDER`, and the library versions the
    workers loaded.  Every row is drawn as in one process (derandomized rows give the same results
    for any ``jobs``); the oracle row runs first when the implementation is not zephon_ref, since
    its verdict decides whether the resume rows compare with zephon_ref too.  A worker that dies
    without a result makes its row a failure naming the exit; on KeyboardInterrupt every worker is
    ended and the interrupt goes on to the caller.  The drawn-call coverage of every worker is
    merged into this process's (:func:`properties.generator.seen`)."""
    import multiprocessing as mp

    from properties import generator as gen

    names = [n for n in ORDER if not only or n in only]
    ctx = mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")
    adapter = load_adapter(impl)
    results: dict[str, Row] = {}
    versions: dict[str, str] = {}
    running: dict[Any, tuple[str, Any]] = {}  # parent end of the pipe -> (row, process)
    first = ["oracle"] if "oracle" in names and adapter is not ORACLE else []
    # the dearest rows first (ROW_COST; a row it does not know, e.g. torch, counts as dear): the wall
    # time is then about the larger of the slowest row and the total over ``jobs``
    queue = sorted((n for n in names if n not in first), key=lambda n: -ROW_COST.get(n, 60.0))
    use_oracle = False

    def launch(name: str) -> None:
        parent, child = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_worker, name=f"conformance: {name}",
                           args=(child, impl, name, examples, derandomize, shrink_seconds, long_items,
                                 use_oracle), daemon=False)
        # not daemonic: a row may start processes of its own (the torch row's DataLoader workers;
        # a daemonic worker may not have children).  The parent joins every worker, and ends them
        # on an interrupt (_end_workers), so none outlives it.
        proc.start()
        child.close()
        running[parent] = (name, proc)

    def collect() -> None:
        for conn in _wait_any(list(running)):
            name, proc = running.pop(conn)  # type: ignore[call-overload]
            try:
                row, cov, vers = conn.recv()
            except (EOFError, OSError):
                proc.join()
                row = _dead_worker(name, proc.exitcode)
            else:
                gen.seen().merge(cov)
                versions.update(vers)
                proc.join()
            conn.close()
            results[name] = row
            if progress:
                state = "skipped" if row.skipped else "FAILED" if row.failure else "ok"
                print(f"[{len(results)}/{len(names)}] {name}: {state}, {row.examples} examples, "
                      f"{row.cpu_seconds:.0f} s CPU", file=sys.stderr, flush=True)

    try:
        for name in first:
            launch(name)
            while running:
                collect()
            row = results[name]
            use_oracle = row.skipped is None and row.failure is None
        while queue or running:
            while queue and len(running) < jobs:
                launch(queue.pop(0))
            collect()
    except BaseException:
        _end_workers([proc for _, proc in running.values()])
        raise
    return [results[n] for n in names], versions


def _wait_any(conns: list[Any]) -> list[Any]:
    """The workers' pipe ends that have something to read (a result, or EOF: the worker died)."""
    from multiprocessing.connection import wait

    return wait(conns)


def _end_workers(procs: Sequence[Any]) -> None:
    """End the workers still running (SIGTERM, then SIGKILL after 5 s), a second Ctrl-C included."""
    for proc in procs:
        proc.terminate()
    for proc in procs:
        try:
            proc.join(5)
        finally:
            if proc.is_alive():
                proc.kill()
                proc.join()


def _torch_unavailable() -> str | None:
    from properties.torch_row import torch_unavailable

    return torch_unavailable()


def _row_examples(name: str, examples: int) -> int:
    """A row's examples: ``examples``, capped for the torch row (each example forks loader workers)."""
    if name == "torch":
        from properties.torch_row import EXAMPLES_CAP

        return min(examples, EXAMPLES_CAP)
    return examples


def format_table(rows: Sequence[Row]) -> str:
    lines = [f"{'property':<22} {'examples':>8} {'passed':>7} {'ex/min':>7}  first failing minimal config",
             "-" * 100]
    for r in rows:
        tail = f"skipped: {r.skipped}" if r.skipped else (r.failure or (f"- ({r.note})" if r.note else "-"))
        if r.failure and r.found_at is not None:
            tail = f"[found at example {r.found_at}] {tail}"
        rate = f"{60 * r.examples / r.seconds:.0f}" if r.seconds > 0 and r.examples else "-"
        lines.append(f"{r.prop:<22} {r.examples:>8} {r.passed:>7} {rate:>7}  {tail}")
        if r.unsupported:
            n = sum(k for _, k in r.unsupported)
            lines.append(f"{'':<22} declined {n} drawn configurations: " +
                         "; ".join(f"{k} x {why[:100]}" for why, k in r.unsupported[:3]) +
                         (f"; {len(r.unsupported) - 3} more reasons" if len(r.unsupported) > 3 else ""))
        if r.ours is not None:
            lines.append(f"{'':<22} first differing item: implementation {r.ours[:400]}")
            lines.append(
                f"{'':<22}                       reference      {r.theirs[:400] if r.theirs else ''}"
            )
    return "\n".join(lines)


def _versions() -> dict[str, str]:
    """Python's and Hypothesis's versions, and those of the libraries this process loaded."""
    import platform

    import hypothesis

    versions = {"python": platform.python_version(), "hypothesis": hypothesis.__version__}
    for lib in ("zephon_ref", "zephon", "torch"):
        mod = sys.modules.get(lib)
        if mod is not None:
            versions[lib] = str(getattr(mod, "__version__", "unknown"))
    return versions


def results_json(
    adapter: Any, rows: Sequence[Row], *, examples: int, impl: str, seconds: float,
    loaded: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The results for a machine: the implementation, its features, library versions, the examples
    setting, and per row: property, examples, passed, skipped (the reason), failure (minimal
    configuration and first problem), config (the minimal configuration alone), ours / theirs (the
    first differing item of each side, when a stream differed), seconds (wall), cpu_seconds (user +
    sys); ``loaded``: the versions of libraries that worker processes loaded (``--jobs``)."""
    versions = _versions()
    versions.update(loaded or {})
    return {"impl": impl, "adapter": str(getattr(adapter, "name", impl)),
            "features": sorted(getattr(adapter, "features", ())), "versions": versions,
            "examples": examples, "profile": profiles.active(), "seconds": round(seconds, 3),
            "passed": not any(r.failure for r in rows),
            "rows": [{**asdict(r), "property": r.prop, "seconds": round(r.seconds, 3)} for r in rows],
            "coverage": coverage_json()}


def coverage_json() -> dict[str, Any]:
    """The drawn calls of this process per (method, knob, value class) (:mod:`properties.generator`),
    the classes never drawn, and what the generator cannot draw (:func:`properties.generator.undeclared`)."""
    from properties import generator as gen

    cov = gen.seen()
    return {"calls": dict(sorted(cov.calls.items())), "rows": cov.rows(),
            "never_drawn": [list(z) for z in cov.zeros()], "undeclared": gen.undeclared()}


def main(argv: Sequence[str] | None = None) -> int:
    ap = OneLineArgumentParser(prog="python -m properties.conformance",
                              description=(__doc__ or "").split("\n")[0])
    ap.add_argument(
        "--impl",
        default="inline",
        help="inline, threads, zephon, tensor, or module:attr naming an adapter (default: inline)",
    )
    ap.add_argument(
        "--examples",
        type=int_at_least(1),
        default=20,
        help="Hypothesis examples per property, >= 1 (default: 20)",
    )
    ap.add_argument("--property", action="append", default=[],
                    help=f"run only this property (repeatable; one of: {', '.join(ORDER)})")
    ap.add_argument("--skip", action="append", default=[], metavar="PROPERTY",
                    help="leave this property out (repeatable; names as for --property)")
    ap.add_argument("--random", action="store_true", help="random examples (default: derandomized)")
    ap.add_argument(
        "--json", metavar="FILE", type=writable_path, help="also write the results as JSON to FILE"
    )
    ap.add_argument("--quiet", action="store_true", help="no progress bars on stderr")
    ap.add_argument("--coverage", action="store_true",
                    help="also print how many drawn calls took each (method, knob, value class)")
    ap.add_argument(
        "--shrink-seconds",
        type=float,
        default=SHRINK_SECONDS,
        help=f"stop shrinking a failing row after this many seconds (default: {SHRINK_SECONDS:g})",
    )
    ap.add_argument(
        "--jobs",
        type=int_at_least(1),
        default=1,
        help="run the rows in this many worker processes, >= 1 (default: 1, every row in this process); "
             "the results do not depend on it",
    )
    ap.add_argument(
        "--long-items",
        type=int_at_least(1),
        default=None,
        help="items of the long-run row (default: 2,000; 100,000 under HYPOTHESIS_PROFILE=nightly)",
    )
    args = ap.parse_args(argv)
    prog = ap.prog
    if not args.shrink_seconds >= 0:
        print(
            f"{prog}: --shrink-seconds: expected a number >= 0, received {args.shrink_seconds}",
            file=sys.stderr,
        )
        return 2
    unknown = [p for p in args.property if p not in ORDER]
    if unknown:
        print(f"{prog}: --property: expected one of {', '.join(repr(p) for p in ORDER)}, received "
              f"{', '.join(repr(p) for p in unknown)}", file=sys.stderr)
        return 2
    try:
        adapter = load_adapter(args.impl)
    except (ImportError, ValueError, KeyError) as exc:
        print(f"{prog}: --impl: {str(exc).splitlines()[0] if str(exc) else exc!r}", file=sys.stderr)
        return 2
    why = not_an_adapter(adapter)
    if why is not None:
        print(f"{prog}: --impl {args.impl}: {why}", file=sys.stderr)
        return 2
    unknown = [p for p in args.skip if p not in ORDER]
    if unknown:
        print(f"{prog}: --skip: expected one of {', '.join(ORDER)}, received {unknown[0]!r}", file=sys.stderr)
        return 2
    print(f"property suite against {getattr(adapter, 'name', args.impl)} "
          f"(features: {', '.join(sorted(getattr(adapter, 'features', ()))) or 'none'}), "
          f"{args.examples} examples per property", flush=True)
    from properties import generator as gen

    gen.reset_seen()  # --coverage and --json count this command's draws
    t0 = time.perf_counter()
    only = [p for p in (args.property or ORDER) if p not in args.skip]
    loaded: dict[str, str] = {}
    try:
        if args.jobs > 1:
            rows, loaded = run_suite_parallel(
                args.impl, jobs=args.jobs, examples=args.examples, derandomize=not args.random, only=only,
                progress=sys.stderr.isatty() and not args.quiet, shrink_seconds=args.shrink_seconds,
                long_items=args.long_items)
        else:
            rows = run_suite(adapter, examples=args.examples, derandomize=not args.random, only=only,
                             progress=sys.stderr.isatty() and not args.quiet,
                             shrink_seconds=args.shrink_seconds, long_items=args.long_items)
    except KeyboardInterrupt:
        print(f"{prog}: interrupted: expected the rows to finish, received Ctrl-C (no table, nothing "
              f"written)", file=sys.stderr)
        return 130
    print(format_table(rows))
    if args.coverage:
        from properties import generator as gen

        print()
        print(gen.seen().format())
        for line in gen.undeclared():
            print(f"not drawable: {line}")
    if args.json:
        doc = results_json(adapter, rows, examples=args.examples, impl=args.impl,
                           seconds=time.perf_counter() - t0, loaded=loaded)
        Path(args.json).write_text(json.dumps(doc, indent=2, default=repr) + "\n")
    return 1 if any(r.failure for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())

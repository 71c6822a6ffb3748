"""Stateful Hypothesis machines: checkpoint, restore, remap, switch settings, save, load and corrupt in
any order.

Theory of operation
-------------------
:func:`resume_machine` builds a ``RuleBasedStateMachine`` for one adapter
(:mod:`properties.adapters`).  A run starts from a configuration drawn by
:func:`properties.strategies.pipeline_configs` (or one of :data:`MACHINE_CONFIGS`);
the machine keeps the position ``pos`` in that configuration's uninterrupted
stream, the *reference*: zephon_ref's own stream when the machine is given an
``oracle`` adapter (``properties.conformance`` does that once the implementation
passed the oracle row), else the implementation's own uninterrupted run.  Whatever
the order of rules, the items delivered so far are exactly ``reference[:pos]``.

Rules (a rule needs the adapter feature in brackets; :func:`properties.adapters.skipped_rules`
names what an adapter skips and why):

* ``advance(n)``: the next ``n`` items are ``reference[pos:pos+n]`` (resume equivalence
  is this, after any earlier restore);
* ``checkpoint`` into a bundle; ``restore`` any earlier checkpoint into fresh objects
  (the bundle keeps it: one checkpoint can be restored many times, in any order);
* ``restore_under_other_execution_settings`` [runners]: runner, workers and queue
  sizes drawn by :func:`~properties.strategies.execution_settings`;
* ``remap`` [remap]: restore a checkpoint under another dp_degree, worker count and
  mapping strategy, run every participant in lockstep to the end, and check that
  every lane's stream is exactly its reference stream
  (:func:`sim.invariants.lane_stream_problems`) -- a side run: the machine's own run
  carries on;
* ``save_and_load`` [durable]; ``corrupt_a_saved_checkpoint`` [durable]: a flipped
  bit in any saved file must be refused with a typed error, and the live run must
  carry on unchanged (the next ``advance`` checks it);

Invariants after every step: the position is within the reference; with the
``engine_state`` feature, every checkpoint encodes to the same bytes whatever the
insertion order of its dicts, and the live run's checkpoint keeps each lane's inflight
chunks within :func:`sim.invariants.inflight_bound` and has evicted nothing that
the rest of the reference needs (:func:`sim.invariants.eviction_safety_problems`).
"""

from __future__ import annotations

import copy
import shutil
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hypothesis import assume, event, note
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from properties import invariants as inv
from properties.pipelines import MIXTURE_GROUPING_MINIMAL, PipelineConfig
from properties.strategies import Topology, execution_settings, pipeline_configs, topologies

__all__ = ["MACHINE_CONFIGS", "machine_configs", "resume_machine"]

_LAYOUT = {"web": (20, 10), "code": (10,), "books": (6,)}
MACHINE_CONFIGS: tuple[PipelineConfig, ...] = (
    PipelineConfig(chain=[("pack_sequences", {"max_length": 48, "algorithm": "first_fit", "num_bins": 4}),
                          ("shuffle", {"buffer_size": 8, "seed": 3}),
                          ("ensure_mixture", {"mixture": {"web": 0.6, "code": 0.3, "books": 0.1}}),
                          ("batch", {"microbatch_size": 2})],
                   layout=_LAYOUT, source_kwargs={"chunk_size": 8, "seed": 1},
                   options={"canonical_replicas": 3, "flush_every_k_chunks": 2}),
    PipelineConfig(chain=[("shuffle", {"buffer_size": 6, "seed": 5, "algorithm": "block"}),
                          ("batch", {"microbatch_size": 3})],
                   layout=_LAYOUT, source_kwargs={"chunk_size": 6, "seed": 2},
                   options={"canonical_replicas": 2, "flush_every_k_chunks": 1}),
    PipelineConfig(chain=[("batch", {"microbatch_size": 2})], layout=_LAYOUT,
                   source_kwargs={"chunk_size": 8, "seed": 4}, options={"canonical_replicas": 1}),
    # a regression: a lane's records split by other lanes' sentinels (docs/divergences.md, Engine)
    MIXTURE_GROUPING_MINIMAL,
)


def machine_configs() -> st.SearchStrategy[PipelineConfig]:
    """The machine's configurations: the fixed ones, a drawn small one, or a drawn long-range one
    (:data:`properties.strategies.TIERS`)."""
    return st.one_of(st.sampled_from(MACHINE_CONFIGS), pipeline_configs(), pipeline_configs(tier="long"))


_REFERENCE: dict[tuple[str, str], list[Any]] = {}


def _reference(adapter: Any, cfg: PipelineConfig) -> list[Any]:
    """``adapter``'s uninterrupted stream of ``cfg`` (kept for the last 256 configurations)."""
    key = (adapter.name, cfg.describe())
    if key not in _REFERENCE:
        run = adapter.build(cfg)
        _REFERENCE[key] = run.deliver(1_000_000)
        run.close()
        if len(_REFERENCE) > 256:  # a bounded cache: drop the oldest
            del _REFERENCE[next(iter(_REFERENCE))]
    return _REFERENCE[key]


def _lanes_of(items: list[Any]) -> dict[int, list[Any]]:
    lanes: dict[int, list[Any]] = {}
    for v in items:
        lanes.setdefault(v[0][0], []).append(v)
    return lanes


def resume_machine(
    adapter: Any,
    *,
    configs: st.SearchStrategy[PipelineConfig] | None = None,
    oracle: Any = None,
    on_start: Callable[[], None] | None = None,
) -> type[RuleBasedStateMachine]:
    """A machine class checking ``adapter`` (one class per adapter); ``oracle``: the adapter whose
    uninterrupted stream is the reference (None: ``adapter``'s own); ``on_start``: called as each
    example starts (progress)."""
    reference_of = adapter if oracle is None else oracle
    against = "the uninterrupted run" if oracle is None else f"{oracle.name}'s stream (the oracle)"
    features = frozenset(getattr(adapter, "features", frozenset()))
    durable, runners = "durable" in features, "runners" in features
    remaps, engine_state = "remap" in features, "engine_state" in features
    config_strategy = machine_configs() if configs is None else configs

    class ResumeMachine(RuleBasedStateMachine):
        checkpoints = Bundle("checkpoints")
        started = 0  # examples started (the conformance table counts them)
        last_config = ""  # the configuration of the latest example: after a failure, the minimal one

        def __init__(self) -> None:
            super().__init__()
            self.run: Any = None
            self.pos = 0
            self.cfg: PipelineConfig | None = None
            self.key = ""
            self.ref: list[Any] = []
            self.needs: list[frozenset[tuple[int, int]]] = []
            self.tmp = Path(tempfile.mkdtemp(prefix="zephon-ref-machine-"))
            self.saves = 0
            # the admission window the inflight chunks of the current run's checkpoints were reached
            # under: its own runner's, or the larger one of the run a restored state came from
            self.window = 0

        @initialize(cfg=config_strategy)
        def start(self, cfg: PipelineConfig) -> None:
            reason = adapter.unsupported(cfg)
            if reason is not None:
                event(f"skipped: {reason}")
            assume(reason is None)
            note(cfg.describe())
            type(self).started += 1
            if on_start is not None:
                on_start()
            type(self).last_config = cfg.describe()
            self.cfg, self.key = cfg, cfg.describe()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # options that have no effect on this plan warn
                self.ref = _reference(reference_of, cfg)
                self.run = adapter.build(cfg)
            self.window = inv.execution_window(adapter, cfg)
            if engine_state:
                self.needs = [inv.needs_of(v) for v in self.ref]

        def _replace(self, run: Any, pos: int) -> None:
            self.run.close()
            self.run, self.pos = run, pos

        @rule(n=st.integers(1, 7))
        def advance(self, n: int) -> None:
            got = self.run.deliver(n)
            want = self.ref[self.pos:self.pos + len(got)]
            if got != want:
                at = next(i for i in range(len(got)) if got[i] != want[i])
                kind = "a repeat" if got[at] in self.ref[:self.pos + at] else "skipped, reordered or changed"
                raise AssertionError(f"{adapter.name}: item {self.pos + at} differs from {against} "
                                     f"({kind}): got {got[at]!r}, expected {want[at]!r}")
            if len(got) < n:
                assert self.pos + len(got) == len(self.ref), (
                    f"{adapter.name}: the stream ended after {self.pos + len(got)} of {len(self.ref)} items")
            self.pos += len(got)

        @rule(target=checkpoints)
        def checkpoint(self) -> tuple[str, int, Any, int]:
            state = self.run.checkpoint()
            if engine_state:  # determinism of checkpoint bytes: insertion order must not matter
                problems = inv.encoding_problems(state)
                assert not problems, f"{adapter.name}: checkpoint after {self.pos} items: " + "; ".join(
                    problems
                )
            return (self.key, self.pos, copy.deepcopy(state), self.window)

        @rule(ck=checkpoints)
        def restore(self, ck: tuple[str, int, Any, int]) -> None:
            key, pos, state, window = ck
            if key == self.key and self.cfg is not None:
                self._replace(adapter.build(self.cfg, state=copy.deepcopy(state)), pos)
                self.window = max(window, inv.execution_window(adapter, self.cfg))

        @precondition(lambda self: runners)
        @rule(ck=checkpoints, execution=execution_settings())
        def restore_under_other_execution_settings(
            self, ck: tuple[str, int, Any, int], execution: dict[str, Any]
        ) -> None:
            key, pos, state, window = ck
            if key == self.key and self.cfg is not None:
                self._replace(adapter.build(self.cfg, state=copy.deepcopy(state), **execution), pos)
                self.window = max(window, inv.execution_window(adapter, self.cfg, execution))

        @precondition(lambda self: remaps)
        @rule(ck=checkpoints, data=st.data())
        def remap(self, ck: tuple[str, int, Any, int], data: st.DataObject) -> None:
            key, pos, state, _ = ck
            if key != self.key or self.cfg is None:
                return
            topology: Topology = data.draw(topologies(int(self.cfg.options.get("canonical_replicas", 1))))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # mid-window and uneven-lane warnings are expected here
                runs = adapter.participants(self.cfg, topology, copy.deepcopy(state))
            rest: list[Any] = []
            for run in runs:
                rest += run.deliver(1_000_000)
                run.close()
            problems = inv.lane_stream_problems(
                _lanes_of(self.ref[:pos] + rest), _lanes_of(self.ref), exact=True
            )
            assert not problems, f"{adapter.name}: remapped at {pos} to {topology}: " + "; ".join(problems)

        @precondition(lambda self: durable)
        @rule()
        def save_and_load(self) -> None:
            self.saves += 1
            directory = self.tmp / f"ck{self.saves}"
            adapter.save(self.run, directory)
            self._replace(adapter.load(self.cfg, directory), self.pos)
            if self.cfg is not None:  # loaded under the adapter's own settings, from this run's state
                self.window = max(self.window, inv.execution_window(adapter, self.cfg))

        @precondition(lambda self: durable)
        @rule(pick=st.integers(0, 10_000), offset=st.integers(0, 10_000), bit=st.integers(0, 7))
        def corrupt_a_saved_checkpoint(self, pick: int, offset: int, bit: int) -> None:
            from zephon_ref.errors import ZephonRefError

            self.saves += 1
            directory = self.tmp / f"ck{self.saves}"
            adapter.save(self.run, directory)
            files = sorted(f for f in directory.rglob("*") if f.is_file())
            victim = files[pick % len(files)]
            data = bytearray(victim.read_bytes())
            data[offset % len(data)] ^= 1 << bit
            victim.write_bytes(bytes(data))
            try:
                adapter.load(self.cfg, directory)
            except ZephonRefError:
                pass  # refused, typed: the live run must be unaffected (the next advance checks it)
            else:
                raise AssertionError(
                    f"{adapter.name}: a checkpoint with a flipped bit in {victim.name} loaded"
                )

        @invariant()
        def delivered_is_a_prefix(self) -> None:
            assert 0 <= self.pos <= len(self.ref)

        @precondition(lambda self: engine_state and self.run is not None)
        @invariant()
        def inflight_bounded_and_eviction_safe(self) -> None:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                state = self.run.checkpoint()
            # the window of the runner and queue size in force (or of the run the state came from)
            problems = inv.adapter_inflight_checker(adapter, self.cfg, window=self.window)(state)
            assert not problems, f"{adapter.name}: " + "; ".join(problems)
            cursors = state.get("replay_cursors") or {}
            pinned = frozenset((int(lane), int(c[0])) for lane, c in cursors.items() if c is not None)
            problems = inv.eviction_safety_problems(
                [(self.pos, inv.lane_cut(state))], self.needs, pinned=[pinned]
            )
            assert not problems, f"{adapter.name}: " + "; ".join(problems)

        def teardown(self) -> None:
            if self.run is not None:
                self.run.close()
            shutil.rmtree(self.tmp, ignore_errors=True)

    ResumeMachine.__name__ = f"ResumeMachine_{adapter.name}"
    return ResumeMachine

"""Run the whole property suite against one implementation and print a table.

Theory of operation
-------------------
``python -m properties.conformance --impl NAME --examples N`` resolves ``NAME``
(``inline``, ``threads``, ``zephon``, ``tensor`` or ``module:attr``) to an adapter
(:func:`properties.adapters.load_adapter`) and runs every property of the suite
against it under Hypothesis with ``N`` examples each:

* ``resume machine``: the stateful machine (:func:`properties.machines.resume_machine`),
  every rule the adapter's features allow;
* ``resume at cuts``: checkpoint at a drawn cut schedule, restore each into a fresh run;
* ``settings invariance`` [runners]: drawn execution settings never change the stream;
* ``lane remap`` [remap]: restore under a drawn topology, per-lane streams unchanged;
* ``bounded inflight`` / ``eviction safety`` [engine_state]: at every item's checkpoint;
* ``checkpoint bytes`` [deterministic_checkpoints]: two runs to the same cut encode
  (zephon_ref's codec) to the same bytes, and so does a copy with every dict
  rebuilt in reverse insertion order;
* ``corrupt refused`` [durable]: a flipped bit in a saved checkpoint is refused,
  typed, and the live run carries on.

Each row says how many examples ran (shrinking included), how many passed, the
examples per minute on this machine (wall time, shown only), and,
when the property failed, the minimal configuration Hypothesis shrank to and the
first problem.  A property whose feature the adapter lacks is listed as skipped
with the reason.  The exit status is 1 when any property failed.
"""

from __future__ import annotations

import argparse
import copy
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, assume, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from hypothesis.stateful import run_state_machine_as_test

from properties import invariants as inv
from properties.adapters import load_adapter
from properties.machines import machine_configs, resume_machine
from properties.pipelines import PipelineConfig
from properties.strategies import Topology, cut_schedules, execution_settings, topologies

__all__ = ["PROPERTIES", "Row", "main", "run_suite"]


@dataclass(frozen=True, slots=True)
class Row:
    prop: str
    examples: int
    passed: int
    failure: str | None = None  # "minimal config :: first problem"
    skipped: str | None = None
    seconds: float = 0.0  # wall time (reported only: never decides anything)


class _Counter:
    def __init__(self) -> None:
        self.runs = self.passed = 0
        self.last = ""


Check = Callable[[Any, PipelineConfig, st.DataObject], None]


def _full(adapter: Any, cfg: PipelineConfig, **execution: Any) -> list[Any]:
    run = adapter.build(cfg, **execution)
    try:
        return list(run.deliver(1_000_000))
    finally:
        run.close()


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


def _resume_at_cuts(adapter: Any, cfg: PipelineConfig, data: st.DataObject) -> None:
    ref = _full(adapter, cfg)
    cuts = data.draw(cut_schedules(len(ref)), label="cuts")
    items, cks = _checkpoints(adapter, cfg, cuts)
    assert items == ref, "; ".join(inv.settings_invariance_problems({"a: uninterrupted": ref, "b: rerun": items}))
    for cut, state in cks.items():
        run = adapter.build(cfg, state=copy.deepcopy(state))
        rest = run.deliver(1_000_000)
        run.close()
        problems = inv.resume_problems(ref, rest, cut=cut)
        assert not problems, problems[0]


def _settings_invariance(adapter: Any, cfg: PipelineConfig, data: st.DataObject) -> None:
    execution = data.draw(execution_settings(), label="execution")
    problems = inv.settings_invariance_problems({"a: default": _full(adapter, cfg),
                                                 f"b: {execution}": _full(adapter, cfg, **execution)})
    assert not problems, problems[0]


def _lane_remap(adapter: Any, cfg: PipelineConfig, data: st.DataObject) -> None:
    ref = _full(adapter, cfg)
    cut = data.draw(st.integers(0, len(ref)), label="cut")
    topology: Topology = data.draw(topologies(int(cfg.options.get("canonical_replicas", 1))), label="topology")
    items, cks = _checkpoints(adapter, cfg, [cut])
    rest: list[Any] = []
    for run in adapter.participants(cfg, topology, copy.deepcopy(cks[cut])):
        rest += run.deliver(1_000_000)
        run.close()

    def lanes(xs: list[Any]) -> dict[int, list[Any]]:
        out: dict[int, list[Any]] = {}
        for v in xs:
            out.setdefault(v[0][0], []).append(v)
        return out
    problems = inv.lane_stream_problems(lanes(ref[:cut] + rest), lanes(ref), exact=True)
    assert not problems, f"remapped at {cut} to {topology}: {problems[0]}"


def _every_cut(adapter: Any, cfg: PipelineConfig) -> tuple[list[Any], list[Any]]:
    run = adapter.build(cfg)
    items: list[Any] = []
    cks = [copy.deepcopy(run.checkpoint())]
    try:
        while got := run.deliver(1):
            items += got
            cks.append(copy.deepcopy(run.checkpoint()))
    finally:
        run.close()
    return items, cks


def _bounded_inflight(adapter: Any, cfg: PipelineConfig, data: st.DataObject) -> None:
    _, cks = _every_cut(adapter, cfg)
    check = inv.adapter_inflight_checker(adapter, cfg)  # the bound, where and how it applies
    for i, ck in enumerate(cks):
        problems = check(ck)
        assert not problems, f"after {i} items: {problems[0]}"


def _eviction_safety(adapter: Any, cfg: PipelineConfig, data: st.DataObject) -> None:
    items, cks = _every_cut(adapter, cfg)
    cuts = [(i, inv.lane_cut(ck)) for i, ck in enumerate(cks)]
    pinned = [frozenset((int(lane), int(c[0])) for lane, c in (ck.get("replay_cursors") or {}).items()
                        if c is not None) for ck in cks]
    problems = inv.eviction_safety_problems(cuts, [inv.needs_of(v) for v in items], pinned=pinned)
    assert not problems, problems[0]


def _checkpoint_bytes(adapter: Any, cfg: PipelineConfig, data: st.DataObject) -> None:
    from zephon_ref.checkpoint import codec

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
            victim = files[data.draw(st.integers(0, len(files) - 1), label="file")]
            blob = bytearray(victim.read_bytes())
            blob[data.draw(st.integers(0, len(blob) - 1), label="byte")] ^= 1 << data.draw(st.integers(0, 7))
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


#: property name -> (feature it needs or None, check)
PROPERTIES: dict[str, tuple[str | None, Check]] = {
    "resume at cuts": (None, _resume_at_cuts),
    "settings invariance": ("runners", _settings_invariance),
    "lane remap": ("remap", _lane_remap),
    "bounded inflight": ("engine_state", _bounded_inflight),
    "eviction safety": ("engine_state", _eviction_safety),
    "checkpoint bytes": ("deterministic_checkpoints", _checkpoint_bytes),
    "corrupt refused": ("durable", _corrupt_refused),
}


def _settings(examples: int, seed_free: bool) -> settings:
    # no explain phase: it replays variations of the minimal example, and the table reports the last one run
    return settings(max_examples=examples, deadline=None, database=None, derandomize=seed_free,
                    report_multiple_bugs=False, print_blob=False, stateful_step_count=12,
                    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink],
                    suppress_health_check=list(HealthCheck))


def _first_line(exc: BaseException) -> str:
    inner = getattr(exc, "exceptions", None)
    if inner:  # a FlakyFailure or an exception group: say so, and show the first underlying error
        return f"{type(exc).__name__} (not reproducible on replay) of " + _first_line(inner[0])
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


def _run_property(adapter: Any, check: Check, examples: int, derandomize: bool) -> Row:
    c = _Counter()

    @_settings(examples, derandomize)
    @given(cfg=machine_configs(), data=st.data())
    def prop(cfg: PipelineConfig, data: st.DataObject) -> None:
        reason = adapter.unsupported(cfg)
        assume(reason is None)
        c.runs += 1
        c.last = cfg.describe()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            check(adapter, cfg, data)
        c.passed += 1

    try:
        prop()
    except Unsatisfiable as exc:
        return Row("", c.runs, c.passed, skipped=f"no supported configuration ({_first_line(exc)})")
    except Exception as exc:  # noqa: BLE001 - any failure is a row of the table
        return Row("", c.runs, c.passed, failure=f"{c.last} :: {_first_line(exc)}")
    return Row("", c.runs, c.passed)


def run_suite(adapter: Any, *, examples: int, derandomize: bool = True,
              only: Sequence[str] = ()) -> list[Row]:
    """Every property (or those named in ``only``) against ``adapter``; one row each."""
    features = frozenset(getattr(adapter, "features", frozenset()))
    rows = []
    if not only or "resume machine" in only:
        machine = resume_machine(adapter)
        t0 = time.perf_counter()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                run_state_machine_as_test(machine, settings=_settings(examples, derandomize))
            rows.append(Row("resume machine", machine.started, machine.started,
                            seconds=time.perf_counter() - t0))
        except Exception as exc:  # noqa: BLE001
            rows.append(Row("resume machine", machine.started, machine.started - 1,
                            failure=f"{machine.last_config} :: {_first_line(exc)}",
                            seconds=time.perf_counter() - t0))
    for name, (feature, check) in PROPERTIES.items():
        if only and name not in only:
            continue
        if feature is not None and feature not in features:
            rows.append(Row(name, 0, 0, skipped=f"the adapter lacks the {feature!r} feature"))
            continue
        t0 = time.perf_counter()
        row = _run_property(adapter, check, examples, derandomize)
        rows.append(Row(name, row.examples, row.passed, row.failure, row.skipped, time.perf_counter() - t0))
    return rows


def format_table(rows: Sequence[Row]) -> str:
    lines = [f"{'property':<22} {'examples':>8} {'passed':>7} {'ex/min':>7}  first failing minimal config",
             "-" * 100]
    for r in rows:
        tail = f"skipped: {r.skipped}" if r.skipped else (r.failure or "-")
        rate = f"{60 * r.examples / r.seconds:.0f}" if r.seconds > 0 and r.examples else "-"
        lines.append(f"{r.prop:<22} {r.examples:>8} {r.passed:>7} {rate:>7}  {tail}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m properties.conformance", description=__doc__.split("\n")[0])
    ap.add_argument("--impl", default="inline",
                    help="inline, threads, zephon, tensor, or module:attr naming an adapter")
    ap.add_argument("--examples", type=int, default=20, help="Hypothesis examples per property")
    ap.add_argument("--property", action="append", default=[], help="run only this property (repeatable)")
    ap.add_argument("--random", action="store_true", help="random examples (default: derandomized)")
    args = ap.parse_args(argv)
    try:
        adapter = load_adapter(args.impl)
    except (ImportError, ValueError, KeyError) as exc:
        print(f"cannot check {args.impl!r}: {exc}", file=sys.stderr)
        return 2
    print(f"property suite against {getattr(adapter, 'name', args.impl)} "
          f"(features: {', '.join(sorted(getattr(adapter, 'features', ()))) or 'none'}), "
          f"{args.examples} examples per property")
    rows = run_suite(adapter, examples=args.examples, derandomize=not args.random, only=args.property)
    print(format_table(rows))
    return 1 if any(r.failure for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())

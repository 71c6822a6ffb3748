"""Canary mutants as source patches, and the checks that must catch them (tests/quality).

Theory of operation
-------------------
A canary is a realistic bug planted in zephon_ref as one or more :class:`~properties.mutation.Mutant`
source patches (an exact snippet at a named place, refused when the snippet is gone), plus the
name of the check that must catch it.  tests/quality runs each check in a child process inside a
mutated copy of the repository (:func:`properties.mutation.run_mutated`):
``python -m properties.canaries CHECK [--budget N] [--reference FILE]`` prints ``CLEAN`` and exits
0 when the check passes, prints ``CAUGHT: <why>`` and exits 1 when it fails (a crash of the engine
under the mutant counts as caught, and says so).  Nothing here copies an engine function: the
patches name the lines they change, so a canary whose code moved fails loudly (StaleMutant).

Checks:

* ``resume``: resume equivalence cut before every item, on a packing + shuffle + batch pipeline
  and on a wrap-packing one (the implementation is its own oracle);
* ``elastic``: 3 ranks cut mid-window, resumed on 1 rank, equal the single-rank sequence;
* ``bounded``: a pipeline dropping a third of its records keeps its inflight chunks bounded;
* ``routing``: each lane's chunk sequence equals zephon 0.2.0's (needs the conformance extra);
* ``sim``: the simulated canary world (properties.worlds) over ``--budget`` seeds against the
  uninterrupted reference the parent computed on the real engine (``--reference``, JSON);
* ``interleaving``: as ``sim``, and the catching run must show an interleaving witness after a
  mid-step restore;
* ``suite``: the resume machine (derandomized, ``--budget`` examples, no shrinking), then the
  suite's stateless properties.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from properties.mutation import Mutant

__all__ = ["CANARIES", "CHECKS", "Canary", "main"]


@dataclass(frozen=True, slots=True)
class Canary:
    name: str
    check: str
    patches: tuple[Mutant, ...]
    why: str = ""


def _m(name: str, file: str, original: str, replacement: str) -> Mutant:
    return Mutant(name, file, original, replacement)


_RF, _CORE, _LANES = (
    "zephon_ref/ops/replay_filter.py",
    "zephon_ref/engine/core.py",
    "zephon_ref/engine/lanes.py",
)
_STAGE, _COMPL = "zephon_ref/engine/stage.py", "zephon_ref/engine/completion.py"
_TOK = "zephon_ref/ops/tokenize.py"
_EPOCH_COUNT = ("        self.chunks_in_epoch = nxt - bounds[-1] if bounds else "
                "(nxt % self.k if self.k > 0 else nxt)\n")

_FILTER_LE = _m("replay filter matches <=", _RF, "            if rec.meta.cursor == target:\n",
                "            if rec.meta.cursor <= target:\n")
_NO_TRAILING = _m("trailing boundaries not re-injected", _LANES,
                  "        for b in self.boundaries:\n            if b > last:\n"
                  "                yield flush_sentinel(self.lane, b)\n", "")
_RR_ZERO = _m("start index 0", _CORE, "    def _start_index(self) -> int:\n        n = len(self.lanes)\n",
              "    def _start_index(self) -> int:\n        return 0\n")

CANARIES: tuple[Canary, ...] = (
    # -- against the suite's targeted checks (was tests/quality/test_canaries.py's monkeypatches)
    Canary("replay filter matches <= instead of ==", "resume", (_FILTER_LE,)),
    Canary(
        "delivery ignores tombstones",
        "bounded",
        (
            _m(
                "tombstones ignored",
                _CORE,
                "        if not self.monotone:\n"
                "            self.trackers[t.meta.lane_id].complete(t.meta.contribution_refs())\n",
                "        pass\n",
            ),
        ),
    ),
    Canary(
        "restore drops the trailing boundary",
        "resume",
        (
            _m(
                "trailing boundary dropped",
                _LANES,
                _EPOCH_COUNT,
                _EPOCH_COUNT + "        if self.boundaries and self.inflight"
                " and self.boundaries[-1] > max(self.inflight):\n"
                "            self.boundaries = self.boundaries[:-1]\n",
            ),
        ),
    ),
    Canary(
        "work-source state one chunk stale",
        "resume",
        (
            _m(
                "stale ws state",
                _LANES,
                '            "lane_ws_state": self.source.state_dict(),\n',
                '            "lane_ws_state": {**self.source.state_dict(), "global_chunk_index": '
                'max(0, self.source.state_dict()["global_chunk_index"] - 1)},\n',
            ),
        ),
    ),
    Canary("round robin restarts at lane 0 after remap", "elastic", (_RR_ZERO,)),
    Canary(
        "flush sentinel does not reset operators",
        "resume",
        (
            _m(
                "flush without reset",
                _STAGE,
                "    (Kind.FLUSH, _S): (Step.FLUSH_OR_HOLD,),\n",
                "    (Kind.FLUSH, _S): (Step.FORWARD,),\n",
            ),
        ),
    ),
    Canary(
        "lane routing ignores the block number",
        "routing",
        (
            _m(
                "same permutation every block",
                "zephon_ref/work/static_mixture.py",
                '        if self._lane_assignment == "modulo":\n            return g % canon\n'
                "        block, slot = divmod(g, canon)\n",
                '        if self._lane_assignment == "modulo":\n            return g % canon\n'
                "        block, slot = 0, g % canon\n",
            ),
        ),
    ),
    # -- against the simulator (was tests/quality/test_sim_canaries.py's engine canaries)
    Canary("a: replay filter matches <= instead of ==", "sim", (_FILTER_LE,)),
    Canary(
        "b: epoch evicted one step early",
        "sim",
        (
            _m(
                "boundary chunk evicted with its epoch",
                _COMPL,
                "            queued.extend(epoch)\n        if queued:\n",
                "            queued.extend(epoch)\n            if b in stream.inflight and b not in queued:\n"
                "                queued.append(b)\n        if queued:\n",
            ),
        ),
    ),
    # (c) must also show the finer check: a participant's lanes out of the reference's round-robin order
    Canary(
        "c: round-robin pointer not restored",
        "interleaving",
        (
            _m(
                "rr pointer dropped on restore",
                _CORE,
                "        self.rr_next_idx = {k: v for k, v in rr.items() if k == self._rr_key}\n",
                "        self.rr_next_idx = {self._rr_key: 0}\n",
            ),
        ),
    ),
    Canary("d: trailing boundary sentinel not re-injected", "sim", (_NO_TRAILING,)),
    Canary(
        "e: checkpoint counts produced, not delivered, items",
        "sim",
        (
            _m(
                "no notify at delivery",
                _CORE,
                "    def _deliver_one(self, x: Any) -> None:\n        self._notify(x)\n",
                "    def _deliver_one(self, x: Any) -> None:\n        pass\n",
            ),
            _m(
                "notify when produced",
                _CORE,
                "            self._outbox.extend(out)\n            self._upstream_done = final\n",
                "            self._outbox.extend(out)\n            for y in out:\n"
                "                if not is_sentinel(y):\n"
                "                    self._notify(y)\n            self._upstream_done = final\n",
            ),
        ),
    ),
    # -- against the resume machine and the suite's properties (was tests/quality/test_mutants.py)
    Canary(
        "replay filter drops one record too many",
        "suite",
        (
            _m(
                "remember the target's lane",
                _RF,
                "            if rec.meta.cursor == target:\n"
                "                del self._pending[rec.meta.lane_id]\n",
                "            if rec.meta.cursor == target:\n"
                "                del self._pending[rec.meta.lane_id]\n"
                "                self.__dict__.setdefault('_mutant_extra', set()).add(rec.meta.lane_id)\n"
                "                out.extend(tombstones_for_record(rec))\n                continue\n",
            ),
            _m(
                "drop the next record too",
                _RF,
                "            if target is None or rec.meta.tombstone:\n",
                "            if target is None and not rec.meta.tombstone and rec.meta.lane_id in "
                "self.__dict__.get('_mutant_extra', ()):\n"
                "                self.__dict__['_mutant_extra'].discard(rec.meta.lane_id)\n"
                "                out.extend(tombstones_for_record(rec))\n                continue\n"
                "            if target is None or rec.meta.tombstone:\n",
            ),
        ),
    ),
    Canary(
        "eviction ignores cursor pinning",
        "suite",
        (
            _m(
                "pinning ignored",
                _COMPL,
                "            if pinned_cid is not None and pinned_cid in epoch:\n                break\n",
                "",
            ),
        ),
    ),
    Canary(
        "shuffle reseeded on restore",
        "suite",
        (
            _m(
                "reseed on restore",
                "zephon_ref/ops/shuffle.py",
                "            return StreamingShuffleAccumulator(c.buffer_size, c.seed)\n",
                "            return StreamingShuffleAccumulator(c.buffer_size, "
                "c.seed + (1 if ctx.get('replay_targets') else 0))\n",
            ),
        ),
    ),
    Canary(
        "tail multiplexer restarts at lane 0 after restore",
        "suite",
        (
            _m(
                "start index 0 after restore",
                _CORE,
                "    def _start_index(self) -> int:\n        n = len(self.lanes)\n",
                "    def _start_index(self) -> int:\n        if self._targets:\n            return 0\n"
                "        n = len(self.lanes)\n",
            ),
        ),
    ),
    Canary(
        "checkpoint bytes depend on dict insertion order",
        "suite",
        (
            _m(
                "unsorted keys",
                "zephon_ref/codec.py",
                "def _key_sort(key: Any) -> tuple[int, Any]:\n",
                "def _key_sort(key: Any) -> tuple[int, Any]:\n    return (0, 0)\n",
            ),
        ),
    ),
    Canary(
        "a sentinel splits every lane's push",
        "suite",
        (
            _m(
                "zephon's grouping",
                _STAGE,
                "        mine = [r for r in self._regular if lane_of(r) == lane]\n        if mine:\n"
                "            self._regular = [r for r in self._regular if lane_of(r) != lane]\n",
                "        mine = list(self._regular)\n        if mine:\n            self._regular = []\n",
            ),
        ),
    ),
    Canary(
        "legacy_fixed allocator skips its base's init",
        "suite",
        (_m("no base init", "zephon_ref/work/static_mixture.py",
            "    def __init__(self, cfg: _Config) -> None:\n        super().__init__(cfg)\n"
            "        if cfg.redistributing:\n",
            "    def __init__(self, cfg: _Config) -> None:\n        pass\n"
            "        if cfg.redistributing:\n"),),
        why="issue 32's sample of 30 (static_mixture.py:347): allocation_mode was never drawn",
    ),
    # -- against the operators row's payload check (the sample of 30's never-compared payload values)
    Canary(
        "tokenize's mask of the tokenizer's rows is 2",
        "operators",
        (_m("mask 2", _TOK, "        masks = [[1] * len(ids) for ids in ids_out]\n",
            "        masks = [[2] * len(ids) for ids in ids_out]\n"),),
        why="issue 32's sample of 30 (tokenize.py:437 of c4fcf0b, an unpadded record's mask)",
    ),
    Canary(
        "the built-in tokenizer's pads are masked 1",
        "operators",
        (_m("pad mask 1", _TOK, "                    mask.extend([0] * pad)\n",
            "                    mask.extend([1] * pad)\n"),),
        why="issue 32's sample of 30 (tokenize.py:133 of c4fcf0b)",
    ),
    Canary(
        "tokenize's own mask for a maskless tokenizer is 2",
        "operators",
        (_m("own mask 2", _TOK,
            "                elif c.add_attention_mask:\n                    mask = [1] * len(ids)\n",
            "                elif c.add_attention_mask:\n                    mask = [2] * len(ids)\n"),),
        why="the bracket path of issue 32's tokenize.py:437 mutant, reached by a tokenizer without a mask",
    ),
    Canary(
        "a packer slices only the token field",
        "operators",
        (_m("break", "zephon_ref/ops/pack.py",
            "        if k == token_field or v is None or isinstance(v, (bool, int, float)):\n"
            "            continue\n",
            "        if k == token_field or v is None or isinstance(v, (bool, int, float)):\n"
            "            break\n"),),
        why="issue 32's sample of 30 (pack.py:274 of c4fcf0b, continue -> break)",
    ),
)


# ------------------------------------------------------------------------------------------ checks


def _resume() -> str | None:
    from properties.pipelines import PipelineConfig, build_pipeline, item_view

    cfgs = [PipelineConfig([("pack_sequences", {"max_length": 160, "num_bins": 2}),
                            ("shuffle", {"buffer_size": 4, "seed": 2}), ("batch", {"microbatch_size": 2})],
                           layout={"web": (14, 9), "code": (8,), "books": (5,)},
                           source_kwargs={"chunk_size": 4, "seed": 3},
                           options={"runner": "inline", "canonical_replicas": 3, "flush_every_k_chunks": 2}),
            # wrap packing splits records across packs: fragments whose refs do not close
            PipelineConfig([("pack_sequences", {"max_length": 24, "algorithm": "wrap"}),
                            ("shuffle", {"buffer_size": 3, "seed": 1})],
                           layout={"web": (8, 5), "code": (6,)}, weights={"web": 2, "code": 1},
                           source_kwargs={"chunk_size": 3, "seed": 5},
                           options={"runner": "inline", "canonical_replicas": 2, "flush_every_k_chunks": 1})]
    for n, cfg in enumerate(cfgs):
        p = build_pipeline("zephon_ref", cfg)
        cks, items = [p.checkpoint()], []
        for x in p:
            items.append(item_view(x))
            cks.append(p.checkpoint())
        for i, ck in enumerate(cks):
            q = build_pipeline("zephon_ref", cfg)
            q.restore(ck)
            if [item_view(x) for x in q] != items[i:]:
                return f"pipeline {n}: the run resumed at cut {i} differs from the uninterrupted one"
    return None


def _elastic() -> str | None:
    from properties.pipelines import PipelineConfig, build_pipeline, item_view
    from properties.topology import merged_checkpoint, participants, run_lockstep

    cfg = PipelineConfig(
        [
            ("pack_sequences", {"max_length": 160, "num_bins": 2}),
            ("shuffle", {"buffer_size": 4, "seed": 2}),
            ("batch", {"microbatch_size": 2}),
        ],
        layout={"web": (14, 9), "code": (8,), "books": (5,)},
        source_kwargs={"chunk_size": 4, "seed": 3},
        options={"runner": "inline", "canonical_replicas": 3, "flush_every_k_chunks": 2},
    )
    flat = [item_view(x) for x in build_pipeline("zephon_ref", cfg)]
    first = participants(cfg, 3)
    its = [iter(p) for p in first]
    head = [item_view(next(its[r])) for r in (0, 1, 2, 0, 1)]
    rest = [v for s in run_lockstep(participants(cfg, 1, state=merged_checkpoint(first)))[0] for _, v in s]
    return (
        None if head + rest == flat else "3 ranks cut mid-window and resumed on 1 differ from the 1-rank run"
    )


def _drop_some(payload: Any) -> Any:
    return None if len(payload["input_ids"]) % 3 == 0 else payload


def _bounded() -> str | None:
    from properties.pipelines import PipelineConfig, build_pipeline

    p = build_pipeline("zephon_ref", PipelineConfig(
        [("map_transform", {"transform_fn": _drop_some}), ("shuffle", {"buffer_size": 3, "seed": 1})],
        layout={"web": (40, 30), "code": (20,), "books": (10,)}, source_kwargs={"chunk_size": 3, "seed": 1},
        options={"runner": "inline", "canonical_replicas": 1, "flush_every_k_chunks": 1}))
    peak = 0
    for _ in p:
        peak = max(peak, len(p.checkpoint()["inflight"][0]))
    return None if peak <= 4 else f"inflight grew to {peak} chunks (expected at most 4)"


def _routing() -> str | None:
    from properties.sources import SourceConfig, build_source, lane_chunks

    cfg = SourceConfig({"a": (40,), "b": (30,)}, {"a": 1, "b": 1}, 4, {"chunk_size": 3, "seed": 9})
    for lane in range(4):
        if lane_chunks(build_source("zephon_ref", cfg), lane, 4, 12) != lane_chunks(
            build_source("zephon", cfg), lane, 4, 12
        ):
            return f"lane {lane}'s chunks differ from zephon 0.2.0's"
    return None


def sim_view(x: Any) -> str:
    from properties.pipelines import item_view

    return repr(item_view(x))


def sim_reference() -> list[Any]:
    """The canary world's uninterrupted reference run (computed by the parent on the real engine)."""
    from properties.worlds import canary_build
    from sim.world import reference_steps

    return [list(step) for step in reference_steps(canary_build, view=sim_view)]


def _sim(budget: int, reference: list[Any], *, interleaving: bool = False) -> str | None:
    from properties.worlds import CANARY_WORLD, canary_build
    from sim.choices import SeededChoices
    from sim.world import World, check_run

    ref = [tuple(tuple(x) for x in step) for step in reference]
    for seed in range(budget):
        world = World(CANARY_WORLD, canary_build, SeededChoices(seed), view=sim_view)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            world.run()  # an exception here (the engine refusing the mutant's own state) is caught too
        report = check_run(world.history, ref, seed=seed)
        if not report.ok:
            why = f"seed {seed + 1} of {budget}: {report.problems[0][:200]}"
            if interleaving:
                kinds = sorted({p.kind for p in report.witnesses})
                mid = any(e.kind == "restore" and e.extra.get("mid_step") for e in world.history)
                shown = "with" if "interleaving" in kinds and mid else "WITHOUT"
                why += f" ({shown} an interleaving witness after a mid-step restore; witnesses {kinds})"
            return why
    return None


def _suite(budget: int) -> str | None:
    from hypothesis import HealthCheck, Phase, settings
    from hypothesis.stateful import run_state_machine_as_test

    from properties import conformance
    from properties.adapters import adapter
    from properties.machines import resume_machine

    # no shrinking: catching is what counts, and shrinking a stateful failure costs minutes
    cfg = settings(
        max_examples=budget,
        stateful_step_count=15,
        deadline=None,
        database=None,
        derandomize=True,
        print_blob=False,
        report_multiple_bugs=False,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    machine = resume_machine(adapter("inline"))
    try:
        run_state_machine_as_test(machine, settings=cfg)
    except Exception as exc:  # noqa: BLE001 - any failure of the machine is the mutant caught
        return f"resume machine at example {machine.started}: {str(exc).splitlines()[0][:200]}"
    # one row at a time, stopping at the first that catches the mutant: a mutant may also make a later
    # row's run hang (the sentinel mutant does so in eviction safety, past the 1200 s limit: CI's
    # one red test of stop 37), and the lane remap row, built for topology invariance, goes first
    stateless = ["lane remap", "resume at cuts", "settings invariance", "bounded inflight", "eviction safety",
                 "checkpoint bytes"]
    for name in stateless:
        (row,) = conformance.run_suite(adapter("inline"), examples=budget, only=[name])
        if row.failure:
            return f"property {row.prop} at example {row.passed + 1}: {row.failure}"[:260]
    return None


def _operators() -> str | None:
    """Only the operators row's fixed examples (:func:`properties.op_units.regression_cases`)."""
    import warnings

    from properties import generator as gen
    from properties.op_units import regression_cases, unit_problems

    for method in gen.drawn_methods():
        for case, why in regression_cases(method):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                problems = unit_problems(case)
            if problems:
                return f"operators, fixed example of {method} ({why}): {problems[0]}"[:400]
    return None


def _regressions() -> str | None:
    """Only the rows' fixed regression examples (:mod:`properties.regressions`): no drawn example."""
    from properties import conformance
    from properties.adapters import adapter
    from properties.regressions import REGRESSIONS

    for name in REGRESSIONS:
        _, check = conformance.PROPERTIES[name]
        c = conformance._Counter(lambda: None)
        row = conformance._run_regressions(adapter("inline"), name, check, c)
        if row is not None:
            return f"property {name}, {row.failure}"[:400]
    return None


CHECKS: dict[str, str] = {
    "resume": "resume equivalence at every cut (two pipelines)",
    "elastic": "3 ranks cut mid-window resumed on 1 rank",
    "bounded": "inflight chunks bounded when records are dropped",
    "routing": "lane chunk sequences equal zephon 0.2.0's",
    "sim": "the simulated canary world over --budget seeds",
    "interleaving": "as sim, caught with an interleaving witness after a mid-step restore",
    "suite": "the resume machine and the stateless properties over --budget examples",
    "regressions": "the conformance rows' fixed regression examples alone (properties.regressions)",
    "operators": "the operators row's fixed examples alone (properties.op_units.regression_cases)",
}


def run_check(name: str, *, budget: int, reference: list[Any] | None) -> str | None:
    """The check's failure (None: it passed)."""
    simple: dict[str, Callable[[], str | None]] = {
        "resume": _resume,
        "elastic": _elastic,
        "bounded": _bounded,
        "routing": _routing,
        "regressions": _regressions,
        "operators": _operators,
    }
    if name in simple:
        return simple[name]()
    if name in ("sim", "interleaving"):
        if reference is None:
            raise ValueError(
                f"check {name!r}: expected --reference FILE (the real engine's run), received none"
            )
        return _sim(budget, reference, interleaving=name == "interleaving")
    if name == "suite":
        return _suite(budget)
    raise ValueError(f"check: expected one of {sorted(CHECKS)}, received {name!r}")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m properties.canaries",
                                 description="run one canary check (exit 0 CLEAN, 1 CAUGHT, 2 bad usage)")
    ap.add_argument("check", choices=sorted(CHECKS))
    ap.add_argument("--budget", type=int, default=6, help="seeds (sim) or examples (suite)")
    ap.add_argument(
        "--reference", default=None, help="JSON file: the real engine's reference run (sim checks)"
    )
    ap.add_argument(
        "--write-reference", default=None, help="write the canary world's reference run here and exit"
    )
    ns = ap.parse_args(argv)
    if ns.write_reference:
        with open(ns.write_reference, "w") as f:
            json.dump(sim_reference(), f)
        return 0
    reference = None
    if ns.reference:
        with open(ns.reference) as f:
            reference = json.load(f)
    try:
        failure = run_check(ns.check, budget=ns.budget, reference=reference)
    except Exception as exc:  # noqa: BLE001 - the engine crashing under a mutant is a catch
        failure = f"raised {type(exc).__name__}: {str(exc)[:200]}"
    if failure is None:
        print("CLEAN")
        return 0
    print(f"CAUGHT: {failure}")
    return 1


if __name__ == "__main__":
    sys.exit(main())

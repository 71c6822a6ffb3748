"""Conformance of ``add_op``'s keyword form against zephon 0.2.0 on generated configurations.

``ZEPHON_REF_ADD_OP_CONFIGS`` configurations (default 16; one ``random.Random(seed)`` each, printed
on failure) put a user operator built with ``add_op("name", process_many=..., ...)`` into a
pipeline of a source and the crc tokenizer, sometimes after a shuffle and before a batch, on 1-3
lanes.  Its ``process_many`` (written once, run with each library's own record and lineage
helpers) maps payloads, filters (tombstones for the dropped), splits records into two children
(``spawn_child``), tags each record with its place in its ready batch (so the accumulator's batch
boundaries are compared too), or reverses each ready batch (``preserves_cursor_order=False``); its
accumulator is the default, a zero-argument factory or a ``(*, deterministic, ctx)`` factory of a
``CountingAccumulator``; parallelism, placement and the other traits are drawn.  Each lane's
delivered records equal zephon's, and at ``CUTS`` random cuts a zephon_ref checkpoint and a zephon
checkpoint restored into a fresh zephon_ref pipeline each continue with exactly the uninterrupted
remainder.  As in tests/conformance/test_pipeline_conformance.py, where zephon's own lanes depend on
the other lanes of their rank, zephon_ref is compared with zephon's one-lane-per-rank run.

Bad arguments: the same builtin exception as zephon (ValueError / TypeError) where zephon refuses
at the call; where zephon accepts a value unchecked zephon_ref refuses it (docs/divergences.md D-60).
"""

from __future__ import annotations

import copy
import os
import random
import tempfile
import warnings
from types import SimpleNamespace
from typing import Any

import pytest

zephon = pytest.importorskip("zephon", reason="zephon 0.2.0 (the conformance extra) is not installed")

from properties.pipelines import PipelineConfig, crc_tokens, work_source  # noqa: E402
from properties.zephon_checkpoints import restore_any  # noqa: E402
from properties.zephon_records import norm  # noqa: E402
from zephon_ref.errors import ConfigError, ConfigTypeError, ZephonRefError  # noqa: E402

pytestmark = pytest.mark.conformance

CONFIGS = int(os.environ.get("ZEPHON_REF_ADD_OP_CONFIGS", "16"))
CUTS = 3
KINDS = ("map", "filter", "split", "batch_tag", "reverse")


def lib(impl: str) -> SimpleNamespace:
    """The record class, lineage helpers, accumulators and Pipeline of ``impl``."""
    if impl == "zephon":
        from zephon import Pipeline, SampleRecord
        from zephon.ops import CountingAccumulator, spawn_child, tombstones_for_record
    else:
        from zephon_ref.lineage import spawn_child, tombstones_for_record  # type: ignore[assignment]
        from zephon_ref.ops import CountingAccumulator  # type: ignore[assignment]
        from zephon_ref.pipeline import Pipeline  # type: ignore[assignment]
        from zephon_ref.types import SampleRecord  # type: ignore[assignment]
    return SimpleNamespace(Pipeline=Pipeline, SampleRecord=SampleRecord, spawn_child=spawn_child,
                           tombstones_for_record=tombstones_for_record, Counting=CountingAccumulator)


def process_many_of(kind: str, L: SimpleNamespace) -> Any:  # noqa: N803 (a library namespace)
    """A user's ``process_many`` of ``kind``, written against library ``L``'s helpers only."""
    def ids(e: Any) -> list[int]:
        return list(e.payload["input_ids"])

    if kind == "map":
        def pm(elems: list[Any]) -> list[Any]:
            return [L.SampleRecord(e.meta, {"input_ids": [t + 1 for t in ids(e)][::-1], "n": len(ids(e))})
                    for e in elems]
    elif kind == "filter":
        def pm(elems: list[Any]) -> list[Any]:
            out: list[Any] = []
            for e in elems:
                out += L.tombstones_for_record(e) if sum(ids(e)) % 3 == 0 else [e]
            return out
    elif kind == "split":
        def pm(elems: list[Any]) -> list[Any]:
            out: list[Any] = []
            for e in elems:
                toks = ids(e)
                if len(toks) < 4:
                    out.append(e)
                    continue
                half = len(toks) // 2
                for i, part in enumerate((toks[:half], toks[half:])):
                    out.append(L.SampleRecord(L.spawn_child(e.meta, i, is_last_child=i == 1),
                                              {"input_ids": part}))
            return out
    elif kind == "batch_tag":
        def pm(elems: list[Any]) -> list[Any]:
            return [L.SampleRecord(e.meta, {"input_ids": ids(e), "pos": [i, len(elems)]})
                    for i, e in enumerate(elems)]
    else:
        def pm(elems: list[Any]) -> list[Any]:
            return list(reversed(elems))
    return pm


def draw(seed: int) -> dict[str, Any]:
    r = random.Random(20_000 + seed)
    kind = KINDS[seed % len(KINDS)] if seed < 2 * len(KINDS) else r.choice(KINDS)
    acc = r.choice(["default", "zero_arg", "keywords"])
    if kind == "reverse" and acc == "default":
        acc = "zero_arg"  # a passthrough batch may mix lanes; reversing it is execution-dependent
    spec: dict[str, Any] = {"kind": kind, "acc": acc, "max_batch": r.randint(1, 5),
                            "keywords": {"preserves_cursor_order": kind != "reverse"}}
    if r.random() < 0.5:
        spec["keywords"]["parallelism"] = r.choice([1, 2, 4])
    if r.random() < 0.3:
        spec["keywords"]["placement"] = r.choice(["local", "auto"])
    for trait in ("indexable", "calibration_replayable", "batch_shape_sensitive", "requires_serial_state"):
        if r.random() < 0.25:
            spec["keywords"][trait] = r.random() < 0.5
    spec["shuffle"] = r.random() < 0.3 and kind != "reverse"
    spec["batch"] = r.randint(1, 3) if r.random() < 0.3 else None
    lanes = r.randint(1, 3)
    k = r.choice([1, 2, 3]) if kind == "reverse" or spec["shuffle"] else r.choice([None, 2])
    options: dict[str, Any] = {"runner": "inline", "canonical_replicas": lanes}
    if k is not None:
        options["flush_every_k_chunks"] = k
    spec["cfg"] = PipelineConfig([], layout={"web": (30, 20), "code": (16, 10), "books": (8,)},
                                 source_kwargs={"chunk_size": r.choice([3, 4, 8]), "seed": r.randint(0, 99)},
                                 options=options)
    return spec


def build(impl: str, spec: dict[str, Any], **topo: Any) -> Any:
    L = lib(impl)
    cfg: PipelineConfig = spec["cfg"]
    p = L.Pipeline(work_source(cfg, impl)).map_transform(crc_tokens)
    if spec["shuffle"]:
        p = p.shuffle(4, seed=3)
    m = spec["max_batch"]
    factory = {"default": None,
               "zero_arg": lambda: L.Counting(max_batch=m),
               "keywords": lambda *, deterministic, ctx: L.Counting(max_batch=m)}[spec["acc"]]
    p = p.add_op(f"user_{spec['kind']}", process_many=process_many_of(spec["kind"], L), accumulator=factory,
                 **spec["keywords"])
    if spec["batch"] is not None:
        p = p.batch(spec["batch"])
    return p.options(**{**dict(cfg.options), **topo})


def describe(spec: dict[str, Any]) -> str:
    return "\n".join(f"{k}={v.describe() if isinstance(v, PipelineConfig) else v!r}" for k, v in spec.items())


def views(impl: str, spec: dict[str, Any], state: Any = None, **topo: Any) -> list[Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p = build(impl, spec, **topo)
        if state is not None:
            restore_any(p, state)
        return norm(list(p))


def by_lane(items: list[Any]) -> dict[int, list[Any]]:
    out: dict[int, list[Any]] = {}
    for v in items:
        out.setdefault(v[1][0][0] if v[0] == "batch" else v[0], []).append(v)
    return out


def lane_pure(spec: dict[str, Any]) -> dict[int, list[Any]]:
    lanes = int(spec["cfg"].options["canonical_replicas"])
    out: dict[int, list[Any]] = {}
    with tempfile.TemporaryDirectory() as agg:
        for rank in range(lanes):
            out.update(by_lane(views("zephon", spec, world_size=lanes, global_rank=rank, dp_degree=lanes,
                                     aggregate_dir=agg)))
    return out


def checkpoint_at(impl: str, spec: dict[str, Any], cut: int) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p = build(impl, spec)
        it = iter(p)
        for _ in range(cut):
            next(it)
        return copy.deepcopy(p.checkpoint())


@pytest.mark.parametrize("seed", range(CONFIGS))
def test_generated_add_op_pipelines_match_zephon_and_resume_exactly(seed: int) -> None:
    spec = draw(seed)
    try:
        z = views("zephon", spec)
    except RuntimeError:  # zephon refuses the plan when the run starts: so must zephon_ref
        with pytest.raises(RuntimeError):
            views("zephon_ref", spec)
        return
    mine = views("zephon_ref", spec)
    assert mine, describe(spec)
    want, got = by_lane(z), by_lane(mine)
    if got != want and int(spec["cfg"].options["canonical_replicas"]) > 1:
        pure = lane_pure(spec)  # zephon's lanes depend on the other lanes of their rank
        assert pure != want, f"zephon_ref differs from zephon, which is the same on every topology\n" \
                             f"{describe(spec)}"
        want = pure
    assert got == want, describe(spec)
    # a process_many whose output depends on its ready batch's shape (batch_tag) resumes exactly on
    # neither side: replay regroups from the first inflight chunk; there zephon_ref's resumed stream
    # must equal zephon's own resumed stream instead of the uninterrupted remainder
    exact = spec["kind"] != "batch_tag"
    r = random.Random(seed)
    for cut in sorted(r.sample(range(len(mine) + 1), min(CUTS, len(mine) + 1))):
        ours = views("zephon_ref", spec, checkpoint_at("zephon_ref", spec, cut))
        if exact:
            assert ours == mine[cut:], f"zephon_ref resume at cut {cut}\n{describe(spec)}"
        if want == by_lane(z):  # zephon's checkpoint cuts zephon's (deterministic) stream
            zstate = checkpoint_at("zephon", spec, cut)
            theirs = z[cut:] if exact else views("zephon", spec, zstate)
            if not exact:
                assert ours == theirs, f"zephon_ref resume at cut {cut} vs zephon's resume\n{describe(spec)}"
            assert views("zephon_ref", spec, zstate) == theirs, \
                f"zephon checkpoint at cut {cut} into zephon_ref\n{describe(spec)}"


def test_serial_state_with_parallel_workers_is_refused_when_a_run_starts_as_in_zephon() -> None:
    spec = {**draw(0), "keywords": {"preserves_cursor_order": True, "requires_serial_state": True,
                                    "parallelism": 4}}
    for impl in ("zephon", "zephon_ref"):
        build(impl, spec)  # accepted at the call
        with pytest.raises(RuntimeError, match="serial"):
            views(impl, spec)
        views(impl, spec, deterministic=False)  # zephon allows it outside deterministic mode


def test_an_instance_with_serial_state_and_parallel_workers_is_refused_as_in_zephon() -> None:
    from zephon.ops import BaseOp as ZBaseOp
    from zephon.ops import OpTraits as ZOpTraits

    from zephon_ref.ops.base import BaseOp, OpTraits

    for impl, base, traits in (("zephon", ZBaseOp, ZOpTraits), ("zephon_ref", BaseOp, OpTraits)):
        op = type("Serial", (base,), {
            "traits": lambda self, t=traits: t(preserves_cursor_order=True, requires_serial_state=True,
                                               parallelism=4),
            "process_many": lambda self, e: e})()
        p = _plain(impl).add_op(op).options(runner="inline", canonical_replicas=1)
        with warnings.catch_warnings(), pytest.raises(RuntimeError, match="serial"):
            warnings.simplefilter("ignore")
            list(p)


def test_the_instance_form_names_the_operator_by_its_class_name_as_zephon() -> None:
    """zephon's docs: "the instance form defaults to the class name of ``op``"; the plan names (in
    ``explain()``, metrics and the replay filter's name) are the class name as written, not lowercased."""
    names = {}
    import importlib

    for impl in ("zephon", "zephon_ref"):
        ops = importlib.import_module(f"{impl}.ops")

        class MyCoolOp(ops.BaseOp):  # type: ignore[misc, name-defined]
            traits_value = ops.OpTraits(preserves_cursor_order=True)

            def traits(self) -> Any:
                return self.traits_value

            def process_many(self, e: Any) -> Any:
                return e

        text = _plain(impl).add_op(MyCoolOp()).options(runner="inline", canonical_replicas=1).explain()
        names[impl] = [w for w in text.replace("'", " ").replace(",", " ").split() if "CoolOp" in w
                       or "coolop" in w][:2]
    assert names["zephon"] == ["MyCoolOp@p1", "MyCoolOp_replay_filter@p1"], names
    assert names["zephon_ref"] == names["zephon"], names


def test_the_draws_cover_every_kind_and_accumulator_form() -> None:
    specs = [draw(s) for s in range(CONFIGS)]
    assert {s["kind"] for s in specs} == set(KINDS)
    assert {s["acc"] for s in specs} == {"default", "zero_arg", "keywords"}
    assert {s["cfg"].options["canonical_replicas"] for s in specs} == {1, 2, 3}


def test_the_conformance_check_catches_a_wrong_accumulator_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    """A planted bug: zephon_ref's kwargs form ignoring the accumulator factory (a passthrough
    instead) changes the ready batches that ``batch_tag`` records, and the comparison sees it."""
    from zephon_ref.ops import functional
    from zephon_ref.ops.base import PassthroughAccumulator

    spec = next(s for s in map(draw, range(40)) if s["kind"] == "batch_tag" and s["acc"] != "default"
                and s["max_batch"] > 1)
    assert by_lane(views("zephon_ref", spec)) == by_lane(views("zephon", spec)) or \
        int(spec["cfg"].options["canonical_replicas"]) > 1
    monkeypatch.setattr(functional.FunctionalOp, "accumulator",
                        lambda self, *, deterministic, ctx: PassthroughAccumulator())
    assert by_lane(views("zephon_ref", spec)) != by_lane(views("zephon", spec)), describe(spec)


def test_both_forms_of_the_accumulator_factory_are_called_as_zephon_calls_them() -> None:
    from zephon_ref.ops import CountingAccumulator
    from zephon_ref.ops.functional import FunctionalOp

    seen: list[Any] = []

    def zero() -> Any:
        seen.append("zero")
        return CountingAccumulator(max_batch=2)

    def keywords(**kw: Any) -> Any:
        seen.append(sorted(kw))
        return CountingAccumulator(max_batch=2)

    def optional(x: int = 1) -> Any:  # a parameter, even with a default: zephon passes the keywords
        return CountingAccumulator(max_batch=x)

    for f in (zero, keywords):
        FunctionalOp("u", process_many=list, preserves_cursor_order=True, accumulator=f).accumulator(
            deterministic=True, ctx={"k": 1})
    assert seen == ["zero", ["ctx", "deterministic"]]
    with pytest.raises(TypeError):
        FunctionalOp("u", process_many=list, preserves_cursor_order=True, accumulator=optional).accumulator(
            deterministic=True, ctx={})
    with pytest.raises(ConfigTypeError, match="accumulator"):
        FunctionalOp("u", process_many=list, preserves_cursor_order=True, accumulator=lambda: 3).accumulator(
            deterministic=True, ctx={})


@pytest.mark.parametrize("seed", range(8))
def test_the_kwargs_form_builds_zephons_traits(seed: int) -> None:
    """The built operator's OpTraits equal those of the operator zephon builds (read from its plan
    node) for drawn keywords: indexable defaults to False here, unlike OpTraits' own default."""
    from dataclasses import fields

    spec = {**draw(seed), "batch": None}
    zop = build("zephon", spec)._tail.op
    ours = build("zephon_ref", spec)._ops[-1][1]
    want, got = zop.traits(), ours.traits()
    assert {f.name: getattr(got, f.name) for f in fields(got)} == \
        {f.name: getattr(want, f.name) for f in fields(got)}, spec["keywords"]


def _pm(elems: list[Any]) -> list[Any]:
    return elems


# (positional, keywords, the builtin zephon 0.2.0 raises at the call)
REFUSED_BY_BOTH = [
    (("x",), {"process_many": _pm}, ValueError),  # preserves_cursor_order is required
    (("x",), {"preserves_cursor_order": True}, ValueError),  # process_many is required
    (("",), {"process_many": _pm, "preserves_cursor_order": True}, ValueError),
    (("x",), {"name": "y", "process_many": _pm, "preserves_cursor_order": True}, ValueError),
    ((3,), {}, ValueError),
    (("x",), {}, ValueError),
]
INSTANCE_REFUSES = ["process_many", "preserves_cursor_order", "parallelism", "indexable", "accumulator",
                    "process_one", "validation_samples", "calibration_replayable", "batch_shape_sensitive",
                    "requires_serial_state"]
# zephon accepts these at the call (and fails at the first iteration, or never); zephon_ref
# refuses them at the call (docs/divergences.md D-60)
REFUSED_HERE = [
    ({"process_many": 3}, ConfigTypeError), ({"parallelism": 0}, ConfigError),
    ({"parallelism": -1}, ConfigError), ({"parallelism": 2.0}, ConfigTypeError),
    ({"parallelism": True}, ConfigTypeError), ({"placement": 3}, ConfigTypeError),
    ({"placement": ""}, ConfigError), ({"preserves_cursor_order": 1}, ConfigTypeError),
    ({"indexable": "x"}, ConfigTypeError), ({"accumulator": 3}, ConfigTypeError),
    ({"process_one": 3}, ConfigTypeError), ({"validation_samples": 3}, ConfigTypeError),
    ({"batch_shape_sensitive": 1}, ConfigTypeError), ({"requires_serial_state": 1}, ConfigTypeError),
    ({"calibration_replayable": 1}, ConfigTypeError),
]


def _plain(impl: str) -> Any:
    return lib(impl).Pipeline(work_source(PipelineConfig([]), impl)).map_transform(crc_tokens)


@pytest.mark.parametrize(("args", "kw", "builtin"), REFUSED_BY_BOTH)
def test_bad_calls_raise_zephons_builtin(args: tuple[Any, ...], kw: dict[str, Any], builtin: type) -> None:
    with pytest.raises(builtin):
        _plain("zephon").add_op(*args, **kw)
    with pytest.raises(builtin) as info:
        _plain("zephon_ref").add_op(*args, **kw)
    assert isinstance(info.value, ZephonRefError)


@pytest.mark.parametrize("keyword", INSTANCE_REFUSES)
def test_the_instance_form_refuses_every_keyword_form_keyword_as_zephon(keyword: str) -> None:
    from zephon.ops import OpTraits as ZOpTraits

    from zephon_ref.ops.functional import FunctionalOp

    value = {"process_many": _pm, "accumulator": lambda: None, "process_one": _pm,
             "validation_samples": list, "parallelism": 2}.get(keyword, True)
    zop = zephon.ops.BaseOp
    zinst = type("Z", (zop,), {"traits": lambda self: ZOpTraits(preserves_cursor_order=True),
                               "process_many": lambda self, e: e})()
    with pytest.raises(ValueError):
        _plain("zephon").add_op(zinst, **{keyword: value})
    ours = FunctionalOp("u", process_many=_pm, preserves_cursor_order=True)
    with pytest.raises(ConfigError, match=keyword):
        _plain("zephon_ref").add_op(ours, **{keyword: value})


@pytest.mark.parametrize(("kw", "err"), REFUSED_HERE)
def test_values_zephon_takes_unchecked_are_refused_at_the_call(kw: dict[str, Any], err: type) -> None:
    call = {"process_many": _pm, "preserves_cursor_order": True, **kw}
    _plain("zephon").add_op("x", **call)  # zephon takes it at the call
    with pytest.raises(err, match=next(iter(kw))):
        _plain("zephon_ref").add_op("x", **call)


@pytest.mark.parametrize("bad", [lambda e: None, lambda e: [x.payload for x in e]])
def test_a_process_many_result_that_is_not_records_is_a_type_error_as_in_zephon(bad: Any) -> None:
    for impl in ("zephon", "zephon_ref"):
        p = _plain(impl).add_op("x", process_many=bad, preserves_cursor_order=True)
        p.options(runner="inline", canonical_replicas=1, auto_validation="off")
        with warnings.catch_warnings(), pytest.raises(TypeError):
            warnings.simplefilter("ignore")
            list(p)


def test_validate_checks_a_kwargs_form_operator_with_validation_samples() -> None:
    """zephon's validate() smoke-tests add_op operators of both forms; a process_many keeping state
    across calls is reported (a built-in operator would be skipped)."""
    from zephon_ref.types import SampleMeta, SampleRecord

    calls = [0]

    def counting(elems: list[Any]) -> list[Any]:
        calls[0] += 1
        return [SampleRecord(e.meta, {"n": calls[0]}) for e in elems]

    def samples() -> list[Any]:
        return [SampleRecord(SampleMeta(sample_id=(0, 0, i), lane_id=i % 2, chunk_id=0), {"n": 0})
                for i in range(2)]

    good = _plain("zephon_ref").add_op("ok", process_many=_pm, preserves_cursor_order=True,
                                       validation_samples=samples)
    bad = _plain("zephon_ref").add_op("bad", process_many=counting, preserves_cursor_order=True,
                                      validation_samples=samples)
    assert good.validate().ok
    assert [i.code for i in bad.validate().errors] == ["process_many_not_deterministic"]

"""Conformance of pack_sequences / pack_flat against zephon 0.2.0 on generated configurations.

Two levels, both seeded (``random.Random(seed)``, one seed per configuration, printed on failure):

* **operator**: ``ZEPHON_REF_PACK_OP_CONFIGS`` configurations (default 300) of every knob both
  libraries take (algorithm incl. best_fit_wrap with its pool and age, envelope or flat output with
  pad id and positions, homogeneity none / full / group with DomainGroups, caps, bins, flush and
  shuffle strategies) drive zephon's ``PackSequences`` and zephon_ref's with the same record pushes
  (two lanes, three components, empty, oversized and split records, children of one offset) and
  compare per lane: cursor keys, contributors with is_last_child, tombstones, component counts,
  ``_packing_metadata`` (padding_length included) and payloads (flat rows and positions as lists);
* **pipeline**: ``ZEPHON_REF_PACK_PIPELINE_CONFIGS`` configurations (default 24) of a source, the
  crc tokenizer, one packer and sometimes a shuffle and a batch, on 1-3 lanes: each lane's
  delivered records equal zephon's, and at ``CUTS`` random cuts per configuration a zephon
  checkpoint and a zephon_ref checkpoint restored into a fresh zephon_ref pipeline each continue
  with exactly the uninterrupted remainder.

Known differences (docs/divergences.md) are judged, not skipped: a child's closing flag that zephon
keeps while a sibling stays buffered (first/best fit and best_fit_wrap, which reorder: compared with
the flags cleared, everything else equal); the random pre-packing shuffle of a push mixing lanes
(operator level: pushes are lane-pure; pipeline level: compared with zephon's one-lane-per-rank run,
as tests/conformance/test_pipeline_conformance.py does).
"""

from __future__ import annotations

import os
import random
import tempfile
import warnings
from typing import Any

import pytest

zephon = pytest.importorskip("zephon", reason="zephon 0.2.0 (the conformance extra) is not installed")

from zephon._internal.ops.pack_sequences import PackSequences as ZPack  # noqa: E402
from zephon.ops import OpContext as ZOpContext  # noqa: E402
from zephon.ops.grouping import DomainGroups as ZDomainGroups  # noqa: E402

from properties.opkit import rec, run, split  # noqa: E402
from properties.pipelines import PipelineConfig, build_pipeline, checkpoint_after  # noqa: E402
from properties.zephon_checkpoints import restore_any  # noqa: E402
from properties.zephon_records import norm, per_lane, to_zephon_all  # noqa: E402
from zephon_ref.lineage import spawn_child  # noqa: E402
from zephon_ref.ops import PackSequences  # noqa: E402
from zephon_ref.ops.base import OpContext  # noqa: E402
from zephon_ref.ops.grouping import DomainGroups  # noqa: E402
from zephon_ref.types import SampleRecord  # noqa: E402

pytestmark = pytest.mark.conformance

OP_CONFIGS = int(os.environ.get("ZEPHON_REF_PACK_OP_CONFIGS", "300"))
PIPELINE_CONFIGS = int(os.environ.get("ZEPHON_REF_PACK_PIPELINE_CONFIGS", "24"))
CUTS = 3
NAMES = {"c0": 0, "c1": 1, "c2": 2}
REORDERING = ("first_fit", "best_fit", "best_fit_wrap")


# -- drawing ------------------------------------------------------------------------------------------
def draw_knobs(r: random.Random, components: list[str], max_length: int) -> dict[str, Any]:
    """One packer configuration zephon 0.2.0 accepts (the cross-knob rules of PackConfig)."""
    alg = r.choice(["first_fit", "best_fit", "wrap", "best_fit_wrap"])
    flat = r.random() < 0.5
    k: dict[str, Any] = {"max_length": max_length, "algorithm": alg}
    if flat:
        k["output"] = "flat"
    if alg in ("first_fit", "best_fit"):
        k["num_bins"] = r.randint(1, 4)
        if r.random() < 0.3:
            k["min_sequence_length"] = r.randint(0, 4)
        if r.random() < 0.3:
            k["flush_strategy"] = "fullest"
        if r.random() < 0.3:
            k["drop_oversized"] = True
    if r.random() < 0.4:
        k["max_sequences_per_bin"] = r.randint(1, 4)
    if alg == "best_fit_wrap":
        if r.random() < 0.8:
            k["candidate_pool_size"] = r.randint(1, 8)
        if r.random() < 0.6:
            k["max_candidate_age"] = r.randint(1, 12)
    if flat:
        if alg != "wrap" or "max_sequences_per_bin" in k or r.random() < 0.3:
            k["pad_token_id"] = r.randint(0, 3)
        if r.random() < 0.3:
            k["emit_positions"] = False
    if r.random() < 0.25:
        k["shuffle_strategy"] = r.choice(["random", "length"])
        if k["shuffle_strategy"] == "random" and r.random() < 0.5:
            k["shuffle_seed"] = r.randint(0, 50)
    if r.random() < 0.2:
        k["tokens_field"] = "input_ids"
    h = r.choice(["none", "none", "full", "group"])
    if h != "none":
        k["homogeneity"] = h
    if h == "group":
        names = list(components)
        r.shuffle(names)
        cut = r.randint(1, len(names))
        groups = {"g0": names[:cut]}
        if cut < len(names) and r.random() < 0.5:
            groups["g1"] = names[cut:]
        k["groups"] = groups
    return k


def draw_records(r: random.Random, max_length: int) -> tuple[list[SampleRecord], bool]:
    """Two lanes' records of three chunks: lengths 0..2*max_length, some split into children."""
    out: list[SampleRecord] = []
    children = False
    for chunk in range(3):
        for lane in (0, 1):
            for off in range(r.randint(2, 7)):
                n = r.choice([0, 1, 2, r.randint(1, max_length), r.randint(1, max_length),
                              r.randint(max_length // 2, 2 * max_length), max_length])
                base = rec(lane, chunk, off, n_tokens=n, comp=r.randint(0, 2))
                if n >= 2 and r.random() < 0.15:
                    children = True
                    pieces = r.randint(2, 3)
                    ids = base.payload["input_ids"]
                    for i in range(pieces):
                        part = ids[i::pieces] or [7]
                        meta = spawn_child(base.meta, i, is_last_child=i == pieces - 1)
                        out.append(SampleRecord(meta, {"input_ids": part, "mask": [1] * len(part), "k": off}))
                else:
                    out.append(base)
    return out, children


def draw_pushes(r: random.Random, recs: list[SampleRecord], lane_pure: bool) -> list[list[SampleRecord]]:
    if lane_pure:
        return [p for lane in (0, 1)
                for p in split([x for x in recs if x.meta.lane_id == lane],
                               sorted(r.sample(range(1, 30), 3)))]
    return split(recs, sorted(r.sample(range(1, len(recs) + 1), min(4, len(recs)))))


# -- running ------------------------------------------------------------------------------------------
def zephon_knobs(knobs: dict[str, Any]) -> dict[str, Any]:
    z = dict(knobs)
    if "groups" in z:
        z["groups"] = ZDomainGroups(z["groups"])
    return z


def run_both(knobs: dict[str, Any], pushes: list[list[SampleRecord]]) -> tuple[Any, Any]:
    ctx = {"get_component_id": NAMES.__getitem__}
    kw = dict(knobs)
    m = kw.pop("max_length")
    ours = PackSequences(m, **{**kw, "groups": DomainGroups(kw["groups"])} if "groups" in kw else kw)
    theirs = ZPack(m, **zephon_knobs(kw))
    ours.setup(OpContext(ctx))
    theirs.setup(ZOpContext(dict(ctx)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mine = _outcome(lambda: per_lane(run(ours, pushes, ctx=ctx)))
        z = _outcome(lambda: per_lane(run(theirs, to_zephon_all(pushes), ctx=dict(ctx))))
    return mine, z


def _outcome(fn: Any) -> Any:
    """The lanes, or the builtin kind of the error (ValueError / TypeError) both must raise."""
    try:
        return fn()
    except (ValueError, TypeError) as exc:
        return ("raised", ValueError if isinstance(exc, ValueError) else TypeError)


def _unflag(lanes: Any) -> Any:
    return {k: [(n[0], n[1], tuple(c for c, _ in n[2]), *n[3:]) for n in v] for k, v in lanes.items()}


def _assert_closes_last(lanes: Any, where: str) -> None:
    """zephon_ref's side of that row: per lane and base offset exactly one closing ref, on the
    offset's last occurrence in the output."""
    for lane, items in lanes.items():
        last: dict[Any, int] = {}
        closing: dict[Any, list[int]] = {}
        for i, n in enumerate(items):
            for cursor, flag in n[2]:
                base = (cursor[0], cursor[1])
                last[base] = i
                if flag:
                    closing.setdefault(base, []).append(i)
        for base, at in last.items():
            assert closing.get(base) == [at], f"{where}: lane {lane} offset {base} closes at " \
                                              f"{closing.get(base)}, last seen at {at}"


def _delivered(lanes: Any) -> dict[Any, tuple[list[Any], int]]:
    """Per lane: the sorted base offsets delivered and the tokens packed."""
    return {lane: (sorted({(c[0], c[1]) for n in items for c, _ in n[2]}),
                   sum(n[6]["total_length"] for n in items if n[6] is not None))
            for lane, items in lanes.items()}


def op_case(seed: int) -> tuple[dict[str, Any], Any, Any, bool]:
    r = random.Random(seed)
    max_length = r.choice([4, 8, 10, 16, 24])
    knobs = draw_knobs(r, sorted(NAMES), max_length)
    recs, children = draw_records(r, max_length)
    pushes = draw_pushes(r, recs, lane_pure=knobs.get("shuffle_strategy") == "random")
    mine, z = run_both(knobs, pushes)
    return knobs, mine, z, children


def test_generated_operator_configurations_match_zephon() -> None:
    seen: dict[str, int] = {}
    raised = unflagged = moved = 0
    for seed in range(OP_CONFIGS):
        knobs, mine, z, children = op_case(seed)
        key = f"{knobs['algorithm']}/{knobs.get('output', 'envelope')}/{knobs.get('homogeneity', 'none')}"
        seen[key] = seen.get(key, 0) + 1
        if mine != z and children and knobs["algorithm"] in REORDERING and "raised" not in (mine[0], z[0]):
            # docs/divergences.md row 1 (closing flag of a child moved to its last-emitted sibling)
            _assert_closes_last(mine, f"seed {seed}: {knobs}")
            mine, z = _unflag(mine), _unflag(z)
            unflagged += 1
        elif mine != z and children and knobs["algorithm"] == "wrap" and knobs.get("shuffle_strategy") \
                and "raised" not in (mine[0], z[0]):
            # divergence D-3: wrap packs a reordered push's closer after its siblings; zephon may
            # close the offset early.  Ours closes each offset once and last, zephon's does not, and
            # both deliver the same offsets and tokens per lane
            _assert_closes_last(mine, f"seed {seed}: {knobs}")
            with pytest.raises(AssertionError):
                _assert_closes_last(z, f"seed {seed}: {knobs}")
            assert _delivered(mine) == _delivered(z), f"seed {seed}: {knobs}"
            moved += 1
            continue
        assert mine == z, f"seed {seed}: {knobs}\nzephon_ref: {mine}\nzephon:     {z}"
        raised += isinstance(mine, tuple)
    print(f"\n{OP_CONFIGS} operator configurations equal to zephon ({raised} raise in both, {unflagged} "
          f"equal with child closing flags cleared, {moved} wrap closers moved, D-3): {sorted(seen.items())}")
    assert len(seen) == 4 * 2 * 3 or OP_CONFIGS < 200, f"every algorithm x output x homogeneity drawn: {seen}"


# -- pipelines ----------------------------------------------------------------------------------------
def draw_pipeline(seed: int) -> PipelineConfig:
    r = random.Random(10_000 + seed)
    knobs = draw_knobs(r, ["web", "code", "books"], r.choice([32, 64, 96, 160]))
    method = "pack_flat" if knobs.pop("output", "envelope") == "flat" else "pack_sequences"
    chain: list[tuple[str, dict[str, Any]]] = [(method, knobs)]
    if r.random() < 0.3:
        chain.append(("shuffle", {"buffer_size": r.randint(1, 6), "seed": r.randint(0, 9)}))
    if r.random() < 0.4:
        chain.append(("batch", {"microbatch_size": r.randint(1, 3)}))
    k = r.choice([None, 1, 2, 3])
    options: dict[str, Any] = {"runner": "inline", "canonical_replicas": r.randint(1, 3)}
    if k is not None:
        options["flush_every_k_chunks"] = k
    return PipelineConfig(chain, layout={"web": (40, 25), "code": (20, 12), "books": (10,)},
                          source_kwargs={"chunk_size": r.choice([4, 8, 16]), "seed": r.randint(0, 99)},
                          options=options)


def _views(impl: str, cfg: PipelineConfig, state: Any = None, **topo: Any) -> list[Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p = build_pipeline(impl, cfg, **topo)
        if state is not None:
            restore_any(p, state)
        return norm(list(p))


def _by_lane(views: list[Any]) -> dict[int, list[Any]]:
    out: dict[int, list[Any]] = {}
    for v in views:
        lane = v[1][0][0] if v[0] == "batch" else v[0]
        out.setdefault(lane, []).append(v)
    return out


def _zephon_lane_pure(cfg: PipelineConfig) -> dict[int, list[Any]]:
    lanes = int(cfg.options["canonical_replicas"])
    out: dict[int, list[Any]] = {}
    with tempfile.TemporaryDirectory() as agg:
        for rank in range(lanes):
            topo = {} if lanes == 1 else {"world_size": lanes, "global_rank": rank, "dp_degree": lanes,
                                          "aggregate_dir": agg}
            out.update(_by_lane(_views("zephon", cfg, **topo)))
    return out


@pytest.mark.parametrize("seed", range(PIPELINE_CONFIGS))
def test_generated_pipelines_match_zephon_and_resume_exactly(seed: int) -> None:
    cfg = draw_pipeline(seed)
    z, mine = _views("zephon", cfg), _views("zephon_ref", cfg)
    want, got = _by_lane(z), _by_lane(mine)
    if got != want and int(cfg.options["canonical_replicas"]) > 1:
        pure = _zephon_lane_pure(cfg)  # zephon's lanes depend on the other lanes of their rank
        assert pure != want, f"zephon_ref differs from zephon, which is the same on every topology\n" \
                             f"{cfg.describe()}"
        want = pure
    assert got == want, cfg.describe()
    r = random.Random(seed)
    for cut in sorted(r.sample(range(len(mine) + 1), min(CUTS, len(mine) + 1))):
        ours = _views("zephon_ref", cfg, checkpoint_after("zephon_ref", cfg, cut))
        assert ours == mine[cut:], f"zephon_ref resume at cut {cut}\n{cfg.describe()}"
        if want == _by_lane(z):  # zephon's checkpoint cuts zephon's (deterministic) stream
            theirs = _views("zephon_ref", cfg, checkpoint_after("zephon", cfg, cut))
            assert theirs == z[cut:], f"zephon checkpoint at cut {cut} into zephon_ref\n{cfg.describe()}"


def test_the_generators_cover_every_new_mode() -> None:
    """The pipeline tier draws best_fit_wrap, pack_flat and both homogeneous modes at least once."""
    chains = [draw_pipeline(s).chain[0] for s in range(PIPELINE_CONFIGS)]
    assert any(m == "pack_flat" for m, _ in chains)
    assert any(k["algorithm"] == "best_fit_wrap" for _, k in chains)
    assert {k.get("homogeneity", "none") for _, k in chains} >= {"none", "full", "group"}


@pytest.mark.parametrize("method", ["pack_sequences", "pack_flat"])
def test_the_builder_methods_take_zephons_keywords_and_defaults(method: str) -> None:
    import inspect

    from zephon_ref.pipeline import Pipeline

    theirs = inspect.signature(getattr(zephon.Pipeline, method)).parameters
    mine = inspect.signature(getattr(Pipeline, method)).parameters
    assert [(n, p.kind, p.default) for n, p in mine.items()] == \
        [(n, p.kind, p.default) for n, p in theirs.items()]


FLAT_TRAINING = [
    {"max_length": 64, "num_bins": 2, "pad_token_id": 0},
    {"max_length": 48, "algorithm": "wrap"},
    {"max_length": 64, "algorithm": "best_fit_wrap", "candidate_pool_size": 3, "pad_token_id": 2,
     "homogeneity": "full"},
    {"max_length": 32, "algorithm": "wrap", "max_sequences_per_bin": 2, "pad_token_id": 1,
     "emit_positions": False},
]


@pytest.mark.parametrize("knobs", FLAT_TRAINING, ids=lambda k: k.get("algorithm", "first_fit"))
def test_pack_flat_rows_convert_to_the_same_training_batches(knobs: dict[str, Any]) -> None:
    """What a framework does with pack_flat: batch, then to_training with labels, loss mask and
    cu_seqlens (from the positions pack_flat emits); every array equal to zephon's."""
    import numpy as np

    cfg = PipelineConfig([("pack_flat", knobs), ("batch", {"microbatch_size": 2})])
    got = {}
    for impl in ("zephon", "zephon_ref"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            rows = []
            for b in build_pipeline(impl, cfg):
                t = b.to_training(return_labels=True, return_loss_mask=True,
                                  return_cu_seqlens=knobs.get("emit_positions", True))
                rows.append({k: np.asarray(v).tolist() for k, v in t.items()})
        got[impl] = rows
    assert got["zephon_ref"] == got["zephon"] and len(got["zephon"]) >= 3


def _array_records(r: random.Random, dict_form: bool) -> list[SampleRecord]:
    import numpy as np

    out = []
    for off in range(12):
        n = r.randint(1, 9)
        ids = np.arange(100, 100 + n)
        payload: Any = {"input_ids": ids, "mask": np.ones(n, dtype=np.int8)} if dict_form else ids
        out.append(rec(off % 2, 0, off, payload=payload, comp=off % 3))
    return out


@pytest.mark.parametrize("seed", range(12))
def test_numpy_array_payload_merging_matches_zephon(seed: int) -> None:
    r = random.Random(seed)
    dict_form = seed % 3 != 0
    knobs: dict[str, Any] = {"max_length": 10, "pack_payloads": "numpy_array"}
    if dict_form and seed % 2:
        knobs.update(algorithm=r.choice(["wrap", "best_fit_wrap"]))
    else:
        knobs.update(algorithm=r.choice(["first_fit", "best_fit"]), num_bins=r.randint(1, 3))
        if not dict_form:
            knobs["length_fn"] = lambda x: len(x.payload)
    recs = _array_records(r, dict_form)
    mine, z = run_both(knobs, split(recs, [3, 7]))
    assert mine == z and mine[0] != "raised", f"seed {seed}: {knobs}"

"""Conformance of ``Pipeline.to_indexable_torch_dataset()`` and ``is_indexable`` against zephon 0.2.0.

zephon 0.2.0's StaticMixtureWorkSource does not support indexing, so the indexable path needs a
work source that does (``supports_indexing()``, ``__len__``, ``sample_id_at``): here each library's
StaticMixtureWorkSource, subclassed to index every row of the synthetic corpus in dataset, shard and
row order.  ``ZEPHON_REF_INDEXABLE_CONFIGS`` generated chains (default 40; one ``random.Random`` per
seed, printed on failure) of indexable operators (map_transform, one that drops records, the fallback
tokenizer, decode_text, add_op and stateful_transform declared indexable) and non-indexable ones
(shuffle, batch, pack_sequences, ensure_mixture, materialize, add_op without ``indexable=True``, an
add_op that splits records) are built with both libraries: ``is_indexable`` agrees; a non-indexable
plan is refused with a RuntimeError by both; an indexable one has the same ``len`` and, for every
index, the same record (cursor, contributors, tombstone, counts, payload) or a RuntimeError from both
(an operator that is not 1->1 on this path).
"""

from __future__ import annotations

import os
import random
import warnings
from types import SimpleNamespace
from typing import Any

import pytest

zephon = pytest.importorskip("zephon", reason="zephon 0.2.0 (the conformance extra) is not installed")
pytest.importorskip("torch", reason="the torch extra is not installed")

from properties.pipelines import PipelineConfig, crc_tokens, work_source  # noqa: E402
from properties.zephon_records import norm_record  # noqa: E402
from zephon_ref.errors import ContractError  # noqa: E402
from zephon_ref.synthetic import synthetic_corpus  # noqa: E402

pytestmark = pytest.mark.conformance

CONFIGS = int(os.environ.get("ZEPHON_REF_INDEXABLE_CONFIGS", "40"))
CFG = PipelineConfig([], layout={"web": (6, 3), "code": (5,), "books": (2, 2)},
                     weights={"web": 0.5, "code": 0.3, "books": 0.2},
                     source_kwargs={"chunk_size": 4, "seed": 1})


def all_sample_ids(cfg: PipelineConfig) -> list[tuple[int, int, int]]:
    """Every row of ``cfg``'s corpus as a SampleId, in dataset, shard and row order."""
    corpus = synthetic_corpus(seed=cfg.corpus_seed, layout=cfg.layout)
    return [(dataset_id, int(shard), row)
            for dataset_id, d in enumerate(corpus.datasets)
            for shard, n in zip(d.ids().tolist(), d.counts().tolist(), strict=True) for row in range(int(n))]


def lib(impl: str) -> SimpleNamespace:
    if impl == "zephon":
        from zephon import Pipeline, SampleRecord
        from zephon.ops import spawn_child, tombstones_for_record
    else:
        from zephon_ref.lineage import spawn_child, tombstones_for_record  # type: ignore[assignment]
        from zephon_ref.pipeline import Pipeline  # type: ignore[assignment]
        from zephon_ref.types import SampleRecord  # type: ignore[assignment]
    return SimpleNamespace(Pipeline=Pipeline, SampleRecord=SampleRecord, spawn_child=spawn_child,
                           tombstones_for_record=tombstones_for_record)


def indexable_source(impl: str, cfg: PipelineConfig = CFG, *, supports: bool = True) -> Any:
    src = work_source(cfg, impl)
    ids = all_sample_ids(cfg)

    class Indexed(type(src)):  # type: ignore[misc]
        def supports_indexing(self) -> bool:
            return supports

        def __len__(self) -> int:
            return len(ids)

        def sample_id_at(self, index: int) -> tuple[int, int, int]:
            return ids[index]

    src.__class__ = Indexed
    return src


def drop_every_third(row: Any) -> Any:
    return None if sum(row["input_ids"]) % 3 == 0 else row


def apply(p: Any, impl: str, step: str) -> Any:
    L = lib(impl)
    if step == "map":
        return p.map_transform(crc_tokens)
    if step == "drop":
        return p.map_transform(drop_every_third)
    if step == "tokenize":  # the tiny offline HF tokenizer (the built-in ones differ by design, D-39)
        return p.tokenize(tokenizer_id=str(tokenizer_dir()), field="text")
    if step == "decode":
        return p.decode_text()
    if step in ("add_op", "add_op_plain"):
        def pm(es: list[Any]) -> list[Any]:
            return [L.SampleRecord(e.meta, {**e.payload, "seen": len(es)}) for e in es]
        return p.add_op(step, process_many=pm, preserves_cursor_order=True, indexable=step == "add_op")
    if step == "add_op_tombstone":
        def drop(es: list[Any]) -> list[Any]:
            return [t for e in es for t in L.tombstones_for_record(e)]
        return p.add_op(step, process_many=drop, preserves_cursor_order=True, indexable=True)
    if step == "add_op_split":
        def split(es: list[Any]) -> list[Any]:
            return [L.SampleRecord(L.spawn_child(e.meta, i, is_last_child=i == 1), dict(e.payload))
                    for e in es for i in range(2)]
        return p.add_op(step, process_many=split, preserves_cursor_order=True, indexable=True)
    if step in ("stateful", "stateful_plain"):
        def mark(rs: list[Any]) -> list[Any]:
            return [L.SampleRecord(r.meta, {**r.payload, "t": 1}) for r in rs]
        return p.stateful_transform(step, init_state=lambda: 0, push=lambda s, rs: (s + 1, rs),
                                    transform=mark, indexable=step == "stateful")
    if step == "shuffle":
        return p.shuffle(4, seed=2)
    if step == "batch":
        return p.batch(2)
    if step == "pack":
        return p.pack_sequences(64, num_bins=2)
    if step == "mixture":
        return p.ensure_mixture()
    if step == "materialize":
        return p.materialize()
    raise AssertionError(step)


INDEXABLE = ["map", "drop", "tokenize", "decode", "add_op", "add_op_tombstone", "stateful"]
NOT_INDEXABLE = ["shuffle", "batch", "pack", "mixture", "materialize", "add_op_plain", "stateful_plain"]
#: steps that read ``input_ids`` (after "map" or "tokenize"), in any order
ON_IDS = ["drop", "add_op", "stateful", "add_op_plain", "stateful_plain", "shuffle", "mixture", "materialize"]


def draw(seed: int) -> list[str]:
    """A chain that makes sense on text rows: decode_text or not, then one step from text to ids,
    then 0-3 steps on ids; sometimes a non-indexable step, a splitting add_op, a final tombstone
    add_op or a batch."""
    r = random.Random(30_000 + seed)
    steps = (["decode"] if r.random() < 0.3 else []) + [r.choice(["map", "tokenize"])]
    steps += [r.choice(ON_IDS[:3]) for _ in range(r.randint(0, 3))]
    if r.random() < 0.3:
        steps.insert(r.randint(len(steps) - 1, len(steps)), r.choice(ON_IDS[3:] + ["pack"]))
    if r.random() < 0.15:
        steps.append("add_op_split")
    if r.random() < 0.2:
        steps.append("add_op_tombstone")
    if r.random() < 0.1:
        steps.append("batch")
    return steps


_TOKDIR: list[Any] = []


def tokenizer_dir() -> Any:
    """A tiny WordLevel tokenizer built offline once per session (:mod:`properties.hf_tokenizer`)."""
    if not _TOKDIR:
        import tempfile

        from properties.hf_tokenizer import build_tokenizer

        _TOKDIR.append(build_tokenizer(tempfile.mkdtemp(prefix="zr-idx-tok-") + "/tok"))
    return _TOKDIR[0]


def build(impl: str, steps: list[str], *, supports: bool = True) -> Any:
    p = lib(impl).Pipeline(indexable_source(impl, supports=supports))
    for s in steps:
        p = apply(p, impl, s)
    return p


def items(ds: Any, n: int) -> list[Any]:
    """Each index's record, or the builtin its error derives from (with whether a RuntimeError names
    the 1->1 rule): on this path a dropped record's tombstone reaches the next operator, in zephon as
    here, and a user's process_many may fail on its None payload."""
    out: list[Any] = []
    for i in range(n):
        try:
            out.append(norm_record(ds[i]))
        except RuntimeError as e:
            out.append(("RuntimeError", "1->1" in str(e)))
        except (TypeError, ValueError, KeyError) as e:
            out.append(next(b.__name__ for b in (TypeError, KeyError, ValueError) if isinstance(e, b)))
    return out


@pytest.mark.parametrize("seed", range(CONFIGS))
def test_generated_plans_index_like_zephon(seed: int) -> None:
    steps = draw(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        z, ours = build("zephon", steps), build("zephon_ref", steps)
        assert ours.is_indexable == z.is_indexable, steps
        if not z.is_indexable:
            with pytest.raises(RuntimeError):
                z.to_indexable_torch_dataset()
            with pytest.raises(ContractError):
                ours.to_indexable_torch_dataset()
            return
        zd, od = z.to_indexable_torch_dataset(), ours.to_indexable_torch_dataset()
        assert len(od) == len(zd) == len(all_sample_ids(CFG)), steps
        assert items(od, len(od)) == items(zd, len(zd)), steps


def test_the_draws_cover_both_answers_and_the_split_refusal() -> None:
    drawn = [draw(s) for s in range(CONFIGS)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        answers = {build("zephon_ref", s).is_indexable for s in drawn}
    assert answers == {True, False}
    assert any("add_op_split" in s and not set(s) & set(NOT_INDEXABLE) for s in drawn)
    assert set(INDEXABLE) | set(NOT_INDEXABLE) <= {x for s in drawn for x in s}


def test_a_source_without_indexing_is_refused_by_both() -> None:
    for impl, err in (("zephon", RuntimeError), ("zephon_ref", ContractError)):
        p = build(impl, ["map"], supports=False)
        assert not p.is_indexable
        with pytest.raises(err):
            p.to_indexable_torch_dataset()


def test_the_dataset_is_a_map_style_torch_dataset_a_dataloader_reads() -> None:
    import torch.utils.data as tud

    ds = build("zephon_ref", ["map"]).to_indexable_torch_dataset()
    assert isinstance(ds, tud.Dataset) and not isinstance(ds, tud.IterableDataset)
    loader = tud.DataLoader(ds, batch_size=4, shuffle=False,
                            collate_fn=lambda xs: [x.meta.sample_id for x in xs])
    assert [sid for b in loader for sid in b] == all_sample_ids(CFG)
    zds = build("zephon", ["map"]).to_indexable_torch_dataset()
    zloader = tud.DataLoader(zds, batch_size=4, collate_fn=lambda xs: [x.meta.sample_id for x in xs])
    assert [sid for b in zloader for sid in b] == all_sample_ids(CFG)


def test_an_index_past_the_end_is_an_index_error_as_zephons_source_gives() -> None:
    zd, od = (build(i, ["map"]).to_indexable_torch_dataset() for i in ("zephon", "zephon_ref"))
    n = len(od)
    with pytest.raises(IndexError):
        zd[n]
    with pytest.raises(IndexError):
        od[n]


@pytest.mark.parametrize(("index", "err"), [(-1, IndexError), ("a", TypeError), (1.0, TypeError),
                                             (True, TypeError)])
def test_indexes_zephon_passes_to_the_source_unchecked_are_refused(index: Any, err: type) -> None:
    """zephon hands any index to ``sample_id_at`` (here a list: -1 reads the last row, True the
    second); zephon_ref takes an int in [0, len) only (docs/divergences.md D-101)."""
    od = build("zephon_ref", ["map"]).to_indexable_torch_dataset()
    with pytest.raises(err, match="index"):
        od[index]


def test_the_indexable_path_calls_process_many_only_never_the_accumulator() -> None:
    """As zephon: a stateful_transform's push (its accumulator) never runs on this path, its
    transform does; so the same record comes back however often it is read."""
    pushes: list[int] = []

    def push(s: int, rs: list[Any]) -> Any:
        pushes.append(len(rs))
        return s + 1, rs

    for impl in ("zephon", "zephon_ref"):
        p = lib(impl).Pipeline(indexable_source(impl)).map_transform(crc_tokens).stateful_transform(
            "s", init_state=lambda: 0, push=push, indexable=True)
        ds = p.to_indexable_torch_dataset()
        assert norm_record(ds[2]) == norm_record(ds[2])
    assert pushes == []

"""Tensor payloads against zephon 0.2.0: ``pack_flat`` over torch tensor fields,
``pack_sequences(pack_payloads="torch_tensor")`` and ``tokenize(return_tensors=...)``.

Three tiers, all seeded (one ``random.Random(seed)`` per configuration, printed on failure), every
payload compared *tensor-equal*: same type, same dtype, same shape and ``torch.equal`` (numpy
arrays: dtype and ``array_equal``), besides the records' lineage (cursor keys, contributors with
is_last_child, tombstones, counts, ``_packing_metadata``):

* **operator**: ``ZEPHON_REF_TENSOR_OP_CONFIGS`` configurations (default 240) of both packers (every
  algorithm; flat with pad ids, caps and positions; envelope with ``torch_tensor`` or ``keep_list``)
  over two lanes of tensor records of a drawn dtype (int64, int32, int16, uint8, bool, float32,
  bfloat16), with a mask field, at times a 2-D field, a scalar, children of one offset (wrap);
  about a third of them with a twist zephon handles its own way: a list after a tensor or before
  it, a numpy array after a tensor, mixed dtypes, other trailing sizes, a key missing in a later
  record, a 0-dim tensor field, a pad id outside a uint8 field.  Both must give the same records or
  raise the same builtin; where zephon raises KeyError / IndexError (a key missing, a dict after a
  tensor) zephon_ref raises its typed ConfigError / ConfigTypeError (divergence D-8);
* **tokenize**: every ``return_tensors`` (None, "pt", "np", "numpy", "tf") under ten knob sets with
  zephon_ref's HashTokenizer given to both and, where the ``hf`` extra is installed, the tiny offline HF
  tokenizer (also loaded from its directory by the facade, with ``use_fast``); ``tokenizer=None`` on
  both (each library's built-in tokenizer: kinds, dtypes and shapes, zephon's ids being salted);
* **pipeline**: ``ZEPHON_REF_TENSOR_PIPELINE_CONFIGS`` pipelines (default 10): a map that makes
  tensor fields (or tokenize(return_tensors="pt") over text), then a packer and sometimes a batch,
  on 1-2 lanes; the streams are equal, and at ``CUTS`` cuts a zephon_ref checkpoint and a zephon
  checkpoint restored into a fresh zephon_ref pipeline each continue with exactly the
  uninterrupted remainder (checkpoints hold cursors, not payloads: the bins in flight at a cut,
  tensors included, are rebuilt by replay on both); pack_flat tensor rows through ``to_training``.
"""

from __future__ import annotations

import os
import random
import warnings
from typing import Any

import numpy as np
import pytest

zephon = pytest.importorskip("zephon", reason="zephon 0.2.0 (the conformance extra) is not installed")
torch = pytest.importorskip("torch", reason="torch is not installed")

from zephon._internal.ops.pack_sequences import PackSequences as ZPack  # noqa: E402
from zephon._internal.ops.tokenize_text import TokenizeText as ZTokenize  # noqa: E402
from zephon.ops import OpContext as ZOpContext  # noqa: E402

from properties.hf_tokenizer import AVAILABLE as HF_AVAILABLE  # noqa: E402
from properties.opkit import rec, run, split  # noqa: E402
from properties.pipelines import PipelineConfig, build_pipeline, checkpoint_after  # noqa: E402
from properties.zephon_checkpoints import restore_any  # noqa: E402
from properties.zephon_records import norm_record, to_zephon_all  # noqa: E402
from zephon_ref.lineage import spawn_child  # noqa: E402
from zephon_ref.ops import PackSequences, Tokenize  # noqa: E402
from zephon_ref.ops.base import OpContext  # noqa: E402
from zephon_ref.ops.tokenize import HashTokenizer  # noqa: E402
from zephon_ref.types import SampleRecord  # noqa: E402

pytestmark = pytest.mark.conformance

OP_CONFIGS = int(os.environ.get("ZEPHON_REF_TENSOR_OP_CONFIGS", "240"))
PIPELINE_CONFIGS = int(os.environ.get("ZEPHON_REF_TENSOR_PIPELINE_CONFIGS", "10"))
CUTS = 3
CTX = {"get_component_id": {"c0": 0, "c1": 1, "c2": 2}.__getitem__}
DTYPES = (torch.int64, torch.int32, torch.int16, torch.uint8, torch.bool, torch.float32, torch.bfloat16)
TWISTS = ("list_after", "list_first", "numpy_after", "dtype_mix", "trailing", "missing_key", "zero_dim",
          "pad_range")


# -- tensor-equal views ------------------------------------------------------------------------------
def same(a: Any, b: Any) -> bool:
    """Tensor-equal: same kind, dtype, shape and values, recursively through dicts and lists."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (type(a) is type(b) and a.dtype == b.dtype and a.shape == b.shape
                and bool(torch.equal(a.detach(), b.detach())))
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (type(a) is type(b) and a.dtype == b.dtype and a.shape == b.shape
                and bool(np.array_equal(a, b)))
    if isinstance(a, dict) or isinstance(b, dict):
        return (type(a) is type(b) and list(a) == list(b) and all(same(a[k], b[k]) for k in a))
    if isinstance(a, (list, tuple)) or isinstance(b, (list, tuple)):
        return (type(a) is type(b) and len(a) == len(b)
                and all(same(x, y) for x, y in zip(a, b, strict=True)))
    return type(a) is type(b) and bool(a == b)


def split_view(records: list[Any]) -> tuple[list[Any], list[Any]]:
    """(lineage views without payloads, payloads) of a list of records or micro-batches."""
    metas, payloads = [], []
    for item in records:
        recs = list(item.records) if hasattr(item, "records") else [item]
        for r in recs:
            metas.append(norm_record(type(r)(meta=r.meta, payload=None) if hasattr(r, "meta") else r)[:-1])
            payloads.append(r.payload)
    return metas, payloads


def outcome(fn: Any) -> Any:
    """The records, or ("raised", the exception) for the builtin kinds zephon raises."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return fn()
        except (ValueError, TypeError, RuntimeError, LookupError) as exc:
            return ("raised", exc)


def judge(mine: Any, theirs: Any, where: str) -> str:
    """'equal', 'raised' (the same builtin) or 'D-8' (zephon's KeyError / IndexError, our typed error);
    fails otherwise."""
    m_raised = isinstance(mine, tuple) and mine[0] == "raised"
    z_raised = isinstance(theirs, tuple) and theirs[0] == "raised"
    if m_raised or z_raised:
        assert m_raised and z_raised, f"{where}\nzephon_ref: {mine!r:.600}\nzephon:     {theirs!r:.600}"
        m, z = mine[1], theirs[1]
        from zephon_ref.errors import ConfigError, ConfigTypeError, ZephonRefError

        assert isinstance(m, ZephonRefError), f"{where}: untyped {m!r}"
        if isinstance(z, KeyError):  # divergence D-8: a key the first entry has, missing later
            assert isinstance(m, ConfigError) and "every key of the first" in str(m), f"{where}: {m!r}"
            return "D-8"
        if isinstance(z, IndexError):  # divergence D-8: a dict entry after a bare tensor
            assert isinstance(m, ConfigTypeError) and "dicts like the first" in str(m), f"{where}: {m!r}"
            return "D-8"
        kinds = [k for k in (ValueError, TypeError, RuntimeError) if isinstance(z, k)]
        assert kinds and all(isinstance(m, k) for k in kinds), f"{where}: zephon {z!r}, zephon_ref {m!r}"
        return "raised"
    m_meta, m_pay = split_view(mine)
    z_meta, z_pay = split_view(theirs)
    assert m_meta == z_meta, f"{where}\nzephon_ref: {m_meta!r:.900}\nzephon:     {z_meta!r:.900}"
    for i, (a, b) in enumerate(zip(m_pay, z_pay, strict=True)):
        assert same(a, b), f"{where}: record {i}\nzephon_ref: {a!r:.600}\nzephon:     {b!r:.600}"
    return "equal"


def test_the_comparison_sees_dtype_shape_and_kind() -> None:
    t = torch.tensor([1, 2])
    assert same({"a": t}, {"a": torch.tensor([1, 2])})
    assert not same(t, t.to(torch.int32))
    assert not same(t, [1, 2])
    assert not same(t, t.numpy())
    assert not same(torch.ones(2, 1), torch.ones(1, 2))
    assert not same({"a": t, "b": 1}, {"b": 1, "a": t})


# -- operator tier -----------------------------------------------------------------------------------
def draw_knobs(r: random.Random) -> dict[str, Any]:
    alg = r.choice(["first_fit", "best_fit", "wrap", "best_fit_wrap"])
    k: dict[str, Any] = {"max_length": r.choice([4, 8, 10, 16]), "algorithm": alg}
    flat = r.random() < 0.5
    if alg in ("first_fit", "best_fit"):
        k["num_bins"] = r.randint(1, 3)
    if r.random() < 0.3:
        k["max_sequences_per_bin"] = r.randint(1, 3)
    if alg == "best_fit_wrap" and r.random() < 0.7:
        k["candidate_pool_size"] = r.randint(1, 6)
    if flat:
        k["output"] = "flat"
        if alg != "wrap" or "max_sequences_per_bin" in k or r.random() < 0.3:
            k["pad_token_id"] = r.randint(0, 3)
        if r.random() < 0.3:
            k["emit_positions"] = False
    elif r.random() < 0.8:
        k["pack_payloads"] = "torch_tensor"
    return k


def _tensor(values: list[int], dtype: Any) -> Any:
    return torch.tensor(values).to(dtype) if values else torch.tensor([], dtype=dtype)


def draw_records(r: random.Random, knobs: dict[str, Any], twist: str | None) -> list[SampleRecord]:
    """Two lanes of three chunks: tensor fields of one dtype, a mask, at times a 2-D field or a scalar;
    the twist lands on one record after the first of lane 0."""
    max_length = knobs["max_length"]
    dtype = r.choice(DTYPES)
    if twist == "pad_range":
        dtype = torch.uint8
        if "pad_token_id" in knobs:
            knobs["pad_token_id"] = 300
    mask_dtype = r.choice([torch.bool, torch.int8, torch.int64])
    # a 2-D field cannot take pack_flat's 1-D pad, a scalar is no tensor to join: both refused, so rarer there
    emb = r.random() < (0.1 if knobs.get("output") == "flat" else 0.25) or twist == "trailing"
    scalar = r.random() < (0.1 if knobs.get("pack_payloads") == "torch_tensor" else 0.3)
    wrap = knobs["algorithm"] == "wrap"
    out: list[SampleRecord] = []
    for chunk in range(3):
        for lane in (0, 1):
            for off in range(r.randint(2, 5)):
                n = r.choice([1, 2, 3, r.randint(1, max_length), r.randint(max_length // 2, 2 * max_length)])
                ids = [100 + (chunk * 31 + off * 7 + i * 3) % 90 for i in range(n)]
                payload: dict[str, Any] = {"input_ids": _tensor(ids, dtype),
                                           "mask": _tensor([1 - i % 2 for i in range(n)], mask_dtype)}
                if emb:
                    payload["emb"] = torch.arange(n * 2, dtype=torch.float32).reshape(n, 2)
                if scalar:
                    payload["k"] = off
                base = rec(lane, chunk, off, payload=payload, comp=r.randint(0, 2))
                if wrap and n >= 2 and r.random() < 0.2:
                    pieces = 2
                    cut = r.randint(1, n - 1)
                    for i, (a, b) in enumerate(((0, cut), (cut, n))):
                        meta = spawn_child(base.meta, i, is_last_child=i == pieces - 1)
                        part = {f: v[a:b] if f != "k" else v for f, v in payload.items()}
                        out.append(SampleRecord(meta, part))
                else:
                    out.append(base)
    if twist is not None and twist != "pad_range":
        at = next(i for i, x in enumerate(out) if x.meta.lane_id == 0 and i > 0)
        x = out[at]
        p = dict(x.payload)
        n = int(p["input_ids"].shape[0])
        if twist == "list_after":
            p["input_ids"] = p["input_ids"].tolist()
        elif twist == "list_first":
            first = out[0]
            out[0] = SampleRecord(first.meta, {**first.payload,
                                               "input_ids": first.payload["input_ids"].tolist()})
        elif twist == "numpy_after":
            p["input_ids"] = np.array(p["input_ids"].tolist())
        elif twist == "dtype_mix":
            p["input_ids"] = p["input_ids"].to(r.choice([torch.int32, torch.float32, torch.int64]))
            p["mask"] = p["mask"].to(torch.float32)
        elif twist == "trailing":
            p["emb"] = torch.zeros(n, 3)
        elif twist == "missing_key":
            del p["mask"]
        elif twist == "zero_dim":
            p["z"] = torch.tensor(r.choice([n, 5]))
        out[at] = SampleRecord(x.meta, p)
    return out


def run_both(knobs: dict[str, Any], pushes: list[list[SampleRecord]]) -> tuple[Any, Any]:
    kw = dict(knobs)
    m = kw.pop("max_length")

    def ours() -> Any:
        op = PackSequences(m, **kw)
        op.setup(OpContext(dict(CTX)))
        return run(op, pushes, ctx=dict(CTX))

    def theirs() -> Any:
        op = ZPack(m, **kw)
        op.setup(ZOpContext(dict(CTX)))
        return run(op, to_zephon_all(pushes), ctx=dict(CTX))

    return outcome(ours), outcome(theirs)


def op_case(seed: int) -> tuple[dict[str, Any], str | None, Any, Any]:
    r = random.Random(seed)
    knobs = draw_knobs(r)
    twist = r.choice(TWISTS) if r.random() < 0.35 else None
    recs = draw_records(r, knobs, twist)
    pushes = [p for lane in (0, 1) for p in split([x for x in recs if x.meta.lane_id == lane],
                                                 sorted(r.sample(range(1, 20), 2)))]
    mine, z = run_both(knobs, pushes)
    return knobs, twist, mine, z


def test_generated_tensor_packing_matches_zephon() -> None:
    tally: dict[str, int] = {}
    seen: set[tuple[str, str]] = set()
    for seed in range(OP_CONFIGS):
        knobs, twist, mine, z = op_case(seed)
        verdict = judge(mine, z, f"seed {seed}: twist={twist} knobs={knobs}")
        tally[verdict] = tally.get(verdict, 0) + 1
        seen.add((knobs["algorithm"], knobs.get("output", knobs.get("pack_payloads", "keep_list"))))
    print(f"\n{OP_CONFIGS} tensor packing configurations against zephon 0.2.0: {sorted(tally.items())}; "
          f"{len(seen)} algorithm x output forms")
    if OP_CONFIGS >= 200:
        assert tally.get("equal", 0) >= OP_CONFIGS // 2, tally
        assert tally.get("raised", 0) > 0 and tally.get("D-8", 0) > 0, tally
        assert len(seen) == 4 * 3


def test_a_planted_tensor_bug_is_a_difference(monkeypatch: pytest.MonkeyPatch) -> None:
    """The comparison catches a pad that loses the field's dtype (planted: the pad tail as int64)."""
    import zephon_ref.ops.pack as pack_mod

    def int64_pad(value: Any, count: int, fill: int, name: str) -> Any:
        return torch.cat([value.to(torch.int64), torch.full((count,), fill, dtype=torch.int64)])

    knobs = {"max_length": 8, "algorithm": "first_fit", "num_bins": 1, "output": "flat", "pad_token_id": 0}
    ids = torch.tensor([1, 2, 3], dtype=torch.int32)
    pushes = [[rec(0, 0, i, payload={"input_ids": ids}) for i in range(3)]]
    assert judge(*run_both(knobs, pushes), "unplanted") == "equal"
    monkeypatch.setattr(pack_mod, "pad_tensor", int64_pad)
    with pytest.raises(AssertionError, match="record 0"):
        judge(*run_both(knobs, pushes), "planted")


# -- tokenize tier -----------------------------------------------------------------------------------
TOKENIZE_KNOBS = [
    {}, {"special_tokens": "tokenizer_default"}, {"special_tokens": "tokenizer_default", "padding": True},
    {"special_tokens": "none"}, {"special_tokens": "none", "add_attention_mask": False},
    {"split_long_samples": True, "max_length": 3},
    {"special_tokens": "tokenizer_default", "split_long_samples": True, "max_length": 2,
     "padding": "max_length"},
    {"padding": "max_length", "max_length": 8, "preserve_upstream_payload": True},
    {"max_length": 4, "truncation": True}, {"special_tokens": "eos", "padding": True},
]
TEXTS = ["hello how are you", "", "the cat sat on the mat ok", "zzz unknownword hi"]


def _tokenizers() -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = [("built-in", HashTokenizer(vocab_size=50))]
    if HF_AVAILABLE:
        from properties.hf_tokenizer import tiny_tokenizer

        out.append(("hf", tiny_tokenizer("plain")))
    return out


@pytest.mark.parametrize("return_tensors", [None, "pt", "np", "numpy", "tf"])
def test_tokenize_return_tensors_matches_zephon(return_tensors: str | None) -> None:
    recs = [rec(0, 0, i, payload={"text": t, "k": i}) for i, t in enumerate(TEXTS)]
    tally: dict[str, int] = {}
    for name, tok in _tokenizers():
        for knobs in TOKENIZE_KNOBS:
            kn = {**knobs, "return_tensors": return_tensors}

            def ours(kn: dict[str, Any] = kn, tok: Any = tok) -> Any:
                op = Tokenize(tok, field="text", **kn)
                op.setup(OpContext({}))
                return run(op, [recs], ctx={})

            def theirs(kn: dict[str, Any] = kn, tok: Any = tok) -> Any:
                op = ZTokenize(tok, field="text", **kn)
                op.setup(ZOpContext({}))
                return run(op, to_zephon_all([recs]), ctx={})

            verdict = judge(outcome(ours), outcome(theirs), f"{name} tokenizer, {kn}")
            tally[verdict] = tally.get(verdict, 0) + 1
    print(f"\nreturn_tensors={return_tensors!r}: {sorted(tally.items())}")
    if return_tensors in ("pt", "np"):
        assert tally.get("equal", 0) >= len(TOKENIZE_KNOBS) - 1  # the ragged batch HF refuses is "raised"


# -- pipeline tier -----------------------------------------------------------------------------------
def tensors_int32(row: Any) -> Any:
    ids = row["input_ids"]
    return {"input_ids": torch.tensor(ids, dtype=torch.int32), "mask": torch.ones(len(ids), dtype=torch.bool)}


def tensors_int64(row: Any) -> Any:
    return {"input_ids": torch.tensor(row["input_ids"], dtype=torch.int64)}


def as_text(row: Any) -> Any:
    return {"text": " ".join(f"w{t}" for t in row["input_ids"])}


TOKENIZER = HashTokenizer(vocab_size=997, offset=10)


def draw_pipeline(seed: int) -> PipelineConfig:
    r = random.Random(20_000 + seed)
    max_length = r.choice([32, 64, 96])
    alg = r.choice(["first_fit", "best_fit", "wrap", "best_fit_wrap"])
    knobs: dict[str, Any] = {"max_length": max_length, "algorithm": alg}
    if alg in ("first_fit", "best_fit"):
        knobs["num_bins"] = r.randint(1, 3)
    if alg == "best_fit_wrap":
        knobs["candidate_pool_size"] = r.randint(1, 6)
    flat = seed % 2 == 0
    if flat and alg != "wrap":
        knobs["pad_token_id"] = r.randint(0, 3)
    if not flat:
        knobs["pack_payloads"] = "torch_tensor"
    front = r.choice(["int32", "int64", "tokenize"])
    chain: list[tuple[str, dict[str, Any]]]
    if front == "tokenize":
        chain = [("map_transform", {"transform_fn": as_text}),
                 ("tokenize", {"tokenizer": TOKENIZER, "field": "text", "return_tensors": "pt",
                               "special_tokens": r.choice(["bos_eos", "none"])})]
    else:
        chain = [("map_transform", {"transform_fn": tensors_int32 if front == "int32" else tensors_int64})]
    chain.append(("pack_flat" if flat else "pack_sequences", knobs))
    if r.random() < 0.4:
        chain.append(("batch", {"microbatch_size": r.randint(1, 3)}))
    options: dict[str, Any] = {"runner": "inline", "canonical_replicas": r.randint(1, 2)}
    if r.random() < 0.5:
        options["flush_every_k_chunks"] = r.randint(1, 3)
    return PipelineConfig(chain, layout={"web": (30, 20), "code": (16,), "books": (10,)},
                          source_kwargs={"chunk_size": r.choice([4, 8]), "seed": r.randint(0, 99)},
                          options=options)


def _items(impl: str, cfg: PipelineConfig, state: Any = None) -> list[Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p = build_pipeline(impl, cfg)
        if state is not None:
            restore_any(p, state)
        return list(p)


@pytest.mark.parametrize("seed", range(PIPELINE_CONFIGS))
def test_generated_tensor_pipelines_match_zephon_and_resume_at_cuts(seed: int) -> None:
    cfg = draw_pipeline(seed)
    mine, z = _items("zephon_ref", cfg), _items("zephon", cfg)
    assert len(mine) >= 3, cfg.describe()
    assert judge(mine, z, cfg.describe()) == "equal"
    r = random.Random(seed)
    for cut in sorted(r.sample(range(1, len(mine)), min(CUTS, len(mine) - 1))):
        ours = _items("zephon_ref", cfg, checkpoint_after("zephon_ref", cfg, cut))
        assert judge(ours, mine[cut:], f"zephon_ref resume at cut {cut}\n{cfg.describe()}") == "equal"
        theirs = _items("zephon_ref", cfg, checkpoint_after("zephon", cfg, cut))
        assert judge(theirs, z[cut:], f"zephon checkpoint at cut {cut}\n{cfg.describe()}") == "equal"


def test_a_checkpoint_holds_no_tensor() -> None:
    """What a cut in the middle of open bins holds, on both: cursors and counts, never a payload."""
    cfg = PipelineConfig([("map_transform", {"transform_fn": tensors_int32}),
                          ("pack_flat", {"max_length": 64, "num_bins": 3, "pad_token_id": 0})],
                         options={"runner": "inline", "canonical_replicas": 1})

    def leaves(x: Any) -> list[Any]:
        if isinstance(x, dict):
            return [v for k in x for v in [k, *leaves(x[k])]]
        if isinstance(x, (list, tuple)):
            return [v for e in x for v in leaves(e)]
        return [x]

    for impl in ("zephon", "zephon_ref"):
        state = checkpoint_after(impl, cfg, 2)
        kinds = {type(v).__module__.split(".")[0] for v in leaves(state)}
        assert "torch" not in kinds, (impl, kinds)


def test_a_row_off_the_cpu_is_padded_on_its_device_where_zephon_refuses() -> None:
    """Divergence D-8: zephon pads a partial pack_flat row with a CPU tensor, which torch will not join
    to a tensor on another device; zephon_ref pads on the field's own device (the meta device stands
    in for a GPU)."""
    knobs = {"max_length": 8, "algorithm": "first_fit", "num_bins": 1, "output": "flat", "pad_token_id": 9}
    pushes = [[rec(0, 0, 0, payload={"input_ids": torch.tensor([1, 2, 3], device="meta")})]]
    mine, z = run_both(knobs, pushes)
    assert z[0] == "raised" and isinstance(z[1], RuntimeError) and "device" in str(z[1]), z
    (row,) = mine
    assert row.payload["input_ids"].device.type == "meta" and tuple(row.payload["input_ids"].shape) == (8,)


def _shape_view(out: Any) -> Any:
    """A record's lineage and, per field, (kind, dtype, shape) only: zephon's built-in tokenizer draws
    its ids from a salted string hash (another per process), so ids are not comparable."""
    if isinstance(out, tuple):
        return ("raised", [k.__name__ for k in (ValueError, TypeError, RuntimeError)
                           if isinstance(out[1], k)])

    def form(v: Any) -> Any:
        if not hasattr(v, "__len__"):
            return v
        return type(v).__name__, str(getattr(v, "dtype", "")), tuple(getattr(v, "shape", ())) or len(v)

    metas, payloads = split_view(out)
    return metas, [{k: form(v) for k, v in p.items()} for p in payloads]


@pytest.mark.parametrize("return_tensors", [None, "pt", "np", "numpy", "tf"])
def test_the_built_in_tokenizer_gives_zephons_kinds_dtypes_and_shapes(return_tensors: str | None) -> None:
    """tokenizer=None on both (zephon's fallback tokenizer, zephon_ref's HashTokenizer): under
    tokenizer_default the tokenizer itself builds the batch array (a ragged batch refused)."""
    recs = [rec(0, 0, i, payload={"text": t, "k": i}) for i, t in enumerate(TEXTS)]
    for knobs in TOKENIZE_KNOBS:
        kn = {**knobs, "return_tensors": return_tensors}

        def ours(kn: dict[str, Any] = kn) -> Any:
            op = Tokenize(None, field="text", **kn)
            op.setup(OpContext({}))
            return run(op, [recs], ctx={})

        def theirs(kn: dict[str, Any] = kn) -> Any:
            op = ZTokenize(None, "__fallback__", field="text", **kn)
            op.setup(ZOpContext({}))
            return run(op, to_zephon_all([recs]), ctx={})

        mine, z = outcome(ours), outcome(theirs)
        assert _shape_view(mine) == _shape_view(z), f"{kn}\nzephon_ref: {mine!r:.800}\nzephon:     {z!r:.800}"


def as_words(row: Any) -> Any:
    from properties.hf_tokenizer import WORDS

    return {"text": " ".join(WORDS[t % len(WORDS)] for t in row["input_ids"])}


@pytest.mark.skipif(not HF_AVAILABLE, reason="the hf extra (transformers, tokenizers) is not installed")
@pytest.mark.parametrize(("return_tensors", "use_fast"), [("pt", True), ("np", False), (None, None)])
def test_a_tokenizer_directory_with_return_tensors_and_use_fast_packs_like_zephon(
        tmp_path: Any, return_tensors: str | None, use_fast: bool | None) -> None:
    """The facade's path: ``tokenize(tokenizer_id=<a local directory>, use_fast=, return_tensors=)`` (the
    tiny offline HF tokenizer), then pack_flat over its arrays: every row tensor-equal to zephon's."""
    from properties.hf_tokenizer import build_tokenizer

    path = str(build_tokenizer(tmp_path / "tok"))
    cfg = PipelineConfig([("map_transform", {"transform_fn": as_words}),
                          ("tokenize", {"tokenizer_id": path, "field": "text",
                                        "return_tensors": return_tensors, "use_fast": use_fast}),
                          ("pack_flat", {"max_length": 64, "num_bins": 2, "pad_token_id": 0})],
                         options={"runner": "inline", "canonical_replicas": 1})
    mine = _items("zephon_ref", cfg)
    assert judge(mine, _items("zephon", cfg), cfg.describe()) == "equal" and len(mine) > 10
    kind = {"pt": torch.Tensor, "np": np.ndarray, None: list}[return_tensors]
    assert all(type(x.payload["input_ids"]) is kind for x in mine)


@pytest.mark.parametrize("front", [tensors_int32, tensors_int64], ids=["int32", "int64"])
@pytest.mark.parametrize("knobs", [{"max_length": 64, "num_bins": 2, "pad_token_id": 0},
                                   {"max_length": 48, "algorithm": "wrap"}], ids=["first_fit", "wrap"])
def test_tensor_rows_convert_to_the_same_training_batches(front: Any, knobs: dict[str, Any]) -> None:
    """What a framework does next: pack_flat rows of tensors, batch, to_training (labels, loss mask,
    cu_seqlens): every output tensor-equal to zephon's."""
    cfg = PipelineConfig([("map_transform", {"transform_fn": front}), ("pack_flat", knobs),
                          ("batch", {"microbatch_size": 2})])
    got = {impl: [b.to_training(return_labels=True, return_loss_mask=True, return_cu_seqlens=True)
                  for b in _items(impl, cfg)] for impl in ("zephon", "zephon_ref")}
    assert len(got["zephon"]) >= 3
    for i, (a, b) in enumerate(zip(got["zephon_ref"], got["zephon"], strict=True)):
        # "ids": zephon_ref's are SampleId named tuples, zephon's plain tuples (equal values; not a tensor
        # matter, left to the to_training work)
        a, b = {**a, "ids": [tuple(x) for x in a["ids"]]}, {**b, "ids": [tuple(x) for x in b["ids"]]}
        assert same(a, b), f"batch {i}: {[k for k in a if not same(a[k], b.get(k))]}"


def test_a_ragged_call_whose_first_row_is_empty_is_refused_where_zephon_loses_its_tokens() -> None:
    """Divergence D-103: tokenizer=None, special_tokens="tokenizer_default", return_tensors="pt", no
    padding, a call of an empty text then "hello world": torch.tensor([[], [id, id]]) is an empty (2, 0)
    tensor, so zephon 0.2.0 delivers both records with no tokens; zephon_ref refuses the call typed (a
    ConfigError that is a ValueError), as it refuses every other ragged return_tensors call."""
    from zephon_ref.errors import ConfigError

    recs = [rec(0, 0, 0, payload={"text": ""}), rec(0, 0, 1, payload={"text": "hello world"})]
    kn = {"special_tokens": "tokenizer_default", "return_tensors": "pt"}
    z = ZTokenize(None, "__fallback__", field="text", **kn)
    z.setup(ZOpContext({}))
    lost = run(z, to_zephon_all([recs]), ctx={})
    assert [tuple(r.payload["input_ids"].shape) for r in lost] == [(0,), (0,)]  # zephon: the tokens are gone
    op = Tokenize(None, field="text", **kn)
    op.setup(OpContext({}))
    with pytest.raises(ConfigError, match="rows of one length") as err:
        run(op, [recs], ctx={})
    assert isinstance(err.value, ValueError)

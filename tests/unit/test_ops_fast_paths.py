"""The faster operators (zephon_ref.fast.ops) give exactly the plain operators' answers on fixed cases
(the drawn ones: tests/properties/test_fast_ops.py)."""

from __future__ import annotations

import zlib
from typing import Any

import pytest

from properties.opkit import rec, run
from zephon_ref.fast.ops import ID_TABLE_LIMIT, FastOps
from zephon_ref.ops import HashTokenizer, Tokenize

TEXTS = [
    "a b c d e f g",
    "",
    "hello world hello",
    "one two three four five six seven eight nine",
    "b a  c\tz",
]


def crc_ids(text: str, vocab: int = 32000, offset: int = 3) -> list[int]:
    return [zlib.crc32(w.encode("utf-8")) % vocab + offset for w in text.split()]


def test_hash_tokenizer_gives_the_crc_ids_and_the_fast_tokenize_the_same_with_and_without_its_table() -> None:
    tok = HashTokenizer()
    assert [tok.encode(t) for t in TEXTS] == [crc_ids(t) for t in TEXTS]
    big = HashTokenizer(vocab_size=ID_TABLE_LIMIT + 1, offset=5)  # past ID_TABLE_LIMIT: no table, same ids
    assert [big.encode(t) for t in TEXTS] == [crc_ids(t, ID_TABLE_LIMIT + 1, 5) for t in TEXTS]
    assert big == HashTokenizer(vocab_size=ID_TABLE_LIMIT + 1, offset=5) and tok == HashTokenizer()
    small = HashTokenizer(vocab_size=50, offset=7)
    assert [small.encode(t) for t in TEXTS] == [crc_ids(t, 50, 7) for t in TEXTS]
    assert [small.word_id(w) for w in ["b", "a", "c"]] == crc_ids("b a c", 50, 7)
    recs = [rec(0, 0, i, payload={"text": t}) for i, t in enumerate(TEXTS)]
    for t in (tok, big, small):
        op = Tokenize(t, field="text", special_tokens="none")
        fast = run(FastOps().operator(op), [recs])
        assert [r.payload["input_ids"] for r in fast] == [t.encode(x) for x in TEXTS]
        assert fast[2].payload["input_ids"][0] is fast[2].payload["input_ids"][2] or t is big  # interned


class _Delegate:
    """Not a HashTokenizer, so Tokenize takes the general (HF call convention) path."""

    def __init__(self) -> None:
        self.inner = HashTokenizer()
        self.pad_token_id, self.bos_token_id, self.eos_token_id = 0, 1, 2

    def __call__(self, texts: Any, **kw: Any) -> Any:
        return self.inner(texts, **kw)


CASES: list[dict[str, Any]] = [
    {},
    {"special_tokens": "bos"},
    {"special_tokens": "eos", "add_attention_mask": False},
    {"special_tokens": "none"},
    {"max_length": 4, "truncation": True},
    {"max_length": 3, "split_long_samples": True},
    {"max_length": 5, "split_long_samples": True, "padding": "max_length"},
    {"max_length": 12, "padding": "max_length"},
    {"preserve_upstream_payload": True},
    {"special_tokens": "tokenizer_default", "max_length": 4, "truncation": True},
    {"max_length": 6, "truncation": True, "padding": "max_length", "add_attention_mask": False},
]


@pytest.mark.parametrize("knobs", CASES, ids=lambda k: "-".join(f"{v}" for v in k.values()) or "default")
def test_fast_builtin_tokenizer_path_equals_the_plain_and_the_general_paths(knobs: dict[str, Any]) -> None:
    recs = [rec(0, 0, i, payload={"text": t, "k": i}) for i, t in enumerate(TEXTS)]
    fast = run(FastOps().operator(Tokenize(HashTokenizer(), field="text", **knobs)), [recs])
    plain = run(Tokenize(HashTokenizer(), field="text", **knobs), [recs])
    general = run(Tokenize(_Delegate(), field="text", **knobs), [recs])
    assert [(r.meta, r.payload) for r in fast] == [(r.meta, r.payload) for r in plain]
    assert [(r.meta, r.payload) for r in plain] == [(r.meta, r.payload) for r in general]

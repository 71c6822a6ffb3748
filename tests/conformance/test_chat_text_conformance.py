"""decode_text, map_batch, expand_chat, tokenize_chat and tokenize over Hugging Face tokenizers
against zephon 0.2.0: the same pipelines, the same delivered items, and resumes at cuts.

Each case builds one pipeline with both libraries over the same in-memory rows (drawn from a
seeded generator: :mod:`properties.hf_tokenizer`) and compares every delivered item: lane,
cursor key, contributors with ``is_last_child`` and the *whole* payload (numpy arrays as lists
with their dtype).  zephon_ref's threads runner must give the same items; zephon_ref is checkpointed
at 3 drawn cuts and a fresh pipeline restored from each continues exactly like the uninterrupted run;
and one zephon checkpoint, translated by ``restore_zephon_state``, continues the same way
(:func:`properties.chat_conformance.check_case`).  The tokenizer cases use a tiny WordLevel
tokenizer built offline in a temporary directory: passed as an object (``tokenizer=``) and as
a directory (``tokenizer_id=``), with an untagged and a ``{% generation %}``-tagged template.

Generated configurations per run (``CASES`` each): decode_text, expand_chat + tokenize_chat,
tokenize over the HF tokenizer, map_batch; ``ZEPHON_REF_CHAT_CASES`` changes the count.
"""

from __future__ import annotations

import os
import random
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from properties.sources import zephon_available

pytestmark = [
    pytest.mark.conformance,
    pytest.mark.skipif(
        not zephon_available(), reason="zephon 0.2.0 not installed (pip install .[conformance])"
    ),
]

hf = pytest.importorskip("transformers", reason="transformers not installed (pip install .[hf])")

from properties.chat_conformance import TOK, TOK_ID, check_case, drop_odd_first, keep_all  # noqa: E402
from properties.hf_tokenizer import (  # noqa: E402
    SPECIALS,
    TAGGED_TEMPLATE,
    TEMPLATE,
    WORDS,
    build_tokenizer,
    conversations,
    texts,
)

CASES = int(os.environ.get("ZEPHON_REF_CHAT_CASES", "40"))


@pytest.fixture(scope="module")
def tokdirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tok")
    return {
        "plain": build_tokenizer(root / "plain", template=TEMPLATE),
        "tagged": build_tokenizer(root / "tagged", template=TAGGED_TEMPLATE),
    }


def draw_cases(seed: int, make: Callable[[random.Random], tuple[list[Any], dict[str, Any]]]) -> list[Any]:
    rng = random.Random(seed)
    return [make(rng) for _ in range(CASES)]


# -- decode_text ---------------------------------------------------------------------------------------


def _decode_case(rng: random.Random) -> tuple[list[Any], dict[str, Any]]:
    kw: dict[str, Any] = {"fields": rng.choice([("text",), ("text", "raw"), ("raw", "missing"), ()])}
    if rng.random() < 0.5:
        kw["lowercase"] = rng.random() < 0.5
    if rng.random() < 0.5:
        kw["normalize_newlines"] = rng.random() < 0.5
    if rng.random() < 0.4:
        kw["errors"] = rng.choice(["replace", "ignore", "backslashreplace"])
    if rng.random() < 0.3:
        kw["encoding"] = rng.choice(["latin-1", "utf-8", "ascii"])
        kw.setdefault("errors", "replace")
    chain = [("decode_text", kw)]
    if rng.random() < 0.5:
        chain.append(("batch", {"microbatch_size": rng.randint(1, 4), "drop_last": rng.random() < 0.5}))
    return chain, {"chunk_size": rng.randint(1, 6), "lanes": rng.randint(1, 3), "seed": rng.randint(0, 99)}


def _text_rows(seed: int, n: int) -> list[dict[str, Any]]:
    rows = []
    for r in texts(seed, n):
        raw = r["text"].encode("utf-8") + (b"\xff\xfe" if seed % 2 == 0 and r["id"] % 4 == 0 else b"")
        value: Any = raw if r["id"] % 3 else bytearray(raw)
        rows.append(
            {"text": r["text"].encode("utf-8") if r["id"] % 2 else r["text"], "raw": value, "id": r["id"]}
        )
    return rows


@pytest.mark.parametrize("case", range(CASES))
def test_decode_text(case: int) -> None:
    chain, kw = draw_cases(30, _decode_case)[case]
    check_case(_text_rows(case, 24), chain, **kw)


# -- expand_chat + tokenize_chat ----------------------------------------------------------------------


def _chat_case(rng: random.Random) -> tuple[list[Any], dict[str, Any]]:
    tagged = rng.random() < 0.35
    kw: dict[str, Any] = {rng.choice(["tokenizer", "tokenizer_id"]): None}
    kw = {"tokenizer": TOK} if "tokenizer" in kw else {"tokenizer_id": TOK_ID}
    if not tagged and rng.random() < 0.25:
        kw["apply_chat_template"] = False
    scope = rng.choice([None, "all_assistant", "last_span", "after_last_user"])
    if scope == "after_last_user" and kw.get("apply_chat_template") is False:
        scope = "last_span"
    if scope is not None:
        kw["loss_scope"] = scope
    if scope == "after_last_user":
        # untagged: prefix_diff by name; tagged: "auto" finds the tags (zephon's owned ranges)
        if not tagged:
            kw["span_source"] = "prefix_diff"
    elif kw.get("apply_chat_template", True) and rng.random() < 0.3:
        kw["span_source"] = "generation_tags" if tagged else "prefix_diff"
    if rng.random() < 0.4:
        kw["max_length"] = rng.randint(2, 14)
    if rng.random() < 0.3:
        kw["preserve_upstream_payload"] = True
    if rng.random() < 0.2:
        kw["mask_field_out"] = "labels_mask"
    chain: list[tuple[str, dict[str, Any]]] = []
    if rng.random() < 0.6:
        chain.append(("expand_chat", {}))
    chain.append(("tokenize_chat", kw))
    if rng.random() < 0.3:
        chain.append(("batch", {"microbatch_size": rng.randint(1, 3), "drop_last": False}))
    return chain, {
        "tagged": tagged,
        "chunk_size": rng.randint(1, 5),
        "lanes": rng.randint(1, 3),
        "seed": rng.randint(0, 99),
    }


@pytest.mark.parametrize("case", range(CASES))
def test_expand_and_tokenize_chat(case: int, tokdirs: dict[str, Path]) -> None:
    chain, kw = draw_cases(31, _chat_case)[case]
    tagged = kw.pop("tagged")
    check_case(conversations(case, 20), chain, tokdir=tokdirs["tagged" if tagged else "plain"], **kw)


def test_chat_template_override_and_loss_on_last_turn_only(tokdirs: dict[str, Path], tmp_path: Path) -> None:
    """``chat_template=`` as text and as a file path overrides the tokenizer's; the deprecated boolean."""
    path = tmp_path / "t.jinja"
    path.write_text(TAGGED_TEMPLATE)
    rows = conversations(7, 16)
    for template in (TAGGED_TEMPLATE, str(path)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            n = check_case(
                rows,
                [
                    ("expand_chat", {}),
                    (
                        "tokenize_chat",
                        {"tokenizer_id": TOK_ID, "chat_template": template, "loss_on_last_turn_only": True},
                    ),
                ],
                tokdir=tokdirs["plain"],
                chunk_size=3,
                lanes=2,
            )
        assert n > 0


# -- tokenize over an HF tokenizer ---------------------------------------------------------------------


def _tokenize_case(rng: random.Random) -> tuple[list[Any], dict[str, Any]]:
    kw: dict[str, Any] = {"field": "text"}
    kw.update({"tokenizer": TOK} if rng.random() < 0.5 else {"tokenizer_id": TOK_ID})
    mode = rng.choice(["bos_eos", "bos", "eos", "none", "tokenizer_default", None])
    if mode is not None:
        kw["special_tokens"] = mode
    if mode in ("bos_eos", "bos", "eos", None) and rng.random() < 0.4:
        kw["bos_token_id" if mode in ("bos_eos", "bos", None) else "eos_token_id"] = rng.randint(7, 20)
    shape = rng.choice(["plain", "split", "truncate", "pad", "longest"])
    if shape == "split":
        kw.update(split_long_samples=True, max_length=rng.randint(1, 6))
        if rng.random() < 0.5:
            kw["padding"] = rng.choice(["max_length", True])
    elif shape == "truncate":
        kw.update(truncation=True, max_length=rng.randint(3, 8))
    elif shape == "pad":
        kw.update(padding="max_length", max_length=rng.randint(1, 10))
    elif shape == "longest":
        kw["padding"] = rng.choice([True, "longest"])
    if rng.random() < 0.3:
        kw["add_attention_mask"] = False
    if rng.random() < 0.3:
        kw["preserve_upstream_payload"] = True
    chain: list[tuple[str, dict[str, Any]]] = [("tokenize", kw)]
    if rng.random() < 0.4:
        chain.append(("batch", {"microbatch_size": rng.randint(1, 3), "drop_last": rng.random() < 0.5}))
    return chain, {"chunk_size": rng.randint(1, 6), "lanes": rng.randint(1, 3), "seed": rng.randint(0, 99)}


@pytest.mark.parametrize("case", range(CASES))
def test_tokenize_with_hf_tokenizer(case: int, tokdirs: dict[str, Path]) -> None:
    chain, kw = draw_cases(32, _tokenize_case)[case]
    check_case(texts(case, 20), chain, tokdir=tokdirs["plain"], **kw)


# -- map_batch -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", range(CASES))
def test_map_batch(case: int) -> None:
    rng = random.Random(1000 + case)
    fn = rng.choice([drop_odd_first, keep_all])
    chain = [
        ("decode_text", {}),
        ("batch", {"microbatch_size": rng.randint(1, 4), "drop_last": rng.random() < 0.5}),
        ("map_batch", {"transform_fn": fn, "drop_none": rng.random() < 0.7}),
    ]
    if rng.random() < 0.3:
        chain.append(("map_batch", {"transform_fn": keep_all}))
    check_case(
        _text_rows(case, 24),
        chain,
        chunk_size=rng.randint(1, 5),
        lanes=rng.randint(1, 3),
        seed=rng.randint(0, 99),
    )


#: a template reading a static argument, per-record tools and per-record enable_thinking
CONTEXT_TEMPLATE = (
    "{% if greeting %}<|system|> {{ greeting }} </s> {% endif %}"
    "{% if tools %}<|system|> {{ tools | map(attribute='name') | join(' ') }} </s> {% endif %}"
    "{% for m in messages %}<|{{ m['role'] }}|> {% if enable_thinking and m['role'] == 'assistant' %}"
    "yes {% endif %}{{ m['content'] }} </s> {% endfor %}{% if add_generation_prompt %}<|assistant|> "
    "{% if enable_thinking %}yes {% endif %}{% endif %}"
)


@pytest.mark.parametrize("fields", [{}, {"tools_field": "ctx.tools", "enable_thinking_field": "ctx.think"}])
def test_template_kwargs_tools_and_thinking(tokdirs: dict[str, Path], fields: dict[str, str]) -> None:
    """``chat_template_kwargs`` reach every render; ``tools_field`` / ``enable_thinking_field`` pick
    per-record values (absent or None: not passed)."""
    rows = conversations(11, 18)
    for i, r in enumerate(rows):
        tools, think = (
            ([{"name": "cat"}, {"name": "dog"}] if i % 3 == 0 else None),
            (i % 2 == 0 if i % 5 else None),
        )
        if fields:
            r["ctx"] = {"tools": tools, "think": think}
        else:
            r["tools"], r["enable_thinking"] = tools, think
    for kwargs in ({"greeting": "hello"}, None):
        n = check_case(
            rows,
            [
                ("expand_chat", {}),
                (
                    "tokenize_chat",
                    {
                        "tokenizer": TOK,
                        "chat_template": CONTEXT_TEMPLATE,
                        "chat_template_kwargs": kwargs,
                        "preserve_upstream_payload": True,
                        **fields,
                    },
                ),
            ],
            tokdir=tokdirs["plain"],
            chunk_size=4,
            lanes=2,
        )
        assert n > 0
    # the arguments reached the renders: the greeting opens every conversation, tools and thinking some
    from properties.chat_conformance import build, items_of

    chain = [
        (
            "tokenize_chat",
            {
                "tokenizer": TOK,
                "chat_template": CONTEXT_TEMPLATE,
                "chat_template_kwargs": {"greeting": "hello"},
                **fields,
            },
        )
    ]
    got = [
        r[3]["input_ids"][2][1]
        for item in items_of(
            build("zephon_ref", rows, chain, tokdir=tokdirs["plain"], chunk_size=4, lanes=1, seed=0)
        )
        for r in item
    ]
    vocab = {t: i for i, t in enumerate(SPECIALS + WORDS)}
    assert got and set(got) == {vocab["hello"]}

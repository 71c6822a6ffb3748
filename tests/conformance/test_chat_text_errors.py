"""Bad values for decode_text, map_batch, expand_chat, tokenize_chat and tokenize's tokenizer paths:
zephon 0.2.0 refuses each (at the call or at its first batch), and zephon_ref refuses it with a
subclass of the same builtin (at the builder call where it can), changing nothing."""

from __future__ import annotations

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

pytest.importorskip("transformers", reason="transformers not installed (pip install .[hf])")

from properties.chat_conformance import TOK, TOK_ID, build, check_case, keep_all  # noqa: E402
from properties.hf_tokenizer import TEMPLATE, build_tokenizer, conversations, texts  # noqa: E402
from zephon_ref.errors import ZephonRefError  # noqa: E402


@pytest.fixture(scope="module")
def tokdirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tokerr")
    return {
        "plain": build_tokenizer(root / "plain", template=TEMPLATE),
        "none": build_tokenizer(root / "none", template=None),
    }


BAD_BYTES = [{"text": b"ok \xff\xfe", "id": 0}, {"text": "fine", "id": 1}]
CHATS = conversations(3, 8)
# (id, rows, chain, tokenizer directory)
CASES: list[tuple[str, list[Any], list[tuple[str, dict[str, Any]]], str | None]] = [
    ("decode-unknown-encoding", BAD_BYTES, [("decode_text", {"encoding": "no-such-codec"})], None),
    ("decode-unknown-errors", BAD_BYTES, [("decode_text", {"errors": "no-such-handler"})], None),
    ("decode-strict-bad-bytes", BAD_BYTES, [("decode_text", {})], None),
    ("decode-non-mapping", ["just text", "more"], [("decode_text", {})], None),
    ("map-batch-before-batch", BAD_BYTES[1:] * 3, [("map_batch", {"transform_fn": keep_all})], None),
    (
        "map-batch-not-callable",
        BAD_BYTES[1:] * 3,
        [("batch", {"microbatch_size": 1}), ("map_batch", {"transform_fn": 3})],
        None,
    ),
    ("expand-empty-key", CHATS, [("expand_chat", {"field": "a..b"})], None),
    ("expand-empty-field", CHATS, [("expand_chat", {"field": ""})], None),
    ("expand-missing-field", CHATS, [("expand_chat", {"field": "chat"})], None),
    ("expand-not-a-list", [{"messages": "hello"}] * 3, [("expand_chat", {})], None),
    ("expand-no-role", [{"messages": [{"content": "hi"}]}] * 3, [("expand_chat", {})], None),
    ("chat-no-tokenizer", CHATS, [("tokenize_chat", {})], None),
    ("chat-not-a-tokenizer", CHATS, [("tokenize_chat", {"tokenizer": 3})], None),
    ("chat-max-length-1", CHATS, [("tokenize_chat", {"tokenizer": TOK, "max_length": 1})], "plain"),
    (
        "chat-bad-loss-scope",
        CHATS,
        [("tokenize_chat", {"tokenizer": TOK, "loss_scope": "everything"})],
        "plain",
    ),
    (
        "chat-scope-and-bool",
        CHATS,
        [("tokenize_chat", {"tokenizer": TOK, "loss_scope": "last_span", "loss_on_last_turn_only": True})],
        "plain",
    ),
    (
        "chat-bool-not-bool",
        CHATS,
        [("tokenize_chat", {"tokenizer": TOK, "loss_on_last_turn_only": 1})],
        "plain",
    ),
    ("chat-bad-span-source", CHATS, [("tokenize_chat", {"tokenizer": TOK, "span_source": "magic"})], "plain"),
    (
        "chat-no-template-span",
        CHATS,
        [("tokenize_chat", {"tokenizer": TOK, "apply_chat_template": False, "span_source": "prefix_diff"})],
        "plain",
    ),
    (
        "chat-mask-is-input-ids",
        CHATS,
        [("tokenize_chat", {"tokenizer": TOK, "mask_field_out": "input_ids"})],
        "plain",
    ),
    (
        "chat-reserved-kwarg",
        CHATS,
        [("tokenize_chat", {"tokenizer": TOK, "chat_template_kwargs": {"tools": []}})],
        "plain",
    ),
    ("chat-eos-with-object", CHATS, [("tokenize_chat", {"tokenizer": TOK, "eos_token": "</s>"})], "plain"),
    (
        "chat-tags-untagged",
        CHATS,
        [("tokenize_chat", {"tokenizer": TOK, "span_source": "generation_tags"})],
        "plain",
    ),
    (
        "chat-after-last-user-auto",
        CHATS,
        [("tokenize_chat", {"tokenizer_id": TOK_ID, "loss_scope": "after_last_user"})],
        "plain",
    ),
    ("chat-no-template", CHATS, [("tokenize_chat", {"tokenizer_id": TOK_ID})], "none"),
    ("chat-missing-field", CHATS, [("tokenize_chat", {"tokenizer": TOK, "field": "chat"})], "plain"),
    (
        "chat-first-token-supervised",
        [{"messages": [{"role": "assistant", "content": "hi"}]}] * 3,
        [("tokenize_chat", {"tokenizer": TOK, "apply_chat_template": False})],
        "plain",
    ),
    (
        "tokenize-split-no-max",
        texts(0, 4),
        [("tokenize", {"field": "text", "tokenizer": TOK, "split_long_samples": True})],
        "plain",
    ),
    (
        "tokenize-split-and-truncate",
        texts(0, 4),
        [
            (
                "tokenize",
                {
                    "field": "text",
                    "tokenizer_id": TOK_ID,
                    "split_long_samples": True,
                    "truncation": True,
                    "max_length": 4,
                },
            )
        ],
        "plain",
    ),
    (
        "tokenize-bos-under-none",
        texts(0, 4),
        [("tokenize", {"field": "text", "tokenizer": TOK, "special_tokens": "none", "bos_token_id": 1})],
        "plain",
    ),
]


@pytest.mark.parametrize(("rows", "chain", "tok"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_refused_with_zephons_builtin(
    rows: list[Any], chain: list[Any], tok: str | None, tokdirs: dict[str, Path]
) -> None:
    assert check_case(rows, chain, tokdir=None if tok is None else tokdirs[tok], chunk_size=2) == -1, (
        "zephon accepted it"
    )


#: refused by zephon_ref at the call, accepted by zephon 0.2.0 (docs/divergences.md)
ONLY_HERE: list[tuple[str, list[Any], list[tuple[str, dict[str, Any]]], str | None]] = [
    (
        "tokenize-bad-padding",
        texts(0, 4),
        [("tokenize", {"field": "text", "tokenizer": TOK, "padding": "sideways"})],
        "plain",
    ),
    ("decode-fields-str", BAD_BYTES, [("decode_text", {"fields": "text"})], None),
]
AT_THE_CALL = [
    c
    for c in CASES
    if not c[0].startswith(
        (
            "decode-strict",
            "decode-non",
            "expand-missing",
            "expand-not",
            "expand-no-role",
            "chat-missing",
            "chat-first",
        )
    )
] + ONLY_HERE


@pytest.mark.parametrize(
    ("rows", "chain", "tok"), [c[1:] for c in AT_THE_CALL], ids=[c[0] for c in AT_THE_CALL]
)
def test_configuration_refused_at_the_builder_call(
    rows: list[Any], chain: list[Any], tok: str | None, tokdirs: dict[str, Path]
) -> None:
    """Bad knobs are refused at the call (zephon refuses several only at its first batch), with a
    ZephonRefError, and the pipeline keeps its operators."""
    from zephon_ref.pipeline import Pipeline

    head, last = chain[:-1], chain[-1]
    p = build(
        "zephon_ref", rows, head, tokdir=None if tok is None else tokdirs[tok], chunk_size=2, lanes=1, seed=0
    )
    assert isinstance(p, Pipeline)
    before = list(p._ops)
    kw = dict(last[1])
    for k, v in list(kw.items()):
        if v == TOK:
            import transformers

            kw[k] = transformers.AutoTokenizer.from_pretrained(
                str(tokdirs[tok or "plain"]), local_files_only=True
            )
        elif v == TOK_ID:
            kw[k] = str(tokdirs[tok or "plain"])
    with pytest.raises(ZephonRefError):
        getattr(p, last[0])(**kw)
    assert p._ops == before


def test_tokenizer_id_is_a_local_directory(tmp_path: Path) -> None:
    """A hub id or a missing directory is refused (nothing is downloaded): ConfigError, a ValueError."""
    from zephon_ref.errors import ConfigError
    from zephon_ref.pipeline import Pipeline

    p = build("zephon_ref", texts(0, 4), [], tokdir=None, chunk_size=2, lanes=1, seed=0)
    assert isinstance(p, Pipeline)
    for bad in ("gpt2", str(tmp_path / "absent"), str(tmp_path)):
        with pytest.raises(ConfigError, match="tokenizer_id"):
            p.tokenize(tokenizer_id=bad, field="text")
        with pytest.raises(ConfigError, match="tokenizer_id"):
            p.tokenize_chat(tokenizer_id=bad)
    assert p._ops == []


@pytest.mark.parametrize("method", ["decode_text", "map_batch", "expand_chat", "tokenize_chat", "tokenize"])
def test_parameters_are_zephons_in_order(method: str) -> None:
    """Code that introspects the builder (or passes arguments by position) sees zephon's parameters."""
    import inspect

    import zephon

    from zephon_ref.pipeline import Pipeline

    theirs = inspect.signature(getattr(zephon.Pipeline, method)).parameters
    ours = inspect.signature(getattr(Pipeline, method)).parameters
    assert [(n, p.kind) for n, p in ours.items()] == [(n, p.kind) for n, p in theirs.items()]
    assert {n: p.default for n, p in ours.items()} == {n: p.default for n, p in theirs.items()}

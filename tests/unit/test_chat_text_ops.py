"""decode_text, map_batch, expand_chat and tokenize_chat on hand-checked inputs (no zephon needed).

The tokenize_chat cases use the tiny offline tokenizer of properties/hf_tokenizer.py and skip,
saying so, when transformers (the ``hf`` extra) is not installed.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest

from properties.hf_tokenizer import SPECIALS, TAGGED_TEMPLATE, TEMPLATE, WORDS, build_tokenizer
from properties.opkit import rec
from zephon_ref.errors import ConfigError, PayloadError, PayloadTypeError
from zephon_ref.ops.decode_text import DecodeText, DecodeTextConfig
from zephon_ref.ops.expand_chat import ExpandChat, ExpandChatConfig
from zephon_ref.ops.knobs import domains, knob_values
from zephon_ref.ops.map_batch import MapBatch, MapBatchConfig
from zephon_ref.ops.tokenize import TokenizeConfig
from zephon_ref.ops.tokenize_chat import TokenizeChatConfig, last_span_only, mask_from_spans
from zephon_ref.pipeline import Pipeline
from zephon_ref.types import SampleBatch
from zephon_ref.work import Dataset, InMemoryShard, StaticMixtureWorkSource

U, A, S = "user", "assistant", "system"


def msgs(*pairs: tuple[str, str]) -> dict[str, Any]:
    return {"messages": [{"role": r, "content": c} for r, c in pairs], "keep": 1}


def test_decode_text_decodes_normalises_and_lowercases_named_fields_only() -> None:
    op = DecodeText(("a", "b", "absent"), lowercase=True)
    r = rec(0, 0, 0, payload={"a": b"X\r\nY\rZ", "b": bytearray(b"Q"), "c": b"raw"})
    (out,) = op.process_many([r])
    assert out.payload == {"a": "x\ny\nz", "b": "q", "c": b"raw"}
    assert r.payload["a"] == b"X\r\nY\rZ"  # the input record is not changed
    (keep,) = DecodeText(normalize_newlines=False, errors="replace").process_many(
        [rec(0, 0, 1, payload={"text": b"a\r\n\xff"})]
    )
    assert keep.payload == {"text": "a\r\n\ufffd"}
    with pytest.raises(PayloadTypeError):
        DecodeText().process_many([rec(0, 0, 2, payload="text")])
    with pytest.raises(ConfigError):
        DecodeText(encoding="no-such-codec")
    with pytest.raises(LookupError):
        DecodeText(errors="no-such-handler")


def test_expand_chat_children_carry_the_query_ordinals_and_only_the_last_closes() -> None:
    payload = msgs((S, "s"), (U, "q0"), (A, "a0"), (U, "q1"), (U, "q2"), (A, "a2"), (U, "q3"))
    out = ExpandChat().process_many([rec(0, 0, 0, payload=payload)])
    assert [r.meta.lineage for r in out] == [(0,), (2,)]  # q1 is unanswered: a gap
    assert [[ref.is_last_child for ref in r.meta.contribution_refs()] for r in out] == [[False], [True]]
    assert [len(r.payload["messages"]) for r in out] == [3, 6]  # q3 is cut from the last prefix
    assert all(r.payload["keep"] == 1 for r in out)
    out[0].payload["messages"][0]["content"] = "changed"
    assert out[1].payload["messages"][0]["content"] == "s"  # siblings share nothing
    (sole,) = ExpandChat().process_many([rec(0, 0, 1, payload=msgs((U, "q"), (A, ""), (U, "more")))])
    assert sole.meta.lineage == () and len(sole.payload["messages"]) == 2
    (tomb,) = ExpandChat().process_many([rec(0, 0, 2, payload=msgs((A, "hi"), (U, "q")))])
    assert tomb.meta.tombstone
    nested = {"chat": {"messages": payload["messages"], "x": 2}}
    two = ExpandChat(field="chat.messages").process_many([rec(0, 0, 3, payload=nested)])
    assert [len(r.payload["chat"]["messages"]) for r in two] == [3, 6] and two[0].payload["chat"]["x"] == 2
    with pytest.raises(PayloadError):
        ExpandChat().process_many([rec(0, 0, 4, payload={"messages": [{"content": "no role"}]})])
    with pytest.raises(ConfigError):
        ExpandChat(field="a..b")


def test_map_batch_drops_with_tombstones_and_every_chunk_still_evicts() -> None:
    rows = [{"text": f"row {i}"} for i in range(12)]
    src = StaticMixtureWorkSource(
        [Dataset.from_dict("d", {0: InMemoryShard(rows)})], {"d": 1.0}, chunk_size=3
    )
    kept = []

    def every_other(b: SampleBatch) -> SampleBatch | None:
        return b if b.records[0].meta.chunk_offset % 2 == 0 else None

    p = Pipeline(src).decode_text().batch(2, drop_last=False).map_batch(every_other).options(runner="inline")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        kept = list(p)
        state = p.checkpoint()
    assert kept and all(isinstance(b, SampleBatch) for b in kept)
    assert all(b.records[0].meta.chunk_offset % 2 == 0 for b in kept)
    assert all(not chunks for chunks in state["inflight"].values())  # dropped batches closed their offsets
    assert set(p.inflight_summary().values()) == {0}
    with pytest.raises(ConfigError, match="batch"):
        Pipeline(src).map_batch(every_other)
    with pytest.raises(ConfigError, match="before batch"):
        Pipeline(src).batch(2).map_transform(lambda x: x)
    p2 = Pipeline(src).batch(2).map_batch(lambda b: {"not": "a batch"}).options(runner="inline")
    with pytest.raises(PayloadTypeError):
        list(p2)


def test_spans_to_masks_and_last_span() -> None:
    assert mask_from_spans([(0, 3), (4, 6), (5, 5), (8, 9)], [(5, 8)]) == [0, 1, 0, 0]
    assert last_span_only([0, 1, 1, 0, 1, 1, 0]) == [0, 0, 0, 0, 1, 1, 0]
    assert last_span_only([0, 0]) == [0, 0]


def test_every_config_declares_a_domain_for_each_knob() -> None:
    for cfg in (DecodeTextConfig, ExpandChatConfig, MapBatchConfig, TokenizeChatConfig, TokenizeConfig):
        assert domains(cfg), cfg
    assert knob_values(DecodeTextConfig()) == {
        "fields": "a tuple of field names",
        "encoding": "text",
        "errors": "text",
        "normalize_newlines": "True",
        "lowercase": "False",
        "max_batch": "above minimum",
    }
    assert knob_values(MapBatch(lambda b: b).config)["transform_fn"] == "callable"


# -- tokenize_chat over the offline tokenizer ------------------------------------------------------------


@pytest.fixture(scope="module")
def tokdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("transformers", reason="transformers not installed (pip install .[hf])")
    return build_tokenizer(tmp_path_factory.mktemp("tok") / "t", template=TEMPLATE)


def ids(*words: str) -> list[int]:
    vocab = {t: i for i, t in enumerate(SPECIALS + WORDS)}
    return [vocab[w] for w in words]


def chat_stream(tokdir: Path, rows: list[dict[str, Any]], **kw: Any) -> list[Any]:
    src = StaticMixtureWorkSource(
        [Dataset.from_dict("d", {0: InMemoryShard(rows)})], {"d": 1.0}, chunk_size=len(rows)
    )
    p = Pipeline(src).tokenize_chat(tokenizer_id=str(tokdir), **kw).options(runner="inline")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return [
            (r.payload["input_ids"].tolist(), r.payload[kw.get("mask_field_out", "loss_mask")].tolist())
            for r in p
        ]


def test_prefix_diff_supervises_assistant_content_and_its_eos(tokdir: Path) -> None:
    row = msgs((U, "hello"), (A, "hi you"), (U, "bye"), (A, "ok"))
    full = ids(
        "<|user|>",
        "hello",
        "</s>",
        "<|assistant|>",
        "hi",
        "you",
        "</s>",
        "<|user|>",
        "bye",
        "</s>",
        "<|assistant|>",
        "ok",
        "</s>",
    )
    assert chat_stream(tokdir, [row]) == [(full, [0, 0, 0, 0, 1, 1, 1, 0, 0, 0, 0, 1, 1])]
    assert chat_stream(tokdir, [row], loss_scope="last_span") == [(full, [0] * 11 + [1, 1])]
    assert chat_stream(tokdir, [row], loss_scope="after_last_user", span_source="prefix_diff") == [
        (full, [0] * 11 + [1, 1])
    ]
    (cut,) = chat_stream(tokdir, [row], max_length=6)
    assert cut == (full[:6], [0, 0, 0, 0, 1, 1])
    # the tagged template's own assistant mask marks the same tokens
    (tagged,) = chat_stream(tokdir, [row], chat_template=TAGGED_TEMPLATE)
    assert tagged == (full, [0, 0, 0, 0, 1, 1, 1, 0, 0, 0, 0, 1, 1])


def test_after_last_user_over_generation_tags_supervises_owned_ranges_after_the_last_user(
    tokdir: Path,
) -> None:
    """zephon's owned ranges: only the assistants after the last user carry the loss (both, when two
    follow it); no user or no assistant after it: nothing supervised, the record dropped; a record
    whose selected content the template omits is dropped; one failing its structure check raises."""
    kw: dict[str, Any] = {"chat_template": TAGGED_TEMPLATE, "loss_scope": "after_last_user"}
    row = msgs((U, "hello"), (A, "hi you"), (U, "bye"), (A, "ok"), (A, "fine"))
    full = ids(
        "<|user|>", "hello", "</s>", "<|assistant|>", "hi", "you", "</s>",
        "<|user|>", "bye", "</s>", "<|assistant|>", "ok", "</s>", "<|assistant|>", "fine", "</s>",
    )  # fmt: skip
    want = [0] * 11 + [1, 1, 0, 1, 1]
    assert chat_stream(tokdir, [row], **kw) == [(full, want)]
    assert chat_stream(tokdir, [row], span_source="generation_tags", **kw) == [(full, want)]
    # all_assistant over the same tags keeps every assistant (the tokenizer's own mask)
    assert chat_stream(tokdir, [row], chat_template=TAGGED_TEMPLATE) == [
        (full, [0, 0, 0, 0, 1, 1, 1, 0, 0, 0, 0] + want[11:])
    ]
    (cut,) = chat_stream(tokdir, [row], max_length=12, **kw)
    assert cut == (full[:12], want[:12])
    unsupervised = [msgs((U, "hello"), (A, "hi"), (U, "bye")), msgs((S, "yes"), (A, "fine"))]
    assert chat_stream(tokdir, unsupervised + [row], **kw) == [(full, want)]
    skipping = TAGGED_TEMPLATE.replace(
        "{{ m['content'] }} </s>{% endgeneration %}",
        "{% if not m.get('skip') %}{{ m['content'] }} {% endif %}</s>{% endgeneration %}",
    )
    assert skipping != TAGGED_TEMPLATE
    skipped = {"messages": [{"role": U, "content": "hi"}, {"role": A, "content": "ok", "skip": True}]}
    assert chat_stream(tokdir, [skipped, row], **{**kw, "chat_template": skipping}) == [(full, want)]
    from zephon_ref.ops.chat_ownership import TemplateVerificationError

    with pytest.raises(TemplateVerificationError, match="CHAT_TEMPLATE_INVALID"):
        chat_stream(tokdir, [msgs((U, "hello"), (A, ""))], **kw)  # a range starting at a space


def test_an_owned_range_operator_copies_and_pickles(tokdir: Path) -> None:
    """The compiled owned-range template is rebuilt from its text by a copy or a pickle (a spawned
    worker gets a working operator with the same output)."""
    import copy
    import pickle

    import transformers

    from zephon_ref.ops.tokenize_chat import TokenizeChat

    tok = transformers.AutoTokenizer.from_pretrained(str(tokdir), local_files_only=True)
    op = TokenizeChat(tok, chat_template=TAGGED_TEMPLATE, loss_scope="after_last_user")
    row = msgs((U, "hello"), (A, "hi"), (U, "bye"), (A, "ok"))
    want = op.ids_and_mask(row, "s")
    assert want[1] == [0] * 10 + [1, 1]
    for other in (copy.deepcopy(op), pickle.loads(pickle.dumps(op))):
        assert other._owned is not op._owned and other.ids_and_mask(row, "s") == want


def test_unsupervised_and_tiny_conversations_are_dropped(tokdir: Path) -> None:
    rows = [msgs((U, "hello")), {"messages": []}, msgs((U, "hi"), (A, "yes"))]
    assert [len(i) for i, _ in chat_stream(tokdir, rows)] == [6]


def test_tokenize_chat_refusals_at_the_call(tokdir: Path) -> None:
    src = StaticMixtureWorkSource(
        [Dataset.from_dict("d", {0: InMemoryShard([msgs((U, "hi"))])})], {"d": 1.0}, chunk_size=1
    )
    import transformers

    tok = transformers.AutoTokenizer.from_pretrained(str(tokdir), local_files_only=True)
    p = Pipeline(src)
    for kw in (
        {"max_length": 1},
        {"loss_scope": "x"},
        {"span_source": "generation_tags"},
        # a generation block zephon cannot attribute to a message (outside every loop)
        {
            "chat_template": "{% generation %}x{% endgeneration %}" + TAGGED_TEMPLATE,
            "loss_scope": "after_last_user",
        },
        {"chat_template_kwargs": {"tools": []}},
        {"mask_field_out": "input_ids"},
    ):
        with pytest.raises(ConfigError):
            p.tokenize_chat(tok, **kw)
    assert p._ops == []

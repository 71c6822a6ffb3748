"""``tokenize_chat(loss_scope="after_last_user")`` over ``{% generation %}``-tagged templates against
zephon 0.2.0: zephon's owned generation ranges (each block attributed to its input message, a
structure check per record, setup probes), stream for stream, resumed at cuts.

Each generated case draws a tagged template (five, below), conversations (system turns,
assistant turns before and after the last user, several assistants in a row, no user, empty
content, text parts, a ``skip`` flag one template obeys by omitting the content, which zephon
drops the record for) and the knobs (tokenizer object or directory, ``span_source`` "auto" or
"generation_tags", ``max_length``, ``preserve_upstream_payload``, ``mask_field_out``, an
``expand_chat`` before and a ``batch`` after) and runs :func:`properties.chat_conformance.check_case`:
the same delivered items as zephon (or a refusal with the same builtin), the threads runner
alike, zephon_ref resumed at 3 cuts equal to the uninterrupted run, and a zephon checkpoint
continued.  ``ZEPHON_REF_OWNED_CASES`` sets the count (default 40).

Conversations whose assistant text has leading or trailing whitespace are not drawn: there
zephon's verdict depends on its process-wide verification cache (docs/divergences.md, D-19).
"""

from __future__ import annotations

import os
import random
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

from properties.chat_conformance import TOK, TOK_ID, build, check_case  # noqa: E402
from properties.hf_tokenizer import TAGGED_TEMPLATE, WORDS, build_tokenizer  # noqa: E402
from zephon_ref.errors import ZephonRefError  # noqa: E402

CASES = int(os.environ.get("ZEPHON_REF_OWNED_CASES", "40"))

#: the EOS right after the content inside the block: an empty assistant keeps a supervised EOS
TIGHT = (
    "{% for m in messages %}{% if m['role'] == 'assistant' %}<|assistant|> "
    "{% generation %}{{ m['content'] }}</s>{% endgeneration %} "
    "{% else %}<|{{ m['role'] }}|> {{ m['content'] }} </s> {% endif %}{% endfor %}"
)
#: a BOS, text parts joined inside the block (a loop inside the block), a system default
PARTS = (
    "<s> {% if messages[0]['role'] != 'system' %}<|system|> hi </s> {% endif %}"
    "{% for m in messages %}{% if m['role'] == 'assistant' %}<|assistant|> {% generation %}"
    "{% if m['content'] is string %}{{ m['content'] }}{% else %}{% for p in m['content'] %}"
    "{{ p['text'] }} {% endfor %}{% endif %}</s>{% endgeneration %} "
    "{% else %}<|{{ m['role'] }}|> {% if m['content'] is string %}{{ m['content'] }}"
    "{% else %}{% for p in m['content'] %}{{ p['text'] }} {% endfor %}{% endif %} </s> {% endif %}"
    "{% endfor %}"
)
#: omits the content of an assistant marked ``skip`` (zephon drops such a record when selected)
SKIPPING = (
    "{% for m in messages %}{% if m['role'] == 'assistant' %}<|assistant|> {% generation %}"
    "{% if not m.get('skip') %}{{ m['content'] }}{% endif %}</s>{% endgeneration %} "
    "{% else %}<|{{ m['role'] }}|> {{ m['content'] }} </s> {% endif %}{% endfor %}"
)
#: only the content inside the block: an empty assistant renders an empty range at a space, where
#: zephon's endpoint rule stops mapping (and its mask-parity check refuses a later range)
BARE = (
    "{% for m in messages %}{% if m['role'] == 'assistant' %}<|assistant|> {% generation %}"
    "{{ m['content'] }}{% endgeneration %} </s> {% else %}<|{{ m['role'] }}|> {{ m['content'] }} </s> "
    "{% endif %}{% endfor %}"
)
TEMPLATES = {"tagged": TAGGED_TEMPLATE, "tight": TIGHT, "parts": PARTS, "skipping": SKIPPING, "bare": BARE}


@pytest.fixture(scope="module")
def tokdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tokenizer(tmp_path_factory.mktemp("owned") / "tagged", template=TAGGED_TEMPLATE)


def _text(rng: random.Random, lo: int, hi: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi)))


def chats(rng: random.Random, n: int, *, empty: bool, parts: bool, skip: bool) -> list[dict[str, Any]]:
    """``n`` conversations of the shapes in the module docstring."""
    rows = []
    for i in range(n):
        msgs: list[dict[str, Any]] = []
        if rng.random() < 0.3:
            msgs.append({"role": "system", "content": _text(rng, 1, 3)})
        for _ in range(rng.randint(0, 3)):
            if rng.random() < 0.85:
                msgs.append({"role": "user", "content": _text(rng, 1, 4)})
            for _ in range(rng.choice([0, 1, 1, 1, 2])):
                m: dict[str, Any] = {"role": "assistant", "content": _text(rng, 0 if empty else 1, 4)}
                if parts and rng.random() < 0.3 and m["content"]:
                    m["content"] = [{"type": "text", "text": w} for w in m["content"].split(" ")]
                if skip and rng.random() < 0.2:
                    m["skip"] = True
                msgs.append(m)
            if rng.random() < 0.15:
                msgs.append({"role": "tool", "content": _text(rng, 1, 2)})
        rows.append({"messages": msgs, "meta": i})
    return rows


def draw(case: int) -> tuple[list[dict[str, Any]], list[tuple[str, dict[str, Any]]], dict[str, Any]]:
    rng = random.Random(7919 * case + 19)
    name = rng.choice(sorted(TEMPLATES))
    kw: dict[str, Any] = {"tokenizer": TOK} if rng.random() < 0.5 else {"tokenizer_id": TOK_ID}
    kw.update(chat_template=TEMPLATES[name], loss_scope="after_last_user")
    if rng.random() < 0.4:
        kw["span_source"] = "generation_tags"
    if rng.random() < 0.35:
        kw["max_length"] = rng.randint(2, 16)
    if rng.random() < 0.3:
        kw["preserve_upstream_payload"] = True
    if rng.random() < 0.2:
        kw["mask_field_out"] = "labels_mask"
    chain: list[tuple[str, dict[str, Any]]] = []
    if rng.random() < 0.3:
        chain.append(("expand_chat", {}))
    chain.append(("tokenize_chat", kw))
    if rng.random() < 0.3:
        chain.append(("batch", {"microbatch_size": rng.randint(1, 3), "drop_last": False}))
    rows = chats(
        rng,
        rng.randint(8, 20),
        # empty assistant text fails zephon's mask-parity check under TAGGED_TEMPLATE (a range that
        # starts at a space): drawn now and then there, often under the others
        empty=rng.random() < (0.15 if name == "tagged" else 0.6),
        parts=name == "parts",
        skip=name == "skipping",
    )
    shape = {"chunk_size": rng.randint(1, 5), "lanes": rng.randint(1, 3), "seed": rng.randint(0, 99)}
    return rows, chain, shape


@pytest.mark.parametrize("case", range(CASES))
def test_after_last_user_over_generation_tags(case: int, tokdir: Path) -> None:
    rows, chain, kw = draw(case)
    check_case(rows, chain, tokdir=tokdir, **kw)


def test_the_cases_deliver_and_drop(tokdir: Path) -> None:
    """The drawn cases are not mostly refusals, and some drop a record for omitted content: checks
    that the draw reaches the paths (counts on zephon_ref alone, which the cases compare with zephon)."""
    from zephon_ref.pipeline import Pipeline

    delivered = refused = dropped = 0
    for case in range(CASES):
        rows, chain, kw = draw(case)
        try:
            p = build("zephon_ref", rows, chain, tokdir=tokdir, chunk_size=kw["chunk_size"], lanes=1, seed=0)
        except ZephonRefError:
            refused += 1
            continue
        assert isinstance(p, Pipeline)
        tc = next(op for name, op in p._ops if name == "tokenize_chat")
        try:
            for r in rows:
                ids, mask = tc.ids_and_mask(r, ("s",))
                if not ids and r["messages"]:
                    dropped += 1
        except ZephonRefError:
            refused += 1
            continue
        delivered += 1
    print(f"delivered {delivered} refused {refused} dropped {dropped}")
    assert delivered >= CASES // 2, (delivered, refused)
    assert dropped > 0


#: (id, template) refused by both, zephon_ref at the builder call
BAD_TEMPLATES = [
    (
        "outside-loop",
        "{% generation %}x{% endgeneration %}{% for m in messages %}<|{{ m['role'] }}|> "
        "{{ m['content'] }} </s> {% endfor %}",
    ),
    (
        "user-in-block",
        "{% for m in messages %}{% generation %}<|{{ m['role'] }}|> {{ m['content'] }} </s> "
        "{% endgeneration %}{% endfor %}",
    ),
    (
        "starts-at-space",
        "{% for m in messages %}{% if m['role'] == 'assistant' %}<|assistant|>{% generation %} "
        "{{ m['content'] }} </s>{% endgeneration %} {% else %}<|{{ m['role'] }}|> {{ m['content'] }} </s> "
        "{% endif %}{% endfor %}",
    ),
    (
        "content-outside-block",
        "{% for m in messages %}{% if m['role'] == 'assistant' %}<|assistant|> {{ m['content'] }} "
        "{% generation %}</s>{% endgeneration %} {% else %}<|{{ m['role'] }}|> {{ m['content'] }} </s> "
        "{% endif %}{% endfor %}",
    ),
    (
        "in-a-macro",
        "{% macro g(m) %}{% generation %}{{ m['content'] }}{% endgeneration %}{% endmacro %}"
        "{% for m in messages %}<|{{ m['role'] }}|> {% if m['role']=='assistant' %}{{ g(m) }}"
        "{% else %}{{ m['content'] }}{% endif %} </s> {% endfor %}",
    ),
    (
        "text-comparison",
        "{% for m in messages %}{% if m['content'] == 'hi' %}yes {% endif %}{% if m['role'] == "
        "'assistant' %}<|assistant|> {% generation %}{{ m['content'] }} </s>{% endgeneration %} "
        "{% else %}<|{{ m['role'] }}|> {{ m['content'] }} </s> {% endif %}{% endfor %}",
    ),
    (
        "omits-last",
        "{% for m in messages %}{% if m['role'] == 'assistant' %}<|assistant|> {% generation %}"
        "{% if not loop.last %}{{ m['content'] }} {% endif %}</s>{% endgeneration %} "
        "{% else %}<|{{ m['role'] }}|> {{ m['content'] }} </s> {% endif %}{% endfor %}",
    ),
    (
        "index-loop",
        "{% for i in range(messages|length) %}{% set m = messages[i] %}{% if m['role'] == 'assistant' %}"
        "<|assistant|> {% generation %}{{ m['content'] }} </s>{% endgeneration %} "
        "{% else %}<|{{ m['role'] }}|> {{ m['content'] }} </s> {% endif %}{% endfor %}",
    ),
]


@pytest.mark.parametrize("template", [t for _, t in BAD_TEMPLATES], ids=[i for i, _ in BAD_TEMPLATES])
def test_unverifiable_templates_are_refused_like_zephon(template: str, tokdir: Path) -> None:
    """zephon refuses at its first batch (ValueError when compiling, its ValidationError, a
    RuntimeError, from the setup probes); zephon_ref refuses with a subclass of the same builtin
    at the builder call, keeping its operators."""
    rows = [{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "fine"}]}] * 4
    chain = [
        ("tokenize_chat", {"tokenizer": TOK, "chat_template": template, "loss_scope": "after_last_user"})
    ]
    assert check_case(rows, chain, tokdir=tokdir) == -1
    p = build("zephon_ref", rows, [], tokdir=tokdir, chunk_size=2, lanes=1, seed=0)
    import transformers

    tok = transformers.AutoTokenizer.from_pretrained(str(tokdir), local_files_only=True)
    with pytest.raises(ZephonRefError):
        p.tokenize_chat(tok, chat_template=template, loss_scope="after_last_user")
    assert p._ops == []


def test_a_record_failing_its_structure_check_raises_like_zephon(tokdir: Path) -> None:
    """Under TAGGED_TEMPLATE an empty selected assistant fails the mask-parity check: zephon raises
    its ValidationError (a RuntimeError) while iterating; so does zephon_ref (TemplateVerificationError)."""
    rows = [
        {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "fine"}]},
        {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": ""}]},
    ]
    chain = [("tokenize_chat", {"tokenizer": TOK, "loss_scope": "after_last_user"})]
    assert check_case(rows, chain, tokdir=tokdir) == -1
    from zephon_ref.ops.chat_ownership import TemplateVerificationError
    from zephon_ref.validation import ValidationError

    with pytest.raises(TemplateVerificationError, match="CHAT_TEMPLATE_INVALID") as info:
        list(build("zephon_ref", rows, chain, tokdir=tokdir, chunk_size=2, lanes=1, seed=0))
    # zephon's class by its public name: `except zephon.validation.ValidationError` keeps working
    assert isinstance(info.value, ValidationError) and isinstance(info.value, RuntimeError)
    assert {i.code for i in info.value.report.errors} == {"CHAT_TEMPLATE_INVALID", "CHAT_INPUT_CONTEXT"}


def test_zephons_cached_verdict_depends_on_what_its_process_saw_before(tokdir: Path) -> None:
    """divergence D-19: zephon caches a successful structure check by a key that does not see
    whitespace around a text, while the check keeps it.  Alone, an assistant text with a leading
    space fails zephon's mask-parity check (its ValidationError); after a record of the same
    structure without the space, zephon skips the check and drops the record as unsupervised.
    zephon_ref checks every record: it raises either way (as a fresh zephon process does)."""
    import logging

    import transformers
    from zephon._internal.ops.tokenize_chat import TokenizeChat as ZTokenizeChat
    from zephon._internal.utils import chat_template as zchat

    from zephon_ref.ops.chat_ownership import TemplateVerificationError
    from zephon_ref.ops.tokenize_chat import TokenizeChat

    tok = transformers.AutoTokenizer.from_pretrained(str(tokdir), local_files_only=True)
    plain = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "fine"}]}
    spaced = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": " fine"}]}
    logging.disable(logging.WARNING)
    try:
        zchat._VERIFIED_STRUCTURES.clear()  # a fresh process's cache
        with pytest.raises(RuntimeError):
            ZTokenizeChat(tok, loss_scope="after_last_user")._tokenize_delivery(spaced, "s")
        zchat._VERIFIED_STRUCTURES.clear()
        op = ZTokenizeChat(tok, loss_scope="after_last_user")
        ids, _ = op._tokenize_delivery(plain, "a")
        assert len(ids) == 6
        assert op._tokenize_delivery(spaced, "b") == "unsupervised"
    finally:
        logging.disable(logging.NOTSET)
    ours = TokenizeChat(tok, loss_scope="after_last_user")
    assert len(ours.ids_and_mask(plain, "a")[0]) == 6
    with pytest.raises(TemplateVerificationError):
        ours.ids_and_mask(spaced, "b")

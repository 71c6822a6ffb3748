"""A tiny Hugging Face tokenizer built offline, for the tests of the tokenizer paths (the ``hf`` extra).

:func:`build_tokenizer` constructs a ``tokenizers`` WordLevel model over :data:`WORDS` (whitespace
pre-tokenizer, so offsets are exact), wraps it in a fast ``transformers`` tokenizer with BOS
``<s>``, EOS ``</s>``, PAD ``<pad>`` and UNK ``<unk>``, and saves it to a directory whose
``tokenizer_config.json`` carries the chat template (``TEMPLATE``, or ``TAGGED_TEMPLATE`` with
``{% generation %}`` blocks).  Nothing is downloaded: the directory loads with
``AutoTokenizer.from_pretrained(path, local_files_only=True)`` and is what a test passes as
``tokenizer_id``.  :func:`conversations` draws chats over the same words from a seeded generator.
:func:`tiny_tokenizer` loads one of three such tokenizers (plain template, tagged template, none),
built once per process in a temporary directory: the operator row's ``tokenize_chat`` draws them.
"""

from __future__ import annotations

import atexit
import importlib.util
import json
import random
import shutil
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["AVAILABLE", "KINDS", "SPECIALS", "TAGGED_TEMPLATE", "TEMPLATE", "WORDS", "build_tokenizer",
           "conversations", "texts", "tiny_tokenizer"]

#: whether the ``hf`` extra (transformers, tokenizers) is installed: the tiny tokenizer needs it
AVAILABLE = all(importlib.util.find_spec(m) is not None for m in ("transformers", "tokenizers"))

SPECIALS = ("<pad>", "<s>", "</s>", "<unk>", "<|user|>", "<|assistant|>", "<|system|>")
WORDS = tuple(
    [
        "hello",
        "hi",
        "how",
        "are",
        "you",
        "fine",
        "thanks",
        "what",
        "is",
        "two",
        "plus",
        "three",
        "five",
        "ok",
        "bye",
        "yes",
        "no",
        "tell",
        "me",
        "a",
        "joke",
        "the",
        "cat",
        "sat",
        "on",
        "mat",
        "dog",
        "ran",
        "far",
    ]
)

#: every message as ``<|role|> content </s>``; the generation prompt opens an assistant turn
TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} </s> {% endfor %}"
    "{% if add_generation_prompt %}<|assistant|> {% endif %}"
)
#: the same rendering with the assistant's content and EOS inside {% generation %} blocks
TAGGED_TEMPLATE = (
    "{% for m in messages %}{% if m['role'] == 'assistant' %}<|assistant|> "
    "{% generation %}{{ m['content'] }} </s>{% endgeneration %} "
    "{% else %}<|{{ m['role'] }}|> {{ m['content'] }} </s> {% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|> {% endif %}"
)


def build_tokenizer(directory: str | Path, *, template: str | None = TEMPLATE) -> Path:
    """Save the tiny tokenizer (with ``template`` in tokenizer_config.json) to ``directory``."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    path = Path(directory)
    vocab = {t: i for i, t in enumerate(SPECIALS + WORDS)}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=core,
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        unk_token="<unk>",
        additional_special_tokens=list(SPECIALS[4:]),
    )
    fast.save_pretrained(str(path))
    # the template lives in tokenizer_config.json (as older checkpoints ship it), not chat_template.jinja
    (path / "chat_template.jinja").unlink(missing_ok=True)
    cfg_path = path / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg.pop("chat_template", None)
    if template is not None:
        cfg["chat_template"] = template
    cfg_path.write_text(json.dumps(cfg, indent=1, sort_keys=True))
    return path


def _sentence(rng: random.Random, lo: int = 0, hi: int = 5) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi)))


def conversations(seed: int, n: int) -> list[dict[str, Any]]:
    """``n`` chats of 0-6 messages (system, user, assistant, the odd tool turn and unanswered or
    empty turns) under ``"messages"``, with a ``"meta"`` field to carry along."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        msgs: list[dict[str, Any]] = []
        if rng.random() < 0.3:
            msgs.append({"role": "system", "content": _sentence(rng, 1, 3)})
        for _ in range(rng.randint(0, 3)):
            msgs.append({"role": "user", "content": _sentence(rng, 1)})
            r = rng.random()
            if r < 0.7:
                msgs.append({"role": "assistant", "content": _sentence(rng, 0)})
            elif r < 0.8:
                msgs.append({"role": "assistant", "content": _sentence(rng, 1)})
                msgs.append({"role": "tool", "content": _sentence(rng, 1, 2)})
                msgs.append({"role": "assistant", "content": _sentence(rng, 1)})
        out.append({"messages": msgs, "meta": i})
    return out


def texts(seed: int, n: int) -> list[dict[str, Any]]:
    """``n`` text rows (0-12 words, some with CRLF or CR line ends and capitals) under ``"text"``."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        words = [rng.choice(WORDS) for _ in range(rng.randint(0, 12))]
        if words and rng.random() < 0.3:
            words[0] = words[0].capitalize()
        sep = rng.choice([" ", " ", "\r\n", "\r", "\n"])
        out.append({"text": sep.join(words), "id": i})
    return out


#: template kind -> template text (None: the tokenizer defines none)
KINDS = {"plain": TEMPLATE, "tagged": TAGGED_TEMPLATE, "bare": None}
_LOADED: dict[str, Any] = {}  # the suite's (not the semantics'): one tokenizer object per kind and process
_ROOT: list[Path] = []


def tiny_tokenizer(kind: str = "plain") -> Any:
    """The tiny tokenizer with template ``kind`` (:data:`KINDS`), loaded from a directory built once per
    process (removed at exit); the same object on every call (it keeps no per-call state)."""
    if kind not in KINDS:
        raise ValueError(f"kind: expected one of {sorted(KINDS)}, received {kind!r}")
    if kind not in _LOADED:
        from zephon_ref.io.tokenizers import load_tokenizer

        if not _ROOT:
            root = Path(tempfile.mkdtemp(prefix="zephon-ref-tiny-tok-"))
            atexit.register(shutil.rmtree, root, True)
            _ROOT.append(root)
        _LOADED[kind] = load_tokenizer(build_tokenizer(_ROOT[0] / kind, template=KINDS[kind]))
    return _LOADED[kind]

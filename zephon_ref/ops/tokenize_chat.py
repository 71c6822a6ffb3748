"""tokenize_chat: conversations -> ``input_ids`` and a supervised-token loss mask.

Theory of operation
-------------------
A pure function of each record (count-only accumulator, no cross-call state), over a fast
Hugging Face tokenizer *object* the builder was given (loading one from a directory is
the facade's job, :mod:`zephon_ref.io.tokenizers`; this module reads no file).  Per record:

1. the messages at the dot path ``field`` (each a mapping with a ``role``);
2. token ids and a 0/1 mask, by one of three span sources:

   * ``apply_chat_template=False``: the messages' contents concatenated (a list of content
     parts contributes its ``type == "text"`` parts), every assistant content followed by
     the tokenizer's ``eos_token``; a selected assistant's content and its EOS are the
     supervised characters;
   * ``prefix_diff`` (a template without ``{% generation %}`` tags): assistant i's
     supervised characters are ``[len(render(messages[:i], prompt=True)),
     len(render(messages[:i+1]))]`` in the full render, which must start with every such
     partial render (else the template is position dependent: PayloadError);
   * ``generation_tags``: the tokenizer's own ``return_assistant_tokens_mask`` over the
     full render; with ``after_last_user``, zephon's owned ranges instead
     (:mod:`zephon_ref.ops.chat_ownership`: each block's input message, a structure check per
     record whose only issue, omitted selected content, drops the record, and the selected
     owners' ranges mapped by zephon's endpoint rule);

   characters map to tokens by the offset mapping: a token is supervised when its
   character range overlaps a supervised span (``start < b and end > a``); text is
   encoded without added specials, truncated to ``max_length`` when set;
3. ``loss_scope``: ``all_assistant`` (every assistant), ``after_last_user`` (assistants
   after the last user message), ``last_span`` (every assistant, then all but the last
   contiguous supervised run zeroed);
4. a template render that does not end in the EOS id gets it appended (when there is
   room under ``max_length``), its mask bit copying the previous one;
5. fewer than two tokens, or no supervised token: the record is replaced by its
   tombstones; a supervised first token is a PayloadError (packing would train a
   cross-document prediction).

The output payload is ``{"input_ids": int64 array, mask_field_out: uint8 array}`` (plus
the upstream fields with ``preserve_upstream_payload``), as zephon 0.2.0 emits.

The threads runner calls ``process_many`` from several workers at once; transformers >= 5 (the
``hf`` extra's floor) keeps the generation-tag tracker of a compiled template in a ContextVar, so
concurrent masked renders do not share state (zephon salts the template per thread for older
versions).

What may not live here: tokenizer loading, template files, downloads, caches.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from zephon_ref.errors import ConfigError, ConfigTypeError, PayloadError, PayloadTypeError, expected
from zephon_ref.lineage import tombstones_for_record
from zephon_ref.ops.base import RecordMapOp
from zephon_ref.ops.chat_ownership import (
    CONTENT,
    OwnedTemplate,
    TemplateVerificationError,
    owned_mask,
    setup_check,
    verify,
)
from zephon_ref.ops.expand_chat import read_path
from zephon_ref.ops.knobs import (
    Bool,
    Choice,
    Domain,
    Int,
    Opaque,
    Text,
    check_execution,
    check_fields,
    knob,
)
from zephon_ref.types import SampleRecord

__all__ = [
    "DEFAULT_PARALLELISM",
    "LOSS_SCOPES",
    "RESERVED_RENDER_KWARGS",
    "SPAN_SOURCES",
    "TokenizeChat",
    "TokenizeChatConfig",
    "last_span_only",
    "mask_from_spans",
    "resolve_loss_scope",
]

#: zephon 0.2.0's worker count for tokenize_chat(parallelism=None): an execution setting.
DEFAULT_PARALLELISM = 4

SPAN_SOURCES = ("auto", "generation_tags", "prefix_diff")
LOSS_SCOPES = ("all_assistant", "last_span", "after_last_user")
GENERATION_TAG = re.compile(r"\{%-?\s*generation\s*-?%\}")

#: apply_chat_template keywords the operator sets itself: chat_template_kwargs may not name them
RESERVED_RENDER_KWARGS = frozenset(
    {
        "tokenize",
        "return_dict",
        "return_assistant_tokens_mask",
        "add_generation_prompt",
        "chat_template",
        "tools",
        "truncation",
        "max_length",
        "return_tensors",
        "return_attention_mask",
        "continue_final_message",
        "tokenizer_kwargs",
        "padding",
        "messages",
        "return_offsets_mapping",
    }
)


def resolve_loss_scope(loss_scope: Any, loss_on_last_turn_only: Any) -> str:
    """``loss_scope`` after the deprecated boolean (FutureWarning when it is given)."""
    if loss_scope is not None and loss_on_last_turn_only is not None:
        raise ConfigError(
            expected(
                "loss_scope / loss_on_last_turn_only",
                "one of them, not both",
                (loss_scope, loss_on_last_turn_only),
            )
        )
    if loss_on_last_turn_only is not None:
        if type(loss_on_last_turn_only) is not bool:
            raise ConfigTypeError(
                expected("loss_on_last_turn_only", "a bool or None", loss_on_last_turn_only)
            )
        warnings.warn(
            "loss_on_last_turn_only is deprecated; use loss_scope='last_span' or loss_scope='all_assistant'",
            FutureWarning,
            stacklevel=4,
        )
        return "last_span" if loss_on_last_turn_only else "all_assistant"
    return "all_assistant" if loss_scope is None else loss_scope


def mask_from_spans(offsets: Sequence[tuple[int, int]], spans: Sequence[tuple[int, int]]) -> list[int]:
    """1 for each token whose character range ``[s, e)`` overlaps a span ``[a, b)``."""
    return [1 if any(s < b and e > a for a, b in spans) else 0 for s, e in offsets]


def last_span_only(mask: list[int]) -> list[int]:
    """``mask`` with every supervised run but the last contiguous one zeroed."""
    if 1 not in mask:
        return mask
    end = len(mask) - mask[::-1].index(1)
    start = end
    while start > 0 and mask[start - 1] == 1:
        start -= 1
    return [0] * start + [1] * (end - start) + [0] * (len(mask) - end)


def selected_assistants(messages: Sequence[Mapping[str, Any]], scope: str) -> set[int]:
    """Indices of the assistant messages whose content carries the loss under ``scope``."""
    assistants = {i for i, m in enumerate(messages) if m.get("role") == "assistant"}
    if scope != "after_last_user":
        return assistants
    users = [i for i, m in enumerate(messages) if m.get("role") == "user"]
    return {i for i in assistants if users and i > users[-1]}


@dataclass(frozen=True, slots=True, kw_only=True)
class TokenizeChatConfig:
    """The data knobs of ``tokenize_chat`` (domains in :mod:`zephon_ref.ops.knobs`); ``template``
    is the resolved template text (the override, else the tokenizer's), None without a template."""

    BUILDER: ClassVar[str] = "tokenize_chat"
    #: call parameters the config does not store: loading (the facade's: tokenizer_id, eos_token),
    #: the template override (resolved into ``template``) and zephon's legacy loss flag
    CALL_KNOBS: ClassVar[Mapping[str, Domain]] = {
        "tokenizer_id": Choice((None,)),
        "eos_token": Choice((None,)),
        "chat_template": Text(none=True),
        "loss_on_last_turn_only": Bool(none=True),
    }

    tokenizer: Any = knob(
        domain=Opaque((object,), "a fast Hugging Face tokenizer"),
        doc="called for renders, encodings and offsets",
    )
    field: str = knob("messages", Text(), doc="dot path of the messages list")
    max_length: int | None = knob(None, Int(2, none=True), doc="truncate the encoding to this many tokens")
    apply_chat_template: bool = knob(True, Bool(), doc="False: concatenate contents, EOS after assistants")
    span_source: str = knob("auto", Choice(SPAN_SOURCES), doc="how assistant spans are found")
    loss_scope: str = knob("all_assistant", Choice(LOSS_SCOPES), doc="which assistant turns carry the loss")
    chat_template_kwargs: Mapping[str, Any] | None = knob(
        None,
        Opaque((Mapping,), "a mapping of template arguments", none=True),
        doc="static apply_chat_template arguments (None: none)",
    )
    tools_field: str = knob("tools", Text(), doc="payload path of per-record tools")
    enable_thinking_field: str = knob(
        "enable_thinking", Text(), doc="payload path of per-record enable_thinking"
    )
    mask_field_out: str = knob("loss_mask", Text(), doc="output key of the loss mask")
    preserve_upstream_payload: bool = knob(False, Bool(), doc="keep the upstream payload's other fields")
    max_batch: int = knob(64, Int(1), doc="records per process_many call (no effect on output)")
    template: str | None = knob(None, Text(none=True), doc="the resolved chat template text")

    def __post_init__(self) -> None:
        check_fields(self)
        for name in ("field", "tools_field", "enable_thinking_field"):
            if any(not part for part in getattr(self, name).split(".")):
                raise ConfigError(expected(name, "a dot path of non-empty keys", getattr(self, name)))
        if self.mask_field_out == "input_ids":
            raise ConfigError(expected("mask_field_out", "a key other than 'input_ids'", self.mask_field_out))
        kw = self.chat_template_kwargs
        if kw is not None:
            bad = sorted(k for k in kw if not isinstance(k, str))
            if bad:
                raise ConfigTypeError(expected("chat_template_kwargs keys", "str", bad))
            reserved = sorted(RESERVED_RENDER_KWARGS.intersection(kw))
            if reserved:
                raise ConfigError(
                    expected(
                        "chat_template_kwargs",
                        f"no keyword the operator sets itself ({sorted(RESERVED_RENDER_KWARGS)})",
                        reserved,
                    )
                )
        if not self.apply_chat_template:
            if self.span_source != "auto":
                raise ConfigError(
                    expected(
                        "span_source",
                        "'auto' with apply_chat_template=False (spans are exact by construction)",
                        self.span_source,
                    )
                )
            if self.template is not None:
                raise ConfigError(
                    expected("chat_template", "None with apply_chat_template=False", "a template")
                )


def _flat(value: Any, *, pairs: bool = False) -> list[Any]:
    """A flat list (of ints, or of ``(start, end)`` pairs) from an HF result that may be a batch of
    one (versions differ)."""
    seq = value.tolist() if hasattr(value, "tolist") else list(value)
    if (
        seq
        and isinstance(seq[0], (list, tuple))
        and (not pairs or (len(seq[0]) > 0 and isinstance(seq[0][0], (list, tuple))))
    ):
        seq = list(seq[0])
    return seq


class TokenizeChat(RecordMapOp):
    """``tokenize_chat(tokenizer, *, field="messages", max_length=None, chat_template=None,
    apply_chat_template=True, span_source="auto", loss_scope=None, loss_on_last_turn_only=None,
    chat_template_kwargs=None, tools_field="tools", enable_thinking_field="enable_thinking",
    mask_field_out="loss_mask", preserve_upstream_payload=False)`` over a tokenizer object;
    ``chat_template`` here is template *text* (the facade reads a file path)."""

    def __init__(
        self,
        tokenizer: Any,
        *,
        field: str = "messages",
        max_length: int | None = None,
        chat_template: str | None = None,
        apply_chat_template: bool = True,
        span_source: str = "auto",
        loss_scope: str | None = None,
        loss_on_last_turn_only: bool | None = None,
        chat_template_kwargs: Mapping[str, Any] | None = None,
        tools_field: str = "tools",
        enable_thinking_field: str = "enable_thinking",
        mask_field_out: str = "loss_mask",
        preserve_upstream_payload: bool = False,
        max_batch: int = 64,
        placement: str = "auto",
        parallelism: int | None = None,
    ) -> None:
        super().__init__()
        check_execution(placement=placement, parallelism=parallelism)
        scope = resolve_loss_scope(loss_scope, loss_on_last_turn_only)
        if tokenizer is None or not callable(tokenizer):
            # a ConfigError (ValueError): zephon falls back to its built-in stub, or reads is_fast off the
            # object, and refuses either as "not a fast tokenizer" with ValueError
            raise ConfigError(
                expected("tokenizer", "a fast Hugging Face tokenizer object (or tokenizer_id)", tokenizer)
            )
        if chat_template is not None and not isinstance(chat_template, str):
            raise ConfigTypeError(
                expected("chat_template", "template text, a file path or None", chat_template)
            )
        if isinstance(chat_template, str) and not chat_template:
            raise ConfigError(expected("chat_template", "non-empty template text", chat_template))
        template = chat_template
        if apply_chat_template and template is None:
            own = getattr(tokenizer, "chat_template", None)
            template = own if isinstance(own, str) and own else None
        kw = (
            None
            if chat_template_kwargs is None
            else dict(chat_template_kwargs)
            if isinstance(chat_template_kwargs, Mapping)
            else chat_template_kwargs
        )
        self.config = TokenizeChatConfig(
            tokenizer=tokenizer,
            field=field,
            max_length=max_length,
            apply_chat_template=apply_chat_template,
            span_source=span_source,
            loss_scope=scope,
            chat_template_kwargs=kw or None,
            tools_field=tools_field,
            enable_thinking_field=enable_thinking_field,
            mask_field_out=mask_field_out,
            preserve_upstream_payload=preserve_upstream_payload,
            max_batch=max_batch,
            template=template if apply_chat_template else chat_template,
        )
        self.parallelism = DEFAULT_PARALLELISM if parallelism is None else parallelism
        #: the owned-range renderer (after_last_user over generation tags), else None
        self._owned: OwnedTemplate | None = None
        self._source = self._check_tokenizer()

    # -- setup: what zephon checks at its first batch, checked at the builder call --------------
    def _check_tokenizer(self) -> str:
        """The resolved span source ("none" without a template), or a ConfigError."""
        c, tok = self.config, self.config.tokenizer
        if not getattr(tok, "is_fast", False):
            raise ConfigError(
                expected(
                    "tokenizer", "a fast tokenizer (offset mappings, assistant masks)", type(tok).__name__
                )
            )
        if not c.apply_chat_template:
            if not isinstance(getattr(tok, "eos_token", None), str):
                raise ConfigError(
                    expected(
                        "tokenizer.eos_token",
                        "a str (apply_chat_template=False appends it to every assistant turn)",
                        getattr(tok, "eos_token", None),
                    )
                )
            return "none"
        if c.template is None:
            raise ConfigError(
                expected(
                    "chat_template",
                    "a template (the tokenizer defines none): pass "
                    "chat_template=... or apply_chat_template=False",
                    None,
                )
            )
        tagged = GENERATION_TAG.search(c.template) is not None
        if c.span_source == "generation_tags" and not tagged:
            raise ConfigError(
                expected(
                    "span_source='generation_tags'",
                    "a template with {% generation %} tags",
                    "a template without them",
                )
            )
        source = c.span_source
        if source == "auto":
            if not tagged and c.loss_scope == "after_last_user":
                raise ConfigError(
                    expected(
                        "loss_scope='after_last_user' with an untagged template",
                        "span_source='prefix_diff' (explicit) or a tagged template",
                        "'auto'",
                    )
                )
            source = "generation_tags" if tagged else "prefix_diff"
        if source == "generation_tags" and c.loss_scope == "after_last_user":
            # owned generation ranges: compile (ConfigError) and zephon's setup probes
            # (TemplateVerificationError, a RuntimeError as zephon's ValidationError)
            self._owned = OwnedTemplate(c.template)
            setup_check(self._owned, tok, dict(c.chat_template_kwargs or {}), c.loss_scope)
        if source == "prefix_diff":
            probe = [{"role": "user", "content": ""}]
            with_prompt, without = (
                self._render(probe, flag, dict(c.chat_template_kwargs or {})) for flag in (True, False)
            )
            if with_prompt == without:
                raise ConfigError(
                    expected(
                        "chat template",
                        "one that renders add_generation_prompt (prefix_diff "
                        "anchors assistant content on it)",
                        "a template that ignores it",
                    )
                )
        return source

    # -- per record -----------------------------------------------------------------------------
    def _render(self, messages: list[Any], prompt: bool, kwargs: dict[str, Any]) -> str:
        text: str = self.config.tokenizer.apply_chat_template(
            messages,
            tokenize=False,
            add_generation_prompt=prompt,
            chat_template=self.config.template,
            **kwargs,
        )
        return text

    def _messages(self, payload: Any, sample: Any) -> list[Mapping[str, Any]]:
        c = self.config
        value = read_path(payload, tuple(c.field.split(".")), what="tokenize_chat", sample=sample)
        if not isinstance(value, Sequence) or isinstance(value, (str, bytes)):
            raise PayloadTypeError(
                expected(
                    f"tokenize_chat: field {c.field!r} of sample {sample!r}",
                    "a list of role/content messages",
                    value,
                )
            )
        for m in value:
            if not isinstance(m, Mapping) or "role" not in m:
                raise PayloadTypeError(
                    expected(f"tokenize_chat: a message of sample {sample!r}", "a mapping with a 'role'", m)
                )
        if c.loss_scope == "after_last_user":
            for m in value:
                content = m.get("content")
                if isinstance(content, list) and any(
                    not isinstance(p, Mapping) or p.get("type") != "text" for p in content
                ):
                    raise PayloadError(expected("after_last_user content parts", "text-only", content))
                if m.get("role") != "assistant" and m.get("tool_calls"):
                    raise PayloadError(expected("tool_calls", "on assistant messages only", m.get("role")))
        return list(value)

    def _render_kwargs(self, payload: Any) -> dict[str, Any]:
        c = self.config
        kwargs = dict(c.chat_template_kwargs or {})
        for key, path in (("tools", c.tools_field), ("enable_thinking", c.enable_thinking_field)):
            value: Any = payload
            for part in path.split("."):
                value = value.get(part) if isinstance(value, Mapping) else None
                if value is None:
                    break
            if value is not None:
                kwargs[key] = value
        return kwargs

    def _encode(self, text: str, spans: list[tuple[int, int]]) -> tuple[list[int], list[int]]:
        kw: dict[str, Any] = {"add_special_tokens": False, "return_offsets_mapping": True}
        if self.config.max_length is not None:
            kw.update(truncation=True, max_length=self.config.max_length)
        enc = self.config.tokenizer(text, **kw)
        ids = [int(i) for i in _flat(enc["input_ids"])]
        offsets = [(int(a), int(b)) for a, b in _flat(enc["offset_mapping"], pairs=True)]
        return ids, mask_from_spans(offsets, spans)

    def _no_template(self, messages: list[Mapping[str, Any]]) -> tuple[list[int], list[int]]:
        eos = self.config.tokenizer.eos_token
        selected = selected_assistants(messages, self.config.loss_scope)
        parts: list[str] = []
        spans: list[tuple[int, int]] = []
        at = 0
        for i, m in enumerate(messages):
            content = m.get("content", "")
            if isinstance(content, list):
                texts = []
                for part in content:
                    if part.get("type") != "text":
                        continue
                    if "text" not in part:
                        raise PayloadError(expected("a content part with type='text'", "a 'text' key", part))
                    texts.append(part["text"])
                content = "".join(texts)
            if not isinstance(content, str):
                content = str(content)
            piece = content + eos if m.get("role") == "assistant" else content
            if m.get("role") == "assistant" and i in selected:
                spans.append((at, at + len(piece)))
            parts.append(piece)
            at += len(piece)
        return self._encode("".join(parts), spans)

    def _prefix_diff(
        self, messages: list[Mapping[str, Any]], kwargs: dict[str, Any]
    ) -> tuple[list[int], list[int]]:
        full = self._render(messages, False, kwargs)
        selected = selected_assistants(messages, self.config.loss_scope)
        spans: list[tuple[int, int]] = []
        for i, m in enumerate(messages):
            if m.get("role") != "assistant":
                continue
            before = self._render(messages[:i], True, kwargs)
            upto = self._render(messages[: i + 1], False, kwargs)
            if not (full.startswith(upto) and upto.startswith(before)):
                raise PayloadError(
                    expected(
                        "chat template renders",
                        "each partial render a prefix of the full render (prefix_diff)",
                        "a position-dependent template",
                    )
                )
            if i in selected:
                spans.append((len(before), len(upto)))
        return self._encode(full, spans)

    def _generation_tags(
        self, messages: list[Mapping[str, Any]], kwargs: dict[str, Any]
    ) -> tuple[list[int], list[int]]:
        c = self.config
        call: dict[str, Any] = {
            "tokenize": True,
            "return_dict": True,
            "return_assistant_tokens_mask": True,
            "add_generation_prompt": False,
            "chat_template": c.template,
            **kwargs,
        }
        if c.max_length is not None:
            call.update(truncation=True, max_length=c.max_length)
        out = c.tokenizer.apply_chat_template(messages, **call)
        return [int(i) for i in _flat(out["input_ids"])], [int(b) for b in _flat(out["assistant_masks"])]

    def _owned_tags(
        self, messages: list[Mapping[str, Any]], kwargs: dict[str, Any], sample: Any
    ) -> tuple[list[int], list[int]]:
        """``after_last_user`` over generation tags (:mod:`zephon_ref.ops.chat_ownership`): the record's
        structure check (omitted selected content alone: no tokens, so the record is dropped; any
        other issue: TemplateVerificationError), then the selected owners' ranges of the real render."""
        c, owned = self.config, self._owned
        assert owned is not None
        # every record is checked (zephon skips a structure its process checked before): divergence D-19
        codes, detail = verify(owned, c.tokenizer, messages, kwargs, c.loss_scope)
        if codes:
            if set(codes) == {CONTENT}:
                return [], []
            raise TemplateVerificationError(
                codes, detail, context=f"loss_scope={c.loss_scope!r}, sample={sample!r}"
            )
        text, ranges = owned.render(messages, {**c.tokenizer.special_tokens_map, **kwargs})
        selected = selected_assistants(messages, c.loss_scope)
        rendered = {o for o, a, b in ranges if b > a}
        for i in sorted(selected - rendered):
            m = messages[i]
            if any(m.get(k) for k in ("content", "reasoning_content", "reasoning", "thinking", "tool_calls")):
                raise PayloadError(
                    expected(
                        f"tokenize_chat: sample {sample!r}",
                        f"a generation range for the non-empty selected assistant {i}",
                        "none rendered",
                    )
                )
        kw: dict[str, Any] = {"add_special_tokens": False}
        if c.max_length is not None:
            kw.update(truncation=True, max_length=c.max_length)
        enc = c.tokenizer(text, **kw)
        ids = [int(i) for i in _flat(enc["input_ids"])]
        return ids, [int(b) for b in owned_mask(enc, ranges, selected)]

    def ids_and_mask(self, payload: Any, sample: Any) -> tuple[list[int], list[int]]:
        """Steps 1-4 of the module docstring for one payload."""
        c = self.config
        messages = self._messages(payload, sample)
        if not messages:
            return [], []
        if self._source == "none":
            ids, mask = self._no_template(messages)
        elif self._source == "prefix_diff":
            ids, mask = self._prefix_diff(messages, self._render_kwargs(payload))
        elif self._owned is not None:
            ids, mask = self._owned_tags(messages, self._render_kwargs(payload), sample)
        else:
            ids, mask = self._generation_tags(messages, self._render_kwargs(payload))
        if c.loss_scope == "last_span":
            mask = last_span_only(mask)
        eos = getattr(c.tokenizer, "eos_token_id", None)
        if (
            c.apply_chat_template
            and eos is not None
            and ids
            and ids[-1] != int(eos)
            and (c.max_length is None or len(ids) < c.max_length)
        ):
            ids.append(int(eos))
            mask.append(mask[-1])
        return ids, mask

    def process_many(self, elems: list[Any]) -> list[Any]:
        c = self.config
        out: list[Any] = []
        for rec in elems:
            if rec.meta.tombstone:
                out.append(rec)
                continue
            sample = rec.meta.cursor.as_key()
            ids, mask = self.ids_and_mask(rec.payload, sample)
            if len(ids) < 2 or 1 not in mask:
                out.extend(tombstones_for_record(rec))
                continue
            if mask[0] == 1:
                raise PayloadError(
                    expected(
                        f"tokenize_chat: sample {sample!r}",
                        "an unsupervised first token (start conversations with system/user content or a BOS)",
                        "mask[0] == 1",
                    )
                )
            upstream = rec.payload if isinstance(rec.payload, Mapping) else None
            payload: dict[str, Any] = dict(upstream) if (c.preserve_upstream_payload and upstream) else {}
            payload["input_ids"] = np.asarray(ids, dtype=np.int64)
            payload[c.mask_field_out] = np.asarray(mask, dtype=np.uint8)
            out.append(SampleRecord(rec.meta, payload))
        return out

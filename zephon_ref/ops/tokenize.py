"""tokenize: text field -> ``input_ids`` (+ ``attention_mask``), optional split.

Theory of operation
-------------------
``process_many`` is a pure function of each record (no cross-call state; the
accumulator is a count-only :class:`CountingAccumulator`).  Per record:

1. take the text from ``payload[field]`` (``missing_field="empty"`` -> ``""``);
   the output payload starts empty, or as a copy of the upstream payload when
   ``preserve_upstream_payload``;
2. call the tokenizer in the Hugging Face convention
   ``tok(texts, add_special_tokens=, padding=False, truncation=, [max_length=])
   -> {"input_ids": [[...]], "attention_mask": [[...]]}``; when the operator owns
   the specials (every mode but ``"tokenizer_default"``) it asks for no specials
   and reserves room for them under truncation;
3. bracket with BOS/EOS per ``special_tokens`` (mask grows with 1s);
4. pad to ``max_length`` when ``padding="max_length"``, or to the longest record of the
   ``process_many`` call when ``padding=True`` / ``"longest"`` (HF's convention; not when
   splitting, where each window is padded to ``max_length``).  The call is the accumulator's
   group of ``max_batch`` records of one lane, so "longest" depends on where a group starts:
   a resume regroups the replayed chunks (divergence D-10);
5. with ``split_long_samples`` cut into ``max_length`` windows; more than one
   window fans out with :func:`~zephon_ref.lineage.spawn_child` (child index =
   window index, only the last child closes);
6. ``return_tensors`` (``"pt"``, ``"np"`` / ``"numpy"``, ``"tf"``; zephon 0.2.0's rule): where the
   operator owns the specials or splits, the tokenizer is asked for lists and each emitted
   ``input_ids`` / ``attention_mask`` becomes the library's array of that list (``torch.tensor`` /
   ``numpy.array``: int64, and the default float dtype for an empty row), through the installed tensor
   libraries of :mod:`zephon_ref.training` (the torch path installs torch; the semantics import none);
   a library that is not installed is a RuntimeError at the first record, as in zephon.  Under
   ``special_tokens="tokenizer_default"`` without splitting the tokenizer owns everything: the
   keyword is handed to it and each row is kept as it returns it (a Hugging Face tokenizer gives
   rows of its batch tensor and refuses a ragged batch without padding; one that ignores the
   keyword gives lists).

:class:`HashTokenizer` is the built-in tokenizer: whitespace words, each id =
``crc32(word utf-8) % vocab_size + offset``; no download, identical in every
process (crc32 is not salted, unlike ``hash()`` of a string).  Like zephon 0.2.0's
built-in tokenizer it adds no special tokens of its own (``add_special_tokens`` is
accepted and ignored): it only reserves the BOS/EOS ids that the bracket modes splice in,
so ``special_tokens="tokenizer_default"`` gives the words' ids alone.

What may not live here: downloads, or per-call state.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar
from zlib import crc32

from zephon_ref.errors import ConfigError, ConfigTypeError, ContractError, expected
from zephon_ref.lineage import spawn_child
from zephon_ref.ops.base import (
    RecordMapOp,
    check_bool,
    check_choice,
    check_int,
)
from zephon_ref.ops.knobs import Bool, Choice, Domain, Func, Int, Text, check_execution, check_fields, knob
from zephon_ref.training import tensor_library
from zephon_ref.types import SampleRecord
from zephon_ref.work.token_estimation import TextCounting

__all__ = ["RETURN_TENSORS", "HashTokenizer", "Tokenize", "TokenizeConfig", "library_array"]

#: the parallelism zephon's plan gives tokenize when the call names none (an execution hint: explain())
DEFAULT_PARALLELISM = 4

SPECIAL_TOKENS_MODES = ("bos_eos", "bos", "eos", "none", "tokenizer_default")
MISSING_FIELD_MODES = ("error", "empty")
#: ``return_tensors`` -> the tensor library it names (zephon 0.2.0's backends)
RETURN_TENSORS = {"pt": "torch", "np": "numpy", "numpy": "numpy", "tf": "tensorflow"}


def _library(return_tensors: Any) -> Any:
    """The installed tensor library ``return_tensors`` names; a library that is not installed is a
    RuntimeError, a name no library has a ValueError (zephon's builtins)."""
    if not isinstance(return_tensors, str) or return_tensors not in RETURN_TENSORS:
        raise ConfigError(expected("return_tensors", f"one of {sorted(RETURN_TENSORS)}", return_tensors))
    name = RETURN_TENSORS[return_tensors]
    lib = tensor_library(name)
    if lib is None or not lib.available():
        raise ContractError(expected("return_tensors", f"{return_tensors!r} with {name} installed",
                                     f"{name} is not available"))
    return lib


def library_array(return_tensors: Any, values: list[Any]) -> Any:
    """``values`` as the array ``return_tensors`` names (step 6 of the module docstring): the installed
    tensor library's own constructor (``torch.tensor`` / ``numpy.array``)."""
    return _library(return_tensors).array(values)


@dataclass(frozen=True, slots=True)
class HashTokenizer:
    """The built-in tokenizer of the module docstring, with the HF call convention (``return_tensors``
    too: the batch as one array of the library it names, see :func:`library_array`);
    ``bos_token_id`` / ``eos_token_id`` are the ids the operator's bracket modes use.
    """

    vocab_size: int = 32000
    offset: int = 3
    pad_token_id: int = 0
    bos_token_id: int = 1
    eos_token_id: int = 2

    def __post_init__(self) -> None:
        check_int("vocab_size", self.vocab_size, minimum=1)
        check_int("offset", self.offset, minimum=0)

    def word_id(self, word: str) -> int:
        return crc32(word.encode("utf-8")) % self.vocab_size + self.offset

    def encode(self, text: str) -> list[int]:
        return [self.word_id(w) for w in text.split()]

    def __call__(
        self,
        texts: str | Sequence[str],
        *,
        add_special_tokens: bool = True,
        padding: bool | str = False,
        truncation: bool = False,
        max_length: int | None = None,
        return_tensors: str | None = None,
        **_ignored: Any,
    ) -> dict[str, Any]:
        batch = [texts] if isinstance(texts, str) else list(texts)
        ids_out: list[list[int]] = []
        for text in batch:
            ids = self.encode(text)  # no specials, whatever add_special_tokens says
            if truncation and max_length is not None:
                ids = ids[:max_length]
            ids_out.append(ids)
        masks = [[1] * len(ids) for ids in ids_out]
        longest = padding is True or (isinstance(padding, str) and padding == "longest")
        target = max((len(i) for i in ids_out), default=0) if longest else max_length
        if (longest or padding == "max_length") and target is not None:
            for ids, mask in zip(ids_out, masks, strict=True):
                pad = target - len(ids)
                if pad > 0:
                    ids.extend([self.pad_token_id] * pad)
                    mask.extend([0] * pad)
        if return_tensors is None:
            return {"input_ids": ids_out, "attention_mask": masks}
        # the batch as one array of rows of one length; a ragged batch is refused here (Tokenize
        # reports it typed), never left to the library to lose rows: divergence D-103
        if len({len(ids) for ids in ids_out}) > 1:
            _library(return_tensors)  # a library that is not installed is refused first, as zephon does
            raise ValueError(expected(f"return_tensors={return_tensors!r} rows of one call",
                                      "rows of one length (padding='longest' or 'max_length' makes them so)",
                                      [len(ids) for ids in ids_out]))
        return {"input_ids": library_array(return_tensors, ids_out),
                "attention_mask": library_array(return_tensors, masks)}


@dataclass(frozen=True, slots=True, kw_only=True)
class TokenizeConfig:
    """The data knobs of ``tokenize`` after the builder's normalisation (``padding=True`` is
    ``"longest"``, ``"do_not_pad"`` is False, ``tokenizer=None`` the built-in tokenizer); each
    field's domain is declared (:mod:`zephon_ref.ops.knobs`), the rules between fields are
    :class:`Tokenize`'s.  The operator reads its knobs here and keeps no copy of them."""

    BUILDER: ClassVar[str] = "tokenize"
    #: call parameters the config does not store: the semantic builder's tokenizer_id (the facade
    #: also loads a local directory) and an HF loading hint (the facade's load_tokenizer uses it)
    CALL_KNOBS: ClassVar[Mapping[str, Domain]] = {
        "tokenizer_id": Choice((None, "__fallback__")),
        "use_fast": Bool(none=True),
    }

    tokenizer: Callable[..., Any] = knob(domain=Func(), doc="HF-style callable (the built-in HashTokenizer)")
    field: str = knob(domain=Text(), doc="payload key of the text")
    missing_field: str = knob("error", Choice(MISSING_FIELD_MODES), doc="a missing field: error or empty")
    add_attention_mask: bool = knob(True, Bool(), doc="emit attention_mask")
    max_length: int | None = knob(None, Int(1, none=True), doc="truncation / padding / split length")
    padding: bool | str = knob(False, Choice((False, "longest", "max_length")),
                               doc="none, the call's longest row, or max_length")
    truncation: bool = knob(False, Bool(), doc="cut to max_length (room kept for the specials)")
    split_long_samples: bool = knob(False, Bool(), doc="max_length windows as children")
    preserve_upstream_payload: bool = knob(False, Bool(), doc="keep the other payload fields")
    special_tokens: str = knob("bos_eos", Choice(SPECIAL_TOKENS_MODES), doc="who adds BOS/EOS")
    bos_token_id: int | None = knob(None, Int(0, none=True), doc="BOS override under bos_eos / bos")
    eos_token_id: int | None = knob(None, Int(0, none=True), doc="EOS override under bos_eos / eos")
    max_batch: int = knob(64, Int(1), doc="records per process_many call (the 'longest' group)")
    return_tensors: str | None = knob(None, Choice((None, *RETURN_TENSORS)),
                                      doc="lists, or torch / numpy / tensorflow arrays per field")

    def __post_init__(self) -> None:
        check_fields(self)


def _as_list(seq: Any) -> list[int]:
    if hasattr(seq, "tolist"):
        return [int(x) for x in seq.tolist()]
    return [int(x) for x in seq]


def _padded(ids: list[int], mask: list[int] | None, target: int,
            pad_id: int) -> tuple[list[int], list[int] | None]:
    """A row padded to ``target`` (step 4): ids with ``pad_id``, the mask (if any) with 0s."""
    pad = target - len(ids)
    if pad <= 0:
        return ids, mask
    return ids + [pad_id] * pad, None if mask is None else mask + [0] * pad


def _tokenizer_refused(exc: Exception, return_tensors: Any) -> Exception:
    """The tokenizer's refusal to build ``return_tensors`` arrays, as zephon_ref's error of the same
    builtin (a Hugging Face tokenizer refuses a ragged batch without padding, ValueError)."""
    msg = expected(f"the tokenizer's return_tensors={return_tensors!r} batch under "
                   "special_tokens='tokenizer_default'", "one it can build (rows of one length: padding=True "
                   "or 'max_length')", f"{type(exc).__name__}: {exc}")
    if isinstance(exc, TypeError):
        return ConfigTypeError(msg)
    if isinstance(exc, ValueError):
        return ConfigError(msg)
    return ContractError(msg)


class Tokenize(RecordMapOp):
    """``tokenize(tokenizer=None, *, field, ...)`` with the knobs of zephon 0.2.0."""

    def __init__(
        self,
        tokenizer: Callable[..., Any] | None = None,
        *,
        field: str,
        missing_field: str = "error",
        add_attention_mask: bool = True,
        max_length: int | None = None,
        padding: bool | str = False,
        truncation: bool = False,
        split_long_samples: bool = False,
        preserve_upstream_payload: bool = False,
        special_tokens: str = "bos_eos",
        bos_token_id: int | None = None,
        eos_token_id: int | None = None,
        max_batch: int = 64,
        return_tensors: str | None = None,
        use_fast: bool = True,
        placement: str = "auto",
        parallelism: int | None = None,
    ) -> None:
        super().__init__()
        if tokenizer is not None and not callable(tokenizer):
            raise ConfigTypeError(expected("tokenizer", "an HF-style callable or None", tokenizer))
        if not isinstance(field, str) or not field:
            raise ConfigTypeError(expected("field", "a non-empty str", field))
        check_choice("missing_field", missing_field, MISSING_FIELD_MODES)
        check_choice("special_tokens", special_tokens, SPECIAL_TOKENS_MODES)
        for name, val in (
            ("add_attention_mask", add_attention_mask),
            ("truncation", truncation),
            ("split_long_samples", split_long_samples),
            ("preserve_upstream_payload", preserve_upstream_payload),
        ):
            check_bool(name, val)
        check_int("max_length", max_length, minimum=1, allow_none=True)
        check_int("bos_token_id", bos_token_id, minimum=0, allow_none=True)
        check_int("eos_token_id", eos_token_id, minimum=0, allow_none=True)
        check_int("max_batch", max_batch, minimum=1)
        check_execution(placement=placement, parallelism=parallelism)
        check_bool("use_fast", use_fast)  # an HF loading hint; the built-in tokenizer has one form
        # str checks before ==: an array or an odd object must not reach its own __eq__
        if isinstance(padding, str) and padding == "do_not_pad":
            padding = False
        if padding is True:
            padding = "longest"
        if not (padding is False or (isinstance(padding, str) and padding in ("longest", "max_length"))):
            err = ConfigError if isinstance(padding, (bool, str)) else ConfigTypeError
            raise err(expected("padding", "False, True, 'do_not_pad', 'longest' or 'max_length'", padding))
        if split_long_samples and truncation:
            raise ConfigError(
                expected("split_long_samples", "False when truncation=True (mutually exclusive)", True)
            )
        if split_long_samples and max_length is None:
            raise ConfigError(expected("max_length", "an int >= 1 when split_long_samples=True", None))
        if padding == "max_length" and max_length is None:
            raise ConfigError(expected("max_length", "an int >= 1 when padding='max_length'", None))
        owns = special_tokens != "tokenizer_default"
        self._n_bos = 1 if special_tokens in ("bos_eos", "bos") else 0
        self._n_eos = 1 if special_tokens in ("bos_eos", "eos") else 0
        n_specials = self._n_bos + self._n_eos
        if owns and truncation and max_length is None:
            raise ConfigError(
                expected(
                    "max_length", f"an int when truncation=True and special_tokens={special_tokens!r}", None
                )
            )
        if owns and truncation and max_length is not None and max_length - n_specials <= 0:
            raise ConfigError(
                expected("max_length", f"an int > {n_specials} (room for the special tokens)", max_length)
            )
        if special_tokens in ("tokenizer_default", "none") and (
            bos_token_id is not None or eos_token_id is not None
        ):
            raise ConfigError(
                expected(
                    "bos_token_id/eos_token_id",
                    f"None under special_tokens={special_tokens!r}",
                    (bos_token_id, eos_token_id),
                )
            )
        #: the knobs after the normalisation above; the operator keeps no copy of them
        self.config = TokenizeConfig(
            tokenizer=tokenizer if tokenizer is not None else HashTokenizer(), field=field,
            missing_field=missing_field, add_attention_mask=add_attention_mask, max_length=max_length,
            padding=padding, truncation=truncation, split_long_samples=split_long_samples,
            preserve_upstream_payload=preserve_upstream_payload, special_tokens=special_tokens,
            bos_token_id=bos_token_id, eos_token_id=eos_token_id, max_batch=max_batch,
            return_tensors=return_tensors)
        self.parallelism = DEFAULT_PARALLELISM if parallelism is None else parallelism
        self._owns_specials = owns
        self._bos = self._resolve_special("bos", bos_token_id) if self._n_bos else None
        self._eos = self._resolve_special("eos", eos_token_id) if self._n_eos else None

    def _resolve_special(self, which: str, override: int | None) -> int:
        tok = self.config.tokenizer
        value = override if override is not None else getattr(tok, f"{which}_token_id", None)
        if value is None:
            raise ConfigError(
                expected(
                    f"{which}_token_id",
                    f"an id (the tokenizer has no {which}_token_id) "
                    f"for special_tokens={self.config.special_tokens!r}",
                    None,
                )
            )
        return int(value)

    def _pad_id(self) -> int:
        for name in ("pad_token_id", "eos_token_id"):
            v = getattr(self.config.tokenizer, name, None)
            if v is not None:
                return int(v)
        return 0

    def calibration_counting(self) -> TextCounting:
        """How token-aware calibration counts this operator's delivered tokens (zephon 0.2.0's
        text counting spec: field, missing_field, specials, truncation, splitting; padding is
        ignored).  The built-in tokenizer counts one token per whitespace-separated word."""
        c = self.config
        return TextCounting(
            tokenizer=None if type(c.tokenizer) is HashTokenizer else c.tokenizer,
            field=c.field, missing_field=c.missing_field, max_length=c.max_length,
            truncation=c.truncation, split_long_samples=c.split_long_samples,
            special_tokens=c.special_tokens,
        )

    def _text_and_base(self, rec: SampleRecord) -> tuple[str, dict[str, Any]]:
        c = self.config
        payload = rec.payload
        if not isinstance(payload, Mapping):
            return str(payload), {}
        if c.field in payload:
            text = payload[c.field]
        elif c.missing_field == "empty":
            text = ""
        else:
            raise ConfigError(
                expected(
                    f"payload of sample {tuple(rec.meta.sample_id)!r}",
                    f"a {c.field!r} field (have {sorted(map(repr, payload))})",
                    "no such field",
                )
            )
        base = dict(payload) if c.preserve_upstream_payload else {}
        return str(text), base

    def _hf_kwargs(self) -> dict[str, Any]:
        c = self.config
        kw: dict[str, Any] = {"add_special_tokens": not self._owns_specials}
        splitting = c.split_long_samples
        kw["padding"] = c.padding if (not self._owns_specials and not splitting) else False
        kw["truncation"] = False if splitting else c.truncation
        max_len = None if splitting else c.max_length
        if self._owns_specials and c.truncation and c.max_length is not None and not splitting:
            max_len = c.max_length - self._n_bos - self._n_eos
        if max_len is not None:
            kw["max_length"] = max_len
        if self._hands_over_tensors():
            kw["return_tensors"] = c.return_tensors
        return kw

    def _hands_over_tensors(self) -> bool:
        """Whether the tokenizer makes the arrays (step 6): it owns the specials and no split."""
        c = self.config
        return c.return_tensors is not None and not self._owns_specials and not c.split_long_samples

    def _array(self, values: list[int]) -> Any:
        """An emitted field as ``return_tensors`` asks (step 6): the list itself, or the library's array."""
        rt = self.config.return_tensors
        return values if rt is None else library_array(rt, values)

    def process_many(self, elems: list[Any]) -> list[Any]:
        if not elems:
            return []
        texts_bases = [self._text_and_base(r) for r in elems]
        texts = [t for t, _ in texts_bases]
        c = self.config
        try:
            enc = c.tokenizer(texts, **self._hf_kwargs())
        except (TypeError, ValueError, RuntimeError) as exc:
            if not self._hands_over_tensors():
                raise
            raise _tokenizer_refused(exc, c.return_tensors) from exc
        raw_ids = enc["input_ids"]
        raw_masks = enc.get("attention_mask") if hasattr(enc, "get") else None
        rows: list[tuple[list[int], list[int] | None]] = []
        as_given = self._hands_over_tensors()  # rows of the tokenizer's own arrays, kept as they are
        for i in range(len(elems)):
            ids = raw_ids[i] if as_given else _as_list(raw_ids[i])
            mask = (raw_masks[i] if as_given else _as_list(raw_masks[i])) if raw_masks is not None else None
            if self._owns_specials and (self._bos is not None or self._eos is not None):
                pre = [self._bos] if self._bos is not None else []
                post = [self._eos] if self._eos is not None else []
                ids = pre + ids + post
                if mask is not None:
                    mask = [1] * len(pre) + mask + [1] * len(post)
                elif c.add_attention_mask:
                    mask = [1] * len(ids)
            rows.append((ids, mask))
        self._pad_group(rows)
        out: list[SampleRecord] = []
        for rec, (_, base), (ids, mask) in zip(elems, texts_bases, rows, strict=True):
            out.extend(self._emit(rec, base, ids, mask))
        return out

    def _pad_group(self, rows: list[tuple[list[int], list[int] | None]]) -> None:
        """Pad the rows of one call in place when the operator owns the padding (step 4)."""
        c = self.config
        if not (self._owns_specials and c.padding and not c.split_long_samples):
            return
        longest = max((len(i) for i, _ in rows), default=0)
        target = c.max_length if c.padding == "max_length" else longest
        assert target is not None
        pad_id = self._pad_id()
        rows[:] = [_padded(ids, mask, target, pad_id) for ids, mask in rows]

    def _payload(self, base: dict[str, Any], ids: list[int], mask: list[int] | None) -> dict[str, Any]:
        p = dict(base)
        as_given = self._hands_over_tensors()
        p["input_ids"] = ids if as_given else self._array(ids)
        if self.config.add_attention_mask and mask is not None:
            p["attention_mask"] = mask if as_given else self._array(mask)
        return p

    def _emit(
        self, rec: SampleRecord, base: dict[str, Any], ids: list[int], mask: list[int] | None
    ) -> list[SampleRecord]:
        c = self.config
        if not c.split_long_samples:
            return [SampleRecord(rec.meta, self._payload(base, ids, mask))]
        assert c.max_length is not None
        n = c.max_length
        if mask is None and c.add_attention_mask:
            mask = [1] * len(ids)
        windows: list[tuple[list[int], list[int] | None]] = []
        if not ids:
            windows.append(([], [] if mask is not None else None))
        for start in range(0, len(ids), n):
            windows.append((ids[start : start + n], None if mask is None else mask[start : start + n]))
        if c.padding:  # a window is padded to max_length under either padding mode
            pad_id = self._pad_id()
            windows = [_padded(w_ids, w_mask, n, pad_id) for w_ids, w_mask in windows]
        if len(windows) == 1:
            return [SampleRecord(rec.meta, self._payload(base, *windows[0]))]
        last = len(windows) - 1
        return [
            SampleRecord(spawn_child(rec.meta, i, is_last_child=(i == last)), self._payload(base, w, m))
            for i, (w, m) in enumerate(windows)
        ]

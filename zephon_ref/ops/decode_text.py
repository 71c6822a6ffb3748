"""decode_text: bytes fields -> normalised text, one record at a time.

Theory of operation
-------------------
``process_many`` maps each record independently (the accumulator is a count-only
:class:`~zephon_ref.ops.base.CountingAccumulator`, so no state crosses calls and a replay
from any chunk gives the same records).  Per record, for each configured field present in
the (mapping) payload, in the order the fields are named:

1. a bytes-like value (``bytes``, ``bytearray``, ``memoryview``) is decoded with
   ``encoding`` / ``errors``; any other value becomes ``str(value)``;
2. with ``normalize_newlines`` every ``"\\r\\n"`` and then every lone ``"\\r"`` becomes ``"\\n"``;
3. with ``lowercase`` the text is lower-cased (``str.lower``).

Fields the payload lacks are left absent; other fields are copied unchanged into a new
payload dict.  A payload that is not a mapping is a ContractError (a TypeError too, the
builtin zephon 0.2.0 raises).  Tombstones pass through.  Order is preserved.

What may not live here: I/O, per-record state, guessing encodings.
"""

from __future__ import annotations

import codecs
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from zephon_ref.errors import ConfigError, ConfigTypeError, PayloadTypeError, expected
from zephon_ref.ops.base import RecordMapOp
from zephon_ref.ops.knobs import Bool, Int, Opaque, Text, check_execution, check_fields, knob
from zephon_ref.types import SampleRecord

__all__ = ["DEFAULT_PARALLELISM", "DecodeText", "DecodeTextConfig", "UnknownCodecError", "decode_value"]

#: zephon 0.2.0's worker count for decode_text(parallelism=None): an execution setting.
DEFAULT_PARALLELISM = 2


class UnknownCodecError(ConfigError, LookupError):
    """An encoding or error handler codecs does not know: a ConfigError and the LookupError
    zephon 0.2.0 raises for it (at its first decode)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DecodeTextConfig:
    """The data knobs of ``decode_text`` (domains in :mod:`zephon_ref.ops.knobs`)."""

    BUILDER: ClassVar[str] = "decode_text"

    fields: tuple[str, ...] = knob(
        ("text",), Opaque((tuple,), "a tuple of field names"), doc="payload keys to decode, in order"
    )
    encoding: str = knob("utf-8", Text(), doc="a codec name codecs.lookup knows")
    errors: str = knob("strict", Text(), doc="a codecs error handler: strict, replace, ignore, ...")
    normalize_newlines: bool = knob(True, Bool(), doc="CRLF and CR become LF")
    lowercase: bool = knob(False, Bool(), doc="str.lower() after decoding")
    max_batch: int = knob(128, Int(1), doc="records per process_many call (no effect on output)")

    def __post_init__(self) -> None:
        check_fields(self)
        for i, f in enumerate(self.fields):
            if not isinstance(f, str):
                raise ConfigTypeError(expected(f"fields[{i}]", "a str (a payload key)", f))
        try:
            codecs.lookup(self.encoding)
        except LookupError:
            raise UnknownCodecError(
                expected("encoding", "a codec name codecs.lookup() knows", self.encoding)
            ) from None
        try:
            codecs.lookup_error(self.errors)
        except LookupError:
            raise UnknownCodecError(
                expected(
                    "errors", "a registered codecs error handler (strict, replace, ignore, ...)", self.errors
                )
            ) from None


def decode_value(value: Any, c: DecodeTextConfig) -> str:
    """One field's value as text under ``c`` (the plain definition, steps 1-3 above)."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        text = bytes(value).decode(c.encoding, errors=c.errors)
    else:
        text = str(value)
    if c.normalize_newlines:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    if c.lowercase:
        text = text.lower()
    return text


class DecodeText(RecordMapOp):
    """``decode_text(parallelism=None, *, fields=("text",), encoding="utf-8", errors="strict",
    normalize_newlines=True, lowercase=False, max_batch=128, max_latency_ms=2)``."""

    def __init__(
        self,
        fields: Any = ("text",),
        *,
        encoding: str = "utf-8",
        errors: str = "strict",
        normalize_newlines: bool = True,
        lowercase: bool = False,
        max_batch: int = 128,
        max_latency_ms: int | None = 2,
        parallelism: int | None = None,
    ) -> None:
        super().__init__()
        check_execution(parallelism=parallelism)
        if max_latency_ms is not None and (
            isinstance(max_latency_ms, bool) or not isinstance(max_latency_ms, int)
        ):
            raise ConfigTypeError(expected("max_latency_ms", "an int >= 0 or None", max_latency_ms))
        if isinstance(max_latency_ms, int) and max_latency_ms < 0:
            raise ConfigError(expected("max_latency_ms", "an int >= 0 or None", max_latency_ms))
        if isinstance(fields, (str, bytes)) or not hasattr(fields, "__iter__"):
            # zephon takes tuple(fields): "text" would become the fields 't', 'e', 'x', 't'
            raise ConfigTypeError(expected("fields", "a sequence of payload keys (e.g. ('text',))", fields))
        self.config = DecodeTextConfig(
            fields=tuple(fields),
            encoding=encoding,
            errors=errors,
            normalize_newlines=normalize_newlines,
            lowercase=lowercase,
            max_batch=max_batch,
        )
        self.parallelism = DEFAULT_PARALLELISM if parallelism is None else parallelism

    def process_many(self, elems: list[Any]) -> list[Any]:
        c = self.config
        out: list[Any] = []
        for rec in elems:
            if rec.meta.tombstone:
                out.append(rec)
                continue
            payload = rec.payload
            if not isinstance(payload, Mapping):
                raise PayloadTypeError(
                    expected(
                        f"decode_text payload of sample {tuple(rec.meta.sample_id)!r}", "a mapping", payload
                    )
                )
            new = dict(payload)
            for f in c.fields:
                if f in new:
                    new[f] = decode_value(new[f], c)
            out.append(SampleRecord(rec.meta, new))
        return out

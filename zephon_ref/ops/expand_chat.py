"""expand_chat: one conversation prefix per answered user query.

Theory of operation
-------------------
A pure function of each record (count-only accumulator, no cross-call state).  The
messages are read at the dot-separated ``field`` path of the payload; every message must
be a mapping with a non-empty str ``role``.  Scanning the messages in order, user queries
are numbered 0, 1, ... (their *ordinals*); a query is *answered* when an ``assistant``
message follows it before the next ``user`` message (empty content counts).  Each answered
query q gives one prefix: the messages up to (not including) the user message after q, or
all of them for the last query.  Messages before the first user (a system prompt) belong
to every prefix; assistants before any user answer nothing.

* no answered query: the record is replaced by its tombstones (its offsets still close);
* one: one record with the input's metadata (lineage unchanged), its messages cut to the
  prefix (trailing unanswered queries removed);
* several: one child per prefix, ``spawn_child(meta, ordinal)`` (so an unanswered query
  leaves a gap in the child indices), only the last closing; each child's payload is its
  own deep copy (siblings never share nested objects).

Along the field path the containers are copied; other payload fields are kept.  Tombstones
pass through.  Order is preserved (children in prefix order).

What may not live here: role normalisation, loss selection (that is tokenize_chat's).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from zephon_ref.errors import ConfigError, PayloadError, PayloadTypeError, expected
from zephon_ref.lineage import spawn_child, tombstones_for_record
from zephon_ref.ops.base import RecordMapOp
from zephon_ref.ops.knobs import Int, Text, check_execution, check_fields, knob
from zephon_ref.types import SampleRecord

__all__ = ["DEFAULT_PARALLELISM", "ExpandChat", "ExpandChatConfig", "answered_prefixes", "read_path"]

#: zephon 0.2.0's worker count for expand_chat(parallelism=None): an execution setting.
DEFAULT_PARALLELISM = 4


@dataclass(frozen=True, slots=True, kw_only=True)
class ExpandChatConfig:
    """The data knobs of ``expand_chat`` (domains in :mod:`zephon_ref.ops.knobs`)."""

    BUILDER: ClassVar[str] = "expand_chat"

    field: str = knob("messages", Text(), doc="dot-separated payload path of the messages list")
    max_batch: int = knob(64, Int(1), doc="records per process_many call (no effect on output)")

    def __post_init__(self) -> None:
        check_fields(self)
        if any(not part for part in self.field.split(".")):
            raise ConfigError(
                expected("field", "a dot path of non-empty keys (e.g. 'chat.messages')", self.field)
            )


def read_path(payload: Any, path: tuple[str, ...], *, what: str, sample: Any) -> Any:
    """The value at ``path`` in nested mappings; PayloadError naming the sample when a step is missing."""
    value = payload
    for key in path:
        if not isinstance(value, Mapping) or key not in value:
            raise PayloadError(
                expected(
                    f"{what}: payload of sample {sample!r}", f"a {'.'.join(path)!r} field", "no such field"
                )
            )
        value = value[key]
    return value


def answered_prefixes(messages: Sequence[Mapping[str, Any]]) -> list[tuple[int, int]]:
    """``[(user-query ordinal, exclusive end of its prefix)]`` for every answered query, in order."""
    prefixes: list[tuple[int, int]] = []
    ordinal, answered = -1, False
    for i, m in enumerate(messages):
        role = m["role"]
        if role == "user":
            if answered:  # the previous query's prefix ends before this user message
                prefixes.append((ordinal, i))
            ordinal, answered = ordinal + 1, False
        elif role == "assistant" and ordinal >= 0:
            answered = True
    if answered:
        prefixes.append((ordinal, len(messages)))
    return prefixes


class ExpandChat(RecordMapOp):
    """``expand_chat(*, field="messages")``."""

    indexable = False  # a conversation fans out into one record per answered query

    def __init__(
        self,
        *,
        field: str = "messages",
        max_batch: int = 64,
        placement: str = "auto",
        parallelism: int | None = None,
    ) -> None:
        super().__init__()
        check_execution(placement=placement, parallelism=parallelism)
        self.config = ExpandChatConfig(field=field, max_batch=max_batch)
        self.parallelism = DEFAULT_PARALLELISM if parallelism is None else parallelism

    def _messages(self, rec: SampleRecord) -> Sequence[Mapping[str, Any]]:
        path = tuple(self.config.field.split("."))
        sample = tuple(rec.meta.sample_id)
        value = read_path(rec.payload, path, what="expand_chat", sample=sample)
        if not isinstance(value, Sequence) or isinstance(value, (str, bytes)):
            raise PayloadTypeError(
                expected(
                    f"expand_chat: field {self.config.field!r} of sample {sample!r}",
                    "a sequence of messages",
                    value,
                )
            )
        for i, m in enumerate(value):
            if not isinstance(m, Mapping) or not isinstance(m.get("role"), str) or not m["role"]:
                raise PayloadError(
                    expected(
                        f"expand_chat: message {i} of sample {sample!r}",
                        "a mapping with a non-empty str 'role'",
                        m,
                    )
                )
        return value

    def _with_messages(self, payload: Any, messages: Sequence[Any]) -> dict[str, Any]:
        path = self.config.field.split(".")
        top: dict[str, Any] = dict(payload)
        here, src = top, payload
        for key in path[:-1]:
            src = src[key]
            here[key] = dict(src)
            here = here[key]
        here[path[-1]] = messages
        return top

    def process_many(self, elems: list[Any]) -> list[Any]:
        out: list[Any] = []
        for rec in elems:
            if rec.meta.tombstone:
                out.append(rec)
                continue
            messages = self._messages(rec)
            prefixes = answered_prefixes(messages)
            if not prefixes:
                out.extend(tombstones_for_record(rec))
                continue
            if len(prefixes) == 1:
                end = prefixes[0][1]
                payload = (
                    rec.payload
                    if end == len(messages)
                    else self._with_messages(rec.payload, messages[:end])
                )
                out.append(SampleRecord(rec.meta, payload))
                continue
            last = len(prefixes) - 1
            for i, (ordinal, end) in enumerate(prefixes):
                payload = self._with_messages(rec.payload, messages[:end])
                if i != last:
                    payload = copy.deepcopy(payload)
                out.append(SampleRecord(spawn_child(rec.meta, ordinal, is_last_child=(i == last)), payload))
        return out

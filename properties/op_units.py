"""The operator unit properties, over every operator call the API generator draws.

Theory of operation
-------------------
:func:`op_cases` draws one operator call from :mod:`properties.generator` (every data method of the
builder, every knob and value class, the random-order packers and ``block_warmup`` among them),
builds it with the builder, and draws the records it is fed (:func:`unit_streams`): lanes of
increasing chunks whose records are empty, exactly ``max_length`` long, a little shorter or longer,
fanned out into siblings of one offset (a one-to-many map), optionally cut by
``tokenize(split_long_samples=True)`` before the operator (a packer then sees windows of one
document), and single-record epochs.  The operators that read other payloads get them in the same
lineage shapes (no tombstones: the engine forwards those past every operator, zephon's too):
``decode_text`` bytes-like (or str / int)
values in the fields it decodes, some absent (:func:`bytes_payloads`); ``expand_chat`` and
``tokenize_chat`` message lists at the drawn field path, unanswered, empty and tool turns among them,
with per-record tools / thinking flags (:func:`chat_payloads`; ``tokenize_chat`` runs the tiny
offline Hugging Face tokenizer of :mod:`properties.hf_tokenizer`); ``map_batch`` the micro-batches
of a ``batch`` call drawn from the API in front of it; ``pack_sequences(pack_payloads="torch_tensor")``
int64 tensors for every list field where torch imports (without torch the lists stay and the packer
refuses them, typed).  The token records carry a ``labels`` field beside ``input_ids`` (each id with
its low bit flipped, split windows and fan-out siblings included).  Four properties hold for every
case (:func:`unit_problems`):

* **exactly-once closure**: over pushes cut at drawn points and a final flush, every input base
  offset closes exactly once, after every other fragment of it (a partial micro-batch dropped under
  ``batch(drop_last=True)`` may leave offsets unclosed: documented);
* **flush resets the lane**: after a prefix of the stream (so a flush may find the lane's buffer
  empty, right after a block or a pack left), ``flush(reset=True, lane_id=L)`` leaves lane L like a
  fresh accumulator and the other lanes as if L had never been flushed;
* **no pending data after a flush**: ``has_pending_data`` is False for the flushed lane, and for
  every lane after a full flush.
* **payload values** (:func:`payload_problems`): every delivered record keeps ``labels`` aligned
  with its tokens (a pack envelope's slices and a flat pack's pad tail included); tokenize's ids,
  padding and ``attention_mask`` equal a plain definition of its knobs.

Fixed cases per method (:func:`regression_cases`) run before the drawn ones: each payload path the
check guards is reached whatever the generator draws.

The ``operators`` row of :mod:`properties.conformance` runs them for implementations whose
operators are zephon_ref's; tests/unit/test_ops_properties.py runs them under the ci profile.
"""

from __future__ import annotations

import importlib.util
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

from properties import generator as gen
from properties.hf_tokenizer import WORDS
from properties.opkit import closers, last_fragment, rec, run, split
from zephon_ref.lineage import spawn_child
from zephon_ref.types import SampleBatch, SampleRecord

__all__ = ["COMPONENTS", "LABELS", "OpCase", "bytes_payloads", "chat_payloads", "labels_of", "op_cases",
           "payload_problems", "regression_cases", "unit_problems", "unit_streams"]

#: the component names of the probe source (component ids 0, 1, 2 in the records)
COMPONENTS = ("web", "code", "books")


@dataclass(frozen=True)
class OpCase:
    method: str
    kwargs: Mapping[str, Any]
    split_first: int | None  # tokenize(split_long_samples=True, max_length=...) before the operator
    records: tuple[SampleRecord, ...]
    cuts: tuple[int, ...]
    prefix: int  # records pushed before the lane's reset flush
    batch_first: Mapping[str, Any] | None = None  # batch(**batch_first) before the operator (map_batch)

    def describe(self) -> str:
        kw = {k: _short(v) for k, v in self.kwargs.items()}
        shape = [(r.meta.lane_id, r.meta.chunk_id, r.meta.chunk_offset, r.meta.lineage, _size(r.payload))
                 for r in self.records]
        pre = (f"tokenize(split_long_samples=True, max_length={self.split_first}) -> "
               if self.split_first else "")
        if self.batch_first is not None:
            pre += f"batch({dict(self.batch_first)}) -> "
        return (f"{pre}{self.method}({kw}) over {len(self.records)} records "
                f"(lane, chunk, offset, lineage, tokens) {shape}, cuts {list(self.cuts)}, reset after "
                f"{self.prefix}")


def _short(v: Any) -> Any:
    """A knob value as the failure line shows it (a function's name, a tokenizer's template kind)."""
    if hasattr(v, "__name__"):
        return v.__name__
    if hasattr(v, "apply_chat_template"):
        from properties.hf_tokenizer import KINDS

        own = getattr(v, "chat_template", None)
        return "tiny_hf:" + next((k for k, t in KINDS.items() if t == own), "?")
    return v if not isinstance(v, str) or len(v) < 40 else v[:37] + "..."


def _size(payload: Any) -> Any:
    """A record's shape in the failure line: tokens, a chat's roles, a bytes field's length."""
    if payload is None:
        return None  # a tombstone
    if not isinstance(payload, Mapping):
        return type(payload).__name__
    if "input_ids" in payload:
        return len(payload["input_ids"])
    msgs = payload.get("messages", payload.get("chat", {}).get("messages") if isinstance(
        payload.get("chat"), Mapping) else None)
    if isinstance(msgs, list):
        return "".join(m["role"][0] for m in msgs) or "no messages"
    return {k: (len(v) if hasattr(v, "__len__") else v) for k, v in payload.items()}


def _probe() -> Any:
    from properties.pipelines import PipelineConfig, work_source
    from zephon_ref.pipeline import Pipeline

    cfg = PipelineConfig(chain=[], layout={n: (4,) for n in COMPONENTS}, weights={n: 1.0 for n in COMPONENTS},
                         source_kwargs={"chunk_size": 1, "seed": 0})
    return Pipeline(work_source(cfg))


def build_op(method: str, kwargs: Mapping[str, Any]) -> Any:
    """The operator ``Pipeline.<method>(**kwargs)`` adds (built by the builder, so its checks run;
    after the call :data:`properties.generator.PRECEDED_BY` names, where the builder needs one)."""
    p = _probe()
    if method in gen.PRECEDED_BY:
        before, before_kw = gen.PRECEDED_BY[method]
        p = getattr(p, before)(**dict(before_kw))
    p = getattr(p, method)(**dict(kwargs))
    return p._ops[-1][1]


def _payload(n: int, seed: int) -> dict[str, Any]:
    ids = [100 + (seed * 7 + i * 3) % 50 for i in range(n)]
    return {"input_ids": ids, "mask": [1] * n, LABELS: labels_of(ids)}


#: a per-token field beside the tokens in the records the row feeds (:func:`payload_problems` checks
#: that it still lines up with the tokens on every delivered record)
LABELS = "labels"


def labels_of(ids: Sequence[int]) -> list[int]:
    """The :data:`LABELS` field of tokens ``ids``: each token's id with its low bit flipped (never 0
    for the row's ids, which are >= 4; zephon pads a field beside the tokens with 0)."""
    return [int(t) ^ 1 for t in ids]


@st.composite
def unit_streams(draw: Any, *, length: int | None = None, empty_closers: bool = False) -> list[SampleRecord]:
    """Per-lane increasing chunks of records: empty, exactly ``length`` tokens, around it or small;
    some fanned out into 2-3 siblings of one offset (``empty_closers``: the closing one empty one time in
    four, the packers' D-2 shape); at times a single record."""
    if draw(st.integers(0, 5)) == 0:  # a single-record epoch
        n = draw(st.sampled_from([0, 1] + ([length] if length else [])))
        return [SampleRecord(rec(0, 0, 0).meta, _payload(n, 0))]
    lanes = draw(st.lists(st.integers(0, 3), min_size=1, max_size=3, unique=True))
    sizes = [0, 1, 2, 3, 5, 9, 14] + ([length - 1, length, length + 1, 2 * length] if length else [])
    sizes = sorted({s for s in sizes if s >= 0})
    out: list[SampleRecord] = []
    next_chunk = dict.fromkeys(lanes, 0)
    for _ in range(draw(st.integers(1, 6))):
        lane = draw(st.sampled_from(lanes))
        c = next_chunk[lane]
        next_chunk[lane] += 1
        for o in range(draw(st.integers(1, 5))):
            n = draw(st.sampled_from(sizes))
            r = rec(lane, c, o, comp=draw(st.integers(0, 2)), payload=_payload(n, c * 10 + o))
            pieces = draw(st.integers(1, 3))
            if pieces == 1:
                out.append(r)
                continue
            ids = r.payload["input_ids"]
            # a one-to-many map: siblings of one offset (contiguous windows of any lengths, so a
            # closing child may be the longest), the last one closing
            cuts = sorted(draw(st.lists(st.integers(0, len(ids)), min_size=pieces - 1, max_size=pieces - 1)))
            if empty_closers and draw(st.integers(0, 3)) == 0:  # at times an empty closing child (D-2)
                cuts[-1] = len(ids)
            bounds = [0, *cuts, len(ids)]
            for i in range(pieces):
                meta = spawn_child(r.meta, i, is_last_child=(i == pieces - 1))
                part = ids[bounds[i]:bounds[i + 1]]
                out.append(SampleRecord(meta, {"input_ids": part, "mask": [1] * len(part),
                                               LABELS: labels_of(part)}))
    return out


def _texts(recs: Sequence[SampleRecord]) -> list[SampleRecord]:
    return [SampleRecord(r.meta, {"text": " ".join(f"w{t}" for t in r.payload["input_ids"])}) for r in recs]


_WORD = st.sampled_from(WORDS)


def _sentence(draw: Any, lo: int = 0, hi: int = 4) -> str:
    return " ".join(draw(st.lists(_WORD, min_size=lo, max_size=hi)))


@st.composite
def bytes_payloads(draw: Any, recs: Sequence[SampleRecord], kwargs: Mapping[str, Any]) -> list[SampleRecord]:
    """``recs`` (tombstones kept) with ``decode_text`` payloads: each of the drawn ``fields`` (and a
    ``text`` field) holds bytes, a bytearray, a memoryview, a str or an int, or is absent; the text has
    CR, CRLF or LF line ends and capitals, and is encodable in the drawn ``encoding`` unless the drawn
    ``errors`` handler tolerates what is not (then an undecodable byte may appear too)."""
    fields = tuple(kwargs.get("fields", ("text",)))
    encoding = kwargs.get("encoding", "utf-8")
    strict = kwargs.get("errors", "strict") == "strict"
    out: list[SampleRecord] = []
    for r in recs:
        if r.meta.tombstone:
            out.append(r)
            continue
        payload: dict[str, Any] = {"id": r.meta.chunk_offset}
        for f in dict.fromkeys(("text", *fields)):
            if draw(st.integers(0, 5)) == 0:
                continue  # absent: decode_text leaves it absent
            words = [w.capitalize() if draw(st.booleans()) else w
                     for w in draw(st.lists(_WORD, max_size=5))]
            text = draw(st.sampled_from([" ", "\r\n", "\r", "\n"])).join(words)
            if draw(st.integers(0, 3)) == 0:
                text += "\u00e9"  # not ascii
            # encodable under a strict handler (what the codec cannot hold is left out), else utf-8
            raw = text.encode(encoding if strict else "utf-8", errors="ignore")
            if not strict and draw(st.integers(0, 3)) == 0:
                raw += b"\xff"  # not utf-8, not ascii
            kind = draw(st.sampled_from(["bytes", "bytes", "bytearray", "memoryview", "str", "int"]))
            payload[f] = {"bytes": raw, "bytearray": bytearray(raw), "memoryview": memoryview(raw),
                          "str": text, "int": len(raw)}[kind]
        out.append(SampleRecord(r.meta, payload))
    return out


@st.composite
def _messages(draw: Any, *, user_first: bool) -> list[dict[str, Any]]:
    """A chat: an optional system prompt, user queries answered (or not, or by an empty turn), the
    odd tool turn; ``user_first``: it opens with a non-empty system or user message (a template-free
    render otherwise supervises its first token, which tokenize_chat refuses)."""
    msgs: list[dict[str, Any]] = []
    if draw(st.integers(0, 3)) == 0:
        msgs.append({"role": "system", "content": _sentence(draw, 1, 3)})
    if not user_first and draw(st.integers(0, 5)) == 0:
        msgs.append({"role": "assistant", "content": _sentence(draw)})  # answers no query
    for q in range(draw(st.integers(0, 3))):
        msgs.append({"role": "user", "content": _sentence(draw, 1 if user_first and q == 0 else 0)})
        turn = draw(st.sampled_from(["answered", "answered", "unanswered", "empty", "tool"]))
        if turn == "answered":
            msgs.append({"role": "assistant", "content": _sentence(draw, 1)})
        elif turn == "empty":
            msgs.append({"role": "assistant", "content": ""})
        elif turn == "tool":
            msgs += [{"role": "assistant", "content": _sentence(draw, 1)},
                     {"role": "tool", "content": _sentence(draw, 1, 2)},
                     {"role": "assistant", "content": _sentence(draw, 0)}]
    if user_first and not msgs:
        msgs.append({"role": "user", "content": _sentence(draw, 1)})
    return msgs


def _put(payload: dict[str, Any], path: str, value: Any) -> None:
    *outer, last = path.split(".")
    here = payload
    for key in outer:
        here = here.setdefault(key, {})
    here[last] = value


def _owned_ranges(kwargs: Mapping[str, Any]) -> bool:
    """Whether a tokenize_chat call takes zephon's owned generation ranges (after_last_user over tags)."""
    from zephon_ref.ops.tokenize_chat import GENERATION_TAG

    template = kwargs.get("chat_template") or getattr(kwargs.get("tokenizer"), "chat_template", None)
    return (
        kwargs.get("loss_scope") == "after_last_user"
        and kwargs.get("apply_chat_template", True) is not False
        and kwargs.get("span_source", "auto") != "prefix_diff"
        and isinstance(template, str)
        and GENERATION_TAG.search(template) is not None
    )


@st.composite
def chat_payloads(draw: Any, recs: Sequence[SampleRecord], method: str,
                  kwargs: Mapping[str, Any]) -> list[SampleRecord]:
    """``recs`` (tombstones kept) with chat payloads for ``method``: messages at the drawn ``field``
    path, an upstream ``meta`` field, and (tokenize_chat) per-record tools / thinking flags at the
    drawn paths, at times."""
    field = kwargs.get("field", "messages")
    user_first = method == "tokenize_chat"
    owned = method == "tokenize_chat" and _owned_ranges(kwargs)
    out: list[SampleRecord] = []
    for r in recs:
        if r.meta.tombstone:
            out.append(r)
            continue
        payload: dict[str, Any] = {"meta": {"k": r.meta.chunk_offset}}
        msgs = draw(_messages(user_first=user_first))
        if owned and draw(st.integers(0, 7)) != 7:
            # zephon's owned generation ranges refuse (its mask-parity check) an assistant whose text is
            # only whitespace under the tagged template: answered turns in 7 records of 8 (streams compared)
            msgs = [{**m, "content": m["content"] or "ok"} if m["role"] == "assistant" else m for m in msgs]
        if method == "tokenize_chat":
            # a space after every content, as chat data has between turns: a template-free render
            # concatenates contents, and "hi" + "fine</s>" would be one word of the word-level tokenizer
            msgs = [{**m, "content": m["content"] + " "} for m in msgs]
        _put(payload, field, msgs)
        if method == "tokenize_chat":
            if draw(st.integers(0, 3)) == 0:
                _put(payload, kwargs.get("tools_field", "tools"), [{"name": draw(_WORD)}])
            if draw(st.integers(0, 3)) == 0:
                _put(payload, kwargs.get("enable_thinking_field", "enable_thinking"), draw(st.booleans()))
        out.append(SampleRecord(r.meta, payload))
    return out


@st.composite
def op_cases(draw: Any, *, methods: Sequence[str] | None = None) -> OpCase:
    """An operator call drawn from the API and the records it is fed (the module docstring)."""
    table = gen.api()
    names = gen.drawn_methods() if methods is None else [m for m in methods if m in table]
    method = draw(st.sampled_from(names))
    validate = gen.refused_by_builder(_probe)
    _, kwargs = draw(gen.op_call(table[method], ctx={"components": COMPONENTS}, validate=validate,
                                 mode_aware=True))
    length = kwargs.get("max_length") if isinstance(kwargs.get("max_length"), int) else None
    # wrap is fed empty closing children too (split first or not): their closer waits for a buffered
    # sibling (divergence D-2, which zephon 0.2.0 tombstones at once)
    recs = draw(unit_streams(length=length, empty_closers=method in ("pack_sequences", "pack_flat")))
    split_first = None
    if method == "pack_sequences" and draw(st.booleans()):
        split_first = draw(st.integers(1, max(1, (length or 8) // 2 + 1)))
    batch_first = None
    if method == "decode_text":
        recs = draw(bytes_payloads(recs, kwargs))
    elif method in ("expand_chat", "tokenize_chat"):
        recs = draw(chat_payloads(recs, method, kwargs))
    elif method == "map_batch":  # a batch call drawn from the API in front of it
        _, batch_first = draw(gen.op_call(table["batch"], ctx={"components": COMPONENTS}, validate=validate,
                                          mode_aware=True))
    case = OpCase(method, kwargs, split_first, tuple(recs), (), 0, batch_first)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a batch's documented drops: not this row's subject
        n = len(fed_records(case))  # what the operator is fed (micro-batches after batch)
    cuts = tuple(draw(st.lists(st.integers(0, n), max_size=4)))
    prefix = draw(st.integers(0, n))
    return OpCase(method, kwargs, split_first, tuple(recs), cuts, prefix, batch_first)


def _empty_closer_after_a_buffered_sibling() -> tuple[SampleRecord, ...]:
    """Offset (0, 0, 0) split into 3 tokens and an empty closing child, then a 1:1 record of 10 tokens
    on the same lane: wrap's window (max_length 10) emits the 3 tokens only with that record."""
    base = rec(0, 0, 0)
    kids = [SampleRecord(spawn_child(base.meta, 0), _payload(3, 0)),
            SampleRecord(spawn_child(base.meta, 1, is_last_child=True), _payload(0, 0))]
    return (*kids, rec(0, 0, 1, payload=_payload(10, 1)))


def _flat(out: Sequence[Any]) -> list[SampleRecord]:
    res: list[SampleRecord] = []
    for x in out:
        res.extend(x.records if isinstance(x, SampleBatch) else [x])
    return res


def _lane(x: Any) -> int:
    """The lane of a fed element: a record's, or a (lane-pure) micro-batch's."""
    return int(x.records[0].meta.lane_id if isinstance(x, SampleBatch) else x.meta.lane_id)


def _key(out: Sequence[Any]) -> list[Any]:
    return [(r.meta.lane_id, r.meta.cursor, r.meta.contributors, r.meta.tombstone, repr(r.payload))
            for r in _flat(out)]


CTX = {"get_component_id": lambda name: COMPONENTS.index(name)}


def fed_records(case: OpCase) -> list[SampleRecord]:
    """What the operator is fed: the case's records, as text for tokenize, cut into windows first
    when the case says so, batched first for map_batch (micro-batches and the tombstones that pass)."""
    recs: list[Any] = list(case.records)
    if case.batch_first is not None:
        return run(build_op("batch", case.batch_first), [recs], ctx=dict(CTX))
    if case.split_first is not None:
        from zephon_ref.ops import Tokenize

        pre = Tokenize(field="text", max_length=case.split_first, split_long_samples=True,
                       special_tokens="none", tokenizer=_WordIds())
        # each window with its labels beside its tokens (the field the payload check follows)
        recs = [SampleRecord(r.meta, {**r.payload, LABELS: labels_of(r.payload["input_ids"])})
                for r in pre.process_many(_texts(recs))]
    elif case.method == "tokenize":
        recs = _texts(recs)
    if case.method == "pack_sequences" and case.kwargs.get("pack_payloads") == "torch_tensor":
        recs = _tensor_payloads(recs)
    return recs


def _tensor_payloads(recs: list[Any]) -> list[Any]:
    """``pack_payloads="torch_tensor"`` joins tensors only: every list field as an int64 tensor when
    torch imports (without torch the lists stay, and the packer refuses them, typed)."""
    if importlib.util.find_spec("torch") is None:
        return recs
    import torch

    return [SampleRecord(r.meta, {k: torch.tensor(v, dtype=torch.int64) if isinstance(v, list) else v
                                  for k, v in r.payload.items()})
            if isinstance(r.payload, Mapping) else r for r in recs]


class _WordIds:
    """An HF-style tokenizer that reads back the ids :func:`_texts` wrote ("w123" -> 123)."""

    def __call__(self, texts: Any, **_kw: Any) -> dict[str, list[list[int]]]:
        batch = [texts] if isinstance(texts, str) else list(texts)
        ids = [[int(w[1:]) for w in t.split()] for t in batch]
        return {"input_ids": ids, "attention_mask": [[1] * len(i) for i in ids]}


def unit_problems(case: OpCase) -> list[str]:
    """The first problem of each of the properties for ``case`` (empty: all hold): exactly-once closure,
    pending data told truly, a lane's pending data and epoch-reset answers its own, flush resets the lane,
    no pending data after a flush."""
    from zephon_ref.errors import ZephonRefError

    recs = fed_records(case)
    if not recs:
        return []
    problems: list[str] = []

    def op() -> Any:
        return build_op(case.method, case.kwargs)

    try:
        out = _flat(run(op(), split(recs, case.cuts), ctx=dict(CTX)))
    except ZephonRefError:
        return []  # refused input (a record over max_length under drop_oversized=False): typed, not a bug
    drops = case.method == "batch" and case.kwargs.get("drop_last", True)
    # after a batch(drop_last=True) in front (map_batch), an offset whose closer that batch dropped is
    # not owed: only the offsets the fed micro-batches close are
    problems += _closure(_flat(recs), out, partial_ok=drops, owed_closed_only=case.batch_first is not None)
    problems += payload_problems(case, recs, out)

    # flush resets the lane: after the drawn prefix, and after each of the first prefixes that leave
    # their last record's lane with nothing pending (a flush that finds the lane's buffer empty,
    # right after a block or a pack left)
    the_op = op()
    try:
        found, empties = _pending_problems(the_op, recs)
        problems += found
        for prefix in sorted({case.prefix, *empties}):
            problems += _reset_problems(the_op, recs, prefix)
            if problems:
                break
    except ZephonRefError:
        # refused input that depends on how the records are grouped into calls (tokenize's ragged
        # return_tensors batch under special_tokens="tokenizer_default" without padding: typed)
        pass
    return problems


def _pending_problems(the_op: Any, recs: Sequence[Any]) -> tuple[list[str], list[int]]:
    """Pending data told truly, pushed one record at a time (an offset whose closer was fed and that has
    not closed yet is held, so its lane has pending data; the all-lanes answer is the lanes' any), and a
    lane's answers its own (seed 002: its pending data and whether a stalled flush of epoch boundary b
    may pass, ``try_epoch_reset``, equal those of the lane pushed alone); with the first prefixes that
    leave their last record's lane with nothing pending (a flush that finds the lane's buffer empty)."""
    problems: list[str] = []
    probe = the_op.accumulator(deterministic=True, ctx=dict(CTX))
    empties: list[int] = []
    owed: set[tuple[int, int, int]] = set()
    lanes: set[int] = set()
    for k, r in enumerate(recs, 1):
        owed |= set(closers(_flat([r])))
        owed -= set(closers(_flat(run(the_op, [[r]], acc=probe, flush=False))))
        lanes.add(_lane(r))
        held = sorted(key for key in owed if key[0] == _lane(r))
        if held and not probe.has_pending_data(_lane(r)) and not problems:
            problems.append(f"lane {_lane(r)} says it has no pending data after {k} records, while offsets "
                            f"{held[:3]} were fed their closer and never closed")
        each = sorted(lane for lane in lanes if probe.has_pending_data(lane))
        if bool(probe.has_pending_data()) != bool(each) and not problems:
            problems.append(f"has_pending_data() is {probe.has_pending_data()!r} after {k} records while "
                            f"lanes {each} have pending data")
        if not probe.has_pending_data(_lane(r)) and len(empties) < 3:
            empties.append(k)
    for lane in sorted(lanes):
        if problems:
            break
        own = [r for r in recs if _lane(r) == lane]
        alone = the_op.accumulator(deterministic=True, ctx=dict(CTX))
        for r in own:
            run(the_op, [[r]], acc=alone, flush=False)
        for b in range(max(x.meta.chunk_id for x in _flat(own)) + 2):
            if probe.try_epoch_reset(b, lane) != alone.try_epoch_reset(b, lane):
                problems.append(f"try_epoch_reset({b}, lane_id={lane}) is {probe.try_epoch_reset(b, lane)!r} "
                                f"beside other lanes and {alone.try_epoch_reset(b, lane)!r} alone")
                break
        if not problems and probe.has_pending_data(lane) != alone.has_pending_data(lane):
            problems.append(f"has_pending_data({lane}) is {probe.has_pending_data(lane)!r} beside other "
                            f"lanes and {alone.has_pending_data(lane)!r} alone")
    return problems, empties


def _reset_problems(the_op: Any, recs: Sequence[Any], prefix: int) -> list[str]:
    problems: list[str] = []
    before, after = recs[:prefix], recs[prefix:]
    lane = _lane((before or recs)[-1])
    used = the_op.accumulator(deterministic=True, ctx=dict(CTX))
    run(the_op, [before], acc=used, flush=False)
    flushed = [x for b, _ in used.flush(reset=True, lane_id=lane) for x in the_op.process_many(list(b))]
    if any(r.meta.lane_id != lane for r in _flat(flushed)):
        problems.append(f"flush(reset=True, lane_id={lane}) emitted records of other lanes")
    if used.has_pending_data(lane):
        problems.append(f"lane {lane} has pending data after flush(reset=True, lane_id={lane})")
    after_l = [r for r in after if _lane(r) == lane]
    fresh = the_op.accumulator(deterministic=True, ctx=dict(CTX))
    got = [r for r in _flat(run(the_op, [after_l], acc=used, flush=False)) if r.meta.lane_id == lane]
    want = _flat(run(the_op, [after_l], acc=fresh, flush=False))
    if _key(got) != _key(want):
        problems.append(f"lane {lane} after flush(reset=True) differs from a fresh accumulator: "
                        f"{_key(got)[:2]!r:.300} vs {_key(want)[:2]!r:.300}")
    ref = the_op.accumulator(deterministic=True, ctx=dict(CTX))
    run(the_op, [[r for r in before if _lane(r) != lane]], acc=ref, flush=False)
    rest_used = [r for r in _flat(run(the_op, [], acc=used)) if r.meta.lane_id != lane]
    rest_ref = [r for r in _flat(run(the_op, [], acc=ref)) if r.meta.lane_id != lane]
    if _key(rest_used) != _key(rest_ref):
        problems.append(f"lanes other than {lane} changed by its flush(reset=True)")
    if used.has_pending_data():
        problems.append("pending data after a full flush")
    return [f"{p} (reset after {prefix} records)" for p in problems]


def _closure(inputs: Sequence[SampleRecord], out: Sequence[SampleRecord], *, partial_ok: bool,
             owed_closed_only: bool = False) -> list[str]:
    want = (set(closers(inputs)) if owed_closed_only
            else {(r.meta.lane_id, r.meta.chunk_id, r.meta.chunk_offset) for r in inputs})
    cl = closers(out)
    last = last_fragment(out)
    problems = []
    missing = sorted(want - set(cl))
    if missing and not partial_ok:
        problems.append(f"offsets never closed: {missing[:4]}")
    extra = sorted(set(cl) - want)
    if extra:
        problems.append(f"offsets closed that were never fed: {extra[:4]}")
    for key, pos in sorted(cl.items()):
        if len(pos) != 1:
            problems.append(f"offset {key} closed {len(pos)} times (output positions {pos})")
            break
        if pos[0] != last[key]:
            problems.append(f"offset {key} closed at {pos[0]}, before its fragment at {last[key]}")
            break
    return problems


# -- payload values ------------------------------------------------------------------------------------

def _ints(v: Any) -> list[int]:
    """A token-like field as a list of ints (a list, or a torch / numpy array's ``tolist()``)."""
    return [int(x) for x in (v.tolist() if hasattr(v, "tolist") else v)]


def _token_maps(payload: Any) -> list[Mapping[str, Any]]:
    """Every mapping in a delivered payload that holds ``input_ids``: the record's own, a pack
    envelope's entries (``packed_samples``, a ``pack_payloads`` callable's ``entries``)."""
    found: list[Mapping[str, Any]] = []
    if isinstance(payload, Mapping):
        if "input_ids" in payload:
            found.append(payload)
        for v in payload.values():
            if isinstance(v, (list, tuple)):
                for x in v:
                    found += _token_maps(x)
    return found


def payload_problems(case: OpCase, fed: Sequence[Any], out: Sequence[SampleRecord]) -> list[str]:
    """Payload values, record by record (the first problem; empty: they hold).

    * every operator: where every fed record with tokens carries :data:`LABELS`, every delivered
      mapping with ``input_ids`` (a record's payload, a pack envelope's entry, a flat pack) carries it
      too, of the tokens' length, and ``labels[i] == input_ids[i] ^ 1`` at each position but a
      trailing pad run, where it is 0 (a flat pack pads the fields beside the tokens with 0);
    * ``tokenize``: :func:`_tokenize_problems` (ids, attention mask and padding from a plain
      definition of the knobs)."""
    if case.method == "tokenize":
        return _tokenize_problems(case, fed, out)
    with_ids = [m for r in _flat(fed) if not r.meta.tombstone for m in _token_maps(r.payload)]
    labelled = bool(with_ids) and all(LABELS in m for m in with_ids)
    for r in out:
        if r.meta.tombstone:
            continue
        for m in _token_maps(r.payload):
            if LABELS not in m:
                if labelled:
                    return [f"record {r.meta.cursor} lost the field {LABELS!r} beside its tokens "
                            f"(fields {sorted(m)})"]
                continue
            ids, labels = _ints(m["input_ids"]), _ints(m[LABELS])
            if len(ids) != len(labels):
                return [f"record {r.meta.cursor}: {LABELS!r} has {len(labels)} values for {len(ids)} tokens"]
            real = len(ids)
            while real and labels[real - 1] == 0:  # a pad tail (never a real label: the ids are >= 4)
                real -= 1
            if labels[:real] != labels_of(ids[:real]):
                bad = next(i for i in range(real) if labels[i] != ids[i] ^ 1)
                return [f"record {r.meta.cursor}: {LABELS!r} no longer lines up with its tokens at "
                        f"position {bad} ({labels[bad]} for token {ids[bad]}; want {ids[bad] ^ 1})"]
    return []


def _tokenize_expected(kwargs: Mapping[str, Any], text: str) -> list[int]:
    """What ``tokenize(**kwargs)`` makes of ``text`` before padding and splitting, from the knobs'
    documented meaning: the built-in tokenizer's words (``crc32(word) % vocab_size + offset``),
    cut to ``max_length`` under ``truncation`` (less the room for the operator's specials), between
    BOS / EOS as ``special_tokens`` says (the built-in tokenizer adds none of its own)."""
    import zlib

    from zephon_ref.ops.tokenize import HashTokenizer

    tok = kwargs.get("tokenizer") or HashTokenizer()
    words = [zlib.crc32(w.encode("utf-8")) % tok.vocab_size + tok.offset for w in text.split()]
    mode = kwargs.get("special_tokens", "bos_eos")
    bos = ([kwargs.get("bos_token_id") if kwargs.get("bos_token_id") is not None else tok.bos_token_id]
           if mode in ("bos_eos", "bos") else [])
    eos = ([kwargs.get("eos_token_id") if kwargs.get("eos_token_id") is not None else tok.eos_token_id]
           if mode in ("bos_eos", "eos") else [])
    n = kwargs.get("max_length")
    if kwargs.get("truncation") and n is not None:
        words = words[: n - len(bos) - len(eos)]
    return [*bos, *words, *eos]


def _tokenize_problems(case: OpCase, fed: Sequence[Any], out: Sequence[SampleRecord]) -> list[str]:
    """tokenize's payloads against :func:`_tokenize_expected`: a record (or the windows of a split
    record, in order) holds the expected ids, each followed by a run of the tokenizer's pad id (0,
    below its real ids) as the padding knob says (none; up to ``max_length``; at least the record's
    own length under ``"longest"``); ``attention_mask`` is there iff ``add_attention_mask``, of the
    ids' length, 1 exactly on the real tokens and 0 exactly on the pads."""
    kw = case.kwargs
    n = kw.get("max_length")
    padding = {True: "longest", "do_not_pad": False}.get(kw.get("padding", False), kw.get("padding", False))
    splits = bool(kw.get("split_long_samples"))
    if (kw.get("return_tensors") is not None and kw.get("special_tokens") == "tokenizer_default"
            and not splits and not padding):
        # the tokenizer builds one tensor of a call's rows: a ragged call is refused (typed; torch alone
        # would give torch.tensor([[], [699]]) an empty (2, 0) tensor, as zephon 0.2.0 does: D-103), and
        # the rows of an even call are the tokenizer's own; not compared here
        return []
    from zephon_ref.ops.tokenize import HashTokenizer

    tok = kw.get("tokenizer") or HashTokenizer()
    brackets = kw.get("special_tokens", "bos_eos") in ("bos_eos", "bos", "eos")
    # a mask where asked and there is one to give: the tokenizer's, or one the operator makes when it
    # adds a BOS / EOS or cuts windows (zephon 0.2.0 the same: a tokenizer that returns no mask under
    # special_tokens "none" or "tokenizer_default" leaves the record without one)
    want_mask = kw.get("add_attention_mask", True) and (
        "attention_mask" in tok(["w"]) or brackets or splits)
    pad_id = 0  # the built-in tokenizers' pad_token_id
    key = {(r.meta.lane_id, r.meta.chunk_id, r.meta.chunk_offset, r.meta.lineage): r for r in fed}
    got: dict[Any, list[SampleRecord]] = {}
    for r in out:
        own = (r.meta.lane_id, r.meta.chunk_id, r.meta.chunk_offset, r.meta.lineage)
        # a record split into one window keeps its meta; two or more are children (one more lineage
        # element; the fed siblings of an offset never sit beside a whole record of it)
        got.setdefault(own if own in key or not splits else (*own[:3], own[3][:-1]), []).append(r)
    for k, src in key.items():
        recs = sorted(got.get(k, []), key=lambda x: x.meta.lineage)
        full = _tokenize_expected(kw, str(src.payload["text"]))
        windows = ([full[i:i + n] for i in range(0, len(full), n)] or [[]]) if splits else [full]
        if len(recs) != len(windows):
            return [f"tokenize: sample {k} gave {len(recs)} records, want {len(windows)} "
                    f"(ids {full!r:.120})"]
        for r, real in zip(recs, windows, strict=True):
            p = r.payload
            ids = _ints(p["input_ids"])
            size = len(real)
            if splits and padding:
                size = n
            elif padding == "max_length" and n is not None:
                size = max(size, n)
            ok_len = len(ids) >= size if padding == "longest" and not splits else len(ids) == size
            where = f"tokenize: record {r.meta.cursor} of text {src.payload['text']!r:.60}"
            if ids[:len(real)] != real or not ok_len or any(t != pad_id for t in ids[len(real):]):
                return [f"{where}: input_ids {ids!r:.160}, want {real!r:.160} then pads to {size}"]
            if ("attention_mask" in p) != bool(want_mask):
                return [f"{where}: attention_mask present {'attention_mask' in p}, want "
                        f"{bool(want_mask)} (add_attention_mask {kw.get('add_attention_mask', True)})"]
            if want_mask:
                mask = _ints(p["attention_mask"])
                if mask != [1] * len(real) + [0] * (len(ids) - len(real)):
                    return [f"{where}: attention_mask {mask!r:.160} for {len(real)} tokens and "
                            f"{len(ids) - len(real)} pads"]
    return []


# -- fixed examples --------------------------------------------------------------------------------------

def regression_cases(method: str) -> tuple[tuple[OpCase, str], ...]:
    """Fixed cases of ``method`` (with the bug each stands for) that the ``operators`` row runs before
    its drawn ones: which drawn case first reaches a payload path moves with every change of the
    generator, so each path the payload check guards has one case that always reaches it (the
    mutation sample's survivors of issue 32: tokenize's attention-mask values, the packers' fields
    beside the tokens)."""
    from properties import generator as gen

    two = (rec(0, 0, 0, payload=_payload(1, 0)), rec(0, 0, 1, payload=_payload(3, 1)))
    long_one = (rec(0, 0, 0, payload=_payload(3, 2)),)

    def case(kwargs: Mapping[str, Any], recs: tuple[SampleRecord, ...]) -> OpCase:
        return OpCase(method, kwargs, None, recs, (), 0)

    if method == "tokenize":
        return (
            (case({"field": "text"}, two), "the operator's BOS/EOS mask (1 on the specials)"),
            (case({"field": "text", "special_tokens": "tokenizer_default", "padding": "longest"}, two),
             "the tokenizer's own padding: mask 0 on its pads"),
            (case({"field": "text", "tokenizer": gen._maskless_tokenizer()}, two),
             "a tokenizer without a mask: the operator's mask over the bracketed ids"),
            (case({"field": "text", "tokenizer": gen._maskless_tokenizer(), "special_tokens": "none",
                   "split_long_samples": True, "max_length": 2}, two),
             "a tokenizer without a mask, split: the operator's mask over each window"),
        )
    # divergence D-2: an empty closing child tombstoned at once closes its offset ahead of the sibling
    # still in wrap's window (2,400 drawn cases of --examples 100 never reached it)
    d2 = ("an empty closing child's offset closes after its buffered sibling (divergence D-2)")
    if method == "pack_sequences":
        return ((case({"max_length": 2, "algorithm": "wrap"}, long_one),
                 "a wrap slice keeps the fields beside its tokens"),
                (case({"max_length": 10, "algorithm": "wrap"}, _empty_closer_after_a_buffered_sibling()), d2))
    if method == "pack_flat":
        return ((case({"max_length": 4, "num_bins": 1, "pad_token_id": 0}, two),
                 "a flat pack concatenates the fields beside the tokens"),
                (case({"max_length": 10, "algorithm": "wrap", "pad_token_id": 0},
                      _empty_closer_after_a_buffered_sibling()), d2))
    return ()

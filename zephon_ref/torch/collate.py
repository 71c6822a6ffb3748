"""Collation: a delivered item as padded ``int64`` tensors.

Theory of operation
-------------------
:func:`collate_batch` is a pure function of the item: the same item gives the same
tensors on any device (built on the CPU, then moved).  A packed envelope's segments
lie side by side in one row; ``segment_ids`` and ``position_ids`` keep attention and
positions inside a segment.  The layout is in its docstring and in docs/torch.md.

What may not live here: device policy (:mod:`.device`), the dataset (:mod:`.dataset`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from zephon_ref.errors import ConfigError, ConfigTypeError, expected
from zephon_ref.ops.pack import TOKEN_FIELD_CANDIDATES, detect_token_field
from zephon_ref.torch.device import require_torch, resolve_device
from zephon_ref.types import SampleBatch, SampleRecord

if TYPE_CHECKING:
    import torch as _torch

__all__ = ["COLLATED_FIELDS", "IGNORE_INDEX", "TRAINING_FIELDS", "collate_batch", "collate_for_training"]

#: The keys of :func:`collate_batch`'s result, in order.
COLLATED_FIELDS = ("input_ids", "attention_mask", "segment_ids", "position_ids")
#: The keys of :func:`collate_for_training`'s result, in order.
TRAINING_FIELDS = (*COLLATED_FIELDS, "labels", "loss_mask", "cu_seqlens", "max_seqlen")
#: torch's CrossEntropyLoss default ``ignore_index``.
IGNORE_INDEX = -100

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


# -- collation ----------------------------------------------------------------------------------

def _token_list(value: Any, what: str) -> list[int]:
    """A 1-D sequence of ints (list, tuple, numpy or torch 1-D) as a list of Python ints."""
    if isinstance(value, (str, bytes, Mapping)) or not hasattr(value, "__len__"):
        raise ConfigTypeError(expected(what, "a 1-D sequence of ints", type(value).__name__))
    shape = getattr(value, "shape", None)
    if shape is not None and len(shape) != 1:
        raise ConfigError(expected(what, "a 1-D sequence of ints", f"shape {tuple(shape)}"))
    items = value.tolist() if hasattr(value, "tolist") else list(value)
    for t in items:
        if isinstance(t, bool) or not isinstance(t, int):
            raise ConfigTypeError(expected(f"{what} element", "an int", t))
        if not _INT64_MIN <= t <= _INT64_MAX:
            raise ConfigError(expected(f"{what} element", "an int that fits int64", t))
    return list(items)


def _segments_of(payload: Any, what: str) -> list[Any]:
    """The segments of one record: a packed envelope's entries, or the payload itself."""
    if isinstance(payload, Mapping) and "packed_samples" in payload:
        segs = payload["packed_samples"]
        if isinstance(segs, (str, bytes, Mapping)) or not isinstance(segs, Sequence):
            raise ConfigTypeError(expected(f"{what} packed_samples", "a list of segment dicts",
                                           type(segs).__name__))
        return list(segs)
    return [payload]


def _segment_tokens(seg: Any, tokens_field: str, what: str) -> tuple[list[int], list[int]]:
    """(tokens, attention mask) of one segment; the mask is the payload's own when aligned, else ones."""
    if not isinstance(seg, Mapping):
        raise ConfigTypeError(expected(what, "a dict payload with a token field", type(seg).__name__))
    if tokens_field == "auto":
        name = detect_token_field(seg)
        if name is None:
            raise ConfigError(
                expected(what, f"one of the token fields {TOKEN_FIELD_CANDIDATES}", sorted(seg))
            )
    else:
        if tokens_field not in seg:
            raise ConfigError(expected(f"{what} field {tokens_field!r}", "present", sorted(seg)))
        name = tokens_field
    tokens = _token_list(seg[name], f"{what} {name!r}")
    raw_mask = seg.get("attention_mask")
    if raw_mask is None or name == "attention_mask":
        return tokens, [1] * len(tokens)
    mask = _token_list(raw_mask, f"{what} 'attention_mask'")
    if len(mask) != len(tokens) or any(m not in (0, 1) for m in mask):
        raise ConfigError(expected(f"{what} 'attention_mask'", f"{len(tokens)} values in {{0, 1}} "
                                   f"(aligned with {name!r})", mask))
    return tokens, mask


def collate_batch(
    batch: SampleBatch | SampleRecord | Sequence[SampleRecord],
    *,
    tokens_field: str = "auto",
    device: Any = None,
    pad_token_id: int = 0,
    pad_to: int | None = None,
) -> dict[str, _torch.Tensor]:
    """Padded ``int64`` tensors of a delivered item.

    Layout: one row per record (``B`` rows; a lone SampleRecord is a batch of
    one), ``L`` = the longest row (or ``pad_to``).  A record whose payload is a
    packed envelope ``{"packed_samples": [seg, ...]}`` lays its segments side by
    side in envelope order; any other record is one segment.  A segment's tokens
    come from ``tokens_field`` (``"auto"``: the first of
    ``input_ids, tokens, token_ids, ids`` present).  Every tensor is ``[B, L]``:

    * ``input_ids``: the tokens, then ``pad_token_id``;
    * ``attention_mask``: 1 for a token, 0 for padding (a segment's own aligned
      ``attention_mask`` field is used for its tokens when present);
    * ``segment_ids``: ``k`` (1-based) for the tokens of the row's ``k``-th
      segment, 0 for padding: attention stays inside one segment;
    * ``position_ids``: the position inside the segment (restarts at 0 on each
      segment), 0 for padding.

    Row ``r``'s segment ``k`` is ``input_ids[r][segment_ids[r] == k]``.  The
    result is a pure function of the item (built on the CPU, then moved to
    :func:`resolve_device` ``(device)``).
    """
    torch = require_torch()
    if isinstance(batch, SampleBatch):
        records: Sequence[Any] = batch.records
    elif isinstance(batch, SampleRecord):
        records = (batch,)
    elif isinstance(batch, Sequence) and not isinstance(batch, (str, bytes)):
        records = batch
    else:
        raise ConfigTypeError(expected("batch", "a SampleBatch, a SampleRecord or a list of SampleRecords",
                                       type(batch).__name__))
    if not isinstance(tokens_field, str) or not tokens_field:
        raise ConfigTypeError(expected("tokens_field", "'auto' or a field name", tokens_field))
    if isinstance(pad_token_id, bool) or not isinstance(pad_token_id, int) \
            or not _INT64_MIN <= pad_token_id <= _INT64_MAX:
        raise ConfigTypeError(expected("pad_token_id", "an int that fits int64", pad_token_id))
    if pad_to is not None and (isinstance(pad_to, bool) or not isinstance(pad_to, int) or pad_to < 0):
        raise ConfigError(expected("pad_to", "None or an int >= 0", pad_to))
    dev = resolve_device(device)

    rows: list[tuple[list[int], list[int], list[int], list[int]]] = []
    for r, rec in enumerate(records):
        if not isinstance(rec, SampleRecord):
            raise ConfigTypeError(expected(f"batch record {r}", "a SampleRecord", type(rec).__name__))
        ids: list[int] = []
        mask: list[int] = []
        seg_ids: list[int] = []
        pos: list[int] = []
        for k, seg in enumerate(_segments_of(rec.payload, f"record {r}"), start=1):
            tokens, seg_mask = _segment_tokens(seg, tokens_field, f"record {r} segment {k - 1}")
            ids += tokens
            mask += seg_mask
            seg_ids += [k] * len(tokens)
            pos += range(len(tokens))
        rows.append((ids, mask, seg_ids, pos))

    longest = max((len(row[0]) for row in rows), default=0)
    if pad_to is not None and longest > pad_to:
        raise ConfigError(expected("pad_to", f">= the longest row ({longest} tokens)", pad_to))
    width = longest if pad_to is None else pad_to
    flat: list[list[int]] = [[], [], [], []]
    # invariant: each of the four flat lists holds len(rows so far) * width values
    for row in rows:
        pad = width - len(row[0])
        for i, (col, fill) in enumerate(zip(row, (pad_token_id, 0, 0, 0), strict=True)):
            flat[i] += col
            flat[i] += [fill] * pad
    out: dict[str, _torch.Tensor] = {}
    for name, values in zip(COLLATED_FIELDS, flat, strict=True):
        t = torch.tensor(values, dtype=torch.int64).reshape(len(rows), width)
        out[name] = t.to(dev) if dev.type != "cpu" else t
    return out


def collate_for_training(
    batch: SampleBatch | SampleRecord | Sequence[SampleRecord],
    *,
    tokens_field: str = "auto",
    device: Any = None,
    pad_token_id: int = 0,
    pad_to: int | None = None,
    ignore_index: int = IGNORE_INDEX,
) -> dict[str, _torch.Tensor]:
    """:func:`collate_batch`'s tensors plus what a next-token loss and varlen attention need.

    * ``labels`` ``[B, L]`` int64: at a token, the *next* token of the same
      segment when that next token is attended (``attention_mask`` 1); else
      ``ignore_index`` (a segment's last token, masked tokens, padding).  Labels
      are already shifted: ``loss = cross_entropy(logits.view(-1, V), labels.view(-1),
      ignore_index=ignore_index)`` needs no shift and never predicts across a
      packed-document boundary.
    * ``loss_mask`` ``[B, L]`` int64: 1 where ``labels != ignore_index``.
    * ``cu_seqlens`` ``[S + 1]`` int32: cumulative segment lengths over the flat,
      unpadded token stream ``input_ids[segment_ids > 0]`` (rows in order, a
      row's segments in order), starting at 0 (flash-attn's varlen layout).
    * ``max_seqlen``: a 0-d int64 tensor, the longest segment (0 for no tokens).

    Built on the CPU from :func:`collate_batch`'s CPU tensors, then moved, so the
    result is identical on every device.
    """
    torch = require_torch()
    if isinstance(ignore_index, bool) or not isinstance(ignore_index, int) \
            or not _INT64_MIN <= ignore_index <= _INT64_MAX:
        raise ConfigTypeError(expected("ignore_index", "an int that fits int64", ignore_index))
    dev = resolve_device(device)
    out = collate_batch(
        batch, tokens_field=tokens_field, device="cpu", pad_token_id=pad_token_id, pad_to=pad_to
    )
    ids, seg, mask = out["input_ids"], out["segment_ids"], out["attention_mask"]
    labels = torch.full_like(ids, ignore_index)
    if ids.shape[1] > 1:
        # position t predicts t+1 when both lie in the same (non-padding) segment and t+1 is attended
        same = (seg[:, 1:] == seg[:, :-1]) & (seg[:, 1:] > 0) & (mask[:, 1:] == 1)
        labels[:, :-1] = torch.where(same, ids[:, 1:], labels[:, :-1])
    out["labels"] = labels
    out["loss_mask"] = (labels != ignore_index).to(torch.int64)
    # segment lengths in row-major order: one run of equal, non-zero segment ids per segment
    lengths: list[int] = []
    for row in seg.tolist():
        # invariant: lengths holds every segment of the rows before this one
        counts: dict[int, int] = {}
        for k in row:
            if k:
                counts[k] = counts.get(k, 0) + 1
        lengths += [counts[k] for k in sorted(counts)]
    cu = [0]
    for n in lengths:
        cu.append(cu[-1] + n)
    out["cu_seqlens"] = torch.tensor(cu, dtype=torch.int32)
    out["max_seqlen"] = torch.tensor(max(lengths, default=0), dtype=torch.int64)
    if dev.type == "cpu":
        return out
    return {k: v.to(dev) for k, v in out.items()}

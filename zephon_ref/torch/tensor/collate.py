"""Native items -> tensors: token rows, position ids, variable-length boundaries.

Theory of operation
-------------------
One row per entry of the item (a pack, or a document), padded on the right with
0 to the longest row: ``input_ids`` (int64, ``[rows, width]``), ``position_ids``
restarting at 0 for every packed document, ``attention_mask`` (1 on tokens),
``cu_seqlens`` (int32, cumulative document lengths over the flattened rows, for
variable-length attention) and ``max_seqlen``.  The arithmetic is numpy over one
flat token array; torch only wraps the result (``torch.from_numpy``) and moves
it to ``device`` ("cuda" when the caller asks and it is present).

A pure function of the item: the same item gives the same tensors on any
device.  torch is imported here only.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["collate", "collate_numpy"]


_ARANGE = np.arange(1 << 16, dtype=np.int64)


def collate_numpy(item: tuple[int, tuple[Any, ...]]) -> dict[str, Any]:
    _lane, entries = item
    # every entry is a unit (documents, flags): a row is its documents' tokens in order
    rows = [[() if d[6] is None else d[6] for d in u[0]] for u in entries]
    row_lens = [[len(x) for x in r] for r in rows]
    widths = [sum(r) for r in row_lens]
    width = max(widths) if widths else 0
    out = np.zeros((3, len(rows), width), dtype=np.int64)  # input_ids, position_ids, attention_mask
    ar = _ARANGE if width <= _ARANGE.size else np.arange(width, dtype=np.int64)
    for r, (docs, lens, w) in enumerate(zip(rows, row_lens, widths, strict=True)):
        if not w:
            continue
        if len(docs) == 1:
            out[0, r, :w] = docs[0]
            out[1, r, :w] = ar[:w]
        else:
            out[0, r, :w] = np.concatenate(docs)
            out[1, r, :w] = np.concatenate([ar[:n] for n in lens])
        out[2, r, :w] = 1
    flat_lens = [n for r in row_lens for n in r]
    cu = np.zeros(len(flat_lens) + 1, dtype=np.int32)
    np.cumsum(flat_lens, out=cu[1:])
    return {"input_ids": out[0], "position_ids": out[1], "attention_mask": out[2], "cu_seqlens": cu,
            "max_seqlen": max(flat_lens) if flat_lens else 0}


def collate(item: tuple[int, tuple[Any, ...]], *, device: Any = None) -> dict[str, Any]:
    import torch

    out = collate_numpy(item)
    res: dict[str, Any] = {"max_seqlen": out.pop("max_seqlen")}
    for k, v in out.items():
        t = torch.from_numpy(v)
        res[k] = t if device is None else t.to(device, non_blocking=True)
    return res

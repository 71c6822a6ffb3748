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
_EMPTY = np.zeros(0, dtype=np.int64)


def _arange(n: int) -> np.ndarray:
    return _ARANGE[:n] if n <= _ARANGE.size else np.arange(n, dtype=np.int64)


def collate_numpy(item: tuple[int, tuple[Any, ...]]) -> dict[str, Any]:
    _lane, entries = item
    # every entry is a unit (documents, flags): a row is its documents' tokens in order
    seqs = [() if d[6] is None else d[6] for u in entries for d in u[0]]
    lens_l = [len(x) for x in seqs]
    per_row = [len(u[0]) for u in entries]
    rows = len(entries)
    widths_l = []
    at = 0
    for n in per_row:
        widths_l.append(sum(lens_l[at:at + n]))
        at += n
    width = max(widths_l) if widths_l else 0
    total = sum(widths_l)
    lens = np.array(lens_l, dtype=np.int64)
    out = np.zeros((3, rows, width), dtype=np.int64)  # input_ids, position_ids, attention_mask
    if total:
        tokens = np.concatenate([x for x in seqs if len(x)])
        pos = _arange(total) - np.repeat(np.cumsum(lens) - lens, lens)
        at = 0
        for r, w in enumerate(widths_l):
            # row r: its documents' tokens back to back, then padding
            out[0, r, :w] = tokens[at:at + w]
            out[1, r, :w] = pos[at:at + w]
            out[2, r, :w] = 1
            at += w
    cu = np.zeros(lens.size + 1, dtype=np.int32)
    np.cumsum(lens, out=cu[1:])
    return {"input_ids": out[0], "position_ids": out[1], "attention_mask": out[2], "cu_seqlens": cu,
            "max_seqlen": max(lens_l) if lens_l else 0}


def collate(item: tuple[int, tuple[Any, ...]], *, device: Any = None) -> dict[str, Any]:
    import torch

    out = collate_numpy(item)
    res: dict[str, Any] = {"max_seqlen": out.pop("max_seqlen")}
    for k, v in out.items():
        t = torch.from_numpy(v)
        res[k] = t if device is None else t.to(device, non_blocking=True)
    return res

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


def collate_numpy(item: tuple[int, tuple[Any, ...]]) -> dict[str, Any]:
    _lane, entries = item
    # every entry is a unit (documents, flags): a row is its documents' tokens in order
    docs = [() if d[6] is None else d[6] for u in entries for d in u[0]]
    lens = np.fromiter(map(len, docs), dtype=np.int64, count=len(docs))
    flat = np.concatenate(docs).astype(np.int64, copy=False) if docs else np.zeros(0, dtype=np.int64)
    doc_ends = np.cumsum(lens)
    # position of every token inside its document
    pos = np.arange(flat.size, dtype=np.int64) - np.repeat(doc_ends - lens, lens)
    row_ends: list[int] = []
    n = 0
    ends = doc_ends.tolist()
    for u in entries:
        n += len(u[0])
        row_ends.append(int(ends[n - 1]) if n else 0)
    width = 0
    prev = 0
    for e in row_ends:
        width = max(width, e - prev)
        prev = e
    ids = np.zeros((len(entries), width), dtype=np.int64)
    positions = np.zeros_like(ids)
    mask = np.zeros_like(ids)
    prev = 0
    for r, e in enumerate(row_ends):
        w = e - prev
        ids[r, :w] = flat[prev:e]
        positions[r, :w] = pos[prev:e]
        mask[r, :w] = 1
        prev = e
    cu = np.zeros(lens.size + 1, dtype=np.int32)
    cu[1:] = doc_ends
    return {"input_ids": ids, "position_ids": positions, "attention_mask": mask, "cu_seqlens": cu,
            "max_seqlen": int(lens.max()) if lens.size else 0}


def collate(item: tuple[int, tuple[Any, ...]], *, device: Any = None) -> dict[str, Any]:
    import torch

    out = collate_numpy(item)
    res: dict[str, Any] = {"max_seqlen": out.pop("max_seqlen")}
    for k, v in out.items():
        t = torch.from_numpy(v)
        res[k] = t if device is None else t.to(device, non_blocking=True)
    return res

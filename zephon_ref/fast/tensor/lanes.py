"""The record-level stages on documents: map_transform and the built-in tokenizer.

Theory of operation
-------------------
A lane's input is its chunk sequence (:mod:`.chunks`), numbered ``0, 1, ...``
per lane; every ``k`` chunks (``k > 0``) a flush boundary follows.  Each chunk's
samples, in offset order, become *documents*: plain tuples

``(sample_id, chunk_id, offset, component_id, lineage, closing, ids, payload)``

where ``closing`` is None for a 1:1 document (its own closing contributor) or the
``is_last_child`` flag of a window of a split document, ``ids`` the token list
and ``payload`` the user-visible payload (None when it is derived from ``ids``
on demand, the built-in tokenizer's ``{"input_ids", "attention_mask"}``;
:data:`~.chunks.PRETOK` when the dispatcher already tokenized the text).

:func:`map_docs` and :func:`tokenize_docs` are pure functions of each document,
applied to a group (the stage's ``max_batch``) at a time by the lane's cascade
(:mod:`.stream`); the tokenizer splits long documents into windows.  No operator
or engine code of the reference runs here.

What may not live here: packing, batching, ordering across lanes.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from zephon_ref.errors import ConfigError, expected
from zephon_ref.fast.tensor.chunks import PRETOK
from zephon_ref.fast.tensor.config import MapSpec, TokenizeSpec
from zephon_ref.fast.tensor.tokens import WordIds

__all__ = ["TOMB", "Doc", "WordIds", "map_docs", "tokenize_docs"]

#: a tombstone's place in a micro-batch (it splits the pushes of a later operator)
TOMB: Any = None

#: (sample_id, chunk_id, offset, component_id, lineage, closing, ids, payload)
Doc = tuple[tuple[int, int, int], int, int, int, tuple[int, ...], bool | None, Any, Any]


def _texts(f: str, docs: list[Doc]) -> list[str]:
    """Every document's text, with the reference's errors for a missing field."""
    texts: list[str] = []
    for d in docs:
        payload = d[7]
        if payload is None:
            raise ConfigError(expected("tokenize input", "a payload with a text field", "token ids"))
        if isinstance(payload, Mapping):
            if f not in payload:
                raise ConfigError(
                    expected(
                        f"payload of sample {tuple(d[0])!r}",
                        f"a {f!r} field (have {sorted(map(repr, payload))})",
                        "no such field",
                    )
                )
            text = payload[f]
        else:
            text = str(payload)
        texts.append(text if isinstance(text, str) else str(text))
    return texts


def tokenize_docs(spec: TokenizeSpec, words: WordIds, docs: list[Doc]) -> list[Doc]:
    f = spec.field
    n = spec.max_length
    # documents tokenized ahead by the chunk dispatcher carry their ids (payload PRETOK)
    need = [d for d in docs if d[7] is not PRETOK]
    encoded: Iterator[Any] = iter(())
    if need:
        try:  # the common case: dict payloads holding the text field as a str
            texts = [d[7][f] for d in need]
            if not all(type(t) is str for t in texts):
                texts = _texts(f, need)
        except (KeyError, TypeError, IndexError):
            texts = _texts(f, need)
        encoded = iter(words.encode_many(texts))
    out: list[Doc] = []
    split = spec.split_long_samples
    limit = n or 0
    for sid, cid, off, comp, lineage, closing, ids, payload in docs:
        if payload is not PRETOK:
            ids = next(encoded)
        size = ids.shape[0]
        if not split or size <= limit:
            out.append((sid, cid, off, comp, lineage, closing, ids, None))
            continue
        assert n is not None
        if closing is not None:
            raise ConfigError(expected("tokenize(split_long_samples) input", "1:1 documents", "a split one"))
        last = (size - 1) // n
        for i in range(last + 1):
            # a split of a 1:1 document: child i has its own cursor, the last one closes
            out.append((sid, cid, off, comp, (*lineage, i), i == last, ids[i * n:(i + 1) * n], None))
    return out


def map_docs(spec: MapSpec, docs: list[Doc]) -> list[Any]:
    out: list[Any] = []
    fn = spec.fn
    for sid, cid, off, comp, lineage, closing, ids, payload in docs:
        if payload is None:
            tokens = ids.tolist() if isinstance(ids, np.ndarray) else list(ids)
            payload = {"input_ids": tokens, "attention_mask": [1] * len(tokens)}
        new = fn(payload)
        if new is None:
            if not spec.drop_none:  # the record passes unchanged
                out.append((sid, cid, off, comp, lineage, closing, ids, payload))
            elif closing is None or closing:
                out.append(TOMB)  # the reference's tombstone for a closing contributor
            continue
        got = new.get("input_ids") if isinstance(new, dict) else None
        out.append((sid, cid, off, comp, lineage, closing, got if isinstance(got, list) else None, new))
    return out

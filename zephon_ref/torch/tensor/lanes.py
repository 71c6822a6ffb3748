"""Per-lane document streams: work-source chunks -> documents (map / tokenize applied).

Theory of operation
-------------------
A lane's input is its work-source clone's chunk sequence, numbered ``0, 1, ...``
per lane; every ``k`` chunks (``k > 0``) a flush boundary follows.  Each chunk's
samples, in offset order, become *documents*: plain tuples

``(sample_id, chunk_id, offset, component_id, lineage, closing, ids, payload)``

where ``closing`` is None for a 1:1 document (its own closing contributor) or the
``is_last_child`` flag of a window of a split document, ``ids`` the token list
and ``payload`` the user-visible payload (None when it is derived from ``ids``
on demand, the built-in tokenizer's ``{"input_ids", "attention_mask"}``).

:func:`lane_documents` yields, per chunk, the list of documents and whether a
flush boundary follows it.  The record-level stages are pure functions of one
document, so they run here in one pass per chunk.  The work source is used only
through its public lane API (``clone_for_lane``, ``next_chunk``, ``state_dict``);
no operator or engine code of the reference runs here.

What may not live here: packing, batching, ordering across lanes.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator, Mapping
from typing import Any

from zephon_ref.errors import ConfigError, expected
from zephon_ref.torch.tensor.config import MapSpec, TensorPlan, TokenizeSpec

__all__ = ["TOMB", "Doc", "WordIds", "lane_samples", "map_docs", "tokenize_docs"]

#: a tombstone's place in a micro-batch (it splits the pushes of a later operator)
TOMB: Any = None

#: (sample_id, chunk_id, offset, component_id, lineage, closing, ids, payload)
Doc = tuple[tuple[int, int, int], int, int, int, tuple[int, ...], bool | None, list[int] | None, Any]


class WordIds:
    """word -> id for the built-in tokenizer's definition: crc32(utf-8) % vocab_size + offset."""

    __slots__ = ("_ids", "bos", "eos", "offset", "vocab")

    def __init__(self, tokenizer: Any) -> None:
        self.vocab = int(tokenizer.vocab_size)
        self.offset = int(tokenizer.offset)
        self.bos = int(tokenizer.bos_token_id)
        self.eos = int(tokenizer.eos_token_id)
        self._ids: dict[str, int] = {}

    def encode(self, text: str) -> list[int]:
        words = text.split()
        ids = self._ids
        try:
            return [self.bos, *map(ids.__getitem__, words), self.eos]
        except KeyError:
            pass
        v, o = self.vocab, self.offset
        for w in words:
            if w not in ids:
                ids[w] = zlib.crc32(w.encode("utf-8")) % v + o
        return [self.bos, *map(ids.__getitem__, words), self.eos]


def tokenize_docs(spec: TokenizeSpec, words: WordIds, docs: list[Doc]) -> list[Doc]:
    out: list[Doc] = []
    f = spec.field
    n = spec.max_length
    for sid, cid, off, comp, lineage, closing, _ids, payload in docs:
        if isinstance(payload, Mapping):
            if f not in payload:
                raise ConfigError(expected(f"payload of sample {tuple(sid)!r}",
                                           f"a {f!r} field (have {sorted(map(repr, payload))})", "no such field"))
            text = payload[f]
        else:
            text = str(payload)
        ids = words.encode(text if isinstance(text, str) else str(text))
        if not spec.split_long_samples or len(ids) <= (n or 0):
            out.append((sid, cid, off, comp, lineage, closing, ids, None))
            continue
        assert n is not None
        last = (len(ids) - 1) // n
        for i in range(last + 1):
            # a split of a 1:1 document: child i has its own cursor, the last one closes
            if closing is not None:
                raise ConfigError(expected("tokenize(split_long_samples) input", "1:1 documents", "a split one"))
            out.append((sid, cid, off, comp, (*lineage, i), i == last, ids[i * n:(i + 1) * n], None))
    return out


def map_docs(spec: MapSpec, docs: list[Doc]) -> list[Any]:
    out: list[Any] = []
    fn = spec.fn
    for sid, cid, off, comp, lineage, closing, ids, payload in docs:
        new = fn(payload if payload is not None else {"input_ids": ids, "attention_mask": [1] * len(ids)})
        if new is None:
            if not spec.drop_none:  # the record passes unchanged
                out.append((sid, cid, off, comp, lineage, closing, ids, payload))
            elif closing is None or closing:
                out.append(TOMB)  # the reference's tombstone for a closing contributor
            continue
        got = new.get("input_ids") if isinstance(new, dict) else None
        out.append((sid, cid, off, comp, lineage, closing, got if isinstance(got, list) else None, new))
    return out


def lane_samples(source: Any, datasets: Mapping[int, Any], ids: Mapping[str, int], k: int,
                 mixtures: dict[int, dict[int, float]]) -> Iterator[Doc | None]:
    """One lane's fetched documents in order, None after every flush boundary; records each
    chunk's mixture (by component id) in ``mixtures`` as the chunk is admitted."""
    cid = 0
    while True:
        chunk = source.next_chunk()
        if chunk is None:
            return
        mix = chunk.target_mixture if chunk.target_mixture is not None else chunk.mixture
        mixtures[cid] = {ids[name]: w for name, w in mix.items()}
        for off, (sid, name) in enumerate(chunk.ordered()):
            s = (int(sid[0]), int(sid[1]), int(sid[2]))
            yield (s, cid, off, ids[name], (), None, [], datasets[s[0]].get(s[1], s[2]))
        cid += 1
        if k > 0 and cid % k == 0:
            yield None

"""The built-in tokenizer's ids as array operations: whitespace words -> crc32 -> ids.

Theory of operation
-------------------
The built-in tokenizer (``HashTokenizer``) maps every whitespace-separated word to
``crc32(utf-8 bytes) % vocab_size + offset`` and brackets a text with BOS/EOS.
:meth:`WordIds.encode_many` computes that for a group of texts at once:

* ASCII texts (the common case): the texts are joined by a newline into one byte
  array; word starts and ends are where the whitespace mask changes (the ASCII
  whitespace of ``str.split``: space, ``\\t\\n\\v\\f\\r`` and ``\\x1c``-``\\x1f``);
  the CRC-32 of every word runs column by column over the words sorted by length
  (table-driven, the reflected polynomial 0xEDB88320 of zlib), so each step is one
  vector operation over the words still that long;
* anything else (non-ASCII text, a word longer than :data:`LONG_WORD`): per
  word with ``zlib.crc32`` and a memo (a pure function's cache, cleared past
  :data:`CACHE_LIMIT`, which changes no id).

Both paths give the same ids (tests compare them with the reference tokenizer).
The result is one int64 array per text (views of one flat array).
"""

from __future__ import annotations

import zlib
from itertools import chain
from typing import Any

import numpy as np

__all__ = ["CACHE_LIMIT", "LONG_WORD", "VECTOR_TAIL", "WordIds"]

CACHE_LIMIT = 1 << 20
LONG_WORD = 48
#: words per call whose CRC is taken one by one (the longest ones)
VECTOR_TAIL = 24


def _crc_table() -> np.ndarray:
    table = np.zeros(256, dtype=np.uint32)
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0xEDB88320 if c & 1 else c >> 1
        table[i] = c
    return table


_TABLE = _crc_table()
def _crc_equal_length(buf: np.ndarray, starts: np.ndarray, size: int) -> np.ndarray:
    """zlib's CRC-32 of the ``size``-byte words at ``starts``: their bytes gathered once as a
    ``(words, size)`` matrix, then one vector step of the table-driven CRC per column (a
    1 KiB table, which stays in the fastest cache)."""
    mat = np.lib.stride_tricks.sliding_window_view(buf, size)[starts]  # rows gathered by one index
    c: np.ndarray = np.full(starts.size, 0xFFFFFFFF, dtype=np.uint32)
    for j in range(size):
        c = np.take(_TABLE, (c ^ mat[:, j]) & 0xFF) ^ (c >> 8)
    out: np.ndarray = c ^ np.uint32(0xFFFFFFFF)
    return out


#: byte -> 1 for a word byte, 0 for the ASCII whitespace of ``str.split`` (a ``bytes.translate`` table)
_WORD_BYTES = bytes(0 if i in (9, 10, 11, 12, 13, 28, 29, 30, 31, 32) else 1 for i in range(256))


class WordIds:
    __slots__ = ("bos", "eos", "ids", "offset", "vocab")

    def __init__(self, tokenizer: Any) -> None:
        self.vocab = int(tokenizer.vocab_size)
        self.offset = int(tokenizer.offset)
        self.bos = int(tokenizer.bos_token_id)
        self.eos = int(tokenizer.eos_token_id)
        self.ids: dict[str, int] = {}

    # -- per word (fallback) ----------------------------------------------------------------
    def _word_ids(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        split = [t.split() for t in texts]
        flat = list(chain.from_iterable(split))
        ids = self.ids
        missing = set(flat).difference(ids)  # order-free: every id is a pure function of its word
        if missing:
            if len(ids) + len(missing) > CACHE_LIMIT:
                ids.clear()
                missing = set(flat)
            v, o = self.vocab, self.offset
            for w in missing:
                ids[w] = zlib.crc32(w.encode("utf-8")) % v + o
        words = np.fromiter(map(ids.__getitem__, flat), dtype=np.int64, count=len(flat))
        return words, np.fromiter(map(len, split), dtype=np.int64, count=len(split))

    # -- vectorised (ASCII) -----------------------------------------------------------------
    def _ascii_ids(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray] | None:
        joined = "\n".join(texts)
        if not joined.isascii():
            return None
        # padded with whitespace at both ends, so every word has a rising and a falling edge
        # and is followed by at least one byte
        raw = b"\n" + joined.encode("ascii") + b"\n"
        buf = np.frombuffer(raw, dtype=np.uint8)
        word = np.frombuffer(raw.translate(_WORD_BYTES), dtype=np.bool_)
        # the edges alternate (rise, fall, rise, ...) because both ends are whitespace
        edges = np.flatnonzero(word[1:] != word[:-1])
        edges += 1
        starts = edges[0::2]
        lens = edges[1::2] - starts
        n = lens.size
        crc = np.empty(n, dtype=np.uint32)
        counts = np.bincount(lens) if n else np.zeros(1, dtype=np.int64)
        for size in np.flatnonzero(counts).tolist():
            sel = None if counts[size] == n else np.flatnonzero(lens == size)
            at = starts if sel is None else starts[sel]
            if size > LONG_WORD or (size > 8 and at.size < 8):
                # a few long words: zlib one by one
                got = np.fromiter((zlib.crc32(raw[a:a + size]) for a in at.tolist()), dtype=np.uint32,
                                  count=at.size)
            else:
                got = _crc_equal_length(buf, at, size)
            if sel is None:
                crc[:] = got
            else:
                crc[sel] = got
        ids = np.empty(n, dtype=np.int64)
        if self.vocab <= 0xFFFFFFFF:  # the remainder in 32 bits (same value, a faster division)
            ids[:] = crc % np.uint32(self.vocab)
        else:
            ids[:] = crc.astype(np.int64) % self.vocab
        ids += self.offset
        # words per text: text i ends (in raw) where separator i sits, at the cumulative lengths + 1
        bounds = np.fromiter(map(len, texts), dtype=np.int64, count=len(texts))
        bounds += 1
        np.cumsum(bounds, out=bounds)
        per_text = np.diff(np.searchsorted(starts, bounds), prepend=0)
        return ids, per_text

    def encode_many(self, texts: list[str]) -> list[np.ndarray]:
        """Every text's ids, bracketed with BOS/EOS, as int64 views of one flat array."""
        if not texts:
            return []
        got = self._ascii_ids(texts)
        words, lens = got if got is not None else self._word_ids(texts)
        sizes = lens + 2
        ends = np.cumsum(sizes)
        starts = ends - sizes
        out = np.empty(int(ends[-1]), dtype=np.int64)
        keep = np.ones(out.size, dtype=bool)
        keep[starts] = False
        keep[ends - 1] = False
        out[keep] = words
        out[starts] = self.bos
        out[ends - 1] = self.eos
        return [out[a:b] for a, b in zip(starts.tolist(), ends.tolist(), strict=True)]

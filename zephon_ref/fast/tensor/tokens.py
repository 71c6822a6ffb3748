"""The built-in tokenizer's ids as array operations: whitespace words -> crc32 -> ids.

Theory of operation
-------------------
The built-in tokenizer (``HashTokenizer``) maps every whitespace-separated word to
``crc32(utf-8 bytes) % vocab_size + offset`` and brackets a text with BOS/EOS.
:meth:`WordIds.encode_many` computes that for a group of texts at once:

* ASCII texts (the common case): the texts are joined into one byte string with
  a one-byte marker word (``"\\x00"``, surrounded by spaces) where each text's BOS
  and EOS go, so the word stream *is* the output stream (the markers sit at byte
  positions known from the texts' lengths, so a NUL inside a text is an ordinary
  word byte).  Word starts and ends are where the whitespace mask changes (the
  ASCII whitespace of ``str.split``: space, ``\\t\\n\\v\\f\\r`` and
  ``\\x1c``-``\\x1f``).  The CRC is affine over GF(2):
  ``crc32(w) = crc32(len(w) zero bytes) ^ L(w)``, where ``L`` (zero initial value,
  no final xor) is the xor of one term per byte that depends only on the byte and
  on how many bytes *follow* it.  So every word's last 8 bytes are read as one
  little-endian uint64 ending at the word's end (two aligned reads from a copy of
  the buffer; the bytes before the word's start masked to zero, which adds
  nothing), and ``L`` is the xor of at most four lookups in 65,536-entry tables
  (two bytes per lookup); a word longer than 8 bytes adds one such group per
  further 8 bytes.  One vector operation per lookup, over all words at once,
  whatever their lengths;
* a word longer than :data:`LONG_WORD`: ``zlib.crc32`` of its bytes;
* non-ASCII text: per word with ``zlib.crc32`` and a memo (a pure function's cache, cleared past
  :data:`CACHE_LIMIT`, which changes no id).

Both paths give the same ids (tests compare them with the reference tokenizer).
The result is one int64 array per text (views of one flat array).  The large
temporaries live in a per-thread scratch pool (:class:`_Scratch`), reused from
call to call so that each call does not fault in fresh pages; no result is kept
there (the ids are a fresh array every call).  Every ``np.take`` into a scratch
array passes ``mode="clip"`` (its indices are in range, so clipping changes
nothing): with the default ``mode="raise"`` numpy writes through a fresh buffer.
"""

from __future__ import annotations

import threading
import zlib
from itertools import chain
from typing import Any

import numpy as np

__all__ = ["CACHE_LIMIT", "LONG_WORD", "NONZERO_BLOCK", "SCRATCH_LIMIT", "WordIds"]

CACHE_LIMIT = 1 << 20
#: the longest word whose CRC runs as array operations (6 groups of 8 bytes); longer ones use zlib
LONG_WORD = 48
_GROUPS = LONG_WORD // 8
_M64 = (1 << 64) - 1


def _crc_table() -> np.ndarray:
    table = np.zeros(256, dtype=np.uint32)
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0xEDB88320 if c & 1 else c >> 1
        table[i] = c
    return table


_TABLE = _crc_table()


def _byte_terms(n: int) -> np.ndarray:
    """``out[d][b]``: ``L`` of byte ``b`` followed by ``d`` zero bytes (zero initial value,
    no final xor): the byte's own table entry, then ``d`` steps of the register over 0."""
    out = np.empty((n, 256), dtype=np.uint32)
    cur = _TABLE.copy()
    for d in range(n):
        out[d] = cur
        cur = _TABLE[cur & 0xFF] ^ (cur >> 8)
    return out


_TERMS = _byte_terms(LONG_WORD)
#: crc32 of ``n`` zero bytes (the affine part of a word of ``n`` bytes)
_ZEROS = np.array([zlib.crc32(bytes(n)) for n in range(LONG_WORD + 1)], dtype=np.uint32)
#: per length ``l`` (0..8): the mask keeping a uint64's ``l`` most significant bytes
_KEEP = np.array([(_M64 << (8 * (8 - n))) & _M64 for n in range(9)], dtype=np.uint64)
_PAIRS: dict[tuple[int, int], np.ndarray] = {}
_PAIRS_LOCK = threading.Lock()


def _pair_table(g: int, k: int) -> np.ndarray:
    """The 65,536-entry table of the ``k``-th 16 bits (little-endian) of the 8 bytes that end
    ``8 g`` bytes before a word's end: its low byte is followed by ``8 g + 7 - 2 k`` bytes of
    the word, its high byte by one fewer.  Built on first use (a constant of the CRC
    polynomial, the same for every input)."""
    t = _PAIRS.get((g, k))
    if t is None:
        lo, hi = _TERMS[8 * g + 7 - 2 * k], _TERMS[8 * g + 6 - 2 * k]
        t = (hi[:, None] ^ lo[None, :]).ravel()  # index = low byte + 256 * high byte
        with _PAIRS_LOCK:
            t = _PAIRS.setdefault((g, k), t)
    return t


class _Scratch(threading.local):
    """Per-thread scratch arrays by name, grown on demand (by at least a quarter, so windows of
    slowly growing sizes do not reallocate every call) and reused by later calls; an array
    larger than :data:`SCRATCH_LIMIT` bytes is not kept.  Their contents never outlive a call
    (every use overwrites what it reads)."""

    def __init__(self) -> None:
        self.arrays: dict[str, np.ndarray] = {}

    def get(self, name: str, n: int, dtype: Any) -> np.ndarray:
        a = self.arrays.get(name)
        if a is None or a.size < n or a.dtype != dtype:
            grown = 0 if a is None or a.dtype != dtype else a.size + a.size // 4
            a = np.empty(max(n, grown, 1024), dtype=dtype)
            if a.nbytes <= SCRATCH_LIMIT:
                self.arrays[name] = a
            else:
                self.arrays.pop(name, None)
        return a[:n]


#: the largest scratch array (bytes) kept between calls (fewer than 20 names per thread; the
#: demo's window keeps about 10 MiB in all)
SCRATCH_LIMIT = 4 << 20
_SCRATCH = _Scratch()


#: elements of a boolean array per np.flatnonzero call in :func:`_nonzero` (at most 256 KiB of
#: indices per call, so a call's result stays small enough to come from the heap, not from fresh pages)
NONZERO_BLOCK = 1 << 15


def _nonzero(mask: np.ndarray, scratch: _Scratch) -> np.ndarray:
    """``np.flatnonzero(mask)``, as a scratch array: block by block, so that no call returns
    one large fresh array (whose pages the allocator would hand back and fault in again on
    every call)."""
    total = int(np.count_nonzero(mask))
    out = scratch.get("nonzero", total, np.intp)
    at = 0
    for lo in range(0, mask.size, NONZERO_BLOCK):
        got = np.flatnonzero(mask[lo:lo + NONZERO_BLOCK])
        k = got.size
        np.add(got, lo, out=out[at:at + k])
        at += k
    return out


def _aligned_words(raw: bytes, scratch: _Scratch) -> np.ndarray:
    """``raw`` copied into an aligned little-endian uint64 array, zero-padded by one word."""
    size = len(raw) // 8 + 2
    words = scratch.get("words", size, np.dtype("<u8"))
    words[-2:] = 0
    words.view(np.uint8)[:len(raw)] = np.frombuffer(raw, dtype=np.uint8)
    return words


def _read8(words: np.ndarray, at: np.ndarray, out: np.ndarray, scratch: _Scratch) -> np.ndarray:
    """The little-endian uint64 of the 8 bytes at each byte position ``at`` (>= 0) of the buffer
    held by ``words``: two aligned reads, shifted together.  (A gather from a byte-strided
    uint64 view would first copy the whole view to an aligned array, 8 times the buffer.)"""
    n = at.size
    q = np.right_shift(at, 3, out=scratch.get("read8_q", n, np.int64))
    r = np.bitwise_and(at, 7, out=scratch.get("read8_r", n, np.int64)).view(np.uint64)
    r <<= np.uint64(3)  # bit offset of the first byte in its word
    np.take(words, q, out=out, mode="clip")
    out >>= r
    q += 1
    hi = np.take(words, q, out=scratch.get("read8_hi", n, np.dtype("<u8")), mode="clip")
    np.subtract(np.uint64(63), r, out=r)
    hi <<= r
    hi <<= np.uint64(1)  # 64 - offset in two steps: a shift by 64 is not defined
    out |= hi
    return out


#: byte -> True for a word byte, False for the ASCII whitespace of ``str.split``
_WORD_LUT = np.array([i not in (9, 10, 11, 12, 13, 28, 29, 30, 31, 32) for i in range(256)], dtype=np.bool_)
#: joins the texts: the EOS marker of one text, the BOS marker of the next.  The raw buffer is
#: ``_SEP.join([_PAD, *texts, ""])``: 8 bytes of whitespace first (every word's 8-byte read stays
#: inside the buffer), then a spare marker word (ignored), then text 0's BOS marker at byte
#: :data:`_FIRST_BOS`; after the last text its EOS marker, a spare one and a space.
_SEP = " \x00 \x00 "
_PAD = "        "
_FIRST_BOS = len(_PAD) + 3

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
    def _ascii_ids(self, texts: list[str]) -> list[np.ndarray] | None:
        """Every text's ids with BOS/EOS, or None when the texts are not all ASCII."""
        joined = _SEP.join([_PAD, *texts, ""])
        if not joined.isascii():
            return None
        raw = joined.encode("ascii")
        scratch = _SCRATCH
        word = np.take(
            _WORD_LUT,
            np.frombuffer(raw, dtype=np.uint8),
            out=scratch.get("word", len(raw), np.bool_),
            mode="clip",
        )
        change = np.not_equal(word[1:], word[:-1], out=scratch.get("change", len(raw) - 1, np.bool_))
        # the raw buffer starts and ends with whitespace, so the edges alternate (rise, fall, ...)
        edges = _nonzero(change, scratch)
        edges += 1
        starts, ends = edges[0::2], edges[1::2]
        n = starts.size
        lens = np.subtract(ends, starts, out=scratch.get("lens", n, np.int64))
        maxlen = int(lens.max())
        # every word's last 8 bytes as a little-endian uint64
        words = _aligned_words(raw, scratch)
        at = np.subtract(ends, 8, out=scratch.get("at", n, np.int64))
        key = _read8(words, at, scratch.get("key", n, np.dtype("<u8")), scratch)
        crc = np.take(_ZEROS, np.minimum(lens, LONG_WORD, out=scratch.get("cap", n, np.int64)),
                      out=scratch.get("crc", n, np.uint32), mode="clip")
        acc = scratch.get("acc", n, np.uint32)
        for g in range(min(_GROUPS, (maxlen + 7) // 8)):
            if g:
                sel = np.flatnonzero(lens > 8 * g)
                m = sel.size
                glen = lens[sel]
                glen -= 8 * g
                key = _read8(words, at[sel] - 8 * g, scratch.get("key", m, np.dtype("<u8")), scratch)
                part = acc[:m]
            else:
                sel, m, glen, part = None, n, lens, acc
            top = min(8, maxlen - 8 * g)
            if int(glen.min()) < 8:  # mask the bytes before a short word's start
                idx = (
                    glen
                    if top == maxlen - 8 * g
                    else np.minimum(glen, 8, out=scratch.get("cap8", m, np.int64))
                )
                key &= np.take(_KEEP, idx, out=scratch.get("keep", m, np.uint64), mode="clip")
            quarters = key.view("<u2").reshape(m, 4)
            index = scratch.get("quarter", m, np.intp)  # take's own index type: no converted copy
            first = True
            for k in range(4):
                if top <= 6 - 2 * k:
                    continue  # both bytes of this quarter lie before every word's start
                np.copyto(index, quarters[:, k])
                if first:
                    np.take(_pair_table(g, k), index, out=part, mode="clip")
                    first = False
                else:
                    part ^= np.take(
                        _pair_table(g, k), index, out=scratch.get("look", m, np.uint32), mode="clip"
                    )
            if sel is None:
                crc ^= part
            else:
                crc[sel] ^= part
        if maxlen > LONG_WORD:  # a few long words: zlib one by one
            longs = np.flatnonzero(lens > LONG_WORD)
            crc[longs] = [zlib.crc32(raw[a:b]) for a, b in zip(starts[longs].tolist(), ends[longs].tolist(),
                                                                 strict=True)]
        out = np.empty(n, dtype=np.int64)
        if self.vocab <= 0xFFFFFFFF:  # the remainder in 32 bits (same value, a faster division)
            np.add(np.remainder(crc, np.uint32(self.vocab), out=acc), np.int64(self.offset), out=out)
        else:
            np.add(crc, np.int64(self.offset), out=out)  # crc < 2**32 <= vocab: its own remainder
        # the markers: text i's BOS is at byte _FIRST_BOS + sum(len(text_j) + 5 for j < i), its EOS
        # len(text_i) + 3 later
        t = len(texts)
        marks = scratch.get("marks", 2 * t, np.int64)
        sizes = np.fromiter(map(len, texts), dtype=np.int64, count=t)
        bos_at = marks[0::2]
        np.cumsum(sizes, out=bos_at)
        bos_at -= sizes
        bos_at += np.arange(_FIRST_BOS, _FIRST_BOS + 5 * t, 5, dtype=np.int64)
        np.add(bos_at, sizes, out=marks[1::2])
        marks[1::2] += 3
        # a marker is a word start: its index in ``edges`` is twice its word index
        words_at = np.searchsorted(edges, marks)
        words_at >>= 1
        out[words_at[0::2]] = self.bos
        out[words_at[1::2]] = self.eos
        return [out[a:b] for a, b in zip(words_at[0::2].tolist(), (words_at[1::2] + 1).tolist(), strict=True)]

    def encode_many(self, texts: list[str]) -> list[np.ndarray]:
        """Every text's ids, bracketed with BOS/EOS, as int64 views of one flat array."""
        if not texts:
            return []
        got = self._ascii_ids(texts)
        if got is not None:
            return got
        words, lens = self._word_ids(texts)
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

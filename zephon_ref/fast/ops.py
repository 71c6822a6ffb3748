"""FastOps: faster implementations of built-in operators, entering at one seam.

Theory of operation
-------------------
The operators in :mod:`zephon_ref.ops` are the plain definitions.  A :class:`FastOps` is handed to
the engine at start (``Builder.engine(faster=FastOps())``, the protocol
:class:`zephon_ref.ops.base.FasterOps`; a user of :class:`zephon_ref.pipeline.Pipeline` sets
``options(faster_ops=True)`` and the facade hands one to every engine it starts); for each stage
it returns either the operator itself or a faster subclass of exactly that operator type, built
from the operator's own state (the same frozen config: the knobs are defined once, in the plain
operator).  Each faster method states the
plain method it replaces and when it defers to it:

* :class:`FastTokenize`: ``process_many`` for the built-in :class:`~zephon_ref.ops.tokenize.HashTokenizer`
  when the operator owns the special tokens and the padding is not ``"longest"``: each record's
  ids, mask and payload are built once (the plain path asks the tokenizer for the batch, then
  brackets, pads and windows in separate steps), and every id is taken from one immutable tuple
  of the id range (``table[i] == i + offset``, built once per operator when ``vocab_size <=``
  :data:`ID_TABLE_LIMIT`), so every occurrence of an id is one int object.  That matters when
  records are buffered: 64 lanes' shuffle reservoirs can hold a whole corpus of token lists, and
  with a fresh int per token the cyclic collector walks millions of objects (issue 22: 64-lane
  throughput fell to 0.55 of one lane, RSS +45%).

pack's old shortcut (``len`` of a list token field before the general field resolution) is not
here: measured on the tokenizing and the map_transform pipelines it saved no CPU time within the
noise, so it was deleted rather than kept (house rule 8: a shortcut worth keeping).

Invariant (the reason they may exist): for every input, a faster operator gives the records,
refusals and warnings of the plain one, so streams, checkpoints and fingerprints are the same
with or without a FastOps (the fingerprint is taken from the builder's plain operators; no state
names an operator's class).  ``properties.fast_ops.fast_ops_problems`` checks it on drawn
operators and records; ``tests/properties/test_fast_ops.py`` and the conformance CLI's ``fast ops``
row run it (and planted differences).

Who uses it: a facade user who opts in (``Pipeline.options(faster_ops=True)``: iteration under
the inline and the threads runner, ``engine()``, a run resumed from a checkpoint; default off, so
a pipeline runs the plain operators unless asked), and the benchmarks that measure speed with it
(they say so in their rows).  Nothing in the semantics imports this module.

What may not live here: knobs, refusals or output rules of their own (those are the plain
operators'); process-global caches (a table belongs to one operator object).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, TypeVar
from zlib import crc32

from zephon_ref.ops.base import BaseOp
from zephon_ref.ops.tokenize import HashTokenizer, Tokenize
from zephon_ref.types import SampleRecord

__all__ = ["ID_TABLE_LIMIT", "FastOps", "FastTokenize", "iterate"]

#: Largest vocabulary whose ids a FastTokenize keeps as one tuple (about 4.7 MiB at the limit).
ID_TABLE_LIMIT = 1 << 17

_Op = TypeVar("_Op", bound=BaseOp)


def _adopt(cls: type[_Op], op: BaseOp) -> _Op:
    """An instance of ``cls`` (a subclass of ``type(op)``) holding ``op``'s own state: the same
    config object and derived fields, so its knobs are the plain operator's, defined once."""
    assert issubclass(cls, type(op)), (cls, type(op))
    fast = cls.__new__(cls)
    fast.__dict__.update(vars(op))
    return fast


class FastTokenize(Tokenize):
    """``Tokenize.process_many`` specialised to the built-in tokenizer; see the module docstring."""

    _ids: tuple[int, ...]

    @classmethod
    def from_plain(cls, op: Tokenize) -> FastTokenize:
        fast = _adopt(cls, op)
        tok = op.config.tokenizer
        fast._ids = ()
        if type(tok) is HashTokenizer and tok.vocab_size <= ID_TABLE_LIMIT:
            fast._ids = tuple(range(tok.offset, tok.offset + tok.vocab_size))
        return fast

    def _encode(self, tok: HashTokenizer, text: str) -> list[int]:
        """``tok.encode(text)``, each id from the table when there is one."""
        table, vocab = self._ids, tok.vocab_size
        if table:  # table[i] == i + offset
            return [table[crc32(w.encode("utf-8")) % vocab] for w in text.split()]
        return tok.encode(text)

    def process_many(self, elems: list[Any]) -> list[Any]:
        c = self.config
        tok = c.tokenizer
        if not elems or not self._owns_specials or type(tok) is not HashTokenizer or c.padding == "longest":
            return super().process_many(elems)  # the plain path
        # as the plain path: the tokenizer asked for no specials, truncated to the room left for
        # them, bracketed with BOS/EOS, padded or windowed; every real token has mask 1
        texts_bases = [self._text_and_base(r) for r in elems]
        limit = self._hf_kwargs().get("max_length") if c.truncation and not c.split_long_samples else None
        pre = [] if self._bos is None else [self._bos]
        post = [] if self._eos is None else [self._eos]
        pad_to = c.max_length if c.padding == "max_length" and not c.split_long_samples else None
        pad_id = self._pad_id() if pad_to is not None else 0
        simple = pad_to is None and not c.split_long_samples and c.return_tensors is None
        out: list[SampleRecord] = []
        for rec, (text, base) in zip(elems, texts_bases, strict=True):
            words = self._encode(tok, text)
            if limit is not None and len(words) > limit:
                del words[limit:]
            ids = [*pre, *words, *post] if (pre or post) else words
            n = len(ids)
            if simple:
                payload = dict(base)
                payload["input_ids"] = ids
                if c.add_attention_mask:
                    payload["attention_mask"] = [1] * n
                out.append(SampleRecord(rec.meta, payload))
                continue
            mask: list[int] | None = [1] * n
            if pad_to is not None and pad_to > n:
                ids = ids + [pad_id] * (pad_to - n)
                mask = [1] * n + [0] * (pad_to - n)
            out.extend(self._emit(rec, base, ids, mask))
        return out


class FastOps:
    """The faster operators, by exact plain type (a user's subclass keeps its own methods).

    Pass one to ``Builder.engine(faster=...)``; it holds nothing between calls (each operator's
    table belongs to the faster operator it builds).
    """

    #: what it swaps, for a benchmark row to say
    SWAPS = ("tokenize (built-in tokenizer: one pass per record, interned ids)",)

    def operator(self, op: BaseOp) -> BaseOp:
        if type(op) is Tokenize:
            return FastTokenize.from_plain(op)
        return op

    def __repr__(self) -> str:
        return "FastOps()"


def iterate(pipeline: Any, faster: Any = None) -> Iterator[Any]:
    """Iterate a :class:`zephon_ref.pipeline.Pipeline` as ``iter(pipeline)`` does (the runner its
    options name), with ``faster`` (default a :class:`FastOps`) plugged in at the engine seam:
    the same items, faster.  ``pipeline.checkpoint()`` reads this run as it reads an ``iter()``.

    ``pipeline.options(faster_ops=True)`` then ``iter(pipeline)`` is the facade's way to the same
    run (and it guards against a second concurrent iteration, as ``iter()`` does); this function
    remains for a caller with faster operators of its own."""
    run: Iterator[Any] = pipeline._drive(pipeline.engine(faster=FastOps() if faster is None else faster))
    return run

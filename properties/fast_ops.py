"""The faster operators against the plain ones (house rule 8): equal output on drawn input.

Theory of operation
-------------------
:class:`zephon_ref.fast.ops.FastOps` swaps ``tokenize`` for a faster subclass at the engine's
seam.  Its invariant is that the swap changes nothing a caller sees.  :func:`fast_ops_problems`
checks that on one drawn :class:`FastOpCase`: the plain operator and ``FastOps().operator(op)``
(or the ``faster`` given, to show a planted difference is caught) each run the case's records
through a fresh accumulator, split into the case's pushes, then flush; the output records
(metadata and payloads), or the refusal (type and message), and the warnings must be equal.  The
draws reach every branch of the faster path: the built-in tokenizer with and without its id
table, every special-tokens mode, BOS/EOS overrides, truncation, splitting, both paddings
(``"longest"`` takes the plain path), whitespace runs, tabs and newlines, missing and non-str
text fields, non-dict payloads, one to five records per call.

:func:`fast_op_cases` is the Hypothesis strategy; ``tests/properties/test_fast_ops.py`` runs it,
with the whole-pipeline check (same stream, checkpoints and fingerprint) beside it, and the
conformance CLI as its ``fast ops`` row (:func:`fast_ops_check`).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

from properties.opkit import rec, run, split

__all__ = ["FastOpCase", "fast_op_cases", "fast_ops_check", "fast_ops_problems"]

_WORDS = ("a", "bb", "héllo", "x1", "the", "end", "zz", "q")


@dataclass(frozen=True)
class FastOpCase:
    """An operator (``kind`` and its builder knobs), records as literals and push cuts.

    ``records``: ``(lane, chunk, offset, payload)``; ``tokenizer``: ``(vocab_size, offset)`` of
    the built-in tokenizer (tokenize only).
    """

    kind: str
    knobs: Mapping[str, Any]
    records: tuple[tuple[int, int, int, Any], ...]
    cuts: tuple[int, ...] = ()
    tokenizer: tuple[int, int] | None = None


def build_op(case: FastOpCase) -> Any:
    """The plain operator of ``case`` (a refusal propagates)."""
    from zephon_ref.ops import HashTokenizer, Tokenize

    assert case.kind == "tokenize", case.kind  # the one operator FastOps swaps
    vocab, offset = case.tokenizer if case.tokenizer is not None else (32000, 3)
    tok = HashTokenizer(vocab_size=vocab, offset=offset)
    return Tokenize(tok, **dict(case.knobs))


def _outcome(op: Any, case: FastOpCase) -> Any:
    from zephon_ref.errors import ZephonRefError

    recs = [rec(lane, chunk, off, payload=payload) for lane, chunk, off, payload in case.records]
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        try:
            out = run(op, split(recs, case.cuts))
        except (ZephonRefError, ValueError, TypeError) as exc:
            return ("refused", type(exc).__name__, str(exc))
    return ("ok", [(r.meta, _comparable(r.payload)) for r in out],
            sorted((w.category.__name__, str(w.message)) for w in seen))


def _comparable(value: Any) -> Any:
    """``value`` with numpy arrays as (dtype, shape, items) and containers kept, so == compares all."""
    if hasattr(value, "dtype") and hasattr(value, "tolist"):
        return ("array", str(value.dtype), tuple(getattr(value, "shape", ())), value.tolist())
    if isinstance(value, dict):
        return {k: _comparable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_comparable(v) for v in value)
    return value


def fast_ops_problems(case: FastOpCase, faster: Any = None) -> list[str]:
    """Differences between the plain operator and its faster one on ``case`` (empty: equal)."""
    from zephon_ref.fast.ops import FastOps

    plain = build_op(case)
    fast = (faster if faster is not None else FastOps()).operator(build_op(case))
    if type(fast) is type(plain):
        return []  # not swapped: nothing to compare
    a, b = _outcome(plain, case), _outcome(fast, case)
    if a == b:
        return []
    if a[0] != b[0] or a[0] == "refused":
        return [f"{case.kind}: plain {a[0]} {a[1:]!r:.300}, fast {b[0]} {b[1:]!r:.300}"]
    if a[2] != b[2]:
        return [f"{case.kind}: warnings differ: plain {a[2]!r:.300}, fast {b[2]!r:.300}"]
    first = next(i for i, (x, y) in enumerate(zip(a[1] + [None], b[1] + [None], strict=False)) if x != y)
    return [f"{case.kind}: output differs at record {first} of {len(a[1])} / {len(b[1])}: "
            f"plain {a[1][first:first + 1]!r:.300}, fast {b[1][first:first + 1]!r:.300}"]


def fast_ops_check(adapter: Any, case: FastOpCase) -> list[str]:
    """The ``fast ops`` row of the conformance CLI: :func:`fast_ops_problems` (the adapter declares
    the ``fast_ops`` feature; the faster operators are zephon_ref's own, whatever the runner)."""
    return fast_ops_problems(case)


@st.composite
def _text(draw: st.DrawFn) -> Any:
    words = draw(st.lists(st.sampled_from(_WORDS), max_size=14))
    seps = draw(st.lists(st.sampled_from([" ", " ", "  ", "\t", "\n"]), min_size=len(words),
                         max_size=len(words)))
    text = "".join(w + s for w, s in zip(words, seps, strict=True))
    if not words:
        return draw(st.sampled_from(["", " "]))
    return draw(st.sampled_from([text, text, text, " " + text]))


@st.composite
def _tokenize_case(draw: st.DrawFn) -> FastOpCase:
    from zephon_ref.fast.ops import ID_TABLE_LIMIT

    mode = draw(st.sampled_from(["none", "truncation", "split", "pad_max", "split_pad", "longest"]))
    max_length = draw(st.integers(1, 12)) if mode != "none" else draw(st.sampled_from([None, 5]))
    special = draw(st.sampled_from(["bos_eos", "bos_eos", "bos", "eos", "none", "tokenizer_default"]))
    knobs: dict[str, Any] = {
        "field": "text", "special_tokens": special, "max_length": max_length,
        "truncation": mode == "truncation", "split_long_samples": mode in ("split", "split_pad"),
        "padding": {"pad_max": "max_length", "split_pad": "max_length", "longest": "longest"}.get(mode,
                                                                                                   False),
        "add_attention_mask": draw(st.booleans()), "preserve_upstream_payload": draw(st.booleans()),
        "missing_field": draw(st.sampled_from(["error", "empty", "empty"])),
        "max_batch": draw(st.integers(1, 5)),
        # arrays of the library named: the faster path hands such records to the plain one
        "return_tensors": draw(st.sampled_from([None, None, None, "np"])),
    }
    if special in ("bos_eos", "bos", "eos") and draw(st.booleans()):
        knobs["bos_token_id"], knobs["eos_token_id"] = draw(st.integers(0, 9)), draw(st.integers(0, 9))
    vocab = draw(st.sampled_from([7, 50, 32000, ID_TABLE_LIMIT, ID_TABLE_LIMIT + 1]))
    tokenizer = (vocab, draw(st.sampled_from([0, 3, 10])))
    payload = st.one_of(
        st.builds(lambda t, k: {"text": t, "k": k}, _text(), st.integers(0, 3)),
        _text().map(lambda t: {"text": t}),
        st.just({"other": "x y"}),  # no text field: refused or empty
        st.integers(0, 99).map(lambda n: {"text": n}),  # a non-str text is str()-ed
        _text(),  # a non-dict payload is its own text
    )
    return _records_case(draw, "tokenize", knobs, payload, tokenizer)


def _records_case(draw: st.DrawFn, kind: str, knobs: dict[str, Any], payload: Any,
                  tokenizer: tuple[int, int] | None) -> FastOpCase:
    lanes = draw(st.sampled_from([1, 1, 2, 3]))
    count = draw(st.integers(0, 12))
    records = tuple((draw(st.integers(0, lanes - 1)), i // 3, i % 3, draw(payload)) for i in range(count))
    cuts = tuple(draw(st.lists(st.integers(0, count), max_size=3)))
    return FastOpCase(kind=kind, knobs=knobs, records=records, cuts=cuts, tokenizer=tokenizer)


def _builds(case: FastOpCase) -> bool:
    from zephon_ref.errors import ZephonRefError

    try:
        build_op(case)
    except ZephonRefError:
        return False
    return True


def fast_op_cases() -> st.SearchStrategy[FastOpCase]:
    """Operators the builder accepts (a refused configuration has no faster operator) with records."""
    return _tokenize_case().filter(_builds)

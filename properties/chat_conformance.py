"""Both libraries over the same rows and chain: the harness of tests/conformance/test_chat_text_*.

:func:`check_case` builds one pipeline with zephon 0.2.0 and zephon_ref over the same in-memory
rows (two shards of one dataset), compares every delivered item (lane, cursor key, contributors
with ``is_last_child``, the whole payload with numpy arrays as ``(dtype, list)``), and then
checks that zephon_ref's threads runner delivers the same items as its inline one,
checkpoints zephon_ref at drawn cuts and checks that a restored pipeline continues exactly, and
restores one zephon checkpoint (``zephon_ref.compat.restore_zephon_state``) whose continuation
must be the uninterrupted run's remainder.
Where zephon refuses the configuration (at the call or while iterating), zephon_ref must refuse
it with a subclass of the same builtin.  In a chain, the value :data:`TOK` stands for a tokenizer
object loaded from ``tokdir`` and :data:`TOK_ID` for the directory itself.
"""

from __future__ import annotations

import copy
import logging
import random
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["TOK", "TOK_ID", "build", "check_case", "drop_odd_first", "items_of", "keep_all", "norm", "view"]

TOK = "<tokenizer object>"
TOK_ID = "<tokenizer directory>"


def norm(value: Any) -> Any:
    """A payload value in a comparable form: arrays as (dtype, list), containers recursively."""
    if isinstance(value, np.ndarray):
        return ("ndarray", str(value.dtype), value.tolist())
    if isinstance(value, dict):
        return {k: norm(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(norm(v) for v in value)
    return value


def view(item: Any) -> list[tuple[Any, ...]]:
    recs = item.records if hasattr(item, "records") else (item,)
    out = []
    for r in recs:
        m = r.meta
        refs = tuple(
            (tuple(ref.cursor.as_key()[:3]) + (tuple(ref.cursor.sample_id),), bool(ref.is_last_child))
            for ref in m.contribution_refs()
        )
        out.append(
            (
                m.lane_id,
                (m.chunk_id, m.chunk_offset, tuple(m.lineage), tuple(m.sample_id)),
                refs,
                norm(r.payload),
            )
        )
    return out


def build(
    impl: str,
    rows: Sequence[dict[str, Any]],
    chain: Sequence[tuple[str, dict[str, Any]]],
    *,
    tokdir: Path | None,
    chunk_size: int,
    lanes: int,
    seed: int,
) -> Any:
    if impl == "zephon":
        import zephon as lib
        from zephon import Pipeline
    else:
        import zephon_ref.work as lib  # type: ignore[no-redef]
        from zephon_ref.pipeline import Pipeline  # type: ignore[assignment]
    half = max(1, len(rows) // 2)
    shards = {0: lib.InMemoryShard(list(rows[:half])), 1: lib.InMemoryShard(list(rows[half:]))}
    src = lib.StaticMixtureWorkSource(
        [lib.Dataset.from_dict("d", shards)], {"d": 1.0}, chunk_size=chunk_size, seed=seed
    )
    p = Pipeline(src)
    tok = None
    for method, kwargs in chain:
        kw = dict(kwargs)
        for key, value in list(kw.items()):
            if value == TOK:
                if tok is None:  # one object per implementation: zephon may set a pad token on it
                    from transformers import AutoTokenizer

                    tok = AutoTokenizer.from_pretrained(str(tokdir), local_files_only=True)
                kw[key] = tok
            elif value == TOK_ID:
                kw[key] = str(tokdir)
        getattr(p, method)(**kw)
    return p.options(runner="inline", canonical_replicas=lanes)


def items_of(p: Any) -> list[Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return [view(x) for x in p]


def check_case(
    rows: Sequence[dict[str, Any]],
    chain: Sequence[tuple[str, dict[str, Any]]],
    *,
    tokdir: Path | None = None,
    chunk_size: int = 4,
    lanes: int = 1,
    seed: int = 0,
    cuts: int = 3,
) -> int:
    """Both libraries deliver the same items; zephon_ref resumes exactly at ``cuts`` cuts.

    Returns the item count, or -1 where both refused."""
    kw: dict[str, Any] = {"tokdir": tokdir, "chunk_size": chunk_size, "lanes": lanes, "seed": seed}
    desc = f"chain={chain!r} chunk_size={chunk_size} lanes={lanes} seed={seed} rows={len(rows)}"
    logging.disable(logging.WARNING)  # zephon logs its per-operator notices
    try:
        try:
            want = items_of(build("zephon", rows, chain, **kw))
        except Exception as exc:  # zephon refuses: zephon_ref must refuse with the same builtin
            builtin = next(t for t in type(exc).__mro__ if t.__module__ == "builtins")
            try:
                items_of(build("zephon_ref", rows, chain, **kw))
            except builtin:
                return -1
            raise AssertionError(f"zephon raised {exc!r}; zephon_ref accepted it\n{desc}") from exc
        got = items_of(build("zephon_ref", rows, chain, **kw))
    finally:
        logging.disable(logging.NOTSET)
    assert len(got) == len(want), f"item count {len(got)} != zephon's {len(want)}\n{desc}"
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        assert g == w, f"item {i}\nzephon:     {w}\nzephon_ref: {g}\n{desc}"
    # execution settings never change the data (seed 002): the threads runner delivers the same items
    threads = items_of(build("zephon_ref", rows, chain, **kw).options(runner="threads"))
    assert threads == got, f"threads runner differs from inline\n{desc}"
    # padding to the group's longest depends on where a group starts, and a resume regroups the
    # replayed chunks (docs/divergences.md): there the identities must resume exactly, the pads not
    longest = any(
        m == "tokenize" and k.get("padding") in (True, "longest") and not k.get("split_long_samples")
        for m, k in chain
    )

    def ident(items: list[Any]) -> list[Any]:
        return [[r[:3] for r in item] for item in items] if longest else items

    rng = random.Random(hash((len(rows), chunk_size, lanes, seed)) & 0xFFFF)
    for cut in sorted({rng.randint(0, len(got)) for _ in range(cuts)}):
        p = build("zephon_ref", rows, chain, **kw)
        it = iter(p)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            head = [view(next(it)) for _ in range(cut)]
            state = p.checkpoint()
            it.close()
            rest = items_of(build("zephon_ref", rows, chain, **kw).restore(state))
        assert ident(head + rest) == ident(got), f"resume at cut {cut} of {len(got)}\n{desc}"
    # a zephon checkpoint of the same pipeline, translated, continues like the uninterrupted run
    from zephon_ref.compat import restore_zephon_state

    cut = rng.randint(0, len(got))
    logging.disable(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            z = build("zephon", rows, chain, **kw)
            zit = iter(z)
            for _ in range(cut):
                next(zit)
            zstate = copy.deepcopy(z.checkpoint())
            zit.close()
            q = build("zephon_ref", rows, chain, **kw)
            restore_zephon_state(q, zstate)
            rest = items_of(q)
    finally:
        logging.disable(logging.NOTSET)
    assert ident(rest) == ident(got[cut:]), f"zephon checkpoint at cut {cut} of {len(got)}\n{desc}"
    return len(got)


def drop_odd_first(batch: Any) -> Any:
    """Drop a batch whose first record is at an odd chunk offset; keep the rest unchanged."""
    return None if batch.records[0].meta.chunk_offset % 2 else batch


def keep_all(batch: Any) -> Any:
    return batch

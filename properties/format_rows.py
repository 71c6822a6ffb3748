"""Shared checks of the file-format conformance tests (tests/conformance/test_{parquet,mds,litdata,lance,
vortex}_rows.py): generated Arrow rows, a typed canonical form of a delivered value, and the stream
comparison of zephon_ref's ``Dataset.from_path`` with zephon 0.2.0's.

:func:`stream_view` reads datasets with one library's ``Dataset.from_path`` (the first with the
format named, the rest detected with ``fmt=None``) and streams a two-dataset mixture of them;
:func:`assert_streams_equal` compares zephon_ref's view with zephon 0.2.0's for one seed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["assert_streams_equal", "canon", "rows", "stream_view"]


def canon(v: Any) -> Any:
    """A value with its type spelled out, so an int64 scalar never equals a Python int."""
    if isinstance(v, dict):
        return ("dict", sorted((k, canon(x)) for k, x in v.items()))
    if isinstance(v, list):
        return ("list", [canon(x) for x in v])
    if isinstance(v, np.ndarray):
        return ("ndarray", str(v.dtype), v.tolist())
    if isinstance(v, np.generic):
        return ("np", str(v.dtype), v.item())
    return (type(v).__name__, v)


def rows(seed: int, n: int) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        k = int(rng.integers(0, 4))
        out.append({
            "text": f"row {seed}-{i}" if i % 5 else None,
            "n": int(rng.integers(-9, 9)),
            "x": float(rng.normal()) if i % 3 else None,
            "flag": bool(i % 2) if i % 7 else None,
            "ids": [int(t) for t in rng.integers(0, 100, size=k)] if i % 6 else None,
            "scores": [0.5, None] if i % 4 == 0 else [float(t) for t in rng.random(k)],
            "meta": {"k": i, "tags": ["a"] * k},
            "nested": [[i], list(range(k))],
            "blob": bytes(range(k)),
        })
    return out


def stream_view(z: Any, paths: Sequence[Path], seed: int, chunk_size: int, *, fmt: str,
                canon: Callable[[Any], Any], with_path: bool = False) -> list[Any]:
    """``[head, *records]``: per dataset its (path,) ids, counts, total and raw bytes, then every
    record of the mixture as (sample id, lane, chunk, offset, canonical payload)."""
    ds = [z.Dataset.from_path(name=f"d{k}", path=str(p), fmt=None if k else fmt) for k, p in enumerate(paths)]
    head = [((d.path,) if with_path else ()) + (d.ids().tolist(), d.counts().tolist(), d.total(),
                                                d.raw_bytes().tolist()) for d in ds]
    src = z.StaticMixtureWorkSource(ds, {d.name: 1.0 / len(ds) for d in ds}, chunk_size=chunk_size, seed=seed,
                                    exhausted_policy="stop")
    recs = [(tuple(r.meta.sample_id), r.meta.lane_id, r.meta.chunk_id, r.meta.chunk_offset, canon(r.payload))
            for r in z.Pipeline(src)]
    return [head, *recs]


def assert_streams_equal(paths: Sequence[Path], seed: int, chunk_size: int, **view: Any) -> None:
    """zephon_ref and zephon 0.2.0 read ``paths`` alike and stream the same records."""
    import zephon

    import zephon_ref

    ours = stream_view(zephon_ref, paths, seed, chunk_size, **view)
    theirs = stream_view(zephon, paths, seed, chunk_size, **view)
    assert ours[0] == theirs[0], f"seed {seed}: (path,) ids/counts/total/raw_bytes"
    assert len(ours) == len(theirs), f"seed {seed}"
    for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        assert a == b, f"seed {seed} record {i}\nzephon_ref: {a}\nzephon:     {b}"

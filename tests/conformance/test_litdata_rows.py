"""``Dataset.from_path(fmt="litdata")``: zephon_ref delivers the rows zephon 0.2.0 delivers.

LitData datasets are written with litdata's own ``BinaryWriter`` (installed with --no-deps by
scripts/install_peers.sh, as CI does before tests/loaders; without it these tests skip) in a seeded
loop over chunk sizes, row counts and item shapes (dicts nested in dicts, lists, tuples, a bare
value) holding str, bytes, int, float, numpy arrays and scalars, torch tensors and JSON-able lists.
Both implementations read them through ``StaticMixtureWorkSource`` and a plain ``Pipeline``: shard
ids, counts, totals, raw bytes and every delivered record (ids, lane, chunk, offset, payload values
*and their types*, dict classes included) agree; so do the refusals' builtins.
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import zephon_ref
from properties.format_rows import assert_streams_equal
from properties.sources import zephon_available

pytestmark = pytest.mark.skipif(importlib.util.find_spec("litdata") is None,
                                reason="litdata not installed (bash scripts/install_peers.sh)")


def canon(v: Any) -> Any:
    """A value with its type spelled out (an int64 scalar is no Python int, a dict no OrderedDict)."""
    if type(v).__name__ == "Tensor":
        return ("tensor", str(v.dtype), tuple(v.shape), v.tolist())
    if isinstance(v, dict):
        return (type(v).__name__, [(k, canon(x)) for k, x in v.items()])
    if isinstance(v, (list, tuple)):
        return (type(v).__name__, [canon(x) for x in v])
    if isinstance(v, np.ndarray):
        return ("ndarray", str(v.dtype), v.shape, v.tolist())
    if isinstance(v, np.generic):
        return ("np", str(v.dtype), v.item())
    return (type(v).__name__, v)


def item(rng: np.random.Generator, shape: int, k: int, dtype: str) -> Any:
    import torch

    n = int(rng.integers(1, 5))
    leaves = {
        "s": f"row{k}" + "é" * n, "b": bytes(rng.integers(0, 256, size=n).tolist()),
        "i": int(rng.integers(-10**6, 10**6)), "f": float(rng.normal()),
        "arr": rng.integers(0, 99, size=(n,)).astype(dtype),
        "m": rng.random((2, n)).astype(np.float16), "np": np.int32(k),
        "t": torch.arange(n, dtype=torch.int64), "l": [k, k + 1],
    }
    if shape == 0:
        return leaves
    if shape == 1:
        return {"text": leaves["s"], "meta": {"i": leaves["i"], "deep": {"arr": leaves["arr"]}},
                "pair": (leaves["f"], leaves["b"])}
    if shape == 2:
        return [leaves["i"], leaves["s"], leaves["arr"]]
    return leaves["i"]


def write_litdata(root: Path, seed: int) -> Path:
    from litdata.streaming.writer import BinaryWriter

    rng = np.random.default_rng(seed)
    out = root / f"lit-{seed}"
    shutil.rmtree(out, ignore_errors=True)
    chunk = {"chunk_bytes": int(rng.choice([200, 600, 1 << 16]))} if seed % 3 else {
        "chunk_size": int(rng.integers(1, 6))}
    w = BinaryWriter(str(out), **chunk)
    shape = seed % 4
    # litdata's writer takes each leaf's serializer (a numpy leaf's dtype too) from the first item
    dtype = str(rng.choice(["int32", "float32", "int64"]))
    for k in range(int(rng.integers(4, 25))):
        w.add_item(k, item(rng, shape, k, dtype))
    w.done()
    w.merge()
    return out


@pytest.mark.conformance
@pytest.mark.skipif(not zephon_available(), reason="zephon 0.2.0 not installed (pip install .[conformance])")
def test_generated_litdata_datasets_stream_as_zephons(tmp_path: Path) -> None:
    for seed in range(12):
        paths = [write_litdata(tmp_path, seed), write_litdata(tmp_path, 100 + seed)]
        assert_streams_equal(paths, seed, 1 + seed % 3, fmt="litdata", canon=canon)


def test_zephon_ref_reads_every_litdata_item_once(tmp_path: Path) -> None:
    """Without zephon: every item written comes back once, in chunk then write order, equal to it."""
    from litdata.streaming.writer import BinaryWriter

    items = [{"s": f"r{k}", "a": np.arange(k + 1, dtype=np.int32), "d": {"k": k}} for k in range(9)]
    w = BinaryWriter(str(tmp_path / "l"), chunk_size=4)
    for k, it in enumerate(items):
        w.add_item(k, it)
    w.done()
    w.merge()
    d = zephon_ref.Dataset.from_path(name="l", path=str(tmp_path / "l"))
    assert d.counts().tolist() == [4, 4, 1] and d.total() == 9
    got = [d.get(int(s), i) for s, n in zip(d.ids().tolist(), d.counts().tolist(), strict=True)
           for i in range(n)]
    assert [g["s"] for g in got] == [it["s"] for it in items]
    assert all(canon(g["a"]) == canon(it["a"]) and dict(g["d"]) == it["d"]
               for g, it in zip(got, items, strict=True))


@pytest.mark.conformance
@pytest.mark.skipif(not zephon_available(), reason="zephon 0.2.0 not installed (pip install .[conformance])")
def test_litdata_refusals_share_zephons_builtins(tmp_path: Path) -> None:
    """A missing path, a directory with no index and an index that is not LitData's, with fmt='litdata'."""
    import zephon

    (tmp_path / "empty").mkdir()
    (tmp_path / "mds").mkdir()
    (tmp_path / "mds" / "index.json").write_text('{"shards": []}', encoding="utf-8")
    cases = [("nowhere", FileNotFoundError), ("empty", ValueError), ("mds", ValueError)]
    for where, builtin in cases:
        for z in (zephon, zephon_ref):
            with pytest.raises(builtin):
                z.Dataset.from_path(name="x", path=str(tmp_path / where), fmt="litdata")
        with pytest.raises(zephon_ref.errors.ConfigError):
            zephon_ref.Dataset.from_path(name="x", path=str(tmp_path / where), fmt="litdata")


@pytest.mark.conformance
@pytest.mark.skipif(not zephon_available(), reason="zephon 0.2.0 not installed (pip install .[conformance])")
def test_a_framed_compressed_chunk_is_refused_at_from_path(tmp_path: Path) -> None:
    """litdata 0.2.76's zstd-compressed chunks are framed (LDFZ): zephon fails at the first read with
    ValueError, zephon_ref refuses them at from_path with a ConfigError (a ValueError; divergence D-49)."""
    import zephon
    from litdata.streaming.writer import BinaryWriter

    w = BinaryWriter(str(tmp_path / "z"), chunk_size=3, compression="zstd")
    rng = np.random.default_rng(1)
    for k in range(10):  # (litdata leaves a tiny chunk plain)
        w.add_item(k, item(rng, 0, k, "int32"))
    w.done()
    w.merge()
    assert sorted((tmp_path / "z").glob("*.bin"))[0].read_bytes()[:4] == b"LDFZ"
    d = zephon.Dataset.from_path(name="z", path=str(tmp_path / "z"))
    src = zephon.StaticMixtureWorkSource([d], {"z": 1.0}, chunk_size=1, seed=1, exhausted_policy="stop")
    with pytest.raises(ValueError):
        list(zephon.Pipeline(src))
    with pytest.raises(zephon_ref.errors.ConfigError, match="LDFZ"):
        zephon_ref.Dataset.from_path(name="z", path=str(tmp_path / "z"))

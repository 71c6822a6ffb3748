"""``Dataset.from_path(fmt="mds")``: zephon_ref delivers the rows zephon 0.2.0 delivers.

MDS datasets are written with MosaicML Streaming's own ``MDSWriter`` (installed by
scripts/install_peers.sh, as CI does before tests/loaders; without it these tests skip) in a seeded
loop over shard size limits (so 1 to many shards, an empty first shard among them), row counts,
compressions and columns of every encoding zephon_ref decodes (str, bytes, int, numpy scalars,
str_int/str_float/str_decimal, json, pkl, ndarray with and without fixed dtype/shape).  Both
implementations read them through ``StaticMixtureWorkSource`` and a plain ``Pipeline``: shard ids,
counts, totals, raw bytes and every delivered record (ids, lane, chunk, offset, payload values *and
their types*) agree; so do the refusals' builtins.
"""

from __future__ import annotations

import json
import shutil
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import zephon_ref
from properties.format_rows import assert_streams_equal
from properties.sources import zephon_available


def _streaming() -> Any:
    """streaming 0.13.0 importable (its torchvision import replaced by the peers' placeholder), or skip."""
    import importlib.util

    if importlib.util.find_spec("streaming") is None:
        pytest.skip("mosaicml-streaming not installed (bash scripts/install_peers.sh)")
    import sys

    from properties.loaders.adapters.streaming import _import_streaming

    module = _import_streaming()
    # zephon 0.2.0 imports streaming's MDS reader once, when its MDS format module is first imported,
    # and keeps None if that failed (streaming imports torchvision, which the placeholder above stands
    # in for): a test earlier in this process that imported zephon's io modules (the public-surface
    # walk) leaves zephon unable to read MDS. Import that module again now that streaming imports.
    zephon_mds = sys.modules.get("zephon._internal.io.formats.mds")
    if zephon_mds is not None and getattr(zephon_mds, "_StreamingMDSReader", True) is None:
        importlib.reload(zephon_mds)
    return module


def canon(v: Any) -> Any:
    """A value with its type spelled out, so an int64 scalar never equals a Python int."""
    if isinstance(v, dict):
        return ("dict", sorted((k, canon(x)) for k, x in v.items()))
    if isinstance(v, (list, tuple)):
        return (type(v).__name__, [canon(x) for x in v])
    if isinstance(v, np.ndarray):
        return ("ndarray", str(v.dtype), v.shape, v.tolist())
    if isinstance(v, np.generic):
        return ("np", str(v.dtype), v.item())
    return (type(v).__name__, v)


COLUMNS = {"s": "str", "b": "bytes", "i": "int", "u8": "uint8", "i16": "int16", "f32": "float32",
           "f64": "float64", "si": "str_int", "sf": "str_float", "sd": "str_decimal", "j": "json", "p": "pkl",
           "a": "ndarray", "af": "ndarray:float32", "ax": "ndarray:int16:2,3"}


def sample(rng: np.random.Generator, cols: list[str], k: int) -> dict[str, Any]:
    n = int(rng.integers(1, 5))
    full = {
        "s": "é" * n + f"row{k}", "b": bytes(rng.integers(0, 256, size=n).tolist()),
        "i": int(rng.integers(-9e15, 9e15)),
        "u8": np.uint8(rng.integers(0, 256)), "i16": np.int16(rng.integers(-300, 300)),
        "f32": np.float32(rng.normal()), "f64": float(rng.normal()), "si": int(rng.integers(-99, 99)),
        "sf": float(rng.normal()), "sd": Decimal(f"{k}.25"), "j": {"k": k, "l": ["x"] * n, "n": None},
        "p": {"t": (k, "y"), "set": frozenset({1})},
        "a": rng.integers(0, 1000, size=(n, 2)).astype(rng.choice(["int64", "uint16", "float64"])),
        "af": rng.random(n).astype(np.float32), "ax": rng.integers(-5, 5, size=(2, 3)).astype(np.int16),
    }
    return {c: full[c] for c in cols}


def write_mds(root: Path, seed: int) -> Path:
    """One generated MDS dataset under ``root`` (a directory named by the seed)."""
    from streaming import MDSWriter

    rng = np.random.default_rng(seed)
    names = sorted(COLUMNS)
    cols = [c for c in names if rng.random() < 0.6] or ["s"]
    out = root / f"mds-{seed}"
    shutil.rmtree(out, ignore_errors=True)
    compression = [None, None, "gz", "bz2", "zstd", "zstd:3"][seed % 6]
    size_limit = int(rng.choice([120, 400, 2000, 1 << 20]))
    with MDSWriter(out=str(out), columns={c: COLUMNS[c] for c in cols}, compression=compression,
                   size_limit=size_limit) as w:
        for k in range(int(rng.integers(1, 30))):
            w.write(sample(rng, cols, k))
    return out


@pytest.mark.conformance
@pytest.mark.skipif(not zephon_available(), reason="zephon 0.2.0 not installed (pip install .[conformance])")
def test_generated_mds_datasets_stream_as_zephons(tmp_path: Path) -> None:
    _streaming()
    for seed in range(12):
        paths = [write_mds(tmp_path, seed), write_mds(tmp_path, 100 + seed)]
        assert_streams_equal(paths, seed, 1 + seed % 3, fmt="mds", canon=canon)


def test_zephon_ref_reads_every_mds_row_once(tmp_path: Path) -> None:
    """Without zephon: every row written is delivered once, equal to what was written."""
    _streaming()
    from streaming import MDSWriter

    rows = [{"s": f"r{k}", "a": np.arange(k + 1, dtype=np.int32), "j": {"k": k}} for k in range(9)]
    with MDSWriter(out=str(tmp_path / "m"), columns={"s": "str", "a": "ndarray", "j": "json"},
                   size_limit=150) as w:
        for r in rows:
            w.write(r)
    d = zephon_ref.Dataset.from_path(name="m", path=str(tmp_path / "m"))
    index = json.loads((tmp_path / "m" / "index.json").read_text())
    assert d.total() == 9 and len(d.ids()) == len(index["shards"]) > 2
    got = [d.get(int(s), i) for s, n in zip(d.ids().tolist(), d.counts().tolist(), strict=True)
           for i in range(n)]
    assert [g["s"] for g in got] == [r["s"] for r in rows]  # shards in index order, rows in file order
    assert all(canon(g["a"]) == canon(r["a"]) and g["j"] == r["j"] for g, r in zip(got, rows, strict=True))


@pytest.mark.conformance
@pytest.mark.skipif(not zephon_available(), reason="zephon 0.2.0 not installed (pip install .[conformance])")
def test_mds_refusals_share_zephons_builtins(tmp_path: Path) -> None:
    """A missing path, a directory with no index (fmt 'mds' or None) and an unparsable index.json."""
    import zephon

    (tmp_path / "empty").mkdir()
    (tmp_path / "corrupt").mkdir()
    (tmp_path / "corrupt" / "index.json").write_text('{"shards": [', encoding="utf-8")
    cases = [("nowhere", "mds", FileNotFoundError), ("empty", "mds", ValueError), ("empty", None, ValueError),
             ("corrupt", "mds", ValueError), ("corrupt", None, ValueError)]
    for where, fmt, builtin in cases:
        for z in (zephon, zephon_ref):
            with pytest.raises(builtin):
                z.Dataset.from_path(name="x", path=str(tmp_path / where), fmt=fmt)
        with pytest.raises(zephon_ref.errors.ConfigError):
            zephon_ref.Dataset.from_path(name="x", path=str(tmp_path / where), fmt=fmt)


def image_view(v: Any) -> Any:
    """An image as (class, mode, size, file format, pixels); a list of them item by item."""
    if isinstance(v, list):
        return [image_view(x) for x in v]
    return (type(v).__name__, v.mode, v.size, v.format, v.tobytes())


@pytest.mark.conformance
@pytest.mark.skipif(not zephon_available(), reason="zephon 0.2.0 not installed (pip install .[conformance])")
def test_mds_image_columns_equal_zephons(tmp_path: Path) -> None:
    """pil, jpeg, png and their lists: the same Pillow image classes, modes, sizes, formats and pixels."""
    _streaming()
    pil = pytest.importorskip("PIL.Image", reason="Pillow not installed")
    import zephon
    from streaming import MDSWriter

    rng = np.random.default_rng(3)
    cols = {"p": "pil", "j": "jpeg", "g": "png", "lp": "list[pil]", "lj": "list[jpeg]", "lg": "list[png]"}
    with MDSWriter(out=str(tmp_path / "img"), columns=cols, size_limit=3000) as w:
        for k in range(5):
            h, wd = int(rng.integers(1, 9)), int(rng.integers(1, 9))
            im = pil.fromarray(rng.integers(0, 256, size=(h, wd, 3)).astype(np.uint8))
            gray = im.convert("L")
            w.write({"p": gray if k % 2 else im, "j": im, "g": gray, "lp": [im, gray][: 1 + k % 2],
                     "lj": [im] * k, "lg": [gray, im]})

    def stream(z: Any) -> list[Any]:
        d = z.Dataset.from_path(name="img", path=str(tmp_path / "img"))
        src = z.StaticMixtureWorkSource([d], {"img": 1.0}, chunk_size=1, seed=4, exhausted_policy="stop")
        recs = [(tuple(r.meta.sample_id), {c: image_view(v) for c, v in r.payload.items()})
                for r in z.Pipeline(src)]
        return [d.counts().tolist(), *recs]

    ours, theirs = stream(zephon_ref), stream(zephon)
    assert len(ours) == 6 and len(ours[0]) > 1
    assert ours == theirs

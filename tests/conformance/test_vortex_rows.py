"""``Dataset.from_path(fmt="vortex")``: zephon_ref delivers the rows zephon 0.2.0 delivers.

Vortex files are written with ``vortex.io.write`` (the ``vortex`` extra; without vortex-data these
tests skip) in a seeded loop over file counts and row counts, with the columns of the Parquet
conformance test (ints, floats, bools, strings, bytes, structs, nested and numeric lists, nulls),
some directories also holding a Parquet file (zephon detects Vortex before Parquet).  Both
implementations read them through ``StaticMixtureWorkSource`` and a plain ``Pipeline``: shard ids,
counts, totals, raw bytes and every delivered record (payload values *and their types*) agree; so
do the refusals' builtins.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("vortex", reason="vortex-data not installed (pip install .[vortex])")

import zephon_ref  # noqa: E402
from properties.format_rows import assert_streams_equal, canon, rows  # noqa: E402
from properties.sources import zephon_available  # noqa: E402
from zephon_ref.io import write_parquet  # noqa: E402


def write_vortex(root: Path, seed: int) -> Path:
    import pyarrow as pa
    import vortex

    rng = np.random.default_rng(seed)
    out = root / f"vx-{seed}"
    out.mkdir()
    for k in range(int(rng.integers(1, 5))):
        vortex.io.write(pa.Table.from_pylist(rows(seed * 10 + k, int(rng.integers(2, 12)))),
                        str(out / f"part-{int(rng.integers(0, 1000)):04d}-{k}.vortex"))
    if seed % 2:
        write_parquet(rows(seed, 3), out / "also.parquet")  # not read: Vortex is detected first
    return out


@pytest.mark.conformance
@pytest.mark.skipif(not zephon_available(), reason="zephon 0.2.0 not installed (pip install .[conformance])")
def test_generated_vortex_datasets_stream_as_zephons(tmp_path: Path) -> None:
    for seed in range(10):
        paths = [write_vortex(tmp_path, seed), write_vortex(tmp_path, 100 + seed)]
        assert_streams_equal(paths, seed, 1 + seed % 3, fmt="vortex", canon=canon)


def test_zephon_ref_reads_every_vortex_row_once(tmp_path: Path) -> None:
    """Without zephon: files in name order, rows in file order, equal to what was written."""
    import pyarrow as pa
    import vortex

    (tmp_path / "v").mkdir()
    for name, ks in (("b", [3, 4]), ("a", [0, 1, 2])):
        table = pa.table({"k": ks, "s": [f"r{k}" for k in ks]})
        vortex.io.write(table, str(tmp_path / "v" / f"{name}.vortex"))
    d = zephon_ref.Dataset.from_path(name="v", path=str(tmp_path / "v"))
    assert d.counts().tolist() == [3, 2]
    got = [d.get(s, i) for s, n in ((0, 3), (1, 2)) for i in range(n)]
    assert [(int(g["k"]), g["s"]) for g in got] == [(k, f"r{k}") for k in range(5)]


@pytest.mark.conformance
@pytest.mark.skipif(not zephon_available(), reason="zephon 0.2.0 not installed (pip install .[conformance])")
def test_vortex_refusals_share_zephons_builtins(tmp_path: Path) -> None:
    """A missing path, a directory with no .vortex file and a corrupt .vortex file."""
    import zephon

    (tmp_path / "empty").mkdir()
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "x.vortex").write_bytes(b"garbage")
    for where, builtin in (("nowhere", FileNotFoundError), ("empty", ValueError), ("bad", ValueError)):
        for z in (zephon, zephon_ref):
            with pytest.raises(builtin):
                z.Dataset.from_path(name="x", path=str(tmp_path / where), fmt="vortex")
        with pytest.raises(zephon_ref.errors.ConfigError):
            zephon_ref.Dataset.from_path(name="x", path=str(tmp_path / where), fmt="vortex")

"""``Dataset.from_path(fmt="lance")``: zephon_ref delivers the rows zephon 0.2.0 delivers.

Lance datasets are written with ``lance.write_dataset`` (the ``lance`` extra; without pylance these
tests skip) in a seeded loop over rows per fragment, appends and deletions (rows and whole
fragments), with the columns of the Parquet conformance test (ints, floats, bools, strings, bytes,
structs, nested and numeric lists, nulls).  Both implementations read them, by root (latest
version) and by an earlier version's manifest, through ``StaticMixtureWorkSource`` and a plain
``Pipeline``: the pinned path, shard ids, counts, totals, raw bytes and every delivered record
(payload values *and their types*) agree; so do the refusals' builtins.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("lance", reason="pylance not installed (pip install .[lance])")

import zephon_ref  # noqa: E402
from properties.format_rows import assert_streams_equal, canon, rows  # noqa: E402
from properties.sources import zephon_available  # noqa: E402


def write_lance(root: Path, seed: int) -> tuple[Path, Path]:
    """A generated Lance dataset and the manifest of its first version."""
    import lance
    import pyarrow as pa

    rng = np.random.default_rng(seed)
    out = root / f"lance-{seed}"
    shutil.rmtree(out, ignore_errors=True)
    per_file = int(rng.integers(1, 8))
    first = [dict(r, k=i) for i, r in enumerate(rows(seed, int(rng.integers(3, 20))))]
    lance.write_dataset(pa.Table.from_pylist(first), str(out), max_rows_per_file=per_file)
    first_manifest = sorted((out / "_versions").glob("*.manifest"))[0]
    if seed % 2:
        more = [dict(r, k=100 + i) for i, r in enumerate(rows(seed + 50, int(rng.integers(1, 6))))]
        lance.write_dataset(pa.Table.from_pylist(more, schema=lance.dataset(str(out)).schema), str(out),
                            mode="append")
    if seed % 3 == 0:
        lo = int(rng.integers(0, per_file + 1))
        lance.dataset(str(out)).delete(f"k >= {lo} AND k < {lo + per_file}")  # may empty a fragment
    return out, first_manifest


@pytest.mark.conformance
@pytest.mark.skipif(not zephon_available(), reason="zephon 0.2.0 not installed (pip install .[conformance])")
def test_generated_lance_datasets_stream_as_zephons(tmp_path: Path) -> None:
    for seed in range(10):
        root, manifest = write_lance(tmp_path, seed)
        assert_streams_equal([root, manifest], seed, 1 + seed % 2, fmt="lance", canon=canon, with_path=True)


def test_zephon_ref_reads_live_rows_once(tmp_path: Path) -> None:
    """Without zephon: deleted rows are not read, an emptied fragment is no shard, ids are positions."""
    import lance
    import pyarrow as pa

    lance.write_dataset(pa.table({"k": list(range(10))}), str(tmp_path / "l"), max_rows_per_file=3)
    lance.dataset(str(tmp_path / "l")).delete("(k >= 3 AND k < 6) OR k = 7")
    d = zephon_ref.Dataset.from_path(name="l", path=str(tmp_path / "l"))
    assert d.ids().tolist() == [0, 1, 2] and d.counts().tolist() == [3, 2, 1]
    got = [int(d.get(s, i)["k"]) for s, n in ((0, 3), (1, 2), (2, 1)) for i in range(n)]
    assert got == [0, 1, 2, 6, 8, 9]
    assert d.path.endswith(".manifest")


@pytest.mark.conformance
@pytest.mark.skipif(not zephon_available(), reason="zephon 0.2.0 not installed (pip install .[conformance])")
def test_lance_refusals_share_zephons_builtins(tmp_path: Path) -> None:
    """A missing path, an empty directory and a directory without _versions/, with fmt='lance'."""
    import zephon

    (tmp_path / "empty").mkdir()
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "x.lance").write_bytes(b"not lance")
    for where, builtin in (("nowhere", FileNotFoundError), ("empty", ValueError), ("data", ValueError)):
        for z in (zephon, zephon_ref):
            with pytest.raises(builtin):
                z.Dataset.from_path(name="x", path=str(tmp_path / where), fmt="lance")
        with pytest.raises(zephon_ref.errors.ConfigError):
            zephon_ref.Dataset.from_path(name="x", path=str(tmp_path / where), fmt="lance")

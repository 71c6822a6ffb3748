"""``Dataset.from_path(fmt="parquet")``: zephon_ref delivers the rows zephon 0.2.0 delivers.

The same Parquet files (several shards, several row groups, columns of every kind the reader
distinguishes: ints and floats of several widths, bools, strings, bytes, structs, nested and
large lists, numeric lists with and without nulls, nulls everywhere) are read by both implementations through
``StaticMixtureWorkSource`` and a plain ``Pipeline``; the delivered records agree one by one in
sample id, lane, chunk id and offset, and in every payload value *and its Python/numpy type*.
The same rows written as JSONL agree too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("pyarrow", reason="pyarrow (the parquet extra) is not installed")

import zephon_ref  # noqa: E402
from properties.format_rows import canon, rows  # noqa: E402
from properties.sources import zephon_available  # noqa: E402
from zephon_ref.io import write_parquet  # noqa: E402


def build(z: Any, root: Path) -> list[Any]:
    a = z.Dataset.from_path(name="a", path=str(root / "a"), fmt=None)
    b = z.Dataset.from_path(name="b", path=str(root / "b"))  # fmt detected
    src = z.StaticMixtureWorkSource([a, b], {"a": 0.6, "b": 0.4}, chunk_size=3, seed=11,
                                    exhausted_policy="stop")
    return list(z.Pipeline(src))


def record_view(r: Any) -> tuple[Any, ...]:
    m = r.meta
    return (tuple(m.sample_id), m.lane_id, m.chunk_id, m.chunk_offset, canon(r.payload))


@pytest.fixture
def parquet_root(tmp_path: Path) -> Path:
    write_parquet(rows(1, 7), tmp_path / "a" / "s-000.parquet", row_group_size=3)
    write_parquet(rows(2, 5), tmp_path / "a" / "s-001.parquet")
    write_parquet(rows(3, 9), tmp_path / "b" / "part-0.parquet", row_group_size=4)
    write_parquet(rows(4, 2), tmp_path / "b" / "sub" / "ignored.parquet")  # not read: a subdirectory
    return tmp_path


def test_zephon_ref_reads_every_row_once(parquet_root: Path) -> None:
    a = zephon_ref.Dataset.from_path(name="a", path=str(parquet_root / "a"), fmt="parquet")
    assert a.ids().tolist() == [0, 1] and a.counts().tolist() == [7, 5]
    got = list(zephon_ref.Pipeline(zephon_ref.StaticMixtureWorkSource([a], {"a": 1.0}, chunk_size=3, seed=2,
                                                                      exhausted_policy="stop")))
    assert sorted(tuple(r.meta.sample_id) for r in got) == [(0, s, i) for s, n in ((0, 7), (1, 5))
                                                             for i in range(n)]
    by_id = {tuple(r.meta.sample_id): r.payload for r in got}
    want = rows(1, 7)[1]
    assert by_id[(0, 0, 1)]["text"] == want["text"] and by_id[(0, 0, 1)]["ids"].tolist() == want["ids"]
    assert canon(by_id[(0, 0, 1)]["n"]) == ("np", "int64", want["n"])


@pytest.mark.conformance
@pytest.mark.skipif(not zephon_available(), reason="zephon 0.2.0 not installed (pip install .[conformance])")
def test_parquet_stream_equals_zephons(parquet_root: Path) -> None:
    import zephon

    ours = [record_view(r) for r in build(zephon_ref, parquet_root)]
    theirs = [record_view(r) for r in build(zephon, parquet_root)]
    assert len(ours) == len(theirs) > 10
    for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        assert a == b, f"record {i}\nzephon_ref: {a}\nzephon:     {b}"


@pytest.mark.conformance
@pytest.mark.skipif(not zephon_available(), reason="zephon 0.2.0 not installed (pip install .[conformance])")
def test_jsonl_stream_equals_zephons(tmp_path: Path) -> None:
    """The same rows as JSONL (bytes left out): both read them as json.loads does."""
    import json

    import zephon

    for name, parts in (("a", ((1, 7), (2, 5))), ("b", ((3, 9),))):
        for k, (seed, n) in enumerate(parts):
            f = tmp_path / name / f"part-{k}.jsonl"
            f.parent.mkdir(parents=True, exist_ok=True)
            f.write_text("".join(json.dumps({c: v for c, v in r.items() if c != "blob"}) + "\n"
                                 for r in rows(seed, n)), encoding="utf-8")
    ours = [record_view(r) for r in build(zephon_ref, tmp_path)]
    theirs = [record_view(r) for r in build(zephon, tmp_path)]
    assert len(ours) == len(theirs) > 10
    assert ours == theirs


@pytest.mark.conformance
@pytest.mark.skipif(not zephon_available(), reason="zephon 0.2.0 not installed (pip install .[conformance])")
def test_narrow_and_nested_column_types_equal_zephons(tmp_path: Path) -> None:
    """int8/int32/uint16/float32 scalars and lists, bool lists, large lists and strings, structs of lists."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    import zephon

    n = 6
    table = pa.table({
        "i8": pa.array([i - 3 if i % 4 else None for i in range(n)], pa.int8()),
        "i32": pa.array(list(range(n)), pa.int32()),
        "u16": pa.array([[i, i + 1] for i in range(n)], pa.list_(pa.uint16())),
        "f32": pa.array([i / 4 for i in range(n)], pa.float32()),
        "lf32": pa.array([[i / 2] if i % 3 else [None] for i in range(n)], pa.list_(pa.float32())),
        "lb": pa.array([[bool(i % 2)] * (i % 3) for i in range(n)], pa.list_(pa.bool_())),
        "big": pa.array([list(range(i)) for i in range(n)], pa.large_list(pa.int64())),
        "ls": pa.array([f"s{i}" * i for i in range(n)], pa.large_string()),
        "st": pa.array([{"v": [i], "w": None} for i in range(n)],
                       pa.struct([("v", pa.list_(pa.int32())), ("w", pa.float64())])),
    })
    (tmp_path / "t").mkdir()
    pq.write_table(table, tmp_path / "t" / "t.parquet", row_group_size=4)

    def stream(z: Any) -> list[Any]:
        d = z.Dataset.from_path(name="t", path=str(tmp_path / "t"), fmt="parquet")
        src = z.StaticMixtureWorkSource([d], {"t": 1.0}, chunk_size=2, seed=5, exhausted_policy="stop")
        return [record_view(r) for r in z.Pipeline(src)]

    ours, theirs = stream(zephon_ref), stream(zephon)
    assert len(ours) == n
    assert ours == theirs


@pytest.mark.conformance
@pytest.mark.skipif(not zephon_available(), reason="zephon 0.2.0 not installed (pip install .[conformance])")
def test_compressed_jsonl_stream_equals_zephons(tmp_path: Path) -> None:
    """Shards as .jsonl, .jsonl.gz, .jsonl.bz2, .jsonl.xz and .jsonl.zst in one directory: the same rows."""
    import bz2
    import gzip
    import json
    import lzma

    import zephon
    from backports import zstd

    packers = {".jsonl": bytes, ".jsonl.gz": gzip.compress, ".jsonl.bz2": bz2.compress,
               ".jsonl.xz": lzma.compress, ".jsonl.zst": zstd.compress}
    (tmp_path / "a").mkdir()
    for k, (suffix, pack) in enumerate(packers.items()):
        text = "".join(json.dumps({c: v for c, v in r.items() if c != "blob"}) + "\n" for r in rows(k, 3 + k))
        (tmp_path / "a" / f"part-{k}{suffix}").write_bytes(pack(text.encode("utf-8")))
    (tmp_path / "a" / "README.txt").write_text("not a shard")

    def stream(z: Any) -> list[Any]:
        d = z.Dataset.from_path(name="a", path=str(tmp_path / "a"))
        assert d.counts().tolist() == [3, 4, 5, 6, 7]
        src = z.StaticMixtureWorkSource([d], {"a": 1.0}, chunk_size=4, seed=9, exhausted_policy="stop")
        return [d.raw_bytes().tolist(), *(record_view(r) for r in z.Pipeline(src))]

    (our_bytes, *ours), (their_bytes, *theirs) = stream(zephon_ref), stream(zephon)
    assert our_bytes == their_bytes  # a compressed shard's bytes are its content's (token-aware costs)
    assert len(ours) == 24 and ours == theirs  # 25 rows, chunks of 4: the partial last chunk is not read


@pytest.mark.conformance
@pytest.mark.skipif(not zephon_available(), reason="zephon 0.2.0 not installed (pip install .[conformance])")
def test_a_missing_path_is_file_not_found_in_both(tmp_path: Path) -> None:
    import zephon

    for z in (zephon, zephon_ref):
        with pytest.raises(FileNotFoundError):
            z.Dataset.from_path(name="x", path=str(tmp_path / "nowhere"))
    with pytest.raises(ValueError):  # and a ConfigError, as every bad path
        zephon_ref.Dataset.from_path(name="x", path=str(tmp_path / "nowhere"))


@pytest.mark.conformance
@pytest.mark.skipif(not zephon_available(), reason="zephon 0.2.0 not installed (pip install .[conformance])")
def test_token_aware_stream_over_parquet_equals_zephons(parquet_root: Path) -> None:
    """Token-aware allocation costs rows by shard bytes: the same byte sizes give the same chunks."""
    import zephon

    def stream(z: Any) -> tuple[list[int], list[Any]]:
        a = z.Dataset.from_path(name="a", path=str(parquet_root / "a"), fmt="parquet")
        b = z.Dataset.from_path(name="b", path=str(parquet_root / "b"), fmt="parquet")
        est = z.work.TokenEstimation(primer={"a": 0.3, "b": 0.7})
        src = z.StaticMixtureWorkSource([a, b], {"a": 0.5, "b": 0.5}, chunk_size=3, seed=4,
                                        exhausted_policy="stop", token_estimation=est)
        return [*a.raw_bytes().tolist(), *b.raw_bytes().tolist()], [record_view(r) for r in z.Pipeline(src)]

    (our_bytes, ours), (their_bytes, theirs) = stream(zephon_ref), stream(zephon)
    assert our_bytes == their_bytes
    assert len(ours) > 5 and ours == theirs


def test_the_type_check_can_fail() -> None:
    assert canon({"n": np.int64(1)}) != canon({"n": 1})
    assert canon([np.array([1])]) != canon([[1]])

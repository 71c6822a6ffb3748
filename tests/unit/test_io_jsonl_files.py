"""Dataset.from_path over compressed JSONL shards and a missing path (no zephon, no pyarrow needed)."""

from __future__ import annotations

import bz2
import gzip
import lzma
from pathlib import Path

import pytest

from zephon_ref.errors import ConfigError
from zephon_ref.io import Dataset, DatasetNotFound


def test_compressed_shards_are_read_in_name_order(tmp_path: Path) -> None:
    (tmp_path / "b.jsonl.gz").write_bytes(gzip.compress(b'{"i": 2}\n{"i": 3}\n'))
    (tmp_path / "a.jsonl").write_bytes(b'{"i": 1}\n')
    (tmp_path / "c.jsonl.bz2").write_bytes(bz2.compress(b'{"i": 4}\n'))
    (tmp_path / "d.jsonl.xz").write_bytes(lzma.compress(b'{"i": 5}\n\n'))
    (tmp_path / "e.json.gz").write_bytes(gzip.compress(b'{"i": 99}\n'))  # not a JSONL name: not a shard
    ds = Dataset.from_path(name="d", path=tmp_path)
    assert ds.counts().tolist() == [1, 2, 1, 1]
    got = [ds.get(s, i)["i"] for s, n in enumerate(ds.counts().tolist()) for i in range(n)]
    assert got == [1, 2, 3, 4, 5]


def test_a_truncated_archive_and_a_missing_path_are_refused(tmp_path: Path) -> None:
    (tmp_path / "x.jsonl.gz").write_bytes(gzip.compress(b'{"i": 1}\n' * 100)[:20])
    with pytest.raises(ConfigError, match="complete compressed file"):
        Dataset.from_path(name="d", path=tmp_path)
    with pytest.raises(DatasetNotFound) as info:
        Dataset.from_path(name="d", path=tmp_path / "nowhere")
    assert isinstance(info.value, FileNotFoundError) and isinstance(info.value, ValueError)
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError):
        Dataset.from_path(name="d", path=tmp_path / "dangling")

"""Dataset.from_path over Parquet without zephon: discovery, counts, lazy rows, refusals."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("pyarrow", reason="pyarrow (the parquet extra) is not installed")

from zephon_ref.errors import ConfigError, ContractError  # noqa: E402
from zephon_ref.io import Dataset, ParquetShard, write_parquet  # noqa: E402
from zephon_ref.work.base import MixtureReadConfig, MixtureReadMode  # noqa: E402


def test_discovery_counts_and_rows(tmp_path: Path) -> None:
    write_parquet([{"a": i, "ids": [i, i]} for i in range(3)], tmp_path / "d" / "b.parquet", row_group_size=2)
    write_parquet([{"a": 9, "ids": []}], tmp_path / "d" / "a.parquet")
    (tmp_path / "d" / "notes.txt").write_text("not a shard")
    ds = Dataset.from_path(name="d", path=tmp_path / "d")
    assert ds.ids().tolist() == [0, 1] and ds.counts().tolist() == [1, 3]  # sorted by file name
    row = ds.get(1, 2)
    assert row["a"] == 2 and isinstance(row["a"], np.int64) and row["ids"].tolist() == [2, 2]
    assert ds.get(0, 0)["ids"] == []  # a list<null> column (pyarrow's type for only empty lists), as zephon
    one = Dataset.from_path(name="one", path=tmp_path / "d" / "b.parquet")
    assert one.counts().tolist() == [3]


def test_refusals(tmp_path: Path) -> None:
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "x.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(ConfigError, match="readable Parquet"):
        Dataset.from_path(name="bad", path=tmp_path / "bad")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match=r"\.jsonl"):
        Dataset.from_path(name="e", path=tmp_path / "empty")
    with pytest.raises(ConfigError, match="parquet"):  # a format zephon does not read either
        Dataset.from_path(name="e", path=tmp_path / "empty", fmt="tfrecord")
    with pytest.raises(ConfigError, match="_versions"):  # Lance is read now: an empty directory is no dataset
        Dataset.from_path(name="e", path=tmp_path / "empty", fmt="lance")
    with pytest.raises(ConfigError, match=r"\.parquet"):
        Dataset.from_path(name="e", path=tmp_path / "empty", fmt="parquet")
    for remote in ("hf://org/data/train", "s3://bucket/prefix"):  # divergence D-49: no network
        with pytest.raises(ConfigError, match="remote store") as info:
            Dataset.from_path(name="r", path=remote)
        assert not isinstance(info.value, FileNotFoundError)


def test_a_file_changed_after_from_path_is_refused(tmp_path: Path) -> None:
    f = write_parquet([{"a": 1}, {"a": 2}], tmp_path / "s.parquet")
    shard = ParquetShard(f)
    write_parquet([{"a": 1}], f)
    with pytest.raises(ContractError, match="changed"):
        shard[0]
    gone = ParquetShard(write_parquet([{"a": 1}], tmp_path / "g.parquet"))
    (tmp_path / "g.parquet").unlink()
    with pytest.raises(ContractError, match="still readable"):
        gone[0]


def test_mixture_read_config_checks_its_fields() -> None:
    assert MixtureReadConfig(mode="weighted_random").mode == "weighted_random"  # kept as given
    assert MixtureReadConfig().mode is MixtureReadMode.WEIGHTED_ROUND_ROBIN
    for bad in ({"mode": "bogus"}, {"within_component": "x"}, {"seed": "1"}, {"seed": True},
                {"precompute": 1}, {"mode": ["unhashable"]}):
        with pytest.raises(ConfigError):
            MixtureReadConfig(**bad)  # type: ignore[arg-type]

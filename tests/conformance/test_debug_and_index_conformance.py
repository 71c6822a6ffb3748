"""``zephon_ref.debug`` and ``zephon_ref.build_index`` against zephon 0.2.0's modules of those names.

* ``DatasetInspector``: over the same rows (in-memory shards, and JSONL / Parquet directories read
  with each library's ``Dataset.from_path``) every ``read`` / ``read_many`` returns zephon's payload;
  a missing shard is a KeyError and a row past the end an IndexError in both; reading after
  ``close()`` is a RuntimeError in both.
* the semaphore hooks run and return None (zephon_ref's runners create no semaphores).
* ``build_index``: for generated directories (1-4 shards of plain or gzip JSONL, or Parquet with
  drawn row-group sizes) the file zephon_ref writes is byte-for-byte zephon's, its return value is
  zephon's, zephon reads a directory indexed by zephon_ref as it reads its own, and bad arguments
  raise zephon's builtin.
"""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path
from typing import Any

import pytest

zephon = pytest.importorskip("zephon", reason="zephon 0.2.0 (the conformance extra) is not installed")
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

import zephon.build_index as zbi  # noqa: E402
import zephon.debug as zdebug  # noqa: E402

import zephon_ref  # noqa: E402
import zephon_ref.build_index as rbi  # noqa: E402
import zephon_ref.debug as rdebug  # noqa: E402
from zephon_ref.errors import ZephonRefError  # noqa: E402

pytestmark = pytest.mark.conformance


def write_dir(root: Path, seed: int) -> str:
    """A generated dataset directory; returns its format ("jsonl" or "parquet")."""
    r = random.Random(seed)
    root.mkdir(parents=True)
    fmt = "parquet" if seed % 3 == 2 else "jsonl"
    for k in range(r.randint(1, 4)):
        rows = [{"text": " ".join(r.choice("abcde") for _ in range(r.randint(0, 6))), "n": i}
                for i in range(r.randint(1, 9))]
        if fmt == "parquet":
            pq.write_table(pa.table({"text": [x["text"] for x in rows], "n": [x["n"] for x in rows]}),
                           root / f"part-{k:02d}.parquet", row_group_size=r.randint(1, 4))
            continue
        body = "".join(json.dumps(x) + "\n" + ("\n" if r.random() < 0.2 else "") for x in rows)
        if r.random() < 0.4:
            with gzip.open(root / f"part-{k:02d}.jsonl.gz", "wt") as f:
                f.write(body)
        else:
            (root / f"part-{k:02d}.jsonl").write_text(body)
    return fmt


@pytest.mark.parametrize("seed", range(12))
def test_build_index_writes_zephons_file(seed: int, tmp_path: Path) -> None:
    fmt = write_dir(tmp_path / "d", seed)
    theirs = zbi.build_index(fmt, str(tmp_path / "d"), output_path=str(tmp_path / "z.json"), progress=False)
    ours = rbi.build_index(fmt, str(tmp_path / "d"), output_path=str(tmp_path / "r.json"), progress=False)
    assert (theirs, ours) == (str(tmp_path / "z.json"), str(tmp_path / "r.json"))
    assert (tmp_path / "r.json").read_bytes() == (tmp_path / "z.json").read_bytes()
    # the default place, and zephon reading a directory zephon_ref indexed: the same rows as without it
    want = zephon_rows(zephon.Dataset.from_path(name="d", path=str(tmp_path / "d"), fmt=fmt))
    assert rbi.build_index(fmt, tmp_path / "d", progress=False) == str(tmp_path / "d" / "index.json")
    assert zephon_rows(zephon.Dataset.from_path(name="d", path=str(tmp_path / "d"), fmt=fmt)) == want
    ours = zephon_ref.io.Dataset.from_path(name="d", path=str(tmp_path / "d"), fmt=fmt)  # ignores the index
    shards = json.loads((tmp_path / "r.json").read_text())["shards"]
    assert ours.layout() == tuple((i, s["num_rows"]) for i, s in enumerate(shards))


def zephon_rows(ds: Any) -> list[list[Any]]:
    """Every row of a zephon dataset, per shard (read with zephon's own inspector)."""
    with zdebug.DatasetInspector(ds) as ins:
        return [ins.read_many(s, list(range(int(n)))) for s, n in enumerate(ds.counts().tolist())]


@pytest.mark.parametrize(("args", "kw", "builtin"), [
    (("csv",), {}, ValueError), (("parquet",), {}, ValueError),
    (("jsonl",), {"max_workers": 0}, ValueError), (("jsonl",), {"max_workers": "x"}, TypeError)])
def test_build_index_refusals_raise_zephons_builtin(args: tuple[Any, ...], kw: dict[str, Any],
                                                    builtin: type, tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.jsonl").write_text('{"a": 1}\n')
    with pytest.raises(builtin):
        zbi.build_index(args[0], str(tmp_path / "d"), progress=False, **kw)
    with pytest.raises(builtin) as info:
        rbi.build_index(args[0], str(tmp_path / "d"), progress=False, **kw)
    assert isinstance(info.value, ZephonRefError)


def test_build_index_progress_prints_zephons_lines(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    write_dir(tmp_path / "d", 0)
    zbi.build_index("jsonl", str(tmp_path / "d"), output_path=str(tmp_path / "i.json"))
    theirs = capsys.readouterr().out
    rbi.build_index("jsonl", str(tmp_path / "d"), output_path=str(tmp_path / "i.json"))
    assert capsys.readouterr().out == theirs


def _datasets(lib: Any, tmp_path: Path, seed: int) -> list[Any]:
    rows = {0: [{"a": i} for i in range(3)], 1: [{"b": i} for i in range(2)]}
    out = [lib.Dataset.from_dict("m", {s: lib.InMemoryShard(list(v)) for s, v in rows.items()})]
    root = tmp_path / f"{lib.__name__}-{seed}"
    fmt = write_dir(root, seed)
    io_mod = lib.io if hasattr(lib, "io") else lib
    out.append(io_mod.Dataset.from_path(name="d", path=str(root), fmt=fmt))
    return out


@pytest.mark.parametrize("seed", [0, 2, 4])
def test_dataset_inspector_reads_zephons_payloads(seed: int, tmp_path: Path) -> None:
    pairs = zip(_datasets(zephon, tmp_path, seed), _datasets(zephon_ref, tmp_path, seed), strict=True)
    for zds, rds in pairs:
        with zdebug.DatasetInspector(zds) as zi, rdebug.DatasetInspector(rds) as ri:
            for shard, n in rds.layout():
                rows = list(range(n))
                assert ri.read_many(shard, rows) == zi.read_many(shard, rows)
                assert ri.read_many(shard, rows[::-1]) == zi.read_many(shard, rows[::-1])
                assert [ri.read(shard, i) for i in rows] == [zi.read(shard, i) for i in rows]
                for bad, err in ((n, IndexError),):
                    with pytest.raises(err):
                        zi.read(shard, bad)
                    with pytest.raises(err):
                        ri.read(shard, bad)
            missing = max(s for s, _ in rds.layout()) + 7
            with pytest.raises(KeyError):
                zi.read(missing, 0)
            with pytest.raises(KeyError):
                ri.read(missing, 0)
        with pytest.raises(RuntimeError):
            zi.read(0, 0)
        with pytest.raises(RuntimeError):
            ri.read(0, 0)


@pytest.mark.parametrize("row", [-1, True, 1.0])
def test_rows_zephon_reads_loosely_are_refused(row: Any) -> None:
    """zephon reads row -1 from the end and converts True / 1.0 with int(); zephon_ref refuses them
    with a typed error naming the row (docs/divergences.md D-99)."""
    ds = zephon_ref.Dataset.from_dict("m", {0: zephon_ref.InMemoryShard([{"a": 0}, {"a": 1}])})
    with pytest.raises(ZephonRefError, match="sample_index"):
        rdebug.DatasetInspector(ds).read(0, row)


def test_the_semaphore_hooks_run_as_zephons_do(capsys: pytest.CaptureFixture[str]) -> None:
    from zephon_ref.debug.semaphore_tracker import RegistrationInfo

    assert rdebug.install_debug_hooks() is None
    assert rdebug.dump_semaphore_registry() is None
    assert rdebug.dump_semaphore_leak_report(force=True) is None
    assert capsys.readouterr().out == ""
    info = RegistrationInfo("s", 0.0, "", "main", 1)
    assert info.name == "s" and info.thread_id == 1

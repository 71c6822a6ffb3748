"""Lance datasets, read locally as zephon 0.2.0 reads them (``fmt="lance"``; the ``lance`` extra).

A Lance dataset is a directory with a ``_versions/`` directory of manifests.  ``from_path`` pins
it to its latest version, or to the version whose ``_versions/<n>.manifest`` file is given, and the
dataset's ``path`` becomes that version's manifest (as zephon's does).  Facts learned by writing
datasets with ``lance.write_dataset`` (appends and deletions included) and reading them with zephon
0.2.0 (tests/conformance/test_lance_rows.py):

* one shard per fragment of the version, shard id = the fragment's position (0, 1, ...), not its
  fragment id: a fragment whose rows were all deleted is gone, and the ids close up;
* a shard's count is its live rows (deleted rows are not read) and its ``raw_bytes`` the size of
  its data files;
* rows in fragment order, each a dict of the columns with Parquet's cell values
  (:func:`zephon_ref.io.cells.parquet_value`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from zephon_ref.errors import ConfigError, expected
from zephon_ref.io.cells import LazyShard, arrow_rows

__all__ = ["LanceShard", "is_manifest", "lance_shards"]

_U64 = 2**64 - 1  # a manifest's file name is this minus its version (or the version itself, older layout)


def is_manifest(p: Path) -> bool:
    """Whether ``p`` names a Lance manifest (``<root>/_versions/<n>.manifest``)."""
    return p.suffix == ".manifest" and p.parent.name == "_versions" and p.stem.isdigit()


def _lance() -> Any:
    try:
        import lance
    except ImportError as exc:
        raise ConfigError(expected("fmt='lance'", "pylance installed (pip install zephon_ref[lance])",
                                   f"ImportError: {exc}")) from exc
    return lance


class LanceShard(LazyShard):
    """One fragment of a pinned Lance version: its live row count now, its rows read on first use."""

    __slots__ = ("_fragment",)

    def __init__(self, root: Path, fragment: Any) -> None:
        self._fragment = fragment
        self._count = int(fragment.count_rows())
        self._raw_bytes = sum((root / "data" / f.path).stat().st_size for f in fragment.metadata.files)
        self._rows: list[Any] | None = None

    def _read(self) -> list[Any]:
        # raw_bytes: the fragment's data files' size in bytes (what token estimation costs rows by)
        return arrow_rows(self._fragment.to_table(), count=self._count,
                          what=f"Lance fragment {self._fragment.fragment_id}")


def lance_shards(p: Path) -> tuple[str, list[LanceShard]]:
    """The manifest path pinned and the fragments of the Lance dataset at ``p`` (a root or a manifest)."""
    if is_manifest(p):
        root, n = p.parent.parent, int(p.stem)
        pinned: int | None = _U64 - n if n > _U64 // 2 else n
    else:
        root, pinned = p, None
        if not (p / "_versions").is_dir():
            raise ConfigError(expected(f"Lance dataset {p}", "a directory with a _versions/ directory",
                                       "none (no Lance _versions/)"))
    lance = _lance()
    try:
        ds = lance.dataset(str(root), version=pinned)
    except (OSError, ValueError) as exc:  # lance's errors are OSError / ValueError
        raise ConfigError(expected(f"Lance dataset {p}", "a readable Lance dataset", str(exc))) from exc
    version = int(ds.version)
    manifest = next((m for m in (root / "_versions" / f"{_U64 - version}.manifest",
                                 root / "_versions" / f"{version}.manifest") if m.is_file()), p)
    return str(manifest.resolve()), [LanceShard(root, f) for f in ds.get_fragments()]

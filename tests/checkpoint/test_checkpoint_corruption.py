"""Corruption campaign over a small real checkpoint: every mutation must be refused.

Default run: every byte of every file flipped (XOR 0xFF), every truncation length
of every file, deleted / duplicated / swapped shards, a manifest from another
run.  ``-m slow`` adds all eight single-bit flips of every byte.
Counts are printed (``-s``) and written to ``$ZEPHON_REF_CAMPAIGN_OUT`` if set.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from properties.ckpt_campaigns import (
    Campaign,
    LocalFiles,
    byte_mutations,
    small_state,
    structural_campaign,
)
from zephon_ref.checkpoint import store
from zephon_ref.checkpoint.schema import manifest_file_name

FP = small_state(0)["fingerprint"]


@pytest.fixture()
def ckpt(tmp_path: Path) -> tuple[Path, dict[str, Any], dict[str, bytes]]:
    d = tmp_path / "ck"
    s = small_state(7)
    store.save(s, d)
    for p in d.iterdir():
        p.chmod(0o644)
    files = {p.name: p.read_bytes() for p in sorted(d.iterdir())}
    return d, s, files


def _campaign(d: Path) -> Campaign:
    return Campaign(lambda: store.load(d, expected_fingerprint=FP, expected_canonical_replicas=2))


def _run_bytes(ckpt: Any, masks: tuple[int, ...], name: str, truncate: bool) -> dict[str, Any]:
    d, s, files = ckpt
    assert store.load(d) == s  # the pristine checkpoint loads
    camp = _campaign(d)
    for label, fname, mutated in byte_mutations(files, masks):
        (d / fname).write_bytes(mutated)
        camp.attempt(label)
        (d / fname).write_bytes(files[fname])
    if truncate:
        for fname, data in files.items():
            for n in range(len(data)):
                (d / fname).write_bytes(data[:n])
                camp.attempt(f"{fname}[:{n}]")
            (d / fname).write_bytes(data)
    assert store.load(d) == s  # restoring the bytes restores loadability
    out = camp.report(name)
    total = sum(len(v) for v in files.values())
    assert camp.tried == total * len(masks) + (total if truncate else 0)
    assert camp.accepted == [], camp.accepted[:10]
    return out


def test_every_byte_flip_and_every_truncation_is_refused(ckpt: Any) -> None:
    out = _run_bytes(ckpt, (0xFF,), "byte-flip+truncate", truncate=True)
    assert out["tried"] >= 2000


@pytest.mark.slow
def test_every_single_bit_flip_is_refused(ckpt: Any) -> None:
    _run_bytes(ckpt, tuple(1 << b for b in range(8)), "bit-flip-full", truncate=False)


def test_structural_damage_is_refused(ckpt: Any, tmp_path: Path) -> None:
    d, s, files = ckpt
    camp = _campaign(d)
    other = tmp_path / "other"
    store.save(small_state(8), other)  # another run of the same pipeline
    third = tmp_path / "third"
    store.save({**small_state(9), "fingerprint": "pipeline-B"}, third)
    structural_campaign(camp, LocalFiles(d), files, LocalFiles(other), LocalFiles(third),
                        manifest_file_name(1), name="structural")
    assert store.load(d) == s  # every case was put back

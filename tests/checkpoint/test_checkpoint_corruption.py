"""Corruption campaign over a small real checkpoint: every mutation must be refused.

Default run: every byte of every file flipped (XOR 0xFF), every truncation length
of every file, deleted / duplicated / swapped shards, a manifest from another
run.  ``-m slow`` adds all eight single-bit flips of every byte.
Counts are printed (``-s``) and written to ``$ZEPHON_REF_CAMPAIGN_OUT`` if set.
"""

from __future__ import annotations

import json
import os
import shutil
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from properties.pipelines import real_state
from zephon_ref.checkpoint import store
from zephon_ref.checkpoint.schema import manifest_file_name
from zephon_ref.errors import ZephonRefError


def _small_state(seed: int) -> dict[str, Any]:
    """A real 2-lane engine state of one pipeline after ``1 + seed % 5`` items (another
    seed = another moment of the same run)."""
    return real_state(7, canonical_replicas=2, items=1 + seed % 5, chunk_size=4)


FP = _small_state(0)["fingerprint"]


@pytest.fixture()
def ckpt(tmp_path: Path) -> tuple[Path, dict[str, Any], dict[str, bytes]]:
    d = tmp_path / "ck"
    s = _small_state(7)
    store.save(s, d)
    for p in d.iterdir():
        p.chmod(0o644)
    files = {p.name: p.read_bytes() for p in sorted(d.iterdir())}
    return d, s, files


class Campaign:
    def __init__(self, d: Path, state: dict[str, Any]) -> None:
        self.d, self.state = d, state
        self.tried = 0
        self.refused: Counter[str] = Counter()
        self.accepted: list[str] = []

    def attempt(self, label: str) -> None:
        self.tried += 1
        try:
            store.load(self.d, expected_fingerprint=FP, expected_canonical_replicas=2)
        except ZephonRefError as exc:
            self.refused[getattr(exc, "reason", type(exc).__name__)] += 1
        else:
            self.accepted.append(label)

    def report(self, name: str) -> dict[str, Any]:
        out = {
            "campaign": name,
            "tried": self.tried,
            "refused": sum(self.refused.values()),
            "accepted": len(self.accepted),
            "by_reason": dict(sorted(self.refused.items())),
        }
        print(json.dumps(out))
        dest = os.environ.get("ZEPHON_REF_CAMPAIGN_OUT")
        if dest:
            with open(dest, "a") as f:
                f.write(json.dumps(out) + "\n")
        return out


def _mutations(files: dict[str, bytes], masks: tuple[int, ...]) -> Iterator[tuple[str, str, bytes]]:
    for name, data in files.items():
        for i in range(len(data)):
            for m in masks:
                yield f"{name}[{i}]^{m:#x}", name, data[:i] + bytes([data[i] ^ m]) + data[i + 1 :]


def _run_bytes(ckpt: Any, masks: tuple[int, ...], name: str, truncate: bool) -> dict[str, Any]:
    d, s, files = ckpt
    assert store.load(d) == s  # the pristine checkpoint loads
    camp = Campaign(d, s)
    for label, fname, mutated in _mutations(files, masks):
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


def _shard_names(files: dict[str, bytes]) -> list[str]:
    return [n for n in files if n.endswith(".shard")]


def test_structural_damage_is_refused(ckpt: Any, tmp_path: Path) -> None:
    d, s, files = ckpt
    camp = Campaign(d, s)
    shards = _shard_names(files)
    other = tmp_path / "other"
    store.save(_small_state(8), other)  # another run of the same pipeline
    third = tmp_path / "third"
    store.save({**_small_state(9), "fingerprint": "pipeline-B"}, third)

    def restore_all() -> None:
        for n in list(os.listdir(d)):
            if n not in files:
                os.unlink(d / n)
        for n, b in files.items():
            (d / n).write_bytes(b)

    cases: list[tuple[str, Callable[[], None]]] = []
    for n in shards:
        cases.append((f"delete {n[:30]}", lambda n=n: os.unlink(d / n)))
        cases.append((f"empty {n[:30]}", lambda n=n: (d / n).write_bytes(b"")))
    for a in shards:
        for b in shards:
            if a != b:
                cases.append((f"duplicate {b[:24]} over {a[:24]}", lambda a=a, b=b: (d / a).write_bytes(files[b])))
    for i, a in enumerate(shards):
        for b in shards[i + 1 :]:
            def swap(a: str = a, b: str = b) -> None:
                (d / a).write_bytes(files[b])
                (d / b).write_bytes(files[a])
            cases.append((f"swap {a[:24]} {b[:24]}", swap))
    for src in (other, third):
        def foreign(src: Path = src) -> None:
            (d / manifest_file_name(1)).write_bytes((src / manifest_file_name(1)).read_bytes())
        cases.append((f"manifest from {src.name}", foreign))

        def foreign_all(src: Path = src) -> None:  # a whole other run's files side by side
            for p in src.iterdir():
                if p.name != manifest_file_name(1):
                    shutil.copy(p, d / p.name)
            (d / manifest_file_name(1)).write_bytes((src / manifest_file_name(1)).read_bytes())
        if src is third:
            cases.append(("whole generation of another pipeline", foreign_all))
    cases.append(("delete manifest", lambda: os.unlink(d / manifest_file_name(1))))
    for label, act in cases:
        act()
        camp.attempt(label)
        restore_all()
    assert store.load(d) == s
    out = camp.report("structural")
    assert out["tried"] == len(cases) >= 12
    assert camp.accepted == []

"""The durable store's campaigns, shared by every place they run (local files, object storage).

Theory of operation
-------------------
The corruption campaign damages a small real checkpoint in every way it can
(every byte flipped, every truncation, deleted / emptied / duplicated / swapped
shards, a manifest from another run, a whole generation of another pipeline)
and counts how each load ended; every one must be refused.  The kill campaign
saves :func:`crash_state` (a pure function of its seed) and kills the writer
mid-save.  Where the files live is the caller's: a :class:`Files` is the
adversary's raw access (it writes over published names, which the store itself
never does); :class:`LocalFiles` is a directory.

What may not live here: the store's own logic (zephon_ref.checkpoint).
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

from properties.pipelines import real_state
from zephon_ref.errors import ZephonRefError

__all__ = [
    "CRASH_LANES",
    "Campaign",
    "Files",
    "LocalFiles",
    "byte_mutations",
    "crash_state",
    "small_state",
    "structural_cases",
]

CRASH_LANES = 3


def crash_state(seed: int, *, canonical_replicas: int = CRASH_LANES) -> dict[str, Any]:
    """A real engine state: source seed ``seed``, 1..5 items delivered, ``canonical_replicas`` lanes."""
    return real_state(seed, canonical_replicas=canonical_replicas, items=1 + seed % 5, chunk_size=8,
                      corpus_seed=seed % 7)


def small_state(seed: int) -> dict[str, Any]:
    """A real 2-lane engine state of one pipeline after ``1 + seed % 5`` items (another
    seed = another moment of the same run)."""
    return real_state(7, canonical_replicas=2, items=1 + seed % 5, chunk_size=4)


class Files(Protocol):
    """Raw access to one checkpoint directory's files, for the adversary."""

    def names(self) -> list[str]: ...

    def read(self, name: str) -> bytes: ...

    def write(self, name: str, data: bytes) -> None: ...

    def delete(self, name: str) -> None: ...


class LocalFiles:
    """A local directory as :class:`Files`."""

    def __init__(self, d: Path) -> None:
        self.d = d

    def names(self) -> list[str]:
        return sorted(os.listdir(self.d))

    def read(self, name: str) -> bytes:
        return (self.d / name).read_bytes()

    def write(self, name: str, data: bytes) -> None:
        p = self.d / name
        if p.exists():
            p.chmod(0o644)
        p.write_bytes(data)

    def delete(self, name: str) -> None:
        os.unlink(self.d / name)


class Campaign:
    """Counts attempts and how each load ended; ``load`` must raise for damage."""

    def __init__(self, load: Callable[[], object]) -> None:
        self.load = load
        self.tried = 0
        self.refused: Counter[str] = Counter()
        self.accepted: list[str] = []

    def attempt(self, label: str) -> None:
        self.tried += 1
        try:
            self.load()
        except ZephonRefError as exc:
            self.refused[getattr(exc, "reason", type(exc).__name__)] += 1
        else:
            self.accepted.append(label)

    def report(self, name: str) -> dict[str, Any]:
        """Print the counts as one JSON line (and append it to ``$ZEPHON_REF_CAMPAIGN_OUT``)."""
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


def byte_mutations(files: dict[str, bytes], masks: tuple[int, ...]) -> Iterator[tuple[str, str, bytes]]:
    """(label, file name, damaged bytes): every byte of every file XOR every mask."""
    for name, data in files.items():
        for i in range(len(data)):
            for m in masks:
                yield f"{name}[{i}]^{m:#x}", name, data[:i] + bytes([data[i] ^ m]) + data[i + 1 :]


def structural_cases(
    target: Files, files: dict[str, bytes], other: Files, third: Files, manifest_name: str
) -> list[tuple[str, Callable[[], None]]]:
    """The structural damage cases over ``target`` (pristine content ``files``);
    ``other`` is another run of the same pipeline, ``third`` another pipeline's
    checkpoint, both holding generation ``manifest_name``'s generation."""
    shards = [n for n in files if n.endswith(".shard")]
    cases: list[tuple[str, Callable[[], None]]] = []
    for n in shards:
        cases.append((f"delete {n[:30]}", lambda n=n: target.delete(n)))  # type: ignore[misc]
        cases.append((f"empty {n[:30]}", lambda n=n: target.write(n, b"")))  # type: ignore[misc]
    for a in shards:
        for b in shards:
            if a != b:
                cases.append((f"duplicate {b[:24]} over {a[:24]}",
                              lambda a=a, b=b: target.write(a, files[b])))  # type: ignore[misc]
    for i, a in enumerate(shards):
        for b in shards[i + 1 :]:
            def swap(a: str = a, b: str = b) -> None:
                target.write(a, files[b])
                target.write(b, files[a])
            cases.append((f"swap {a[:24]} {b[:24]}", swap))
    for label, src in (("other", other), ("third", third)):
        def foreign(src: Files = src) -> None:
            target.write(manifest_name, src.read(manifest_name))
        cases.append((f"manifest from {label}", foreign))
        if src is third:
            def foreign_all(src: Files = src) -> None:  # a whole other run's files side by side
                for n in src.names():
                    if n != manifest_name:
                        target.write(n, src.read(n))
                target.write(manifest_name, src.read(manifest_name))
            cases.append(("whole generation of another pipeline", foreign_all))
    cases.append(("delete manifest", lambda: target.delete(manifest_name)))
    return cases


def restore_all(target: Files, files: dict[str, bytes]) -> None:
    """Put ``target`` back to exactly ``files``."""
    for n in target.names():
        if n not in files:
            target.delete(n)
    for n, b in files.items():
        target.write(n, b)

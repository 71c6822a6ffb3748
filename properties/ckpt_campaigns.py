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

The kill campaigns are written once here and run over a local directory
(tests/checkpoint) and over S3 (tests/s3): the caller says how to start its
writer process and how to see its files.  A writer process runs
:func:`child_loop` or :func:`child_race` (the parent's protocol: "ready", then
saves) after whatever set-up its storage needs.

What may not live here: the store's own logic (zephon_ref.checkpoint).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol

from properties.pipelines import real_state
from zephon_ref.checkpoint import Manifest, store
from zephon_ref.checkpoint.schema import manifest_file_name
from zephon_ref.errors import ZephonRefError

__all__ = [
    "CRASH_LANES",
    "Campaign",
    "Files",
    "LocalFiles",
    "byte_mutations",
    "child_loop",
    "child_race",
    "crash_state",
    "race",
    "small_state",
    "step_kill_campaign",
    "structural_campaign",
    "structural_cases",
    "timed_kill_campaign",
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


def structural_campaign(camp: Campaign, target: Files, files: dict[str, bytes], other: Files, third: Files,
                        manifest_name: str, *, name: str) -> dict[str, Any]:
    """Apply each of :func:`structural_cases` to ``target``, attempt a load, put the files back;
    every case must be refused.  Returns the campaign's report."""
    cases = structural_cases(target, files, other, third, manifest_name)
    for label, act in cases:
        act()
        camp.attempt(label)
        restore_all(target, files)
    out = camp.report(name)
    assert out["tried"] == len(cases) >= 12
    assert camp.accepted == []
    return out


def restore_all(target: Files, files: dict[str, bytes]) -> None:
    """Put ``target`` back to exactly ``files``."""
    for n in target.names():
        if n not in files:
            target.delete(n)
    for n, b in files.items():
        target.write(n, b)


# ---------------------------------------------------------------- kill campaigns

Location = str
"""A checkpoint location as ``store.save`` takes it: a directory path or an ``s3://`` URL."""


def step_kill_campaign(locations: Sequence[Location], *, run_step: Callable[[Location, int, int],
                       tuple[int, str]], files_for: Callable[[Location], Files], total_steps: int,
                       visible_from: int, label: str, step_name: str = "ops_per_save") -> dict[str, Any]:
    """Writers killed by SIGKILL right after step k of a save (every step at least once).

    For location i: generation 1 (``crash_state(1000 + i)``) is saved here, then
    ``run_step(location, k, 5000 + i)`` runs a writer that saves ``crash_state(5000 + i)``
    and kills itself after its k-th storage step (``total_steps`` in a whole save; from
    step ``visible_from`` on, generation 2 is published); it returns (exit code, stderr).
    After each kill: the newest generation is the one expected and loads exactly what was
    saved for it; every generation verifies; the next save works above any leftover; gc
    keeps the newest and leaves exactly its files.  Prints and returns the counts.
    """
    rnd = random.Random(20240611)
    plan = []
    for i, loc in enumerate(locations):
        k = i % total_steps + 1 if i < total_steps else rnd.randint(1, total_steps)
        store.save(crash_state(1000 + i), loc)  # generation 1, complete
        plan.append((loc, k, 5000 + i))
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda r: run_step(*r), plan))
    outcomes = {"killed": 0, "gen1": 0, "gen2": 0, "leftover_files": 0, "gc_removed": 0}
    for i, ((loc, k, seed), (rc, err)) in enumerate(zip(plan, results, strict=True)):
        assert rc == -signal.SIGKILL, (k, rc, err[-2000:])
        outcomes["killed"] += 1
        want_gen, want_seed = (2, seed) if k >= visible_from else (1, 1000 + i)
        assert store.latest_complete_generation(loc) == want_gen, (k, loc)
        assert store.load(loc) == crash_state(want_seed)
        assert all(isinstance(r, Manifest) for _, r in store.iter_verify(loc))
        outcomes[f"gen{want_gen}"] += 1
        files = files_for(loc)
        published = store.read_manifest(loc, want_gen).shards
        outcomes["leftover_files"] += len(files.names()) - (len(published) + 1) * want_gen
        g = store.save(crash_state(9), loc)  # recovery: the next save works, above any leftover
        assert g > want_gen and store.load(loc) == crash_state(9)
        report = store.gc(loc, keep=1)
        outcomes["gc_removed"] += report.files_before - report.files_after
        assert files.names() == sorted([e.file_name(g) for e in store.read_manifest(loc, g).shards]
                                       + [manifest_file_name(g)])
    out = {"kill_campaign": label, "runs": len(plan), **outcomes, step_name: total_steps,
           "distinct_steps": len({k for _, k, _ in plan})}
    print(json.dumps(out))
    assert out["distinct_steps"] == min(total_steps, len(plan))
    return out


def timed_kill_campaign(locations: Sequence[Location], *, start_loop: Callable[[Location, int],
                        subprocess.Popen[str]], max_delay_s: float, label: str,
                        min_published: int) -> list[int]:
    """Writers saving in a loop, killed by SIGKILL after a seeded random delay.

    ``start_loop(location, seed0)`` starts a writer running :func:`child_loop` (it prints
    "ready", then saves ``crash_state(seed0 + i)``).  After each kill the newest published
    generation g (if any) loads exactly ``crash_state(seed0 + g - 1)`` and generation 1
    ``crash_state(seed0)``; at least ``min_published`` writers published something.
    Returns the newest generation of each (0: none).
    """
    rnd = random.Random(77)
    plan = [(loc, rnd.uniform(0.0, max_delay_s), 100 * i) for i, loc in enumerate(locations)]

    def run(r: tuple[Location, float, int]) -> int | None:
        loc, delay, seed0 = r
        proc = start_loop(loc, seed0)
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(delay)  # clock-ok: the kill time is the thing being randomised
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
        return proc.returncode

    with ThreadPoolExecutor(max_workers=2) as pool:
        codes = list(pool.map(run, plan))
    gens = []
    for (loc, _, seed0), rc in zip(plan, codes, strict=True):
        assert rc == -signal.SIGKILL, (loc, rc)
        newest = store.latest_complete_generation(loc)
        gens.append(newest or 0)
        if newest is None:
            continue  # killed before the first manifest: nothing was ever published
        assert store.load(loc) == crash_state(seed0 + newest - 1)
        assert store.load(loc, 1) == crash_state(seed0)
    print(json.dumps({"kill_campaign": label, "runs": len(plan), "generations_seen": gens}))
    assert sum(1 for g in gens if g > 0) >= min_published, gens
    return gens


def race(procs: Sequence[subprocess.Popen[str]], *, timeout_s: float = 300) -> list[list[Any]]:
    """Release writers started in :func:`child_race` (stdin and stdout pipes) together and
    collect their ``[generation or error, seed]`` results; each must exit 0."""
    for p in procs:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    results: list[list[Any]] = []
    for p in procs:
        out, err = p.communicate(timeout=timeout_s)
        assert p.returncode == 0, (err or "")[-2000:]
        results.extend(json.loads(out.strip().splitlines()[-1]))
    return results


def child_loop(location: Location, n: int, seed0: int) -> None:
    """A writer process's loop: build the first states, print "ready", save
    ``crash_state(seed0 + i)`` for i < n (the parent kills it somewhere in there)."""
    ready = [crash_state(seed0 + i) for i in range(min(n, 24))]  # before the parent's clock starts
    print("ready", flush=True)
    for i in range(n):
        store.save(ready[i] if i < len(ready) else crash_state(seed0 + i), location)


def child_race(location: Location, n: int, seed0: int) -> None:
    """A concurrent writer: print "ready", wait for "go" on stdin, save n states, print one
    JSON line ``[[generation, seed] or ["Error:reason", seed], ...]``."""
    states = [(seed0 + i, crash_state(seed0 + i)) for i in range(n)]
    print("ready", flush=True)
    assert sys.stdin.readline().strip() == "go"
    out: list[list[object]] = []
    for seed, state in states:
        try:
            out.append([store.save(state, location), seed])
        except Exception as exc:  # reported to the parent, which counts and asserts
            out.append([f"{type(exc).__name__}:{getattr(exc, 'reason', '')}", seed])
    print(json.dumps(out), flush=True)

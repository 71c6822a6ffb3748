"""Source-patch mutants: a planted bug is an edit of the source text at a named place.

Theory of operation
-------------------
A :class:`Mutant` names a file of the repository, an exact snippet of it and its replacement.
:meth:`Mutant.apply` refuses (:class:`StaleMutant`) unless the snippet occurs exactly once
(or, for generated mutants that carry ``line`` and ``col``, exactly at that place), so a mutant
whose code has changed fails loudly instead of planting a bug in a copy of code that no
longer exists, which is what a monkeypatched copy of a function body did silently.

:func:`mutated_tree` copies the repository's tracked files (``git ls-files``; without git the
source folders) into a temporary directory and applies mutants there; the checkout is never
touched.  :func:`run_mutated` runs a command in that copy (its working directory, first on
``PYTHONPATH``) with a time limit, and returns an :class:`Outcome`.  Nothing here imports the
engine: a mutant's effects live only in the child process.

Used by tests/quality (the canaries) and by :mod:`properties.mutation_score` (the opt-in
mutation-score runner); see docs/mutation.md.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ROOT", "Mutant", "Outcome", "StaleMutant", "mutated_tree", "run_mutated", "tracked_files"]

#: the repository this module belongs to
ROOT = Path(__file__).resolve().parents[1]
_SOURCE_DIRS = ("zephon_ref", "properties", "sim", "tests", "bench", "scripts", "docs")


class StaleMutant(ValueError):
    """The mutant's snippet is not where the mutant says (the source changed): update the mutant."""


@dataclass(frozen=True, slots=True)
class Mutant:
    """Replace ``original`` by ``replacement`` in ``file`` (relative to the repository root).

    Without ``line``: ``original`` must occur exactly once in the file.  With ``line`` (1-based)
    and ``col`` (0-based, in characters): ``original`` must start exactly there.
    """

    name: str
    file: str
    original: str
    replacement: str
    line: int | None = None
    col: int | None = None

    def apply(self, text: str) -> str:
        if not self.original or self.original == self.replacement:
            raise StaleMutant(
                f"mutant {self.name!r}: expected a non-empty snippet and a different replacement"
            )
        if self.line is None:
            n = text.count(self.original)
            if n != 1:
                raise StaleMutant(f"mutant {self.name!r}: expected its snippet exactly once in {self.file}, "
                                  f"found it {n} times: {self.original!r}")
            return text.replace(self.original, self.replacement, 1)
        lines = text.splitlines(keepends=True)
        if not 1 <= self.line <= len(lines):
            raise StaleMutant(
                f"mutant {self.name!r}: {self.file} has {len(lines)} lines, expected line {self.line}"
            )
        start = sum(len(x) for x in lines[: self.line - 1]) + int(self.col or 0)
        if text[start:start + len(self.original)] != self.original:
            raise StaleMutant(f"mutant {self.name!r}: expected {self.original!r} at {self.file}:{self.line}:"
                              f"{self.col}, found {text[start:start + len(self.original)]!r}")
        return text[:start] + self.replacement + text[start + len(self.original):]

    def check(self, root: Path = ROOT) -> None:
        """Raise :class:`StaleMutant` unless the mutant applies to ``root``'s source as it is."""
        self.apply((root / self.file).read_text())


def tracked_files(root: Path = ROOT) -> list[str]:
    """The repository's tracked files (git), else every file under the source folders."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=root,
            capture_output=True,
            check=True,
            timeout=60,
        )
        files = [f for f in out.stdout.decode().split("\0") if f]
        if files:
            return [f for f in files if (root / f).is_file()]
    except (OSError, subprocess.SubprocessError):
        pass
    found = [str(p.relative_to(root)) for d in _SOURCE_DIRS if (root / d).is_dir()
             for p in sorted((root / d).rglob("*")) if p.is_file() and "__pycache__" not in p.parts]
    return found + [f for f in ("pyproject.toml", "README.md") if (root / f).is_file()]


@contextmanager
def mutated_tree(mutants: Sequence[Mutant], *, root: Path = ROOT, files: Sequence[str] | None = None
                 ) -> Iterator[Path]:
    """A temporary copy of the repository with ``mutants`` applied (all checked before anything is
    written); removed afterwards."""
    texts = {}
    for m in mutants:
        texts[m.file] = m.apply(texts.get(m.file, (root / m.file).read_text()))
    tmp = Path(tempfile.mkdtemp(prefix="zephon-ref-mutant-"))
    try:
        for rel in files if files is not None else tracked_files(root):
            dst = tmp / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(root / rel, dst)
        for rel, text in texts.items():
            (tmp / rel).write_text(text)
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@dataclass(frozen=True, slots=True)
class Outcome:
    """A command's result in a mutated copy: exit status (None: killed at the time limit)."""

    returncode: int | None
    seconds: float
    tail: str

    @property
    def timed_out(self) -> bool:
        return self.returncode is None


def run_mutated(mutants: Sequence[Mutant], argv: Sequence[str], *, timeout: float, root: Path = ROOT,
                env: Mapping[str, str] | None = None) -> Outcome:
    """Run ``argv`` (``python`` is replaced by this interpreter) in a mutated copy of ``root``."""
    cmd = [sys.executable if a in ("python", "python3") else a for a in argv]
    with mutated_tree(mutants, root=root) as tree:
        full_env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONDONTWRITEBYTECODE": "1", **(env or {})}
        start = time.monotonic()  # clock-ok: a time limit on a child process, outside the data path
        try:
            # start_new_session: a time limit ends the whole process group (pytest -n, pools)
            proc = subprocess.Popen(
                cmd,
                cwd=tree,
                env=full_env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            out, _ = proc.communicate(timeout=timeout)
            rc: int | None = proc.returncode
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            out, _ = proc.communicate()
            rc = None
        seconds = time.monotonic() - start  # clock-ok
    return Outcome(rc, seconds, out.decode(errors="replace")[-4000:])


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, 9)
    except (ProcessLookupError, PermissionError):
        proc.kill()

"""One script written against zephon's API runs unchanged under zephon and zephon_ref.

``zephon_api_script.py`` builds map_transform -> pack_sequences(best_fit) -> shuffle ->
ensure_mixture -> batch on 4 lanes from ``z.Dataset.from_dict`` / ``z.InMemoryShard``.
Each implementation runs it three times in fresh processes: the whole stream; the first
N batches then a pickled ``checkpoint()``; a restore of that pickle and the rest.  Each
implementation's resumed stream equals its own uninterrupted stream, and the two
uninterrupted streams are equal record for record (lane, cursor key, token ids).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from properties.sources import zephon_available

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path(__file__).with_name("zephon_api_script.py")
CUT = 9  # batches before the checkpoint (of 24)


def run(impl: str, *args: str) -> list:
    out = Path(args[1])
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, str(SCRIPT), impl, *args], env=env, cwd=str(ROOT),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"{impl} {args[0]}:\n{proc.stderr[-4000:]}"
    data = json.loads(out.read_text())
    assert data["impl"] == impl  # the child imported the implementation asked for
    return data["batches"]


def streams(impl: str, tmp: Path) -> tuple[list, list, list]:
    full = run(impl, "full", str(tmp / f"{impl}-full.json"))
    first = run(impl, "first", str(tmp / f"{impl}-first.json"), str(tmp / f"{impl}.pkl"), str(CUT))
    rest = run(impl, "rest", str(tmp / f"{impl}-rest.json"), str(tmp / f"{impl}.pkl"))
    return full, first, rest


def check_resume(impl: str, full: list, first: list, rest: list) -> None:
    assert len(full) > 2 * CUT, f"{impl}: the script should deliver more than {2 * CUT} batches"
    assert first == full[:CUT], f"{impl}: the first {CUT} batches differ from the uninterrupted run"
    for i, (want, got) in enumerate(zip(full[CUT:], rest, strict=False)):
        assert got == want, f"{impl}: resumed batch {CUT + i} differs\nwant {want}\ngot  {got}"
    assert len(rest) == len(full) - CUT, (
        f"{impl}: resumed run delivered {len(rest)}, expected {len(full) - CUT}"
    )


def test_script_resumes_under_zephon_ref(tmp_path: Path) -> None:
    check_resume("zephon_ref", *streams("zephon_ref", tmp_path))


@pytest.mark.conformance
@pytest.mark.skipif(not zephon_available(), reason="zephon 0.2.0 not installed (pip install .[conformance])")
def test_script_resumes_under_zephon_and_both_streams_agree(tmp_path: Path) -> None:
    z_full, *z_parts = streams("zephon", tmp_path)
    check_resume("zephon", z_full, *z_parts)
    r_full = run("zephon_ref", "full", str(tmp_path / "ref-full.json"))
    assert len(r_full) == len(z_full)
    for i, (want, got) in enumerate(zip(z_full, r_full, strict=True)):
        assert got == want, f"batch {i}\nzephon:     {want}\nzephon_ref: {got}"


def test_the_check_can_fail() -> None:
    full = [[[0, [0, 0, [0], [0, 0, 0]], [[1, 2]]]]] * (2 * CUT + 2)
    bad_rest = [list(b) for b in full[CUT:]]
    bad_rest[1] = [[1, [0, 0, [0], [0, 0, 0]], [[1, 2]]]]
    with pytest.raises(AssertionError):
        check_resume("x", full, full[:CUT], bad_rest)
    with pytest.raises(AssertionError):
        check_resume("x", full, full[:CUT], full[CUT + 1:])  # one batch lost

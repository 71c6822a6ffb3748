"""Every entry point answers bad input in one line, with the documented exit code (issue 23 item 2).

Each row runs one command in a subprocess (PYTHONPATH = the repository root), in an empty working
directory with TMPDIR pointing at an empty directory, and asserts: stderr is exactly one line naming
what was expected and what was received, no traceback anywhere, the exit code docs/cli.md gives, and
nothing written (both directories hold exactly what the row put there, byte for byte).  The codes
are zephon_ref.exits' (0 ok, 1 failed, 2 usage, 3 mismatch, 4 storage, 5 missing).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest

from zephon_ref.exits import EXIT_CODES, EXIT_FAILED, EXIT_MISSING, EXIT_STORAGE, EXIT_USAGE

ROOT = Path(__file__).resolve().parents[2]

ZR = ("-m", "zephon_ref.cli")
SIM = ("-m", "sim")
SCALE = ("-m", "sim.scale")
BENCH = ("-m", "bench")
CONF = ("-m", "properties.conformance")
LOADERS = ("-m", "properties.loaders")
CAMPAIGNS = ("-m", "properties.campaigns")
MUTATION = ("-m", "properties.mutation_score")

#: files a row needs in its working directory (created before the run, checked unchanged after)
GARBAGE = {"garbage.pkl": b"this is not a pickle\n"}
A_FILE = {"afile": b"x"}


class Row(NamedTuple):
    argv: tuple[str, ...]
    code: int
    received: str  # a piece of the bad value the line must name ("" where there is none to name)
    files: dict[str, bytes] = {}



ROWS: list[Row | object] = [
    # zephon-ref and its subcommands
    Row((*ZR,), EXIT_USAGE, ""),
    Row((*ZR, "bogus"), EXIT_USAGE, "bogus"),
    Row((*ZR, "demo", "--lanes", "0"), EXIT_USAGE, "0"),
    Row((*ZR, "demo", "--seed", "-1"), EXIT_USAGE, "-1"),
    Row((*ZR, "demo", "--chunk-size", "x"), EXIT_USAGE, "'x'"),
    Row((*ZR, "demo", "--cut", ""), EXIT_USAGE, "''"),
    Row((*ZR, "ckpt"), EXIT_USAGE, ""),
    Row((*ZR, "ckpt", "gc", "/no/such/dir", "--keep", "1"), EXIT_MISSING, "/no/such/dir"),
    Row((*ZR, "ckpt", "gc", ".", "--keep", "0"), EXIT_USAGE, "0"),
    Row((*ZR, "ckpt", "gc", ".", "--keep", "two"), EXIT_USAGE, "'two'"),
    Row((*ZR, "ckpt", "gc", "."), EXIT_USAGE, "none"),
    Row((*ZR, "ckpt", "verify", "/no/such/dir"), EXIT_MISSING, "/no/such/dir"),
    Row((*ZR, "ckpt", "inspect", "."), EXIT_MISSING, "none"),
    Row((*ZR, "ckpt", "verify", "afile"), EXIT_STORAGE, "afile", A_FILE),
    Row((*ZR, "ckpt", "inspect", "s3://Bad_Bucket/x"), EXIT_USAGE, "Bad_Bucket"),
    Row((*ZR, "ckpt", "frobnicate", "."), EXIT_USAGE, "frobnicate"),
    Row((*ZR, "ckpt", "check", "garbage.pkl", "--factory", "m:f"), EXIT_FAILED, "garbage.pkl", GARBAGE),
    Row((*ZR, "ckpt", "check", "missing.pkl", "--factory", "m:f"), EXIT_MISSING, "missing.pkl"),
    Row((*ZR, "ckpt", "check", "garbage.pkl"), EXIT_USAGE, "none", GARBAGE),
    Row((*ZR, "ckpt", "check", "garbage.pkl", "--factory", "m:f", "--show", "-1"), EXIT_USAGE, "-1", GARBAGE),
    # python -m sim
    Row((*SIM,), EXIT_USAGE, ""),
    Row((*SIM, "bogus"), EXIT_USAGE, "bogus"),
    Row((*SIM, "run"), EXIT_USAGE, "none"),
    Row((*SIM, "run", "--seed", "7", "--lanes", "0"), EXIT_USAGE, "0"),
    Row((*SIM, "run", "--seed", "7", "--faults", "bogus"), EXIT_USAGE, "bogus"),
    Row((*SIM, "run", "--seed", "7", "--faults", "crash,,meteor"), EXIT_USAGE, "meteor"),
    Row((*SIM, "run", "--seed", "x"), EXIT_USAGE, "'x'"),
    Row((*SIM, "run", "--seed", "-3"), EXIT_USAGE, "-3"),
    Row((*SIM, "run", "--seed", "7", "--steps", "-5"), EXIT_USAGE, "-5"),
    Row((*SIM, "run", "--seed", "7", "--workers", "1.5"), EXIT_USAGE, "1.5"),
    Row((*SIM, "run", "--seed", "7", "--json", "no/such/dir/run.json"), EXIT_USAGE, "no/such/dir/run.json"),
    Row((*SIM, "sweep", "--seeds", "5..2"), EXIT_USAGE, "5..2"),
    Row((*SIM, "sweep", "--seeds", "a..b"), EXIT_USAGE, "a..b"),
    Row((*SIM, "sweep", "--seeds", ""), EXIT_USAGE, "''"),
    Row((*SIM, "sweep", "--seeds", "1..3", "--jobs", "0"), EXIT_USAGE, "0"),
    Row((*SIM, "sweep", "--seeds", "1..3", "--out", "no/such/dir/s.json"), EXIT_USAGE, "no/such/dir/s.json"),
    Row(
        (*SIM, "sweep", "--seeds", "1..3", "--jsonl", "no/such/dir/s.jsonl"),
        EXIT_USAGE,
        "no/such/dir/s.jsonl",
    ),
    Row((*SIM, "sweep", "--seeds", "1..3", "--resume", "missing.jsonl"), EXIT_USAGE, "missing.jsonl"),
    Row((*SIM, "sweep", "--seeds", "1..3", "--budget", "-1"), EXIT_USAGE, "-1"),
    Row((*SIM, "sweep", "--seeds", "1..3", "--budget", "nan"), EXIT_USAGE, "nan"),
    Row(
        (*SIM, "sweep", "--seeds", "1..3", "--report", "no/such/dir/r.html"), EXIT_USAGE, "no/such/dir/r.html"
    ),
    Row((*SIM, "run", "--seed", "7", "--timeline", "no/such/dir/t.png"), EXIT_USAGE, "no/such/dir/t.png"),
    Row((*SIM, "scale", "--ranks", "0"), EXIT_USAGE, "0"),
    # python -m sim.scale
    Row((*SCALE,), EXIT_USAGE, "none"),
    Row((*SCALE, "--ranks", "4", "--topology", "ring"), EXIT_USAGE, "ring"),
    Row((*SCALE, "--ranks", "4", "--dp-degree", "5"), EXIT_USAGE, "5"),
    Row((*SCALE, "--ranks", "-4"), EXIT_USAGE, "-4"),
    # python -m bench (refused before any benchmark runs)
    Row((*BENCH, "--only", "nosuch"), EXIT_USAGE, "nosuch"),
    Row((*BENCH, "--only", ""), EXIT_USAGE, "''"),
    Row((*BENCH, "--only", "source", "--json", "no/such/dir/b.json"), EXIT_USAGE, "no/such/dir/b.json"),
    Row((*BENCH, "--quick", "--bogus"), EXIT_USAGE, "--bogus"),
    # python -m properties.conformance
    Row((*CONF, "--impl", "nosuch"), EXIT_USAGE, "nosuch"),
    Row((*CONF, "--examples", "-3"), EXIT_USAGE, "-3"),
    Row((*CONF, "--examples", "0"), EXIT_USAGE, "0"),
    Row((*CONF, "--property", "nosuchprop"), EXIT_USAGE, "nosuchprop"),
    Row((*CONF, "--impl", "os:path"), EXIT_USAGE, "os:path"),
    Row((*CONF, "--examples", "x"), EXIT_USAGE, "'x'"),
    Row((*CONF, "--json", "no/such/dir/c.json"), EXIT_USAGE, "no/such/dir/c.json"),
    Row((*CONF, "--jobs", "0"), EXIT_USAGE, "0"),
    # python -m properties.loaders
    Row((*LOADERS, "--loader", "nosuch"), EXIT_USAGE, "nosuch"),
    Row((*LOADERS, "--loader", "zephon_ref", "--examples", "0"), EXIT_USAGE, "0"),
    Row((*LOADERS, "--loader", "zephon_ref", "--steps", "x"), EXIT_USAGE, "'x'"),
    Row((*LOADERS, "--loader", "os:path"), EXIT_USAGE, "os:path"),
    Row((*LOADERS, "--loader", "zephon_ref", "--property", "nosuch"), EXIT_USAGE, "nosuch"),
    Row((*LOADERS, "--loader", "zephon_ref", "--set", "workers"), EXIT_USAGE, "workers"),
    Row(
        (*LOADERS, "--loader", "zephon_ref", "--json", "no/such/dir/l.json"), EXIT_USAGE, "no/such/dir/l.json"
    ),
    # python -m properties.campaigns
    Row((*CAMPAIGNS,), EXIT_USAGE, ""),
    Row((*CAMPAIGNS, "conformance", "--examples", "0"), EXIT_USAGE, "0"),
    Row((*CAMPAIGNS, "conformance", "--shards", "-2"), EXIT_USAGE, "-2"),
    Row((*CAMPAIGNS, "conformance", "--jsonl", "no/such/dir/c.jsonl"), EXIT_USAGE, "no/such/dir/c.jsonl"),
    Row((*CAMPAIGNS, "conformance", "--resume", "missing.jsonl"), EXIT_USAGE, "missing.jsonl"),
    Row((*CAMPAIGNS, "checkpoints", "--budget", "0"), EXIT_USAGE, "0"),
    Row((*CAMPAIGNS, "checkpoints", "--out", "no/such/dir/k.json"), EXIT_USAGE, "no/such/dir/k.json"),
    Row((*CAMPAIGNS, "mutation", "--sample", "0"), EXIT_USAGE, "0"),
    Row((*CAMPAIGNS, "mutation", "--checkers", "bogus"), EXIT_USAGE, "bogus"),
    # python -m properties.mutation_score
    Row((*MUTATION, "run", "--checkers", "nope"), EXIT_USAGE, "nope"),
    Row((*MUTATION, "run", "--timeout", "0"), EXIT_USAGE, "0"),
    Row((*MUTATION, "report", "missing.jsonl"), EXIT_USAGE, "missing.jsonl"),
    Row((*MUTATION, "list", "--sample", "-1"), EXIT_USAGE, "-1"),
]


def _ids(row: object) -> str:
    argv = row.argv if isinstance(row, Row) else row.values[0].argv  # type: ignore[attr-defined]
    return " ".join(a for a in argv if a != "-m")[:60] or "(none)"


def _snapshot(d: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(d)): (p.read_bytes() if p.is_file() else b"<dir>") for p in sorted(d.rglob("*"))
    }


@pytest.mark.parametrize("row", ROWS, ids=_ids)
def test_bad_input_is_one_line_with_the_documented_code_and_writes_nothing(row: Row, tmp_path: Path) -> None:
    work, tmp = tmp_path / "work", tmp_path / "tmp"
    work.mkdir()
    tmp.mkdir()
    for name, data in row.files.items():
        (work / name).write_bytes(data)
    before = _snapshot(work)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(tmp)}
    env.pop("HYPOTHESIS_PROFILE", None)
    proc = subprocess.run([sys.executable, *row.argv], cwd=work, env=env, capture_output=True, text=True,
                          timeout=120)
    shown = f"rc={proc.returncode}\nstdout: {proc.stdout[-800:]}\nstderr: {proc.stderr[-1500:]}"
    assert "Traceback" not in proc.stdout + proc.stderr, shown
    assert proc.returncode == row.code, shown
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and proc.stderr.endswith("\n"), shown
    line = lines[0]
    assert "expected" in line and "received" in line, shown
    assert row.received in line, shown
    assert _snapshot(work) == before and _snapshot(tmp) == {}, "the command wrote files: " + shown


def test_the_codes_are_the_documented_ones() -> None:
    """docs/cli.md's table of codes is zephon_ref.exits' (the rows above use the constants)."""
    text = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    for name, code in EXIT_CODES.items():
        assert f"| {code} | {name} |" in text, (name, code)

"""``zephon-ref ckpt check STATE.pkl --factory module:function``, run in a subprocess.

Pickled zephon 0.2.0 states (good, with a replay target that never comes out,
of another canonical_replicas), a zephon_ref state, garbage, a missing file and
a bad factory: each gets its exit code and, when refused, one line and no
traceback.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path
from typing import Any

import pytest

from properties.sources import zephon_available

pytestmark = [
    pytest.mark.conformance,
    pytest.mark.skipif(
        not zephon_available(), reason="zephon 0.2.0 not installed (pip install .[conformance])"
    ),
]

ROOT = Path(__file__).resolve().parents[2]
FACTORY = textwrap.dedent("""
    from properties.pipelines import PipelineConfig, build_pipeline

    CFG = PipelineConfig(
        [("pack_sequences", {"max_length": 160, "num_bins": 2}), ("shuffle", {"buffer_size": 5, "seed": 1}),
         ("batch", {"microbatch_size": 2})],
        layout={"web": (40, 25), "code": (20, 12), "books": (10,)},
        source_kwargs={"chunk_size": 8, "seed": 3},
        options={"runner": "inline", "canonical_replicas": 2, "flush_every_k_chunks": 2})

    def make():
        return build_pipeline("zephon_ref", CFG)

    def make_zephon():
        return build_pipeline("zephon", CFG)

    def broken():
        raise RuntimeError("no pipeline today")
""")


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("ckpt_check")
    (d / "ckfac.py").write_text(FACTORY)
    sys.path.insert(0, str(d))
    try:
        import ckfac  # type: ignore[import-not-found]

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for impl, maker in (("z", ckfac.make_zephon), ("r", ckfac.make)):
                p = maker()
                it = iter(p)
                for _ in range(7):
                    next(it)
                state: dict[str, Any] = p.checkpoint()
                (d / f"{impl}7.pkl").write_bytes(pickle.dumps(state))
                if impl == "z":
                    lost = pickle.loads(pickle.dumps(state))
                    c = lost["replay_cursors"][0]
                    # right chunk, offset and sample, another lineage: every static check passes,
                    # only the replay probe can tell that this record never comes out
                    lost["replay_cursors"][0] = (c[0], c[1], (*tuple(c[2]), 97), c[3])
                    (d / "lost.pkl").write_bytes(pickle.dumps(lost))
                    other = pickle.loads(pickle.dumps(state))
                    other["world"]["canonical_replicas"] = 3
                    (d / "otherC.pkl").write_bytes(pickle.dumps(other))
        (d / "garbage.pkl").write_bytes(b"not a pickle")
        (d / "alist.pkl").write_bytes(pickle.dumps([1, 2, 3]))
    finally:
        sys.path.remove(str(d))
        sys.modules.pop("ckfac", None)
    return d


def run(workdir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "zephon_ref.compat.check", "check", *args],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_consistent_zephon_state_says_what_comes_next(workdir: Path) -> None:
    r = run(workdir, "z7.pkl", "--factory", "ckfac:make", "--show", "2")
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    assert "state: zephon 0.2.0 engine state v2 (translated)" in out
    assert "consistent: yes" in out
    assert "lane 0: replay inflight chunks" in out and "lane 1: replay inflight chunks" in out
    assert "skip" in out and "next chunk id" in out and "round robin '0/1:0,1'" in out
    assert "next[0]: lane" in out and "next[1]: lane" in out and "next[2]" not in out


def test_a_zephon_ref_state_is_checked_too(workdir: Path) -> None:
    r = run(workdir, "r7.pkl", "--factory", "ckfac:make")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "state: zephon_ref engine state" in r.stdout and "consistent: yes" in r.stdout


def test_a_target_that_never_comes_out_is_inconsistent(workdir: Path) -> None:
    r = run(workdir, "lost.pkl", "--factory", "ckfac:make")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "consistent: no" in r.stdout and "NOT FOUND" in r.stdout
    assert "Traceback" not in r.stdout + r.stderr


# the project's exit codes (zephon_ref.exits, docs/cli.md): 1 corrupt/inconsistent, 2 usage, 3 mismatch,
# 5 missing
@pytest.mark.parametrize(
    "state,factory,code,prefix",
    [
        (
            "otherC.pkl",
            "ckfac:make",
            3,
            "mismatch: inconsistent: StateMismatchError: checkpoint canonical_replicas",
        ),
        ("garbage.pkl", "ckfac:make", 1, "corrupt: state unreadable: garbage.pkl"),
        ("alist.pkl", "ckfac:make", 1, "corrupt: state unreadable: alist.pkl: expected a pickled state dict"),
        ("missing.pkl", "ckfac:make", 5, "missing: state missing: STATE: expected a pickled state file"),
        ("z7.pkl", "ckfac:nothing", 2, "usage error: factory unusable: AttributeError"),
        ("z7.pkl", "nomodule:make", 2, "usage error: factory unusable: ModuleNotFoundError"),
        ("z7.pkl", "ckfac:broken", 2, "usage error: factory unusable: RuntimeError: no pipeline today"),
    ],
)
def test_refusals_are_one_line_with_their_own_exit_code(workdir: Path, state: str, factory: str, code: int,
                                                        prefix: str) -> None:
    r = run(workdir, state, "--factory", factory)
    assert r.returncode == code, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("zephon-ref ckpt check: " + prefix), r.stderr
    assert r.stdout == "" and "Traceback" not in r.stdout + r.stderr


def test_the_zephon_ref_command_has_ckpt_check(workdir: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    ok = subprocess.run(
        [sys.executable, "-m", "zephon_ref.cli", "ckpt", "check", "z7.pkl", "--factory", "ckfac:make"],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ok.returncode == 0 and "consistent: yes" in ok.stdout, ok.stdout + ok.stderr
    bad = subprocess.run([sys.executable, "-m", "zephon_ref.cli", "ckpt", "check", "otherC.pkl", "--factory",
                          "ckfac:make"], cwd=workdir, env=env, capture_output=True, text=True, timeout=300)
    assert bad.returncode == 3 and bad.stderr.startswith("zephon-ref ckpt check: mismatch: inconsistent: "), \
        bad.stdout + bad.stderr

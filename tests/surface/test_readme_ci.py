"""The README's set-up commands are what CI runs, and the test command installs torch."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index("## Set up")
    section = text[
        start : text.index("\n## ", start)
    ]  # the set-up section alone (the next section has commands too)
    return re.findall(r"```bash\n(.*?)\n```", section, re.S)


def test_ci_runs_the_readme_commands_verbatim() -> None:
    demo, tests = readme_commands()
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()]
    assert tests in ci, f"{tests!r} is not a line of .ci/run"
    assert "zephon-ref demo" in demo and any(line.startswith("zephon-ref demo") for line in ci)


def test_the_test_command_installs_the_torch_cpu_pin_and_runs_the_suite() -> None:
    _, tests = readme_commands()
    assert re.search(r'-e "\.\[[^\]]*\btorch\b[^\]]*\]"', tests), tests
    assert '"torch==2.13.0"' in tests and tests.endswith("python3 -m pytest -n 2 -q")

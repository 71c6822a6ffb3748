"""After a plain ``pip install -e .`` the property suite runs (issue 23 item 3).

``python -m properties.conformance --impl inline`` is run in a subprocess for one example of one
property; every module it imported must come from the standard library, from this repository, or
from a distribution that the package's own ``dependencies`` (pyproject.toml, no extras) pull in.
Before issue 23 Hypothesis was only in the ``dev`` extra and the suite stopped with
ModuleNotFoundError on a plain install.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
OURS = {"zephon_ref", "sim", "properties"}
#: imported when present, never required: hypothesis's compat layer tries typing_extensions; Cython's runtime
OPTIONAL = {"typing_extensions", "cython_runtime"}

PROBE = """
import json, runpy, sys
startup = set(sys.modules)  # what the interpreter's site hooks loaded before the suite (e.g. certifi here)
sys.argv = ["properties.conformance", "--impl", "inline", "--examples", "1", "--property", "resume at cuts"]
try:
    runpy.run_module("properties.conformance", run_name="__main__")
except SystemExit as exc:
    code = exc.code
print("MODULES " + json.dumps([code, sorted({m.split(".")[0] for m in set(sys.modules) - startup})]))
"""


def _dependencies() -> list[str]:
    """pyproject's ``[project] dependencies`` (read by hand: tomllib is 3.11+, the package supports 3.10)."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    block = re.search(r"^dependencies = \[(.*?)^\]", text, re.S | re.M)
    assert block is not None
    return re.findall(r'^\s*"([^"]+)"', block.group(1), re.M)


def _name(req: str) -> str:
    return re.split(r"[\s<>=!~;\[(]", req.strip(), maxsplit=1)[0].lower().replace("_", "-")


def _closure(names: list[str]) -> set[str]:
    """Distributions the requirement names pull in, transitively (requirements under an extra skipped)."""
    from packaging.markers import default_environment
    from packaging.requirements import Requirement

    env = default_environment()
    seen: set[str] = set()
    todo = [_name(n) for n in names]
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        seen.add(n)
        try:
            reqs = metadata.requires(n) or []
        except metadata.PackageNotFoundError:
            continue
        for r in reqs:
            req = Requirement(r)
            if req.marker is not None and not req.marker.evaluate({**env, "extra": ""}):
                continue
            todo.append(_name(req.name))
    return seen


def test_the_suite_imports_only_what_a_plain_install_brings() -> None:
    deps = _dependencies()
    assert {"hypothesis", "tqdm"} <= {_name(d) for d in deps}
    allowed = _closure(deps)
    proc = subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    line = next((x for x in proc.stdout.splitlines() if x.startswith("MODULES ")), None)
    assert line is not None, proc.stdout[-2000:] + proc.stderr[-2000:]
    code, modules = json.loads(line[len("MODULES "):])
    assert code in (0, None), proc.stdout[-2000:] + proc.stderr[-2000:]
    dist_of = metadata.packages_distributions()
    outside: dict[str, list[str]] = {}
    for mod in modules:
        if (
            mod in sys.stdlib_module_names
            or mod in OURS | OPTIONAL
            or mod.startswith("_")
            or mod == "__main__"
        ):
            continue
        dists = {_name(d) for d in dist_of.get(mod, [])}
        if not dists & allowed:
            outside[mod] = sorted(dists)
    assert not outside, f"imported by the suite but not brought by pyproject's dependencies: {outside}"


def test_the_readme_oracle_section_has_the_three_commands() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index("## Check your loader against the reference")
    assert start < text.index("## What exists today"), "the section belongs on the first screen"
    block = re.search(r"```bash\n(.*?)\n```", text[start:], re.S)
    assert block is not None
    cmds = [line.split("#")[0].strip() for line in block.group(1).splitlines()]
    assert cmds == ["python3 -m pip install -e .", "python3 -m properties.conformance --impl inline",
                    "python3 -m properties.conformance --impl mymodule:MyAdapter"]


@pytest.mark.parametrize(
    "req,name",
    [
        ("hypothesis>=6.100", "hypothesis"),
        ("zstandard[cffi]>=1", "zstandard"),
        ("typing_extensions; python_version<'3.11'", "typing-extensions"),
    ],
)
def test_requirement_names(req: str, name: str) -> None:
    assert _name(req) == name

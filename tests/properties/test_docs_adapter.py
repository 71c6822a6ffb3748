"""docs/properties.md's example adapter runs, unchanged, through the resume machine."""

from __future__ import annotations

import re
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis.stateful import run_state_machine_as_test

from properties.machines import resume_machine

DOC = Path(__file__).resolve().parents[2] / "docs" / "properties.md"


def test_the_documented_adapter_is_under_50_lines_and_passes_the_machine() -> None:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    adapter_code = blocks[0]
    assert len(adapter_code.strip().splitlines()) < 50
    namespace: dict[str, object] = {}
    exec(compile(adapter_code, str(DOC), "exec"), namespace)  # noqa: S102 - the repository's own doc
    adapter = namespace["MyAdapter"]()  # type: ignore[operator]
    run_state_machine_as_test(resume_machine(adapter), settings=settings(
        max_examples=10, stateful_step_count=10, deadline=None, suppress_health_check=[HealthCheck.too_slow]))

"""docs/properties.md's worked adapter (a loader that is not zephon_ref: the tensor implementation)
runs, unchanged, through the resume machine and the oracle and lineage rows."""

from __future__ import annotations

import re
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis.stateful import run_state_machine_as_test

from properties import conformance
from properties.adapters import not_an_adapter
from properties.machines import resume_machine
from properties.tensor_adapter import ADAPTER

DOC = Path(__file__).resolve().parents[2] / "docs" / "properties.md"


def _documented_adapter() -> object:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    adapter_code = blocks[0]
    assert len(adapter_code.strip().splitlines()) < 50
    namespace: dict[str, object] = {}
    exec(compile(adapter_code, str(DOC), "exec"), namespace)  # noqa: S102 - the repository's own doc
    return namespace["MyAdapter"]()  # type: ignore[operator]


def test_the_documented_adapter_passes_the_machine_and_the_oracle_and_lineage_rows() -> None:
    adapter = _documented_adapter()
    assert not_an_adapter(adapter) is None
    # 8 machine examples (was 10): the time saved goes to the oracle and lineage rows below, which check
    # the documented adapter against zephon_ref itself rather than against its own stream
    run_state_machine_as_test(resume_machine(adapter), settings=settings(
        max_examples=8, stateful_step_count=8, deadline=None, suppress_health_check=[HealthCheck.too_slow]))
    rows = conformance.run_suite(adapter, examples=6, only=["oracle", "lineage"])
    assert [(r.prop, r.failure) for r in rows] == [("oracle", None), ("lineage", None)], rows
    assert all(r.passed >= 1 for r in rows), rows


def test_the_documented_adapter_is_the_shipped_one() -> None:
    """The doc's minimal form builds what properties/tensor_adapter.py builds."""
    from properties.machines import MACHINE_CONFIGS

    adapter = _documented_adapter()
    cfg = MACHINE_CONFIGS[2]
    a, b = adapter.build(cfg), ADAPTER.build(cfg)  # type: ignore[attr-defined]
    assert a.deliver(1_000) == b.deliver(1_000)

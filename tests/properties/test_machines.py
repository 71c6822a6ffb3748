"""The stateful resume machine against each adapter, and proof that it catches a broken one."""

from __future__ import annotations

import os
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import run_state_machine_as_test

from properties.adapters import PipelineAdapter, _PipelineRun, adapter
from properties.machines import resume_machine

EXAMPLES = int(os.environ.get("ZEPHON_REF_MACHINE_EXAMPLES", "30"))
SETTINGS = settings(max_examples=EXAMPLES, stateful_step_count=12, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.mark.parametrize("name", ["inline", "threads"])
def test_resume_machine(name: str) -> None:
    run_state_machine_as_test(resume_machine(adapter(name)), settings=SETTINGS)


@pytest.mark.conformance
def test_resume_machine_against_zephon() -> None:
    pytest.importorskip("zephon", reason="zephon 0.2.0 is the conformance extra")
    run_state_machine_as_test(resume_machine(adapter("zephon")), settings=SETTINGS)


class _SkipOnRestore(_PipelineRun):
    """A planted bug: a restored run silently loses its first item."""

    def __init__(self, pipeline: Any, restored: bool) -> None:
        super().__init__(pipeline)
        self._skip = restored

    def deliver(self, n: int) -> list[Any]:
        if self._skip:
            self._skip = False
            super().deliver(1)
        return super().deliver(n)


class _BrokenAdapter(PipelineAdapter):
    def build(self, cfg: Any, *, state: Any = None, **execution: Any) -> _PipelineRun:
        run = super().build(cfg, state=state, **execution)
        return _SkipOnRestore(run.pipeline, restored=state is not None)


def test_the_machine_catches_a_run_that_skips_an_item_after_restore() -> None:
    broken = _BrokenAdapter("broken", "zephon_ref", {"runner": "inline"})
    with pytest.raises(AssertionError, match="differs from the uninterrupted run|stream ended"):
        run_state_machine_as_test(resume_machine(broken), settings=settings(
            SETTINGS, max_examples=200, database=None, print_blob=False, report_multiple_bugs=False))

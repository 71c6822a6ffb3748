"""The stateful resume machine against each adapter, and proof that it catches a broken one."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from properties.adapters import FEATURES, IteratorRun, PipelineAdapter, adapter, skipped_rules
from properties.machines import resume_machine
from properties.profiles import examples

# the profile (properties/profiles.py) decides randomness and the database; nightly multiplies this
SETTINGS = settings(max_examples=examples(30), stateful_step_count=12, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.mark.parametrize("name", ["inline", "threads"])
def test_resume_machine(name: str) -> None:
    run_state_machine_as_test(resume_machine(adapter(name)), settings=SETTINGS)


@pytest.mark.conformance
def test_resume_machine_against_zephon() -> None:
    pytest.importorskip("zephon", reason="zephon 0.2.0 is the conformance extra")
    run_state_machine_as_test(resume_machine(adapter("zephon")), settings=SETTINGS)


def test_rules_an_adapter_lacks_are_named_with_a_reason() -> None:
    assert skipped_rules(adapter("inline")) == {}
    skipped = skipped_rules(adapter("zephon"))
    # under demand-paced feeding the threads runner's checkpoints are deterministic too (issue 21)
    assert skipped_rules(adapter("threads")) == {}
    assert sorted(skipped) == sorted(
        [
            "save_and_load, corrupt_a_saved_checkpoint",
            "restore_under_other_execution_settings",
            "remap (restore under another dp_degree / worker count / mapping)",
            "the lineage row's exact closure: observe(cfg) shows the tombstones of an uninterrupted run",
            "the shared walk row: zephon_ref's shared chunk walk "
            "checked against the plain walk (zephon_ref's own shortcut; no other "
            "implementation has it)",
            # the blind-spot rows' features (issue 32 item 4), named by FEATURES
            *(FEATURES[f] for f in ("merged_checkpoint", "torch", "aggregation", "operators", "fast_ops",
                                    "fast_codec", "token_estimation")),
        ]
    )
    assert all("lacks the" in why for why in skipped.values())


class _SkipOnRestore(IteratorRun):
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
    def build(self, cfg: Any, *, state: Any = None, **execution: Any) -> IteratorRun:
        run = super().build(cfg, state=state, **execution)
        return _SkipOnRestore(run.pipeline, restored=state is not None)


def test_the_machine_catches_a_run_that_skips_an_item_after_restore() -> None:
    broken = _BrokenAdapter("broken", "zephon_ref", {"runner": "inline"})
    with pytest.raises(AssertionError, match="differs from the uninterrupted run|stream ended"):
        run_state_machine_as_test(resume_machine(broken), settings=settings(
            SETTINGS, max_examples=200, database=None, print_blob=False, report_multiple_bugs=False,
            phases=[Phase.explicit, Phase.generate]))

"""Hand-made mutants of zephon_ref that the property suite (the resume machine and its
invariants) must catch within the ci example budget; a surviving mutant fails the build.

Each mutant is a source patch at a named place (properties/canaries.py, check ``suite``), run
in a child process inside a mutated copy of the repository: the resume machine against the
inline adapter with derandomized examples and no shrinking, then, if it passes, the suite's
stateless properties over the same budget.  Catching means a detector raises (a differing
item, a broken invariant, a crash); a clean run of all of them means the mutant survived.
The child starts a fresh process, so the examples drawn do not depend on which tests ran
before (they did when these mutants were monkeypatched into the test process).
"""

from __future__ import annotations

import pytest

from properties.canaries import CANARIES
from properties.mutation import run_mutated
from properties.profiles import examples

#: the ci budget of each mutant's machine run and of each property (derandomized)
BUDGET = examples(80)
MUTANTS = {c.name: c for c in CANARIES if c.check == "suite"}
#: mutants of payload values the operators row's fixed examples must catch (issue 32's never compared)
PAYLOAD_MUTANTS = {c.name: c for c in CANARIES if c.check == "operators"}


def _check(patches: list, check: str, *args: str, timeout: int = 600) -> tuple[int, str]:
    """Run ``python -m properties.canaries CHECK ARGS`` in a copy of the repository with ``patches``."""
    out = run_mutated(patches, ["python", "-m", "properties.canaries", check, *args], timeout=timeout)
    return out.returncode, out.tail


def _assert_caught(name: str, patches: list, check: str, *args: str, what: str, timeout: int = 600) -> None:
    code, tail = _check(patches, check, *args, timeout=timeout)
    assert code == 1 and "CAUGHT" in tail, f"{what} ({name!r}, exit {code})\n{tail[-1500:]}"
    print(f"{name}: {tail.strip().splitlines()[-1][:220]}")


def _assert_clean(check: str) -> None:
    code, tail = _check([], check)
    assert code == 0 and "CLEAN" in tail, tail[-1500:]


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_mutant_is_caught(name: str) -> None:
    _assert_caught(name, MUTANTS[name].patches, "suite", "--budget", str(BUDGET), timeout=1200,
                   what=f"mutant survived {BUDGET} derandomized machine examples and the properties "
                        "(or the check broke)")


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_mutant_is_caught_by_a_fixed_regression_example(name: str) -> None:
    """The rows' fixed regression examples alone (properties/regressions.py) catch every suite mutant,
    whatever the strategies draw: a change of the derandomized draw sequence cannot hide one (the
    sentinel mutant was caught only at drawn example 79 of 80, and survived a changed sequence)."""
    _assert_caught(name, MUTANTS[name].patches, "regressions", what="no regression example catches it")


def test_regression_examples_pass_on_the_real_engine() -> None:
    """... and pass unmutated (a regression example that failed on correct code would 'catch' anything)."""
    _assert_clean("regressions")


@pytest.mark.parametrize("name", sorted(PAYLOAD_MUTANTS))
def test_payload_mutant_is_caught_by_the_operators_row_fixed_examples(name: str) -> None:
    """tokenize's masks and the packers' fields beside the tokens are compared with a plain
    definition (properties.op_units.payload_problems) on fixed examples, whatever the strategies draw."""
    _assert_caught(name, PAYLOAD_MUTANTS[name].patches, "operators",
                   what="no fixed operator example catches it")


def test_the_operators_row_fixed_examples_pass_on_the_real_operators() -> None:
    _assert_clean("operators")

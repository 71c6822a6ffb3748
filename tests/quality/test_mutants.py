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


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_mutant_is_caught(name: str) -> None:
    canary = MUTANTS[name]
    out = run_mutated(
        canary.patches,
        ["python", "-m", "properties.canaries", "suite", "--budget", str(BUDGET)],
        timeout=1200,
    )
    assert out.returncode == 1 and "CAUGHT" in out.tail, \
        f"mutant survived {BUDGET} derandomized machine examples and the properties (or the check broke): " \
        f"{name!r}, exit {out.returncode}\n{out.tail[-1500:]}"
    print(f"{name}: {out.tail.strip().splitlines()[-1][:220]}")


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_mutant_is_caught_by_a_fixed_regression_example(name: str) -> None:
    """The rows' fixed regression examples alone (properties/regressions.py) catch every suite mutant,
    whatever the strategies draw: a change of the derandomized draw sequence cannot hide one (the
    sentinel mutant was caught only at drawn example 79 of 80, and survived a changed sequence)."""
    out = run_mutated(MUTANTS[name].patches, ["python", "-m", "properties.canaries", "regressions"],
                      timeout=600)
    assert out.returncode == 1 and "CAUGHT" in out.tail, \
        f"no regression example catches {name!r}: exit {out.returncode}\n{out.tail[-1500:]}"
    print(f"{name}: {out.tail.strip().splitlines()[-1][:220]}")


def test_regression_examples_pass_on_the_real_engine() -> None:
    """... and pass unmutated (a regression example that failed on correct code would 'catch' anything)."""
    out = run_mutated([], ["python", "-m", "properties.canaries", "regressions"], timeout=600)
    assert out.returncode == 0 and "CLEAN" in out.tail, out.tail[-1500:]


@pytest.mark.parametrize("name", sorted(PAYLOAD_MUTANTS))
def test_payload_mutant_is_caught_by_the_operators_row_fixed_examples(name: str) -> None:
    """tokenize's masks and the packers' fields beside the tokens are compared with a plain
    definition (properties.op_units.payload_problems) on fixed examples, whatever the strategies draw."""
    out = run_mutated(PAYLOAD_MUTANTS[name].patches, ["python", "-m", "properties.canaries", "operators"],
                      timeout=600)
    assert out.returncode == 1 and "CAUGHT" in out.tail, \
        f"no fixed operator example catches {name!r}: exit {out.returncode}\n{out.tail[-1500:]}"
    print(f"{name}: {out.tail.strip().splitlines()[-1][:220]}")


def test_the_operators_row_fixed_examples_pass_on_the_real_operators() -> None:
    out = run_mutated([], ["python", "-m", "properties.canaries", "operators"], timeout=600)
    assert out.returncode == 0 and "CLEAN" in out.tail, out.tail[-1500:]

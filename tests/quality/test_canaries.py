"""Canary mutants: each plants one realistic bug in zephon_ref as a source patch at a named place
(properties/canaries.py) and proves that the check named for it catches it, run in a child
process inside a mutated copy of the repository.  A canary that survives means the check has gone
blind; a canary whose snippet is gone from the source fails as stale (update the patch)."""

from __future__ import annotations

import pytest

from properties.canaries import CANARIES, run_check
from properties.mutation import Mutant, StaleMutant, run_mutated

TARGETED = {c.name: c for c in CANARIES if c.check in ("resume", "elastic", "bounded", "routing")}


def test_checks_pass_on_the_real_engine() -> None:
    for check in ("resume", "elastic", "bounded"):
        assert run_check(check, budget=0, reference=None) is None, check


def test_every_canary_patch_applies_to_the_source_as_it_is() -> None:
    stale = []
    for c in CANARIES:
        for m in c.patches:
            try:
                m.check()
            except StaleMutant as exc:
                stale.append(str(exc))
    assert not stale, "\n".join(stale)


def test_a_stale_patch_is_refused() -> None:
    with pytest.raises(StaleMutant, match="exactly once"):
        Mutant("gone", "zephon_ref/engine/core.py", "this text is not in the engine", "x").check()
    with pytest.raises(StaleMutant, match="expected"):
        Mutant("moved", "zephon_ref/engine/core.py", "def", "fed", line=1, col=0).check()


@pytest.mark.parametrize("name", sorted(TARGETED))
def test_canary_is_caught(name: str) -> None:
    canary = TARGETED[name]
    if canary.check == "routing":
        pytest.importorskip("zephon", reason="needs zephon 0.2.0 (conformance extra) as the oracle")
    out = run_mutated(canary.patches, ["python", "-m", "properties.canaries", canary.check], timeout=600)
    assert out.returncode == 1 and "CAUGHT" in out.tail, \
        f"canary survived (or the check broke): {name!r}, exit {out.returncode}\n{out.tail[-1500:]}"
    print(f"\n{name}: {out.tail.strip().splitlines()[-1][:200]}")

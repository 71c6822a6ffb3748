"""The shared walk of the global chunk order equals the plain per-lane walk (properties.shortcuts).

Drawn configurations, interleavings of lanes, restores from earlier states and states off the
walk's quota chain; plus a fixed many-lane case where one jump must cross hundreds of chunks.
"""

from __future__ import annotations

from hypothesis import given, settings

from properties.profiles import examples
from properties.shortcuts import WalkCase, run_walk_case, shared_walk_problems, walk_cases

_TOTALS = {"jumps": 0, "cases": 0}


@settings(max_examples=examples(60))
@given(walk_cases())
def test_shared_walk_equals_the_plain_walk(case: WalkCase) -> None:
    report = run_walk_case(case)
    assert not report.problems, report.problems
    _TOTALS["jumps"] += report.jumps
    _TOTALS["cases"] += 1


def test_the_drawn_cases_really_jump() -> None:
    """Run after the property in this module: the shortcut was exercised, else it proves little."""
    if _TOTALS["cases"] == 0:  # run alone (-k): draw a few cases here
        test_shared_walk_equals_the_plain_walk()
    assert _TOTALS["jumps"] > 50, _TOTALS


def test_many_lanes_one_jump_crosses_hundreds_of_chunks() -> None:
    case = WalkCase(layout={"web": (300, 200), "code": (250,), "books": (90,)},
                    weights={"web": 0.6, "code": 0.3, "books": 0.1}, lanes=64,
                    kwargs={"chunk_size": 2, "seed": 1},
                    script=tuple(("next", lane) for lane in (0, 17, 63, 5, 0, 17) for _ in range(2)))
    report = run_walk_case(case)
    assert report.problems == [], report.problems
    assert report.jumps > 64, report.jumps  # every lane reached most of its chunks by jumping
    assert shared_walk_problems(case) == []

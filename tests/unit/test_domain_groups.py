"""zephon_ref.ops.grouping.DomainGroups against zephon 0.2.0's on the same inputs (member maps,
refusals and their messages); a wrong container type is a TypeError here (zephon: AttributeError)."""

from __future__ import annotations

from typing import Any

import pytest

from properties.sources import zephon_available
from zephon_ref.errors import ConfigError, ConfigTypeError
from zephon_ref.ops.grouping import DomainGroups

INPUTS: list[Any] = [
    {"code": ["python", "java"], "web": ["c4"]}, {}, None, {"a": []}, {"a": ["x", "x"]},
    {"a": ["x"], "b": ["x"]}, {"": ["x"]}, {"a": [""]}, {"a": "xy"}, {"a": ("x", "y")}, {1: ["x"]},
    {"a": [1]}, {"a": {"x"}}, {"a": ["x"], "x": ["y"]}, {"b": ["z", "y"], "a": ["x"]},
]
KNOWN = [["python", "java", "c4"], ["python"], [], ("c4", "java", "python", "extra")]


def outcome(cls: Any, groups: Any) -> tuple[str, Any]:
    try:
        return "ok", cls(groups).to_member_map()
    except Exception as exc:  # noqa: BLE001 - the error is the outcome compared
        return "raises", (type(exc), str(exc))


@pytest.mark.conformance
@pytest.mark.skipif(not zephon_available(), reason="zephon 0.2.0 not installed (pip install .[conformance])")
@pytest.mark.parametrize("groups", INPUTS, ids=[repr(g) for g in INPUTS])
def test_same_member_map_or_refusal_as_zephon(groups: Any) -> None:
    from zephon.ops.grouping import DomainGroups as Z

    mine, theirs = outcome(DomainGroups, groups), outcome(Z, groups)
    assert mine[0] == theirs[0], (mine, theirs)
    if mine[0] == "ok":
        assert list(mine[1].items()) == list(theirs[1].items())
    else:
        assert issubclass(mine[1][0], theirs[1][0]) and mine[1][1] == theirs[1][1], (mine, theirs)
        assert issubclass(mine[1][0], ConfigError)


@pytest.mark.conformance
@pytest.mark.skipif(not zephon_available(), reason="zephon 0.2.0 not installed (pip install .[conformance])")
@pytest.mark.parametrize("known", KNOWN, ids=[repr(k) for k in KNOWN])
def test_validate_against_like_zephon(known: Any) -> None:
    from zephon.ops.grouping import DomainGroups as Z

    def check(cls: Any) -> str | None:
        try:
            cls({"code": ["python", "java"]}).validate_against(known)
        except ValueError as exc:
            return str(exc)
        return None

    assert check(DomainGroups) == check(Z)


def test_refusals_without_zephon() -> None:
    with pytest.raises(ConfigTypeError):
        DomainGroups([("a", ["x"])])  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="multiple groups"):
        DomainGroups({"a": ["x"], "b": ["x"]})
    g = DomainGroups({"a": {"y", "x"}})
    assert list(g.to_member_map()) == ["x", "y"]  # a set is read sorted
    m = g.to_member_map()
    m["z"] = "q"
    assert "z" not in g.to_member_map()  # an owned map
    with pytest.raises(ConfigError, match=r"\['x', 'y'\]"):
        g.validate_against([])

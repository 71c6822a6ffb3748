"""The main job: `zephon-ref demo` runs end to end and proves its resumes."""

from __future__ import annotations

import pytest

from zephon_ref.cli import main


def test_demo_resumes_exactly_in_a_fresh_process_and_on_other_ranks(capsys):
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert "IDENTICAL to the uninterrupted one" in out
    assert "killed with SIGKILL" in out
    assert "every lane IDENTICAL and every global step IDENTICAL" in out
    assert out.strip().endswith("OK: every resumed stream matched")
    assert "DIFFER" not in out


def test_demo_reports_bad_arguments_with_typed_error(capsys):
    # refused by the parser (one line, the project's usage code 2), before anything runs
    with pytest.raises(SystemExit) as info:
        main(["demo", "--chunk-size", "0"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--chunk-size: expected an int >= 1, received 0" in err

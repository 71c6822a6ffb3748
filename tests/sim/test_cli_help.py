"""``python -m sim``'s help and printed configuration explain themselves (issue 23 item 6).

Every field a seed can derive has a unit and a meaning (sim.cli.CONFIG_FIELDS) and a row in
docs/sim.md; ``python -m sim --help`` lists every subcommand, scale mode included; every option
of every sim parser has help text and shows its default.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from sim.cli import CONFIG_FIELDS, describe_config, main
from sim.runs import derive_config

ROOT = Path(__file__).resolve().parents[2]


def test_every_derived_field_is_explained_in_the_cli_and_in_docs_sim() -> None:
    fields: set[str] = set()
    for seed in range(200):
        fields |= set(derive_config(seed))
    assert fields <= set(CONFIG_FIELDS), (
        f"fields without a unit and meaning: {sorted(fields - set(CONFIG_FIELDS))}"
    )
    rows = set(re.findall(r"^\| `(\w+)` \|", (ROOT / "docs" / "sim.md").read_text(encoding="utf-8"), re.M))
    assert set(CONFIG_FIELDS) <= rows, f"missing from docs/sim.md: {sorted(set(CONFIG_FIELDS) - rows)}"


def test_the_printed_configuration_names_every_field_with_its_unit() -> None:
    cfg = derive_config(7, faults="crash", max_crashes=2)
    lines = describe_config(cfg)
    assert len(lines) == len(cfg)
    by_name = {line.split()[0]: line for line in lines}
    assert set(by_name) == set(cfg)
    assert "= 1 in " in by_name["crash"] and "participant events" in by_name["crash"]
    assert "= never" in by_name["io_error"]
    assert "ticks" in by_name["max_latency"] and "[" not in by_name["crash"].split("=")[1].split()[0]


def _parsers(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> list[argparse.ArgumentParser]:
    """Every parser ``sim.cli.main`` and ``sim.scale.main`` build (captured as they parse --help)."""
    seen: list[argparse.ArgumentParser] = []
    real = argparse.ArgumentParser.parse_args

    def spy(self: argparse.ArgumentParser, *a: object, **k: object) -> object:
        seen.append(self)
        return real(self, *a, **k)  # type: ignore[arg-type]

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", spy)
    for argv in (["--help"], ["scale", "--help"]):
        with pytest.raises(SystemExit) as info:
            main(argv)
        assert info.value.code == 0
    capsys.readouterr()
    out: list[argparse.ArgumentParser] = []
    todo = list(seen)
    while todo:
        p = todo.pop()
        out.append(p)
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                todo += list(action.choices.values())
    return out


def test_help_lists_every_subcommand_and_every_option_has_help_and_default(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    top = capsys.readouterr().out
    for cmd in ("run", "sweep", "scale"):
        assert re.search(rf"^\s+{cmd}\s+\S", top, re.M), top
    parsers = _parsers(capsys, monkeypatch)
    progs = {p.prog for p in parsers}
    assert {"python -m sim run", "python -m sim sweep", "python -m sim.scale"} <= progs, progs
    for p in parsers:
        if p.prog == "python -m sim scale":  # the listing entry of scale mode; its options are sim.scale's
            continue
        formatter = p._get_formatter()
        for action in p._actions:
            if not action.option_strings or action.help == argparse.SUPPRESS or "-h" in action.option_strings:
                continue
            assert action.help, f"{p.prog} {action.option_strings}: no help text"
            shown = formatter._get_help_string(action) or ""  # what --help prints for it
            assert action.required or "(default" in shown, (
                f"{p.prog} {action.option_strings}: no default shown"
            )


def test_the_progress_bar_is_tqdm_on_a_terminal_only(monkeypatch: pytest.MonkeyPatch) -> None:
    import io
    import sys

    from tqdm import tqdm

    from sim.progress import progress, shown

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert shown(stream=Tty()) and not shown(stream=io.StringIO()) and not shown(quiet=True, stream=Tty())
    tty = Tty()
    monkeypatch.setattr(sys, "stderr", tty)
    bar = progress(3, desc="seeds", unit="seed")
    assert isinstance(bar, tqdm) and not bar.disable
    bar.update(3)
    bar.close()
    assert "3/3" in tty.getvalue()
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    assert progress(3, desc="seeds", unit="seed").disable  # a pipe or a log: nothing drawn

"""Exit codes shared by every command of the project, and an argument parser that refuses in one line.

Theory of operation
-------------------
Every entry point (``zephon-ref`` and its subcommands, ``python -m sim`` and
``python -m sim.scale``, ``python -m properties.conformance``, ``properties.loaders``,
``properties.campaigns``, ``properties.mutation_score``, ``python -m bench``)
ends with one of the codes in :data:`EXIT_CODES`; docs/cli.md has the table per
command and tests/surface/test_cli_bad_input.py runs each command over bad input.
A code means the same thing under every command:

====  ==========  ==================================================================
code  name        meaning
====  ==========  ==================================================================
0     ok          done; what was checked holds
1     failed      the command ran and found a problem: a property failed, the
                  simulator's checker found a violation, a checkpoint is corrupt or
                  inconsistent, the demo's resumed stream differed
2     usage       the command line is wrong: an unknown command or option, a value of
                  the wrong type or out of range, an unknown name, a ``module:name``
                  that does not name what was expected (argparse's own code)
3     mismatch    a well-formed checkpoint that belongs to another pipeline, layout or
                  capture (refused)
4     storage     the operating system or object store refused (not a directory,
                  read-only, disk full, unreachable endpoint)
5     missing     nothing to work on where the command looked: no such checkpoint
                  directory or state file, no published generation
====  ==========  ==================================================================

Every refusal is one line on stderr, ``PROG: KIND: what was expected, what was
received``, never a traceback, and writes nothing.  :class:`OneLineArgumentParser`
gives argparse's usage errors that shape (argparse prints the usage block and the
message on two or more lines; this prints one line, rephrased as "expected ...,
received ..." where argparse's wording allows it) and keeps argparse's code 2.

What may not live here: any command's logic.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
from collections.abc import Callable
from typing import NoReturn

__all__ = [
    "EXIT_CODES",
    "EXIT_FAILED",
    "EXIT_MISMATCH",
    "EXIT_MISSING",
    "EXIT_OK",
    "EXIT_STORAGE",
    "EXIT_USAGE",
    "EPILOG",
    "DefaultsHelpFormatter",
    "OneLineArgumentParser",
    "existing_file",
    "int_at_least",
    "number_above",
    "one_line",
    "refuse",
    "usage_message",
    "writable_path",
]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_MISMATCH = 3
EXIT_STORAGE = 4
EXIT_MISSING = 5

EXIT_CODES: dict[str, int] = {
    "ok": EXIT_OK,
    "failed": EXIT_FAILED,
    "usage": EXIT_USAGE,
    "mismatch": EXIT_MISMATCH,
    "storage": EXIT_STORAGE,
    "missing": EXIT_MISSING,
}

#: the epilog every parser may show under its help
EPILOG = ("exit codes: 0 ok, 1 failed (a check found a problem), 2 usage (bad command line), 3 mismatch "
          "(a checkpoint of another pipeline), 4 storage (the OS or object store refused), 5 missing "
          "(nothing where the command looked); docs/cli.md")

# argparse's own wording (Python 3.10-3.13) -> "expected ..., received ..."
_REWRITES: tuple[tuple[re.Pattern[str], str], ...] = (
    (
        re.compile(r"^(argument [^:]+): invalid choice: (.+?) \(choose from (.+)\)$"),
        r"\1: expected one of \3, received \2",
    ),
    (
        re.compile(r"^(argument [^:]+): invalid (\w+) value: (.+)$"),
        r"\1: expected a value of type \2, received \3",
    ),
    (
        re.compile(r"^the following arguments are required: (.+)$"),
        r"expected the argument(s) \1, received none",
    ),
    (re.compile(r"^unrecognized arguments: (.+)$"), r"expected no further arguments, received \1"),
    (
        re.compile(r"^(argument [^:]+): expected one argument$"),
        r"\1: expected a value after it, received none",
    ),
    (
        re.compile(r"^(argument [^:]+): expected (at least one|\d+) arguments?$"),
        r"\1: expected \2 values after it, received none",
    ),
    (
        re.compile(r"^(argument [^:]+): ignored explicit argument (.+)$"),
        r"\1: expected no value (a switch), received \2",
    ),
    (re.compile(r"^(argument [^:]+): not allowed with (.+)$"), r"\1: expected it alone, received it with \2"),
)


def usage_message(message: str) -> str:
    """argparse's ``message`` as one line, in the project's "expected ..., received ..." shape."""
    text = " ".join(message.split())
    for pattern, repl in _REWRITES:
        if pattern.match(text):
            return pattern.sub(repl, text)
    return text


def one_line(text: str) -> str:
    """``text`` with every run of whitespace (newlines included) made one space."""
    return " ".join(str(text).split())


def refuse(prog: str, kind: str, message: str, code: int) -> int:
    """Print ``PROG: KIND: message`` as one line on stderr and return ``code`` (for
    ``return refuse(...)``)."""
    print(f"{prog}: {kind}: {one_line(message)}", file=sys.stderr)
    return code


class DefaultsHelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Shows every option's default and keeps descriptions' line breaks.

    A help text that already says its default (``"(default"`` in it) is left alone; a required
    option shows none; ``None`` reads "none", a switch's ``False`` reads "off".
    """

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if (
            "(default" in text
            or action.required
            or action.default is argparse.SUPPRESS
            or not action.option_strings
        ):
            return text
        d = action.default
        shown = "none" if d is None else ("on" if d else "off") if isinstance(d, bool) else "%(default)s"
        return f"{text} (default: {shown})" if text else f"(default: {shown})"


class OneLineArgumentParser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line on stderr and exit :data:`EXIT_USAGE` (2).

    Subparsers made through :meth:`add_subparsers` are of this class too (argparse's default).
    """

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: usage error: {usage_message(message)}", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)


def int_at_least(low: int, what: str = "an int") -> Callable[[str], int]:
    """An argparse ``type=`` that accepts an int >= ``low`` and refuses anything else in one line."""

    def parse(text: str) -> int:
        try:
            n = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what} >= {low}, received {text!r}") from None
        if n < low:
            raise argparse.ArgumentTypeError(f"expected {what} >= {low}, received {n}")
        return n

    parse.__name__ = f"int>={low}"
    return parse


def number_above(low: float, what: str = "a number") -> Callable[[str], float]:
    """An argparse ``type=`` that accepts a finite number > ``low`` (seconds, budgets) in one line."""

    def parse(text: str) -> float:
        try:
            x = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what} > {low:g}, received {text!r}") from None
        if not (math.isfinite(x) and x > low):
            raise argparse.ArgumentTypeError(f"expected {what} > {low:g}, received {text}")
        return x

    parse.__name__ = f"number>{low:g}"
    return parse


def writable_path(text: str) -> str:
    """An argparse ``type=`` for an output file: a path whose directory exists and that is not a
    directory itself, checked before the command runs (a typo costs nothing and writes nothing)."""
    d = os.path.dirname(os.path.abspath(text)) if text else ""
    if not text or os.path.isdir(text) or not os.path.isdir(d):
        raise argparse.ArgumentTypeError(f"expected a file path in an existing directory, received {text!r}")
    return text


def existing_file(text: str) -> str:
    """An argparse ``type=`` for an input file that must already exist (``--resume FILE``)."""
    if not text or not os.path.isfile(text):
        raise argparse.ArgumentTypeError(f"expected an existing file, received {text!r}")
    return text

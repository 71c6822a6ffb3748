"""``zephon-ref ckpt inspect DIR``, ``ckpt verify DIR``, ``ckpt gc DIR --keep N`` and
``ckpt check STATE.pkl --factory m:f``.

Theory of operation
-------------------
A thin front end over store.py.  ``DIR`` is a local directory or an
``s3://bucket/prefix`` URL (object storage, configured by the standard AWS
environment variables; see docs/s3.md); a malformed URL or another scheme is a
usage error (2), an unreachable or refusing endpoint a storage error (4).  A local
``DIR`` that does not exist is "missing" (5) for every command, ``gc`` included (it
used to report "kept generations []" and succeed).  ``inspect`` lists every published generation
(lanes, shard sizes, capture, fingerprint) and marks the ones that fail
verification; ``verify`` checks every digest and header of every generation;
neither writes a file.  ``gc`` keeps the N newest generations and removes older
ones and torn leftovers (store.gc's rule), then prints one summary line.
``check`` lives in zephon_ref.compat.check (it judges one pickled engine state,
zephon's or ours, against a pipeline factory; its own exit codes are in its help).

Every refusal ends the command with one line on stderr (never a traceback) and
a distinct exit code (:data:`EXIT_CODES`, the project's codes from
:mod:`zephon_ref.exits`: 0 ok, 1 corrupt, 2 usage, 3 mismatch, 4 storage, 5
missing; docs/cli.md); with several failing generations the code is that of the
oldest failing one.

``add_ckpt_subcommands(subparsers)`` attaches a ``ckpt`` command to the
project's parser; each leaf sets ``func(args) -> int``.  ``main(argv)`` runs the
same commands on their own (``main(["verify", DIR])``; a leading ``"ckpt"`` is
accepted too).  What may not live here: any checkpoint logic.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from zephon_ref.checkpoint.schema import Manifest
from zephon_ref.checkpoint.store import gc, iter_verify, list_generations
from zephon_ref.errors import ConfigError, ZephonRefError
from zephon_ref.exits import (
    EXIT_FAILED,
    EXIT_MISMATCH,
    EXIT_MISSING,
    EXIT_OK,
    EXIT_STORAGE,
    EXIT_USAGE,
    DefaultsHelpFormatter,
    OneLineArgumentParser,
    int_at_least,
)
from zephon_ref.storage.errors import CheckpointCorrupt, CheckpointNotFound, CheckpointRefused, StorageError

__all__ = [
    "EXIT_CODES",
    "EXIT_CORRUPT",
    "EXIT_MISMATCH",
    "EXIT_MISSING",
    "EXIT_OK",
    "EXIT_STORAGE",
    "EXIT_USAGE",
    "add_ckpt_subcommands",
    "cmd_gc",
    "cmd_inspect",
    "cmd_verify",
    "exit_code",
    "main",
]

EXIT_CORRUPT = EXIT_FAILED  # the project's "failed" (1): the check found a damaged generation
EXIT_CODES: dict[str, int] = {
    "ok": EXIT_OK,
    "corrupt": EXIT_CORRUPT,
    "missing": EXIT_MISSING,
    "mismatch": EXIT_MISMATCH,
    "storage": EXIT_STORAGE,
    "usage": EXIT_USAGE,
}
_EPILOG = (
    "exit codes: 0 ok, 1 corrupt, 2 usage (a bad command line), 3 mismatch, "
    "4 storage error (OS refused: not a directory, read-only, disk full, ...), "
    "5 missing (no such directory, no published generation); docs/cli.md"
)

_DIR_HELP = "checkpoint directory: a local path or s3://bucket/prefix"


def exit_code(exc: BaseException) -> int:
    """The exit code for a refusal (see the module docstring)."""
    if isinstance(exc, StorageError):
        return EXIT_STORAGE
    if isinstance(exc, CheckpointNotFound):
        return EXIT_MISSING
    if isinstance(exc, CheckpointRefused):
        return EXIT_MISMATCH
    if isinstance(exc, CheckpointCorrupt):
        return EXIT_CORRUPT
    if isinstance(exc, ConfigError):
        return EXIT_USAGE
    return EXIT_CORRUPT


def _kind(exc: BaseException) -> str:
    code = exit_code(exc)
    return next(k for k, v in EXIT_CODES.items() if v == code)


def _describe(m: Manifest, out: TextIO) -> None:
    cap = m.capture
    total = sum(e.size for e in m.shards)
    print(
        f"generation {m.generation}: engine v{m.engine_version}, canonical_replicas={m.canonical_replicas}, "
        f"fingerprint={m.fingerprint!r}",
        file=out,
    )
    print(
        f"  capture: round_id={cap.round_id!r} reload_count={cap.reload_count} "
        f"delivered={sum(n for _, n in cap.delivered)} over {len(cap.delivered)} lanes",
        file=out,
    )
    print(f"  shards: {len(m.shards)} ({total} bytes)  universal {m.universal.size} B", file=out)
    for e in m.lanes:
        delivered = dict(cap.delivered).get(e.lane)  # type: ignore[arg-type]
        print(f"    lane {e.lane:>4}: {e.size:>9} B  sha256 {e.digest[:16]}  delivered={delivered}", file=out)


def _refused(command: str, exc: BaseException) -> int:
    reason = getattr(exc, "reason", None)
    kind = _kind(exc) + ("" if reason else " error" if _kind(exc) == "usage" else "")
    print(f"zephon-ref ckpt {command}: {kind}{f' ({reason})' if reason else ''}: {exc}", file=sys.stderr)
    return exit_code(exc)


def _guarded(command: str, body: Callable[[argparse.Namespace, TextIO], int]) -> Callable[..., int]:
    def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
        try:
            return body(args, sys.stdout if out is None else out)
        except ZephonRefError as exc:
            return _refused(command, exc)

    run.__name__ = f"cmd_{command}"
    return run


def _missing_directory(command: str, directory: str) -> int | None:
    """EXIT_MISSING with one line on stderr when a local ``directory`` does not exist; else None."""
    if str(directory).startswith("s3://") or os.path.lexists(directory):
        return None
    print(f"zephon-ref ckpt {command}: missing (no-such-directory): "
          f"DIR: expected an existing checkpoint directory, received {directory!r}, which does not exist",
          file=sys.stderr)
    return EXIT_MISSING


def _no_generation(command: str, directory: str) -> int:
    print(f"zephon-ref ckpt {command}: missing (no-generation): "
          f"{directory!r}: expected at least one published generation, received none", file=sys.stderr)
    return EXIT_MISSING


def _inspect(args: argparse.Namespace, out: TextIO) -> int:
    gone = _missing_directory("inspect", args.directory)
    if gone is not None:
        return gone
    if not list_generations(args.directory):
        return _no_generation("inspect", args.directory)
    first_bad = EXIT_OK
    for gen, result in iter_verify(args.directory):
        if isinstance(result, Manifest):
            _describe(result, out)
        else:
            first_bad = first_bad or exit_code(result)
            print(f"generation {gen}: REFUSED ({getattr(result, 'reason', '?')}): {result}", file=out)
    return first_bad


def _verify(args: argparse.Namespace, out: TextIO) -> int:
    gone = _missing_directory("verify", args.directory)
    if gone is not None:
        return gone
    gens = list_generations(args.directory)
    if not gens:
        return _no_generation("verify", args.directory)
    first_bad = EXIT_OK
    bad = 0
    for gen, result in iter_verify(args.directory):
        if isinstance(result, Manifest):
            print(f"ok   generation {gen}: {len(result.shards)} shards verified", file=out)
        else:
            bad += 1
            first_bad = first_bad or exit_code(result)
            print(f"FAIL generation {gen} ({getattr(result, 'reason', '?')}): {result}", file=out)
    print(f"{len(gens) - bad}/{len(gens)} generations verified", file=out)
    return first_bad


def _gc(args: argparse.Namespace, out: TextIO) -> int:
    gone = _missing_directory("gc", args.directory)
    if gone is not None:
        return gone
    r = gc(args.directory, keep=args.keep)
    print(
        f"gc {args.directory}: kept generations {list(r.kept)}, removed {len(r.removed_generations)} "
        f"generations, {r.removed_shards} shards, {r.removed_temps} temp files; "
        f"files {r.files_before} -> {r.files_after}",
        file=out,
    )
    return EXIT_OK


cmd_inspect = _guarded("inspect", _inspect)
cmd_verify = _guarded("verify", _verify)
cmd_gc = _guarded("gc", _gc)


_Parser = OneLineArgumentParser  # usage errors: one line, exit 2 (zephon_ref.exits)
_positive = int_at_least(1)


def _add_leaves(sub: Any) -> None:
    p = sub.add_parser("inspect", help="list generations, lanes, sizes, capture, fingerprint", epilog=_EPILOG,
                       formatter_class=DefaultsHelpFormatter)
    p.add_argument("directory", help=_DIR_HELP)
    p.set_defaults(func=cmd_inspect)
    v = sub.add_parser(
        "verify", help="check every digest of every generation (exit 0 only if all pass)", epilog=_EPILOG,
        formatter_class=DefaultsHelpFormatter,
    )
    v.add_argument("directory", help=_DIR_HELP)
    v.set_defaults(func=cmd_verify)
    g = sub.add_parser(
        "gc", help="keep the N newest generations; remove older ones and torn leftovers", epilog=_EPILOG,
        formatter_class=DefaultsHelpFormatter,
    )
    g.add_argument("directory", help=_DIR_HELP)
    g.add_argument("--keep", type=_positive, required=True, help="generations to keep (>= 1)")
    g.set_defaults(func=cmd_gc)
    from zephon_ref.compat.check import add_check_parser

    add_check_parser(sub)


def add_ckpt_subcommands(subparsers: Any) -> argparse.ArgumentParser:
    """Attach ``ckpt {inspect,verify,gc} DIR``; dispatch with ``args.func(args)``."""
    # Usage errors below ``ckpt`` exit 2 with one line: the ckpt parser (and so
    # its own subparsers) is a _Parser even when the project's parser is not.
    previous = getattr(subparsers, "_parser_class", None)
    if previous is not None:
        subparsers._parser_class = _Parser
    try:
        ckpt = subparsers.add_parser(
            "ckpt",
            help="inspect, verify and collect durable checkpoints",
            description="durable checkpoint tools",
            epilog=_EPILOG,
        )
    finally:
        if previous is not None:
            subparsers._parser_class = previous
    _add_leaves(ckpt.add_subparsers(dest="ckpt_command", required=True, metavar="{inspect,verify,gc,check}"))
    parser: argparse.ArgumentParser = ckpt
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list[:1] == ["ckpt"]:
        args_list = args_list[1:]
    parser = _Parser(prog="zephon-ref ckpt", description="durable checkpoint tools", epilog=_EPILOG)
    _add_leaves(
        parser.add_subparsers(dest="ckpt_command", required=True, metavar="{inspect,verify,gc,check}")
    )
    try:
        args = parser.parse_args(args_list)
    except SystemExit as exc:  # --help (0) or a usage error (2)
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    rc: int = args.func(args)
    return rc


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())

"""``zephon-ref ckpt inspect DIR``, ``ckpt verify DIR`` and ``ckpt check STATE.pkl --factory m:f``.

Theory of operation
-------------------
A thin, read-only front end over store.py.  ``inspect`` lists every published
generation (lanes, shard sizes, capture, fingerprint) and marks the ones that
fail verification; ``verify`` checks every digest and header of every
generation and exits 0 only if all pass (1 if any fails, 2 if there is no
published generation).  Neither command writes a file.  ``check`` lives in
zephon_ref.compat.check (it judges one pickled engine state, zephon's or ours).

``add_ckpt_subcommands(subparsers)`` attaches a ``ckpt`` command to the
project's parser; each leaf sets ``func(args) -> int``.  ``main(argv)`` runs the
same commands on their own (``main(["verify", DIR])``; a leading ``"ckpt"`` is
accepted too).  What may not live here: any checkpoint logic.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any, TextIO

from zephon_ref.checkpoint.schema import Manifest
from zephon_ref.checkpoint.store import iter_verify, list_generations

__all__ = ["add_ckpt_subcommands", "cmd_inspect", "cmd_verify", "main"]


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


def cmd_inspect(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = sys.stdout if out is None else out
    if not list_generations(args.directory):
        print(f"{args.directory}: no published generation", file=out)
        return 2
    bad = 0
    for gen, result in iter_verify(args.directory):
        if isinstance(result, Manifest):
            _describe(result, out)
        else:
            bad += 1
            print(f"generation {gen}: REFUSED ({getattr(result, 'reason', '?')}): {result}", file=out)
    return 1 if bad else 0


def cmd_verify(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = sys.stdout if out is None else out
    gens = list_generations(args.directory)
    if not gens:
        print(f"FAIL {args.directory}: no published generation", file=out)
        return 2
    bad = 0
    for gen, result in iter_verify(args.directory):
        if isinstance(result, Manifest):
            print(f"ok   generation {gen}: {len(result.shards)} shards verified", file=out)
        else:
            bad += 1
            print(f"FAIL generation {gen} ({getattr(result, 'reason', '?')}): {result}", file=out)
    print(f"{len(gens) - bad}/{len(gens)} generations verified", file=out)
    return 1 if bad else 0


def _add_leaves(sub: Any) -> None:
    p = sub.add_parser("inspect", help="list generations, lanes, sizes, capture, fingerprint")
    p.add_argument("directory")
    p.set_defaults(func=cmd_inspect)
    v = sub.add_parser("verify", help="check every digest of every generation (exit 0 only if all pass)")
    v.add_argument("directory")
    v.set_defaults(func=cmd_verify)
    from zephon_ref.compat.check import add_check_parser

    add_check_parser(sub)


def add_ckpt_subcommands(subparsers: Any) -> argparse.ArgumentParser:
    """Attach ``ckpt {inspect,verify} DIR``; dispatch with ``args.func(args)``."""
    ckpt = subparsers.add_parser("ckpt", help="inspect and verify durable checkpoints")
    _add_leaves(ckpt.add_subparsers(dest="ckpt_command", required=True))
    parser: argparse.ArgumentParser = ckpt
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list[:1] == ["ckpt"]:
        args_list = args_list[1:]
    parser = argparse.ArgumentParser(prog="zephon-ref ckpt", description="durable checkpoint tools")
    _add_leaves(parser.add_subparsers(dest="ckpt_command", required=True))
    args = parser.parse_args(args_list)
    rc: int = args.func(args)
    return rc


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())

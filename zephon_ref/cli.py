"""The ``zephon-ref`` command."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

__all__ = ["main"]


def _build_parser() -> argparse.ArgumentParser:
    from zephon_ref import __version__
    from zephon_ref.checkpoint.cli import add_ckpt_subcommands

    parser = argparse.ArgumentParser(prog="zephon-ref", description="zephon_ref: the reference data pipeline")
    parser.add_argument("--version", action="version", version=f"zephon-ref {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="run the main job end to end on the synthetic corpus")
    demo.add_argument("--seed", type=int, default=0)
    demo.add_argument("--lanes", type=int, default=4, help="canonical_replicas (default 4)")
    demo.add_argument("--chunk-size", type=int, default=32)
    demo.add_argument("--cut", type=int, default=3, help="chunks per lane before the checkpoint")
    add_ckpt_subcommands(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    if args.command == "demo":
        from zephon_ref.demo import run_demo
        from zephon_ref.errors import ZephonRefError

        try:
            ok = run_demo(seed=args.seed, lanes=args.lanes, chunk_size=args.chunk_size, cut=args.cut)
        except ZephonRefError as exc:
            print(f"zephon-ref demo: {exc}", file=sys.stderr)
            return 2
        return 0 if ok else 1
    rc: int = args.func(args)
    return rc


if __name__ == "__main__":
    raise SystemExit(main())

"""The ``zephon-ref`` command: ``demo`` and ``ckpt {inspect,verify,gc,check}``.

Exit codes are the project's (:mod:`zephon_ref.exits`, docs/cli.md): 0 ok, 1 the demo's
resumed stream differed, 2 a bad command line (one line on stderr, never a traceback);
the ``ckpt`` commands add 1 corrupt, 3 mismatch, 4 storage and 5 missing.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from zephon_ref.exits import (
    EPILOG,
    EXIT_USAGE,
    DefaultsHelpFormatter,
    OneLineArgumentParser,
    int_at_least,
    refuse,
)

__all__ = ["main"]


def _build_parser() -> argparse.ArgumentParser:
    from zephon_ref import __version__
    from zephon_ref.checkpoint.cli import add_ckpt_subcommands

    parser = OneLineArgumentParser(prog="zephon-ref", description="zephon_ref: the reference data pipeline",
                                   epilog=EPILOG)
    parser.add_argument("--version", action="version", version=f"zephon-ref {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="{demo,ckpt}")
    demo = sub.add_parser("demo", help="run the main job end to end on the synthetic corpus",
                          description="run the main job end to end on the synthetic corpus: build the demo "
                                      "pipeline, read CUT chunks per lane, checkpoint, resume in a fresh "
                                      "pipeline and compare the rest of the stream with an uninterrupted run",
                          formatter_class=DefaultsHelpFormatter, epilog=EPILOG)
    demo.add_argument("--seed", type=int_at_least(0), default=0, help="the pipeline's seed")
    demo.add_argument("--lanes", type=int_at_least(1), default=4, help="canonical_replicas")
    demo.add_argument("--chunk-size", type=int_at_least(1), default=32, help="samples per work chunk")
    demo.add_argument("--cut", type=int_at_least(0), default=3, help="chunks per lane before the checkpoint")
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
            return refuse("zephon-ref demo", "usage error", str(exc), EXIT_USAGE)
        return 0 if ok else 1
    rc: int = args.func(args)
    return rc


if __name__ == "__main__":
    raise SystemExit(main())

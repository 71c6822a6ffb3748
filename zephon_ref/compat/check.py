"""``zephon-ref ckpt check STATE.pkl --factory module:function``: judge one checkpoint.

Theory of operation
-------------------
The state (a pickled dict: a zephon 0.2.0 ``EngineStateV2`` or a zephon_ref
engine state) is restored into the pipeline the factory builds, which
translates a zephon state and validates it (schema, canonical replicas,
fingerprint or the source settings zephon stores, a dry-run load of every owned
lane).  A refusal is reported in one line.  An accepted state is then *replayed*
without its replay targets, on a second pipeline from the factory, to check that
every lane's target cursor really comes out of the replay (a target that never
appears would make the replay filter drop the whole lane) and to count the
records the filter will skip.  The report says, per lane, what must come next:
the inflight chunks to replay, the flush sentinels to re-inject, the replay
target and the records it skips, the next chunk id; then the round-robin
position and, with ``--show N``, the first N items of the continuation.

Only public Pipeline methods are used (``restore``, ``checkpoint``, iteration).
Nothing is written.  Exit codes (the project's, :mod:`zephon_ref.exits`;
docs/cli.md): 0 consistent, 1 inconsistent or unreadable (not a pickle, not a
state dict, a malformed state), 2 usage (a bad command line, or a ``--factory``
that does not name a callable returning a Pipeline), 3 mismatch (a well-formed
state of another pipeline or layout, refused), 5 missing (no such state file).
A refusal is one line on stderr; the report of a state that could be judged
goes to stdout.
"""

from __future__ import annotations

import argparse
import copy
import importlib
import os
import pickle
import sys
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from zephon_ref import state as state_schema
from zephon_ref.compat.zephon_state import is_zephon_state, restore_zephon_state
from zephon_ref.errors import StateFormatError, StateMismatchError, ZephonRefError, expected
from zephon_ref.exits import (
    EXIT_FAILED,
    EXIT_MISMATCH,
    EXIT_MISSING,
    EXIT_USAGE,
    OneLineArgumentParser,
    int_at_least,
)

__all__ = ["EXIT_FACTORY", "EXIT_INCONSISTENT", "EXIT_MISMATCH", "EXIT_MISSING", "EXIT_OK", "EXIT_UNREADABLE",
           "CheckReport", "LaneReport",
           "add_check_parser", "check_state", "cmd_check", "load_factory", "main"]

EXIT_OK = 0
EXIT_INCONSISTENT = EXIT_FAILED  # 1: the check found the state inconsistent
EXIT_UNREADABLE = EXIT_FAILED  # 1: not a pickle, not a state dict, malformed: a corrupt state
EXIT_FACTORY = EXIT_USAGE  # 2: --factory does not name a usable factory
DEFAULT_LIMIT = 100_000


@dataclass
class LaneReport:
    lane: int
    inflight: list[int]
    samples: int
    sentinels_before: list[int]
    trailing: list[int]
    target: tuple[Any, ...] | None
    skip: int | None  # records the replay filter drops; None while the target is not found
    next_cid: int
    progress: tuple[int, int]
    delivered: int | None


@dataclass
class CheckReport:
    origin: str
    consistent: bool
    problem: str = ""
    lanes: list[LaneReport] = field(default_factory=list)
    rr: dict[str, int] = field(default_factory=dict)
    upcoming: list[str] = field(default_factory=list)

    def render(self, out: TextIO) -> None:
        print(f"state: {self.origin}", file=out)
        if not self.consistent:
            print(f"consistent: no: {self.problem}", file=out)
        else:
            print("consistent: yes", file=out)
        for r in self.lanes:
            span = f"{r.inflight[0]}..{r.inflight[-1]} ({len(r.inflight)} chunks, {r.samples} samples)" \
                if r.inflight else "none"
            if r.target is None:
                tgt = "none (nothing of the inflight chunks was delivered: everything replayed is new)"
            elif r.skip is None:
                tgt = f"{r.target}: NOT FOUND in the replay"
            else:
                tgt = f"{r.target}: skip {r.skip} replayed records"
            print(f"lane {r.lane}: replay inflight chunks {span}; flush sentinels before chunks "
                  f"{r.sentinels_before or 'none'}; trailing sentinels {r.trailing or 'none'}", file=out)
            print(f"  replay target {tgt}", file=out)
            print(f"  next chunk id {r.next_cid}; progress (chunk {r.progress[0]}, offset {r.progress[1]}); "
                  f"delivered {'unknown' if r.delivered is None else r.delivered}", file=out)
        for key, idx in self.rr.items():
            print(f"round robin {key!r}: next owned-lane index {idx}", file=out)
        for i, line in enumerate(self.upcoming):
            print(f"next[{i}]: {line}", file=out)


def _items_records(item: Any) -> Sequence[Any]:
    recs = getattr(item, "records", None)
    return list(recs) if recs is not None else [item]


def _describe_item(item: Any) -> str:
    recs = _items_records(item)
    keys = [tuple(r.meta.cursor.as_key()) for r in recs]
    return f"lane {recs[0].meta.lane_id}: " + ", ".join(str(k) for k in keys)


def _lane_table(state: Mapping[str, Any], name: str) -> dict[int, Any]:
    return {int(k): v for k, v in (state.get(name) or {}).items()}


def check_state(
    state: Any, factory: Callable[[], Any], *, show: int = 0, limit: int = DEFAULT_LIMIT
) -> CheckReport:
    """Restore ``state`` into ``factory()``'s pipeline, replay it, and report (never raises a
    ZephonRefError)."""
    origin = ("zephon 0.2.0 engine state v{} (translated)".format(state.get("version"))
              if is_zephon_state(state) else "zephon_ref engine state")
    report = CheckReport(origin=origin, consistent=False)
    pipeline = factory()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # StateFormatError / StateMismatchError propagate to the caller
        if is_zephon_state(state):
            restore_zephon_state(pipeline, copy.deepcopy(state))
        else:
            pipeline.restore(copy.deepcopy(state))
        translated: dict[str, Any] = copy.deepcopy(pipeline.checkpoint())  # the pending (translated) state
    inflight = _lane_table(translated, "inflight")
    cursors = _lane_table(translated, "replay_cursors")
    bounds = _lane_table(translated, "epoch_boundaries")
    nxt = _lane_table(translated, "lane_next_cid")
    prog = _lane_table(translated, "progress")
    emitted = _lane_table(translated, "lane_emitted")
    targets: dict[int, tuple[Any, ...]] = {}
    for lane in sorted(nxt):
        cids = sorted(int(c) for c in (inflight.get(lane) or {}))
        raw = cursors.get(lane)
        target = None if raw is None else (int(raw[0]), int(raw[1]), tuple(raw[2]), tuple(raw[3]))
        if target is not None and target[0] not in cids:
            target = None  # the engine's rule: a cursor counts only while its chunk is inflight
        if target is not None:
            targets[lane] = target
        b = sorted(int(x) for x in (bounds.get(lane) or []))
        last = cids[-1] if cids else -1
        report.lanes.append(LaneReport(
            lane=lane, inflight=cids,
            samples=sum(int(inflight[lane][c]["total_samples"]) for c in inflight.get(lane, {})),
            sentinels_before=[x for x in b if x in cids], trailing=[x for x in b if x > last], target=target,
            skip=0 if target is None else None, next_cid=int(nxt[lane]),
            progress=(int(prog[lane]["chunk_id"]), int(prog[lane]["offset"])),
            delivered=None if lane not in emitted else int(emitted[lane])))
    report.rr = {str(k): int(v) for k, v in (translated.get("rr_next_idx") or {}).items()}
    # replay without targets: every lane's target must come out, after `skip` records
    if targets:
        unfiltered = copy.deepcopy(translated)
        unfiltered["replay_cursors"] = {lane: None for lane in nxt}
        unfiltered["lane_emitted"] = {}  # a probe that delivers from the start: nothing delivered yet
        unfiltered = state_schema.seal(unfiltered)  # this probe vouches for its own edit
        probe = factory()
        seen = dict.fromkeys(targets, 0)
        pending = set(targets)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            probe.restore(unfiltered)
            for n, item in enumerate(probe):
                for rec in _items_records(item):
                    lane = rec.meta.lane_id
                    if lane in pending:
                        seen[lane] += 1
                        if tuple(rec.meta.cursor.as_key()) == targets[lane]:
                            pending.discard(lane)
                if not pending or n + 1 >= limit:
                    break
        for r in report.lanes:
            if r.lane in targets and r.lane not in pending:
                r.skip = seen[r.lane]
        if pending:
            report.problem = (
                f"replay target of lane(s) {sorted(pending)} never comes out of the replay "
                f"(searched {limit} items or to the end): the replay filter would drop those lanes"
            )
            return report
    report.consistent = True
    if show > 0:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for i, item in enumerate(pipeline):
                report.upcoming.append(_describe_item(item))
                if i + 1 >= show:
                    break
    return report


def load_factory(spec: str) -> Callable[[], Any]:
    """``module:function`` -> the function (the current directory is importable, as with ``python -m``)."""
    mod_name, sep, fn_name = spec.partition(":")
    if not sep or not mod_name or not fn_name:
        raise ValueError(expected("--factory", "'module:function'", spec))
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    fn = getattr(importlib.import_module(mod_name), fn_name)
    if not callable(fn):
        raise TypeError(expected(f"--factory {spec}", "a callable returning a Pipeline", type(fn).__name__))
    return fn  # type: ignore[no-any-return]


def _one_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".replace("\n", " ")


def _refuse(kind: str, line: str, code: int) -> int:
    print(f"zephon-ref ckpt check: {kind}: {line}", file=sys.stderr)
    return code


def cmd_check(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = sys.stdout if out is None else out
    # the state first: reading it runs no user code
    if not os.path.isfile(args.state):
        what = "does not exist" if not os.path.lexists(args.state) else "is not a file"
        return _refuse(
            "missing",
            f"state missing: STATE: expected a pickled state file, received {args.state!r}, which {what}",
            EXIT_MISSING,
        )
    try:
        with open(args.state, "rb") as fh:
            state = pickle.load(fh)  # noqa: S301 - the user's own checkpoint file
    except Exception as exc:  # noqa: BLE001 - unreadable input of any kind: one line
        return _refuse("corrupt", f"state unreadable: {args.state}: expected a pickled state dict, received "
                       f"bytes that do not unpickle ({_one_line(exc)})", EXIT_UNREADABLE)
    if not isinstance(state, Mapping):
        return _refuse(
            "corrupt",
            f"state unreadable: {expected(args.state, 'a pickled state dict', type(state).__name__)}",
            EXIT_UNREADABLE,
        )
    try:
        factory = load_factory(args.factory)
    except Exception as exc:  # noqa: BLE001 - any failure to import user code is reported in one line
        return _refuse("usage error", f"factory unusable: {_one_line(exc)}", EXIT_FACTORY)
    try:
        report = check_state(state, factory, show=args.show, limit=args.limit)
    except StateFormatError as exc:
        return _refuse("corrupt", f"state unreadable: {_one_line(exc)}", EXIT_UNREADABLE)
    except StateMismatchError as exc:
        return _refuse("mismatch", f"inconsistent: {_one_line(exc)}", EXIT_MISMATCH)
    except ZephonRefError as exc:
        return _refuse("failed", f"inconsistent: {_one_line(exc)}", EXIT_INCONSISTENT)
    except Exception as exc:  # noqa: BLE001 - a factory that fails when called: one line, no traceback
        return _refuse("usage error", f"factory unusable: {_one_line(exc)}", EXIT_FACTORY)
    report.render(out)
    return EXIT_OK if report.consistent else EXIT_INCONSISTENT


def add_check_parser(sub: Any) -> argparse.ArgumentParser:
    """Attach ``check STATE.pkl --factory module:function`` to a subparsers object."""
    p: argparse.ArgumentParser = sub.add_parser(
        "check", help="is a pickled zephon (or zephon_ref) engine state consistent, and what must come next")
    p.add_argument("state", help="pickled state dict (zephon 0.2.0 Pipeline.checkpoint() or zephon_ref's)")
    p.add_argument("--factory", required=True, help="module:function returning the zephon_ref Pipeline")
    p.add_argument("--show", type=int_at_least(0), default=0,
                   help="also print the first N items of the continuation (default 0)")
    p.add_argument("--limit", type=int_at_least(1), default=DEFAULT_LIMIT,
                   help=f"items to search for the replay targets (default {DEFAULT_LIMIT})")
    p.set_defaults(func=cmd_check)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = OneLineArgumentParser(prog="zephon-ref ckpt", description="judge a checkpoint state")
    add_check_parser(parser.add_subparsers(dest="ckpt_command", required=True))
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    rc: int = args.func(args)
    return rc


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())

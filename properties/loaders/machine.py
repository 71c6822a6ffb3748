"""The generic properties, as one Hypothesis state machine per (adapter, property), and a runner.

Theory of operation
-------------------
A machine draws a configuration from the adapter's space, computes (once per
configuration) the *reference*: the flattened stream of an uninterrupted run over all
epochs, and then plays a training loop against the loader: ``read`` some yields,
``save`` a state (the suite keeps a byte snapshot of it), ``restore`` one of the saved
states into a fresh object (the delivered stream rolls back to where that state was
taken, as a trainer's does), and the property's own rules.  Every yield is checked as it
arrives; at the end the run is drained and checked whole.

What each property checks (PROPERTIES holds the one-line statements):

* ``uninterrupted``: two uninterrupted runs are the same, every epoch (a block of
  ``epoch_spec.length`` items of the flattened stream) holds each item once, and the run
  ends after ``epochs`` epochs;
* ``resume``: read / save / restore in any order; the delivered stream is always a prefix
  of the reference and ends equal to it (cuts within an epoch, across epochs and exactly
  at an epoch's end: ``read_to_epoch_end`` aims at those);
* ``no_skip_dup``: the same moves; every epoch block of the delivered stream holds each
  item once (order free);
* ``state_after_restore``: restore, read 0-3 yields, save, restore that state at once;
* ``restore_twice``: one state restored into two fresh objects reads the same, and the
  state object is byte-identical before and after each restore;
* ``initial_state``: a state read from a loader before anything was consumed, and restores
  into a loader built (and, where the API allows, started) before its state is loaded;
* ``workers``: restore under another worker count: ``exact`` continues the reference,
  ``set`` keeps every epoch whole, ``refuse`` must raise (silent acceptance passes only if
  nothing was skipped or repeated);
* ``counters``: the loader's ``epoch`` / ``items_in_epoch`` agree with the delivered
  stream after every move (at an exact epoch end both ``(e, length)`` and ``(e+1, 0)``
  are accepted).

A failing check raises :class:`LoaderPropertyFailure` with the configuration, the moves
so far (the cut sequence) and the first wrong item; Hypothesis shrinks both.  An
exception from the library inside a move is a failure too (it names the move).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import io
import os
import pickle
import traceback
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.errors import Flaky
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    precondition,
    rule,
    run_state_machine_as_test,
)

from properties.loaders.core import (
    KNOBS,
    EpochSpec,
    LoaderAdapter,
    LoaderConfig,
    LoaderRun,
    Refused,
    dataset_ids,
)
from sim.executor import alarm

__all__ = ["PROPERTIES", "LoaderPropertyFailure", "PropertyResult", "check_property", "config_strategy",
           "machine_for", "reference_stream"]

PROPERTIES: dict[str, str] = {
    "uninterrupted": "two uninterrupted runs are equal; every epoch holds each item once "
    "(or the documented subset)",
    "resume": "restoring at any cut (within, across and exactly at the end of epochs) continues the "
    "uninterrupted stream",
    "no_skip_dup": "through any sequence of restores every epoch holds each item once",
    "state_after_restore": "a state taken right after a restore (before and after reading more) "
    "resumes exactly",
    "restore_twice": "one state restored twice gives the same stream both times; restore does not "
    "change the state",
    "initial_state": "a state read before anything was consumed, and a loader built, started, asked for "
    "its state or iterated before its state is loaded, resume exactly",
    "workers": "another worker count on restore: the same data where documented, refused (or harmless) "
    "where not",
    "counters": "the loader's own counters (epoch, items in epoch) agree with what it delivered",
    "serialised": "a state sent through the serialisation the library documents (torch.save, JSON, ...) "
    "resumes exactly",
}

#: properties that check only what they are about, not the data: a lost or repeated item is resume's and
#: no_skip_dup's finding, and reported here first it hid the counter or state-aliasing failure (datasets'
#: counters reported the shuffle-buffer repeat, item 11 of docs/loaders.md, not its counter's bug)
OWN_CHECKS_ONLY = ("counters", "restore_twice")

_MAX_READ = 4  # yields per read move
#: seconds one move may take before it counts as hung (worker processes that never answer)
MOVE_TIMEOUT = float(os.environ.get("ZEPHON_LOADERS_MOVE_TIMEOUT", "180"))


class MoveTimeout(Exception):
    """A move did not return within MOVE_TIMEOUT seconds."""


def _deadline(seconds: float) -> contextlib.AbstractContextManager[None]:
    """Raise MoveTimeout in the main thread after ``seconds`` (no-op elsewhere or when 0;
    :func:`sim.executor.alarm`)."""
    return alarm(seconds, lambda: MoveTimeout(f"no answer within {seconds:.0f} s"))


class LoaderPropertyFailure(AssertionError):
    """A property does not hold: carries the configuration, the moves and the first wrong item."""

    def __init__(self, prop: str, cfg: LoaderConfig | None, steps: Sequence[str], detail: str,
                 first_wrong: Mapping[str, Any] | None = None) -> None:
        self.prop, self.cfg, self.steps, self.detail = prop, cfg, list(steps), detail
        self.first_wrong = dict(first_wrong) if first_wrong else None
        lines = [f"{prop}: {detail}", f"  config: {cfg.describe() if cfg else '?'}", "  moves:"]
        lines += [f"    {s}" for s in self.steps] or ["    (none)"]
        if self.first_wrong:
            lines.append(f"  first wrong item: {self.first_wrong}")
        super().__init__("\n".join(lines))

    def as_dict(self) -> dict[str, Any]:
        return {"property": self.prop, "detail": self.detail,
                "config": dataclasses.asdict(self.cfg) if self.cfg else None,
                "config_text": self.cfg.describe() if self.cfg else None,
                "moves": self.steps, "first_wrong": self.first_wrong}


def config_strategy(adapter: LoaderAdapter) -> st.SearchStrategy[LoaderConfig]:
    """Configurations from the adapter's space; unsupported ones are filtered out.

    ``space`` maps knobs to the values they may take; or ``space["variant"]`` maps each
    variant to its own such mapping (knobs a variant does not name keep their defaults), which
    keeps the filter from rejecting most draws of an adapter whose variants take different knobs."""
    space = dict(adapter.space)
    variants = space.get("variant")
    per = {str(v): dict(sub) for v, sub in variants.items()} if isinstance(variants, Mapping) else {"": space}
    for sub in per.values():
        unknown = sorted(set(sub) - set(KNOBS))
        if unknown:
            raise ValueError(f"{adapter.name}.space: expected knobs among {list(KNOBS)}, received {unknown}")

    def one(v: str) -> st.SearchStrategy[LoaderConfig]:
        parts = {k: st.sampled_from(list(vals)) for k, vals in per[v].items()}
        if v:
            parts["variant"] = st.just(v)
        return st.builds(LoaderConfig, **parts)

    return st.sampled_from(sorted(per, key=list(per).index)).flatmap(one).filter(
        lambda c: adapter.unsupported(c) is None)


def space_values(adapter: LoaderAdapter, cfg: LoaderConfig, knob: str) -> list[Any]:
    """The values ``knob`` may take in ``cfg``'s variant."""
    variants = adapter.space.get("variant")
    sub = variants.get(cfg.variant, {}) if isinstance(variants, Mapping) else adapter.space
    return list(sub.get(knob, (getattr(cfg, knob),)))


def _canonical(x: Any) -> Any:
    """A value-only form of a state: mappings as sorted items (key order is not content), sequences
    as tuples, arrays and tensors as (dtype, shape, bytes)."""
    if isinstance(x, Mapping):
        return ("map", tuple(sorted(((repr(k), _canonical(v)) for k, v in x.items()), key=lambda kv: kv[0])))
    if isinstance(x, (list, tuple)):
        return ("seq", tuple(_canonical(v) for v in x))
    if hasattr(x, "detach") and hasattr(x, "numpy"):  # a torch tensor
        x = x.detach().cpu().numpy()
    if hasattr(x, "tobytes") and hasattr(x, "dtype"):  # a numpy array
        return ("array", str(x.dtype), tuple(getattr(x, "shape", ())), x.tobytes())
    return x


def _snapshot(state: Any) -> bytes:
    """Bytes that change when the state's content changes (not when only its key order does)."""
    try:
        return pickle.dumps(_canonical(state), protocol=4)
    except Exception:  # noqa: BLE001 - an unpicklable state is still comparable by its repr
        return repr(state).encode()


def _flat(yields: Sequence[Sequence[int]]) -> list[int]:
    return [int(x) for y in yields for x in y]


def reference_stream(adapter: LoaderAdapter, cfg: LoaderConfig, *, limit: int | None = None) -> list[int]:
    """The flattened stream of one uninterrupted run (at most ``limit`` items: a loader that
    does not end is cut there)."""
    length = max(adapter.epoch_spec(cfg).length, cfg.size)
    limit = limit if limit is not None else length * (cfg.epochs + 1) + 8
    run = adapter.build(cfg)
    out: list[int] = []
    try:
        while len(out) <= limit:
            got = run.next(8)
            out += _flat(got)
            if len(got) < 8:
                break
    finally:
        run.close()
    return out


@dataclass
class _Record:
    """Shared by every machine of one property check: the reference cache and counts."""

    cache: dict[LoaderConfig, list[int]]
    started: int = 0
    first_failure_at: int | None = None
    notes: Counter[str] = field(default_factory=Counter)
    #: machine runs Hypothesis may spend shrinking after the first failing one (None: no bound)
    shrink_runs: int | None = None
    shrink_stopped: bool = False  # the bound was reached: shrinking stopped there


def _move(fn: Callable[..., None]) -> Callable[..., None]:
    """Marks the machine busy while a move runs: if the move raises, teardown does not drain (the
    first error stays the one reported)."""
    import functools

    @functools.wraps(fn)
    def wrapped(self: Any, *args: Any, **kwargs: Any) -> None:
        outer = self.busy
        self.busy = True
        fn(self, *args, **kwargs)
        self.busy = outer

    return wrapped


def machine_for(adapter: LoaderAdapter, prop: str, record: _Record) -> type[RuleBasedStateMachine]:
    if prop not in PROPERTIES:
        raise ValueError(f"property: expected one of {list(PROPERTIES)}, received {prop!r}")
    cfgs = config_strategy(adapter)
    P = prop
    primed_ok = bool(getattr(adapter, "primed_ok", False))
    preps: tuple[str, ...] = tuple(getattr(adapter, "preps", ()))

    class LoaderMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            record.started += 1
            self.cfg: LoaderConfig | None = None
            self.run: LoaderRun | None = None
            self.yields: list[list[int]] = []
            self.flat: list[int] = []
            #: (position, state as the library returned it, its bytes, the config, the yields delivered
            #: up to it, a deep copy taken at once: what a checkpoint file written then holds)
            self.saved: list[tuple[int, Any, bytes, LoaderConfig, list[list[int]], Any]] = []
            self.busy = False  # a move is under way (teardown does not drain after a move raised)
            self.steps: list[str] = []
            self.exact = True  # the reference order applies (False after a 'set' worker change)
            self.lossy = False  # a documented lossy resume happened: only repeats are checked
            self.cuts: list[int] = []  # where the lossy restores of the current timeline cut it
            self.ended = False
            self.last = ""  # the last move's kind: a restore right after a restore adds nothing

        # -- helpers ------------------------------------------------------------------------------
        def fail(self, detail: str, first_wrong: Mapping[str, Any] | None = None) -> None:
            if record.first_failure_at is None:
                record.first_failure_at = record.started
            wrong = dict(first_wrong or {})
            with contextlib.suppress(Exception):  # the witness is a help, never a second failure
                if self.cfg is not None and self.flat and "witness" not in wrong:
                    wrong["witness"] = self.witness()
            raise LoaderPropertyFailure(P, self.cfg, self.steps, detail, wrong or None)

        def witness(self) -> str:
            """What the delivered stream did to the data, per epoch: items lost, repeated or reordered
            against the uninterrupted run (what a user of the checkpoint would see)."""
            assert self.cfg is not None
            ref, L = self.ref(), max(self.spec.length, 1)
            universe = Counter(dataset_ids(self.cfg))
            out = []
            upto = max(len(ref), len(self.flat)) if self.ended else len(self.flat)
            for e in range(0, upto, L):
                got, want = self.flat[e:e + L], ref[e:e + L]
                if not want:
                    out.append(f"after the run's end: {got}")
                    break
                c = Counter(got)
                repeated = sorted((c - universe).elements())
                complete = len(got) == len(want) or self.ended
                lost = sorted((Counter(want) - c).elements()) if complete else []
                skipped = [] if complete else sorted((Counter(want[:len(got)]) - c).elements())
                if repeated or lost:
                    out.append(f"epoch {e // L}: lost {lost}, repeated {repeated}")
                elif skipped:
                    out.append(f"epoch {e // L} so far: {skipped} skipped (not delivered where the "
                               f"uninterrupted run has them)")
                elif got != want[:len(got)]:
                    out.append(f"epoch {e // L}: same items, reordered ({got} instead of {want[:len(got)]})")
            return "; ".join(out) or "no item lost, repeated or reordered so far"

        def call(self, what: str, fn: Callable[[], Any]) -> Any:
            try:
                with _deadline(MOVE_TIMEOUT):
                    return fn()
            except MoveTimeout as exc:
                self.fail(f"{what} hung: {exc}")
            except LoaderPropertyFailure:
                raise
            except Refused:
                raise
            except Exception as exc:  # noqa: BLE001 - the library raising inside a move is a finding
                tb = traceback.extract_tb(exc.__traceback__)
                where = f" at {tb[-1].filename.rsplit('/', 3)[-1]}:{tb[-1].lineno}" if tb else ""
                self.fail(f"{what} raised {type(exc).__name__}: {str(exc)[:300]}{where}")

        @property
        def spec(self) -> EpochSpec:
            assert self.cfg is not None
            spec = adapter.epoch_spec(self.cfg)
            if spec.length < 0:  # "as long as the uninterrupted run" (a subset the library decides)
                spec = dataclasses.replace(spec, length=len(self.ref()) // max(self.cfg.epochs, 1))
            return spec

        def ref(self) -> list[int]:
            assert self.cfg is not None
            if self.cfg not in record.cache:
                record.cache[self.cfg] = self.call(
                    "an uninterrupted run", lambda: reference_stream(adapter, self.cfg)
                )
            return record.cache[self.cfg]

        def where(self, pos: int) -> str:
            L = self.spec.length or 1
            return f"epoch {pos // L}, item {pos % L}"

        def deliver(self, got: list[list[int]], asked: int | None) -> None:
            self.last = "read" if got else "empty"  # an empty read moved nothing: restore again is allowed
            start = len(self.flat)
            self.yields += got
            self.flat += _flat(got)
            if asked is not None and len(got) < asked:
                self.ended = True
            self.check(start)

        def check(self, start: int) -> None:
            """Check the items from ``start`` on, and the end if the run ended."""
            assert self.cfg is not None
            if P in OWN_CHECKS_ONLY:
                return
            if self.lossy:
                self.check_no_repeat()
                return
            if P == "no_skip_dup" or not self.exact:
                self.check_epochs(final=self.ended)
                return
            ref = self.ref()
            for i in range(start, len(self.flat)):
                if i >= len(ref):
                    self.fail(f"an item after the end of the uninterrupted stream ({len(ref)} items)",
                              {"position": i, "where": self.where(i), "expected": "end", "got": self.flat[i]})
                if self.flat[i] != ref[i]:
                    self.fail(
                        "the stream differs from the uninterrupted run",
                        {"position": i, "where": self.where(i), "expected": ref[i], "got": self.flat[i]},
                    )
            if self.ended and len(self.flat) < len(ref):
                i = len(self.flat)
                self.fail(f"the stream ended early after {i} of {len(ref)} items",
                          {"position": i, "where": self.where(i), "expected": ref[i], "got": "end"})

        def check_no_repeat(self) -> None:
            """After a documented lossy resume: no item more often than the run holds it, nothing
            invented, the run no longer than ``epochs`` epochs."""
            assert self.cfg is not None
            universe = Counter(dataset_ids(self.cfg))
            seen: Counter[int] = Counter()
            E = self.cfg.epochs
            for j, x in enumerate(self.flat):
                seen[x] += 1
                if x not in universe:
                    self.fail("an item that is not in the dataset", {"position": j, "got": x})
                if seen[x] > universe[x] * E:
                    self.fail(f"item {x} delivered {seen[x]} times in a run of {E} epoch(s) (a lossy resume "
                              f"is documented, a repeating one is not)", {"position": j, "got": x})
            if len(self.flat) > self.spec.length * E:
                self.fail(f"the run delivered {len(self.flat)} items, more than {self.spec.length * E}")
            L = self.spec.length
            if len(self.cuts) == 1 and L and self.cuts[0] // L == E - 1:
                # one lossy restore, in the last epoch: what follows the cut may lose items of that
                # epoch, never repeat one delivered before the cut
                cut = self.cuts[0]
                before, after = Counter(self.flat[(E - 1) * L:cut]), Counter(self.flat[cut:])
                again = sorted((before + after - universe).elements())
                if again:
                    self.fail(f"items {again} delivered before the cut come again after the restore, in the "
                              f"same (last) epoch (a lossy resume is documented, a repeating one is not)",
                              {"position": cut, "where": self.where(cut), "repeated": again})

        def check_epochs(self, *, final: bool) -> None:
            assert self.cfg is not None
            spec, ids = self.spec, dataset_ids(self.cfg)
            universe = Counter(ids)
            L = spec.length
            for e in range(0, max(len(self.flat), 1), max(L, 1)):
                block = self.flat[e:e + L]
                seen: Counter[int] = Counter()
                for j, x in enumerate(block):
                    seen[x] += 1
                    if x not in universe:
                        self.fail(
                            "an item that is not in the dataset",
                            {"position": e + j, "where": self.where(e + j), "got": x},
                        )
                    if seen[x] > universe[x]:
                        self.fail(
                            f"item {x} delivered twice in one epoch",
                            {"position": e + j, "where": self.where(e + j), "got": x, "duplicate_of": x},
                        )
                if len(block) == L and not spec.subset and seen != universe:
                    missing = sorted((universe - seen).elements())
                    self.fail(f"epoch {e // max(L, 1)} misses {missing}",
                              {"position": e, "where": self.where(e), "missing": missing})
            if final:
                want = L * self.cfg.epochs
                if len(self.flat) < want:
                    self.fail(f"the run ended after {len(self.flat)} of {want} items",
                              {"position": len(self.flat), "where": self.where(len(self.flat)), "got": "end"})
                if len(self.flat) > want:
                    self.fail(f"the run delivered {len(self.flat)} items, more than {want}",
                              {"position": want, "where": self.where(want), "got": self.flat[want]})

        def check_counters(self) -> None:
            if self.run is None or P != "counters":
                return
            c = self.call("counters()", self.run.counters)
            if not c:
                return
            L = self.spec.length
            if not L:  # every epoch empty (drop_last over fewer items than a batch): nothing to count
                return
            pos = len(self.flat)
            e, k = divmod(pos, L)
            ok = {(e, k)}
            if k == 0 and pos > 0:
                ok.add((e - 1, L))
            got_e, got_k = c.get("epoch"), c.get("items_in_epoch")
            if got_e is None:
                ok_k = {kk for _, kk in ok}
                if got_k is not None and got_k not in ok_k:
                    self.fail(f"the loader counts {got_k} items in this epoch, {k} were delivered",
                              {"position": pos, "where": self.where(pos), "counters": dict(c)})
                return
            if got_k is None:
                if got_e not in {ee for ee, _ in ok}:
                    self.fail(f"the loader says epoch {got_e}, the stream is in epoch {e}",
                              {"position": pos, "where": self.where(pos), "counters": dict(c)})
                return
            if (got_e, got_k) not in ok:
                self.fail(f"the loader counts epoch {got_e}, item {got_k}; {self.where(pos)} was delivered",
                          {"position": pos, "where": self.where(pos), "counters": dict(c)})

        def open(self, cfg: LoaderConfig, state: Any = None, primed: bool = False,
                 prep: str | None = None) -> LoaderRun:
            if self.run is not None:
                self.run.close()
                self.run = None
            kw: dict[str, Any] = {"primed": primed}
            if prep is not None:
                kw["prep"] = prep
            run: LoaderRun = self.call("build" + (" (restore)" if state is not None else ""),
                                       lambda: adapter.build(cfg, state, **kw))
            return run

        def rollback(self, yields: list[list[int]]) -> None:
            """The trainer goes back to the checkpoint: the stream is what was delivered when it was
            taken (a state saved in a timeline that a later restore abandoned keeps its own)."""
            self.yields = [list(y) for y in yields]
            self.flat = _flat(self.yields)
            self.ended = False

        def pick(self, i: int) -> tuple[int, Any, bytes, LoaderConfig, list[list[int]], Any]:
            return self.saved[-1 - (i % len(self.saved))]

        def restored(self, i: int, *, primed: bool = False, prep: str | None = None) -> None:
            """Restore saved state ``i`` into a fresh object.  Every property but restore_twice restores
            from a fresh deep copy of the state as it was when returned (a checkpoint loaded from disk
            again), so a library that writes into the state object it was given, or into one it returned
            earlier, fails restore_twice and only there; the data properties still see what the data did."""
            pos, state, snap, cfg, upto, pristine = self.pick(i)
            if P == "restore_twice":
                given = state
                if _snapshot(state) != snap:
                    self.fail("the state object changed after it was returned (written by the loader that "
                              "returned it, or by one restored from it)", {"position": pos})
            elif P == "serialised":
                given = self.call("deserialise the state", lambda: _deserialise(adapter, pristine))
            else:
                given = copy.deepcopy(pristine)
            self.run = self.open(cfg, given, primed, prep)
            self.cfg = cfg
            if self.spec.lossy_resume:
                self.lossy = True
                self.cuts = [c for c in self.cuts if c < pos] + [pos]
            if P == "restore_twice" and _snapshot(state) != snap:
                self.fail("restore changed the state object it was given", {"position": pos})
            self.rollback(upto)
            self.last = "restore"
            how = " into a primed loader" if primed else ""
            how += {None: "", "state": " into a loader whose state was read first",
                    "used": " into a loader that already iterated"}.get(prep, f" ({prep})")
            self.steps.append(f"restore(state saved at {self.where(pos)}){how}")
            self.check_counters()

        # -- moves --------------------------------------------------------------------------------
        @initialize(cfg=cfgs)
        @_move
        def setup(self, cfg: LoaderConfig) -> None:
            self.cfg = cfg
            if P == "uninterrupted":
                a = self.ref()
                b = self.call("a second uninterrupted run", lambda: reference_stream(adapter, cfg))
                self.steps.append("two uninterrupted runs")
                for i, (x, y) in enumerate(zip(a, b, strict=False)):
                    if x != y:
                        self.fail("two uninterrupted runs differ", {"position": i, "where": self.where(i),
                                                                    "first_run": x, "second_run": y})
                if len(a) != len(b):
                    self.fail(f"two uninterrupted runs have {len(a)} and {len(b)} items")
                self.flat = list(a)
                self.ended = True
                self.check_epochs(final=True)
                return
            self.run = self.open(cfg)
            if P == "initial_state":
                self.save()

        @precondition(lambda self: self.run is not None and not self.ended)
        @rule(n=st.integers(1, _MAX_READ))
        @_move
        def read(self, n: int) -> None:
            assert self.run is not None
            run = self.run
            got = self.call(f"next({n})", lambda: run.next(n))
            self.steps.append(f"read({n}) -> {_flat(got)}")
            self.deliver(got, n)
            self.check_counters()

        @precondition(lambda self: self.run is not None and not self.ended and P in (
            "resume", "no_skip_dup", "counters", "initial_state", "state_after_restore", "serialised",
            "restore_twice"))
        @rule()
        @_move
        def read_to_epoch_end(self) -> None:
            """Read to the end of the epoch: a cut exactly there."""
            self.to_epoch_end(0)

        @precondition(lambda self: self.run is not None and not self.ended and P in (
            "resume", "no_skip_dup", "counters", "serialised", "restore_twice"))
        @rule(beyond=st.integers(1, 3))
        @_move
        def read_into_next_epoch(self, beyond: int) -> None:
            """Read to the end of the epoch, then ``beyond`` items into the next: a cut early in a later
            epoch, where a library that keeps only the first epoch's order shows."""
            self.to_epoch_end(beyond)

        def to_epoch_end(self, beyond: int) -> None:
            assert self.run is not None
            run = self.run
            L = self.spec.length or 1
            moved = []
            while not self.ended:
                got = self.call("next(1)", lambda: run.next(1))
                moved += _flat(got)
                self.deliver(got, 1)
                if len(self.flat) % L == 0:
                    break
            more: list[int] = []
            for _ in range(beyond):
                if self.ended:
                    break
                got = self.call("next(1)", lambda: run.next(1))
                more += _flat(got)
                self.deliver(got, 1)
            self.steps.append(f"read to the end of the epoch -> {moved}"
                              + (f", then {beyond} more -> {more}" if beyond else ""))
            self.check_counters()

        # a second save at the same place adds nothing (restore_twice restores one state twice)
        @precondition(lambda self: self.run is not None and P != "uninterrupted"
                      and not (self.saved and self.saved[-1][0] == len(self.flat) and self.last != "read"))
        @rule()
        @_move
        def save(self) -> None:
            assert self.run is not None and self.cfg is not None
            run = self.run
            state = self.call("state()", run.state)
            snap = _snapshot(state)
            if P == "serialised":
                pristine = self.call("serialise the state", lambda: _serialise(adapter, state))
            else:
                pristine = self.call("copy.deepcopy(state)", lambda: copy.deepcopy(state))
            self.saved.append(
                (len(self.flat), state, snap, self.cfg, [list(y) for y in self.yields], pristine)
            )
            self.steps.append(f"save() at {self.where(len(self.flat))}")

        @precondition(lambda self: self.run is not None and not self.ended and P not in (
            "uninterrupted", "workers"))
        @rule(n=st.integers(1, _MAX_READ))
        @_move
        def read_and_save(self, n: int) -> None:
            """A training step then a checkpoint: the cut users make most, mid-epoch."""
            self.read(n)
            if not self.ended:
                self.save()

        @precondition(
            lambda self: (
                bool(self.saved) and self.last != "restore"
                and P in ("resume", "no_skip_dup", "counters", "initial_state", "state_after_restore",
                          "serialised")
            )
        )
        @rule(i=st.integers(0, 7))
        @_move
        def restore(self, i: int) -> None:
            self.restored(i)

        # only in initial_state: a loader touched before the load is its own bug class, and drawn in
        # resume it would be the one failure that property reports, hiding the plain-restore ones
        @precondition(lambda self: bool(self.saved) and bool(preps) and P == "initial_state")
        @rule(i=st.integers(0, 7), k=st.integers(0, 7))
        @_move
        def restore_prepared(self, i: int, k: int) -> None:
            """Restore into a loader the user already touched: its state read first (``state``), or
            iterated (``used``), as far as the library's docs allow (``adapter.preps``)."""
            self.restored(i, prep=preps[k % len(preps)])

        @precondition(lambda self: bool(self.saved) and P == "initial_state" and primed_ok)
        @rule(i=st.integers(0, 7))
        @_move
        def restore_primed(self, i: int) -> None:
            self.restored(i, primed=True)

        @precondition(lambda self: bool(self.saved) and P == "state_after_restore")
        @rule(i=st.integers(0, 7), r=st.integers(0, 3))
        @_move
        def restore_read_save_restore(self, i: int, r: int) -> None:
            self.restored(i)
            if r:
                self.read(r)
            self.save()
            self.restored(0)  # the state just saved

        @precondition(lambda self: bool(self.saved) and P == "restore_twice")
        @rule(i=st.integers(0, 7), m=st.integers(1, 6))
        @_move
        def restore_twice(self, i: int, m: int) -> None:
            pos, state, snap, cfg, _, _ = self.pick(i)
            if _snapshot(state) != snap:
                self.fail("the state object changed after it was returned (written by the loader that "
                          "returned it, or by one restored from it)",
                          {"position": pos})
            first = self.open(cfg, state)
            a = _flat(self.call(f"next({m}) after the first restore", lambda: first.next(m)))
            first.close()
            if _snapshot(state) != snap:
                self.fail("restore changed the state object it was given", {"position": pos})
            self.restored(i)
            assert self.run is not None
            second = self.run
            got = self.call(f"next({m}) after the second restore", lambda: second.next(m))
            b = _flat(got)
            self.steps[-1] = f"restore twice (state saved at {self.where(pos)}), next({m}) -> {a} then {b}"
            if a != b:
                j = next(
                    (k for k, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
                )
                self.fail("the same state restored twice gives two streams",
                          {"position": pos + j, "where": self.where(pos + j),
                           "first_restore": a[j] if j < len(a) else "end",
                           "second_restore": b[j] if j < len(b) else "end"})
            self.deliver(got, m)

        @precondition(lambda self: bool(self.saved) and P == "workers")
        @rule(i=st.integers(0, 7), data=st.data())
        @_move
        def restore_other_workers(self, i: int, data: st.DataObject) -> None:
            pos, _, snap, cfg, upto, pristine = self.pick(i)
            state = copy.deepcopy(pristine)
            others = [w for w in space_values(adapter, cfg, "workers") if w != cfg.workers]
            others = [w for w in others if adapter.unsupported(dataclasses.replace(cfg, workers=w)) is None]
            # only counts whose epochs hold the same items: where they differ (drop_last drops each
            # worker's partial batch), a stream cut under one count and read on under another has no
            # epoch to compare with (the items before the cut were the old count's). Drawn, the
            # difference itself was reported as a failure (torchdata, 0 -> 2 workers: "the run delivered
            # 2 items, more than 0", a loader that refused nothing because the run was already over)
            others = [w for w in others
                      if adapter.epoch_spec(dataclasses.replace(cfg, workers=w)) == adapter.epoch_spec(cfg)]
            if not others:
                self.restored(i)
                return
            w = data.draw(st.sampled_from(others), label="workers")
            cfg2 = dataclasses.replace(cfg, workers=w)
            mode = adapter.worker_change(cfg)
            try:
                run = adapter.build(cfg2, state)
                got = run.next(_MAX_READ)
            except Exception as exc:  # noqa: BLE001 - a refusal is what 'refuse' asks for
                self.steps.append(f"restore(state saved at {self.where(pos)}) under workers={w}: refused "
                                  f"({type(exc).__name__})")
                if mode != "refuse" and not isinstance(exc, Refused):
                    self.fail(
                        f"restoring under workers={w} (documented: {mode}) raised {type(exc).__name__}: "
                        f"{str(exc)[:200]}"
                    )
                record.notes[f"workers {cfg.workers}->{w}: refused"] += 1
                self.restored(i)
                return
            if self.run is not None:
                self.run.close()
            self.run, self.cfg = run, cfg2
            self.rollback(upto)
            self.steps.append(f"restore(state saved at {self.where(pos)}) under workers={w}: accepted")
            if mode == "refuse":
                # a restore that reads nothing (a state after the run's end) never reaches the iter()
                # where a library checks the worker count: counted apart, it is no silent acceptance
                how = "accepted silently" if got else "accepted, nothing delivered"
                record.notes[f"workers {cfg.workers}->{w}: {how}"] += 1
            if mode != "exact":
                self.exact = False
            self.deliver(got, _MAX_READ)

        def teardown(self) -> None:
            try:
                if self.run is not None and not self.ended and self.cfg is not None and not self.busy:
                    run = self.run
                    guard = (self.spec.length + 2) * (self.cfg.epochs + 1) + 8
                    moved: list[int] = []
                    while not self.ended and guard > 0:
                        got = self.call("next(8) (draining)", lambda: run.next(8))
                        moved += _flat(got)
                        self.deliver(got, 8)
                        guard -= 8
                    if not self.ended:
                        self.fail("the run does not end")
            finally:
                if self.run is not None:
                    self.run.close()
                    self.run = None

    LoaderMachine.__name__ = f"{adapter.name.replace('-', '_')}_{prop}"
    LoaderMachine.__qualname__ = LoaderMachine.__name__
    return LoaderMachine


@dataclass
class PropertyResult:
    loader: str
    prop: str
    status: str  # "pass", "FAIL", "declared" (documented unsupported), "n/a"
    examples: int = 0
    to_failure: int | None = None
    reason: str = ""
    failure: dict[str, Any] | None = None
    notes: dict[str, int] = field(default_factory=dict)
    #: shrinking stopped at the ``shrink_runs`` bound (the witness is the smallest found by then)
    shrink_bounded: bool = False

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def check_property(
    adapter: LoaderAdapter,
    prop: str,
    *,
    examples: int = 30,
    steps: int = 10,
    derandomize: bool = True,
    cache: dict[LoaderConfig, list[int]] | None = None,
    shrink_runs: int | None = None,
) -> PropertyResult:
    """Run one property against one adapter and say what happened (never raises for a failing
    property: the result carries it).  ``shrink_runs``: at most that many machine runs spent shrinking
    a failure (None: Hypothesis' own limits)."""
    if shrink_runs is not None and shrink_runs < 1:
        raise ValueError(f"shrink_runs: expected None or an int >= 1, received {shrink_runs!r}")
    declared = dict(adapter.declared())
    if prop in declared:
        return PropertyResult(adapter.name, prop, "declared", reason=declared[prop])
    record = _Record(cache if cache is not None else {}, shrink_runs=shrink_runs)
    machine = machine_for(adapter, prop, record)
    budget = 1 if prop == "uninterrupted" else steps
    s = settings(max_examples=examples, stateful_step_count=budget, deadline=None, database=None,
                 derandomize=derandomize, print_blob=False,
                 suppress_health_check=list(HealthCheck), report_multiple_bugs=False,
                 # no "explain" phase: it traces every line of the library under test (sys.settrace),
                 # which made a shrunk failure take minutes to report
                 phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink])
    try:
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf), _bounded_shrinking(record):
            run_state_machine_as_test(machine, settings=s)
    except LoaderPropertyFailure as exc:
        return PropertyResult(adapter.name, prop, "FAIL", record.started, record.first_failure_at,
                              exc.detail, exc.as_dict(), dict(record.notes), record.shrink_stopped)
    except Flaky as exc:
        return PropertyResult(adapter.name, prop, "FAIL", record.started, record.first_failure_at,
                              f"not reproducible (Hypothesis: {type(exc).__name__}): the loader's output "
                              f"changed between identical runs: {str(exc)[:300]}", None, dict(record.notes))
    except BaseException as exc:
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        return PropertyResult(adapter.name, prop, "FAIL", record.started, record.first_failure_at,
                              f"{type(exc).__name__}: {str(exc)[:400]}", None, dict(record.notes))
    return PropertyResult(adapter.name, prop, "pass", record.started, None, "", None, dict(record.notes))


@contextlib.contextmanager
def _bounded_shrinking(record: _Record) -> Any:
    """While it is open, Hypothesis' engine ends a run once ``record.shrink_runs`` test calls followed the
    first failure, the way it ends one after its own ``MAX_SHRINKS`` successful shrinks
    (``exit_with(ExitReason.max_shrinks)``): the failure reported is the smallest found by then, replayed
    as usual.  Hypothesis has no public setting for this (its only bounds are 500 shrinks and 300 s);
    calls are counted, not timed, so the bound and the witness are the same on a loaded machine as on
    an idle one.  The hook wraps ``ConjectureRunner.test_function`` (Hypothesis 6.x) and is removed on
    exit."""
    if record.shrink_runs is None:
        yield
        return
    from hypothesis.internal.conjecture import engine

    original = engine.ConjectureRunner.test_function
    budget = record.shrink_runs

    def test_function(self: Any, data: Any) -> None:
        original(self, data)
        first = getattr(self, "first_bug_found_at", None)
        if first is not None and self.call_count - first >= budget and not self.ignore_limits:
            record.shrink_stopped = True
            self.exit_with(engine.ExitReason.max_shrinks)

    engine.ConjectureRunner.test_function = test_function  # type: ignore[method-assign]
    try:
        yield
    finally:
        engine.ConjectureRunner.test_function = original  # type: ignore[method-assign]


def _serialise(adapter: LoaderAdapter, state: Any) -> Any:
    """The state through the serialisation its library documents (``adapter.serialise``, else
    ``torch.save`` into bytes where torch imports, else pickle)."""
    own = getattr(adapter, "serialise", None)
    if own is not None:
        return own(state)
    try:
        import torch
    except ImportError:
        return pickle.dumps(state)
    buf = io.BytesIO()
    torch.save(state, buf)
    return buf.getvalue()


def _deserialise(adapter: LoaderAdapter, blob: Any) -> Any:
    own = getattr(adapter, "deserialise", None)
    if own is not None:
        return own(blob)
    try:
        import torch
    except ImportError:
        return pickle.loads(blob)
    # torch.load's default (weights_only=True since torch 2.6), as a user's resume calls it: a state that
    # only loads with weights_only=False is a finding, not something to paper over here
    return torch.load(io.BytesIO(blob))


def copy_state(state: Any) -> Any:
    """A deep copy (what a checkpoint round trip through torch.save would give)."""
    return copy.deepcopy(state)

"""The simulation kernel: integer virtual time and one event queue.

Theory of operation
-------------------
:class:`Kernel` owns the simulator's clock and nothing else.  Time is an
integer count of ticks (what a tick means is the caller's business; the world
model will say microseconds).  Work is an *event*: a zero-argument callable to
run at a tick, with an integer priority and a label.  Events wait in one binary
heap ordered by the key ``(time, priority, seq)``:

* ``time``      the tick at which the event runs;
* ``priority``  smaller runs first among events of the same tick;
* ``seq``       a counter the kernel hands out at :meth:`Kernel.schedule`, so
                events with equal time and priority run in the order they were
                scheduled (FIFO), and no two keys are ever equal.

Without choices, a new event whose ``(time, priority)`` is that of the entries already
in a FIFO beside the heap (or any event, when the FIFO is empty) joins the FIFO instead;
seqs only grow, so the FIFO is in key order, and the next event is the smaller of the
heap's top and the FIFO's head: the same order, at O(1) for the thousands of events a
scale round queues for one tick.  Every path but run-to-idle first moves the FIFO onto
the heap.

Invariants kept here:

1. Time never goes backwards: scheduling before ``now`` raises
   :class:`SchedulingInPast`, and the kernel asserts that every event it pops
   is at or after ``now``.
2. Every event that runs is recorded as a :class:`TraceEntry`
   ``(time, priority, seq, label)`` *before* its action runs (so a failing
   action's event is in the trace), and folded into a SHA-256 of the canonical
   trace: :meth:`Kernel.fingerprint`.  The canonical form is one line per
   event, ``"<time> <priority> <seq> <json label>\\n"`` after a version header;
   it holds integers and strings only, never floats, ``id()`` or ``hash()``,
   so equal runs give equal fingerprints in any process on any machine.  Lines
   are hashed in batches (the digest of a concatenation is that of its parts fed
   in order); :meth:`Kernel.fingerprint` folds in whatever is pending first.
3. A cancelled event never runs and is never traced.  Cancellation is lazy
   (the heap entry's action is cleared and the entry is dropped when it reaches
   the top), so cancel is O(1).

Ties as decisions.  Given a :class:`~sim.choices.Choices`, the kernel stops
breaking ties of equal ``(time, priority)`` by ``seq`` alone: it keeps the
live events of the current ``(time, priority)`` group in ``seq`` order and asks
``choices.choose("kernel/tie", range(k))`` which of the k runs next (index 0,
where Hypothesis shrinks, is FIFO).  Events scheduled for the group's key while
it runs join it; one scheduled for now with a smaller priority runs before the
rest of it; a cancelled member leaves it.  That makes "which participant steps
next" a decision that the seeded, Hypothesis, replay and exhaustive backends
all control.  Without choices, the order is exactly ``(time, priority, seq)``.

What may not live here: anything about ranks, storage, faults or pipelines;
wall-clock time; randomness other than through the choices object.
"""

from __future__ import annotations

import hashlib
import heapq
import json
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from zephon_ref.errors import ConfigError, ConfigTypeError, ContractError, expected

from .choices import Choices

__all__ = [
    "TIE_LABEL",
    "EventHandle",
    "Kernel",
    "RunOutcome",
    "SchedulingInPast",
    "TraceEntry",
]

#: The decision label under which the kernel asks its choices to break ties.
TIE_LABEL = "kernel/tie"

_FINGERPRINT_HEADER = b"zephon-sim-trace/1\n"
_LABEL_CACHE_LIMIT = 4096  # labels are kinds of event, few; a run that makes each one unique stays bounded
_FOLD_EVERY = 1024  # trace lines hashed per digest update (fingerprint() folds the rest)

# A heap entry is a list [time, priority, seq, action, label, tied]; the action
# slot is cleared (None) once the event has run or been cancelled; ``tied`` is
# True while the entry waits in the kernel's tie group instead of the heap.
# Lists compare element-wise and seq is unique, so comparison never reaches the
# action.
_TIME, _PRIO, _SEQ, _ACTION, _LABEL, _TIED = 0, 1, 2, 3, 4, 5


class SchedulingInPast(ContractError):
    """An event (or a run limit) was asked for at a tick before ``now``."""

    def __init__(self, message: str, *, now: int, requested: int) -> None:
        super().__init__(message)
        self.now = now
        self.requested = requested


@dataclass(frozen=True, slots=True)
class TraceEntry:
    """One event that ran: its key and its label."""

    time: int
    priority: int
    seq: int
    label: str


@dataclass(frozen=True, slots=True)
class EventHandle:
    """What :meth:`Kernel.schedule` returns; pass it to :meth:`Kernel.cancel`."""

    seq: int
    time: int
    priority: int
    label: str
    _entry: list[Any] = field(compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class RunOutcome:
    """Why :meth:`Kernel.run` returned.

    ``reason`` is ``"idle"`` (no event left), ``"until"`` (the next event is
    after the time limit), ``"stop"`` (the stop predicate answered true) or
    ``"budget"`` (``max_events`` events ran and more are waiting).
    """

    reason: Literal["idle", "until", "stop", "budget"]
    events: int
    now: int


def _check_int(what: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigTypeError(expected(what, "an int", value))
    return value


class Kernel:
    """Integer virtual time and an event heap keyed ``(time, priority, seq)``.

    ``keep_trace=False`` keeps only the running fingerprint and the event
    count, for long runs whose trace would not fit in memory.
    """

    __slots__ = (
        "_bucket",
        "_cancelled_in_heap",
        "_choices",
        "_digest",
        "_events_run",
        "_heap",
        "_keep_trace",
        "_label_bytes",
        "_now",
        "_pending",
        "_seq",
        "_tied",
        "_trace",
    )

    def __init__(self, *, start: int = 0, choices: Choices | None = None, keep_trace: bool = True) -> None:
        self._now = _check_int("Kernel start", start)
        self._choices = choices
        self._keep_trace = keep_trace
        self._heap: list[list[Any]] = []
        # Without choices: a FIFO of entries that share one (time, priority), beside the heap.
        # The next event is the smaller of the heap's top and the FIFO's head, so the order is
        # exactly (time, priority, seq); a round whose thousands of participants all act one
        # tick later queues them in O(1) each instead of sifting them through a deep heap.
        self._bucket: deque[list[Any]] = deque()
        # With choices: the live events of the current (time, priority) group, in seq order.
        self._tied: list[list[Any]] = []
        self._seq = 0
        self._cancelled_in_heap = 0
        self._events_run = 0
        self._trace: list[tuple[int, int, int, str]] = []
        self._digest = hashlib.sha256(_FINGERPRINT_HEADER)
        self._label_bytes: dict[str, bytes] = {}
        # Canonical trace lines not yet folded into _digest: hashing the concatenation in
        # batches gives the digest that hashing line by line gives (SHA-256 is a stream).
        self._pending: list[bytes] = []

    # -- observation -----------------------------------------------------------------

    @property
    def now(self) -> int:
        """The current tick: the time of the event running or last run."""
        return self._now

    @property
    def events_run(self) -> int:
        """How many events have run so far."""
        return self._events_run

    @property
    def pending(self) -> int:
        """How many scheduled events have neither run nor been cancelled."""
        return len(self._heap) + len(self._bucket) + len(self._tied) - self._cancelled_in_heap

    @property
    def trace(self) -> tuple[TraceEntry, ...]:
        """Every event that ran, in order (empty when ``keep_trace=False``)."""
        return tuple(TraceEntry(t, p, s, label) for t, p, s, label in self._trace)

    def fingerprint(self) -> str:
        """SHA-256 (hex) of the canonical trace so far."""
        self._fold()
        return self._digest.hexdigest()

    def peek_time(self) -> int | None:
        """The tick of the next event to run, or None when nothing is pending."""
        if self._tied:
            return int(self._tied[0][_TIME])  # the group's time is now, never after the heap's top
        self._unbucket()
        self._drop_cancelled_top()
        return self._heap[0][_TIME] if self._heap else None

    # -- scheduling ------------------------------------------------------------------

    def _due(self, action: object, at: int | None, after: int | None, priority: object, label: object) -> int:
        """The tick of the common call (exactly one of at= / after= an int not in the past, an int
        priority, a str label, a callable) in one test, or -1: any other call takes
        :meth:`schedule`'s checks, which refuse exactly what this test does not let through."""
        if at is None:
            time = self._now + after if type(after) is int and after >= 0 else -1
        else:
            time = at if after is None and type(at) is int and at >= self._now else -1
        return time if time >= 0 and type(priority) is int and type(label) is str and callable(action) else -1

    def schedule(
        self,
        action: Callable[[], object],
        *,
        at: int | None = None,
        after: int | None = None,
        priority: int = 0,
        label: str,
    ) -> EventHandle:
        """Run ``action`` at tick ``at``, or ``after`` ticks from now (give exactly one).

        An event scheduled for ``now`` from inside a running event runs later
        in this same tick (after the events already queued with its priority).
        """
        time = self._due(action, at, after, priority, label)
        if time >= 0:
            seq = self._seq
            self._seq = seq + 1
            entry: list[Any] = [time, priority, seq, action, label, False]
            self._push(entry)
            return EventHandle(seq, time, priority, label, entry)
        if (at is None) == (after is None):
            raise ConfigError(expected("Kernel.schedule", "exactly one of at= or after=", (at, after)))
        if at is None:
            delay = _check_int("Kernel.schedule after", after)
            if delay < 0:
                raise SchedulingInPast(
                    expected("Kernel.schedule after", "a delay >= 0", delay),
                    now=self._now,
                    requested=self._now + delay,
                )
            time = self._now + delay
        else:
            time = _check_int("Kernel.schedule at", at)
            if time < self._now:
                raise SchedulingInPast(
                    expected("Kernel.schedule at", f"a tick >= now ({self._now})", time),
                    now=self._now,
                    requested=time,
                )
        _check_int("Kernel.schedule priority", priority)
        if not isinstance(label, str):
            raise ConfigTypeError(expected("Kernel.schedule label", "a str", label))
        if not callable(action):
            raise ConfigTypeError(expected("Kernel.schedule action", "a callable", action))
        seq = self._seq
        self._seq = seq + 1
        entry = [time, priority, seq, action, label, False]
        self._push(entry)
        return EventHandle(seq, time, priority, label, entry)

    def post(
        self,
        action: Callable[[], object],
        *,
        at: int | None = None,
        after: int | None = None,
        priority: int = 0,
        label: str,
    ) -> None:
        """:meth:`schedule` for an event its caller will never cancel: the same event (same
        key, same seq, same checks and refusals), without building a handle."""
        time = self._due(action, at, after, priority, label)
        if time >= 0:
            seq = self._seq
            self._seq = seq + 1
            bucket = self._bucket
            if self._choices is None and (
                not bucket or (bucket[0][_TIME] == time and bucket[0][_PRIO] == priority)
            ):
                bucket.append([time, priority, seq, action, label, False])  # _push, inlined
            else:
                heapq.heappush(self._heap, [time, priority, seq, action, label, False])
            return
        self.schedule(action, at=at, after=after, priority=priority, label=label)  # refuses, or the rare case

    def cancel(self, handle: EventHandle) -> bool:
        """Cancel a pending event; False if it already ran or was already cancelled."""
        entry = handle._entry
        if entry[_ACTION] is None:
            return False
        entry[_ACTION] = None
        if entry[_TIED]:
            entry[_TIED] = False
            tied = self._tied
            del tied[next(i for i, other in enumerate(tied) if other is entry)]
        else:
            self._cancelled_in_heap += 1
        return True

    # -- running ---------------------------------------------------------------------

    def step(self) -> TraceEntry | None:
        """Run the next event; None (and nothing happens) when none is pending."""
        entry = self._pop_next()
        if entry is None:
            return None
        self._fire(entry)
        return TraceEntry(entry[_TIME], entry[_PRIO], entry[_SEQ], entry[_LABEL])

    def run(
        self,
        *,
        until: int | None = None,
        stop: Callable[[], bool] | None = None,
        max_events: int | None = None,
    ) -> RunOutcome:
        """Run events in order until one of the limits says stop.

        * ``until``: run every event at a tick <= ``until``, then move ``now``
          to ``until`` (reason ``"until"``, or ``"idle"`` if nothing is left);
        * ``stop``: asked before each event; true ends the run (``"stop"``);
        * ``max_events``: a budget of events for this call (``"budget"``).

        With none given, runs until the queue is empty (``"idle"``).
        """
        if until is not None:
            _check_int("Kernel.run until", until)
            if until < self._now:
                raise SchedulingInPast(
                    expected("Kernel.run until", f"a tick >= now ({self._now})", until),
                    now=self._now,
                    requested=until,
                )
        if max_events is not None and _check_int("Kernel.run max_events", max_events) < 0:
            raise ConfigError(expected("Kernel.run max_events", "a budget >= 0", max_events))
        ran = 0
        if until is None and stop is None and max_events is None and self._choices is None:
            # Run to idle without choices: the loop below, with its limits and tie groups
            # left out (the same events in the same (time, priority, seq) order).
            # _fire inlined (one event's bookkeeping, in the same order); keep it in step.
            heap, pop = self._heap, heapq.heappop
            bucket = self._bucket
            popleft = bucket.popleft
            pending, labels, trace = self._pending, self._label_bytes, self._trace
            keep = self._keep_trace
            while True:
                if bucket:
                    top = pop(heap) if heap and heap[0] < bucket[0] else popleft()
                elif heap:
                    top = pop(heap)
                else:
                    break
                time, priority, seq, action, label, _ = top
                if action is None:
                    self._cancelled_in_heap -= 1
                    continue
                assert time >= self._now, (time, self._now)
                self._now = time
                top[_ACTION] = None
                self._events_run += 1
                if keep:
                    trace.append((time, priority, seq, label))
                encoded = labels.get(label)
                if encoded is None:
                    encoded = self._encode_label(label)
                pending.append(b"%d %d %d %s\n" % (time, priority, seq, encoded))
                if len(pending) >= _FOLD_EVERY:
                    self._fold()
                action()
                ran += 1
            return RunOutcome("idle", ran, self._now)
        while True:
            if stop is not None and stop():
                return RunOutcome("stop", ran, self._now)
            next_time = self.peek_time()
            if next_time is None:
                if until is not None:
                    self._now = until
                return RunOutcome("idle", ran, self._now)
            if until is not None and next_time > until:
                self._now = until
                return RunOutcome("until", ran, self._now)
            if max_events is not None and ran >= max_events:
                return RunOutcome("budget", ran, self._now)
            entry = self._pop_next()
            assert entry is not None  # peek_time just saw a live event
            self._fire(entry)
            ran += 1

    # -- internals -------------------------------------------------------------------

    def _push(self, entry: list[Any]) -> None:
        """Queue a new entry: on the FIFO if it is empty or the entry has its (time,
        priority) (seqs only grow, so the FIFO stays in key order), else on the heap."""
        bucket = self._bucket
        if self._choices is None and (
            not bucket or (bucket[0][_TIME] == entry[_TIME] and bucket[0][_PRIO] == entry[_PRIO])
        ):
            bucket.append(entry)
        else:
            heapq.heappush(self._heap, entry)

    def _unbucket(self) -> None:
        """Move the FIFO's entries onto the heap (every path but run-to-idle reads the heap only)."""
        bucket, heap = self._bucket, self._heap
        while bucket:
            heapq.heappush(heap, bucket.popleft())

    def _drop_cancelled_top(self) -> None:
        heap = self._heap
        while heap and heap[0][_ACTION] is None:
            heapq.heappop(heap)
            self._cancelled_in_heap -= 1

    def _pop_next(self) -> list[Any] | None:
        if self._choices is None:
            self._unbucket()
            self._drop_cancelled_top()
            return heapq.heappop(self._heap) if self._heap else None
        return self._pop_tied()

    def _pop_tied(self) -> list[Any] | None:
        """The next event when ties are decisions: one of the (time, priority) group."""
        assert self._choices is not None
        heap = self._heap
        tied = self._tied
        self._drop_cancelled_top()
        if tied and heap and (heap[0][_TIME], heap[0][_PRIO]) < (tied[0][_TIME], tied[0][_PRIO]):
            # An event scheduled for now with a smaller priority goes before the
            # rest of the group: give the group back to the heap and regroup.
            for entry in tied:
                entry[_TIED] = False
                heapq.heappush(heap, entry)
            tied.clear()
        if not tied:
            if not heap:
                return None
            first = heapq.heappop(heap)
            first[_TIED] = True
            tied.append(first)
            self._drop_cancelled_top()
        time, priority = tied[0][_TIME], tied[0][_PRIO]
        # Every entry with the group's key that reached the heap since the group
        # formed was scheduled later, so it has a larger seq: appending keeps
        # the group in seq (FIFO) order, and index 0 is the FIFO choice.
        while heap and heap[0][_TIME] == time and heap[0][_PRIO] == priority:
            entry = heapq.heappop(heap)
            entry[_TIED] = True
            tied.append(entry)
            self._drop_cancelled_top()
        index = 0 if len(tied) == 1 else self._choices.choose(TIE_LABEL, range(len(tied)))
        chosen = tied.pop(index)
        chosen[_TIED] = False
        return chosen

    def _fire(self, entry: list[Any]) -> None:
        time, priority, seq, action, label, _ = entry
        # Time never goes backwards: schedule refuses the past, so the heap top
        # is always at or after now.
        assert time >= self._now, (time, self._now)
        self._now = time
        entry[_ACTION] = None
        self._events_run += 1
        if self._keep_trace:
            self._trace.append((time, priority, seq, label))
        encoded = self._label_bytes.get(label)
        if encoded is None:
            encoded = self._encode_label(label)
        pending = self._pending
        pending.append(b"%d %d %d %s\n" % (time, priority, seq, encoded))
        if len(pending) >= _FOLD_EVERY:
            self._fold()
        action()

    def _encode_label(self, label: str) -> bytes:
        encoded = json.dumps(label, ensure_ascii=True).encode("ascii")
        if len(self._label_bytes) < _LABEL_CACHE_LIMIT:
            self._label_bytes[label] = encoded
        return encoded

    def _fold(self) -> None:
        """Hash the pending trace lines into the digest (in order) and forget them."""
        pending = self._pending
        if pending:
            self._digest.update(b"".join(pending))
            pending.clear()

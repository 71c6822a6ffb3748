"""The kernel: (time, priority, seq) order, cancel, refusal of the past, run limits, trace and fingerprint."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.choices import ReplayChoices, SeededChoices
from sim.explore import explore
from sim.kernel import TIE_LABEL, EventHandle, Kernel, SchedulingInPast, TraceEntry
from zephon_ref.errors import ConfigError, ConfigTypeError, ContractError


def _recorder(kernel: Kernel, log: list[str]) -> Callable[..., EventHandle]:
    def add(at: int, label: str, priority: int = 0) -> EventHandle:
        return kernel.schedule(lambda: log.append(label), at=at, priority=priority, label=label)

    return add


def test_events_run_in_time_then_priority_then_sequence_order() -> None:
    kernel = Kernel()
    log: list[str] = []
    add = _recorder(kernel, log)
    add(5, "t5")
    add(3, "t3-p1", priority=1)
    add(3, "t3-p0-first")
    add(3, "t3-p-1", priority=-1)
    add(3, "t3-p0-second")
    add(0, "t0")
    outcome = kernel.run()
    assert log == ["t0", "t3-p-1", "t3-p0-first", "t3-p0-second", "t3-p1", "t5"]
    assert (outcome.reason, outcome.events, outcome.now) == ("idle", 6, 5)
    assert [(e.time, e.priority, e.seq) for e in kernel.trace] == [
        (0, 0, 5),
        (3, -1, 3),
        (3, 0, 2),
        (3, 0, 4),
        (3, 1, 1),
        (5, 0, 0),
    ]


def test_an_event_scheduled_for_now_runs_later_in_the_same_tick() -> None:
    kernel = Kernel()
    log: list[str] = []

    def first() -> None:
        log.append("first")
        kernel.schedule(lambda: log.append("spawned"), after=0, label="spawned")
        kernel.schedule(lambda: log.append("later"), after=2, label="later")

    kernel.schedule(first, at=1, label="first")
    kernel.schedule(lambda: log.append("queued"), at=1, label="queued")
    kernel.run()
    assert log == ["first", "queued", "spawned", "later"]
    assert kernel.now == 3


def test_cancel_stops_a_pending_event_once_and_leaves_no_trace() -> None:
    kernel = Kernel()
    log: list[str] = []
    add = _recorder(kernel, log)
    keep = add(1, "keep")
    drop = add(2, "drop")
    add(3, "tail")
    assert kernel.pending == 3
    assert kernel.cancel(drop) is True
    assert kernel.cancel(drop) is False
    assert kernel.pending == 2
    kernel.run()
    assert log == ["keep", "tail"]
    assert kernel.cancel(keep) is False  # already ran
    assert [e.label for e in kernel.trace] == ["keep", "tail"]
    assert kernel.pending == 0


def test_cancel_at_the_head_of_the_queue_is_skipped_by_peek_and_step() -> None:
    kernel = Kernel()
    head = kernel.schedule(lambda: None, at=1, label="head")
    kernel.schedule(lambda: None, at=4, label="next")
    kernel.cancel(head)
    assert kernel.peek_time() == 4
    assert kernel.step() == TraceEntry(4, 0, 1, "next")
    assert kernel.step() is None
    assert kernel.peek_time() is None


def test_scheduling_in_the_past_is_refused_and_changes_nothing() -> None:
    kernel = Kernel(start=10)
    with pytest.raises(SchedulingInPast) as info:
        kernel.schedule(lambda: None, at=9, label="late")
    assert (info.value.now, info.value.requested) == (10, 9)
    assert isinstance(info.value, ContractError) and isinstance(info.value, RuntimeError)
    assert "now (10)" in str(info.value)
    with pytest.raises(SchedulingInPast):
        kernel.schedule(lambda: None, after=-1, label="negative")
    with pytest.raises(SchedulingInPast):
        kernel.run(until=3)
    assert kernel.pending == 0 and kernel.now == 10
    kernel.schedule(lambda: None, at=10, label="now is fine")
    assert kernel.pending == 1


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({}, ConfigError),
        ({"at": 1, "after": 1}, ConfigError),
        ({"at": 1.5}, ConfigTypeError),
        ({"at": True}, ConfigTypeError),
        ({"after": 1, "priority": 0.5}, ConfigTypeError),
        ({"after": 1, "label": 3}, ConfigTypeError),
    ],
)
def test_schedule_arguments_are_checked(kwargs: dict[str, object], error: type[Exception]) -> None:
    kernel = Kernel()
    kwargs = {"label": "x", **kwargs}
    with pytest.raises(error):
        kernel.schedule(lambda: None, **kwargs)  # type: ignore[arg-type]
    with pytest.raises(ConfigTypeError):
        kernel.schedule("not callable", at=1, label="x")  # type: ignore[arg-type]
    assert kernel.pending == 0


def test_run_limits_until_stop_and_budget() -> None:
    kernel = Kernel()
    log: list[int] = []
    for t in range(10):
        kernel.schedule(partial(log.append, t), at=t, label=f"e{t}")
    assert kernel.run(until=3).reason == "until"
    assert log == [0, 1, 2, 3] and kernel.now == 3
    outcome = kernel.run(max_events=2)
    assert (outcome.reason, outcome.events, outcome.now) == ("budget", 2, 5)
    outcome = kernel.run(stop=lambda: len(log) >= 8)
    assert (outcome.reason, outcome.events, outcome.now) == ("stop", 2, 7)
    outcome = kernel.run(until=100)
    assert (outcome.reason, outcome.events, outcome.now) == ("idle", 2, 100)
    with pytest.raises(ConfigError):
        kernel.run(max_events=-1)


def test_an_action_that_raises_is_traced_and_the_kernel_goes_on() -> None:
    kernel = Kernel()

    def boom() -> None:
        raise ValueError("boom")

    kernel.schedule(boom, at=1, label="boom")
    kernel.schedule(lambda: None, at=2, label="after")
    with pytest.raises(ValueError, match="boom"):
        kernel.run()
    assert [e.label for e in kernel.trace] == ["boom"]
    assert kernel.run().events == 1
    assert kernel.events_run == 2


def _fingerprint(labels: list[tuple[int, int, str]], *, keep_trace: bool = True) -> str:
    kernel = Kernel(keep_trace=keep_trace)
    for at, priority, label in labels:
        kernel.schedule(lambda: None, at=at, priority=priority, label=label)
    kernel.run()
    return kernel.fingerprint()


def test_fingerprint_is_a_function_of_the_trace() -> None:
    base = [(1, 0, "a"), (2, 0, "b\nwith newline"), (2, 1, "c")]
    assert _fingerprint(base) == _fingerprint(list(base))
    assert _fingerprint(base) == _fingerprint(base, keep_trace=False)
    assert _fingerprint(base) != _fingerprint([(1, 0, "a"), (3, 0, "b\nwith newline"), (2, 1, "c")])
    assert _fingerprint(base) != _fingerprint([(1, 0, "a"), (2, 0, "b"), (2, 1, "c")])
    assert _fingerprint(base) != _fingerprint([(1, 0, "a"), (2, 2, "b\nwith newline"), (2, 1, "c")])
    assert Kernel().fingerprint() != _fingerprint(base)
    assert len(_fingerprint(base)) == 64
    assert Kernel(keep_trace=False).trace == ()


@settings(max_examples=60, deadline=None, database=None)
@given(
    st.lists(st.tuples(st.integers(0, 6), st.integers(-1, 1), st.integers(0, 3), st.booleans()), max_size=25),
    st.none() | st.integers(0, 2**32),
)
def test_time_never_goes_backwards_and_order_is_the_key(
    plan: list[tuple[int, int, int, bool]], seed: int | None
) -> None:
    # Each planned event may spawn a follow-up `delay` ticks later; some are cancelled.
    # With a seed, ties are decisions: the roots' (time, priority) order still holds.
    kernel = Kernel(choices=None if seed is None else SeededChoices(seed))
    handles = []
    for i, (at, priority, delay, cancel) in enumerate(plan):

        def act(delay: int = delay, i: int = i) -> None:
            kernel.schedule(lambda: None, after=delay, label=f"child{i}")

        handles.append((kernel.schedule(act, at=at, priority=priority, label=f"e{i}"), cancel))
    for handle, cancel in handles:
        if cancel:
            kernel.cancel(handle)
    kernel.run()
    trace = kernel.trace
    times = [e.time for e in trace]
    assert times == sorted(times)
    roots = [(e.time, e.priority, e.seq) for e in trace if e.label.startswith("e")]
    if seed is None:
        assert roots == sorted(roots)
    else:
        assert [r[:2] for r in roots] == sorted(r[:2] for r in roots)
    assert len(roots) == sum(1 for *_, cancel in plan if not cancel)


def test_ties_become_decisions_when_the_kernel_has_choices() -> None:
    def run(choices: SeededChoices | ReplayChoices | None) -> list[str]:
        kernel = Kernel(choices=choices)
        log: list[str] = []
        for name in ("a", "b", "c"):
            kernel.schedule(partial(log.append, name), at=1, label=name)
        kernel.schedule(lambda: log.append("late"), at=2, label="late")
        kernel.run()
        return log

    assert run(None) == ["a", "b", "c", "late"]
    orders = set()
    for seed in range(40):
        choices = SeededChoices(seed)
        order = run(choices)
        assert order[-1] == "late"
        assert [(d.label, d.n) for d in choices.record] == [(TIE_LABEL, 3), (TIE_LABEL, 2)]
        assert run(ReplayChoices(choices.record)) == order
        orders.add(tuple(order))
    assert len(orders) == 6


def test_exhaustive_exploration_of_tied_events_finds_every_order() -> None:
    def scenario(choices):  # type: ignore[no-untyped-def]
        kernel = Kernel(choices=choices)
        log: list[str] = []
        for name in ("a", "b", "c"):
            kernel.schedule(partial(log.append, name), at=0, label=name)
        kernel.schedule(lambda: log.append("x"), at=0, priority=1, label="x")
        kernel.run()
        return tuple(log)

    report = explore(scenario, is_final=lambda state: True)
    assert report.paths == 6 and report.terminal_states == 6 and report.ok


def _urgent_run(seed: int) -> list[str]:
    kernel = Kernel(choices=SeededChoices(seed))
    log: list[str] = []

    def make(name: str) -> None:
        def act() -> None:
            log.append(name)
            if name == "b":
                kernel.schedule(lambda: log.append("urgent"), after=0, priority=-1, label="urgent")
                kernel.schedule(lambda: log.append("joins"), after=0, label="joins")

        kernel.schedule(act, at=0, label=name)

    for name in ("a", "b", "c"):
        make(name)
    kernel.run()
    return log


def test_with_choices_a_smaller_priority_scheduled_now_cuts_into_the_tie_group() -> None:
    orders = set()
    for seed in range(20):
        log = _urgent_run(seed)
        assert log[log.index("b") + 1] == "urgent"
        assert sorted(log) == ["a", "b", "c", "joins", "urgent"]
        orders.add(tuple(log))
    assert len(orders) > 3


def test_with_choices_cancelling_a_member_of_the_tie_group_removes_the_option() -> None:
    seeded = SeededChoices(0)
    kernel = Kernel(choices=seeded)
    handles = [kernel.schedule(lambda: None, at=0, label=str(i)) for i in range(3)]
    kernel.schedule(lambda: None, at=1, label="later")
    kernel.step()  # the group {0, 1, 2} is formed and one of them ran; two wait in it
    ran = {e.label for e in kernel.trace}
    waiting = [h for h in handles if h.label not in ran]
    assert kernel.cancel(waiting[0]) and not kernel.cancel(waiting[0])
    assert kernel.pending == 2 and kernel.peek_time() == 0
    kernel.run()
    assert [e.label for e in kernel.trace][1:] == [waiting[1].label, "later"]
    assert [d.n for d in seeded.record] == [3]  # one option left after the cancel: no decision


def test_calls_outside_schedules_fast_path_keep_the_checked_behaviour() -> None:
    """schedule() takes plain int / str / callable calls in one test; everything else goes
    through the full checks: bools refused, int subclasses accepted, negative ticks ordered,
    and run() to idle skips cancelled entries and leaves nothing pending."""

    class Tick(int):
        pass

    kernel = Kernel(start=-5)
    log: list[str] = []
    kernel.schedule(lambda: log.append("b"), at=-2, label="b")
    kernel.schedule(lambda: log.append("a"), at=-3, priority=Tick(1), label="a")
    dropped = kernel.schedule(lambda: log.append("dropped"), after=Tick(1), label="dropped")
    kernel.schedule(lambda: log.append("c"), after=0, label="c")
    for bad in ({"after": True}, {"after": 1, "priority": True}, {"at": -9}):
        with pytest.raises((ConfigTypeError, SchedulingInPast)):
            kernel.schedule(lambda: None, label="x", **bad)  # type: ignore[arg-type]
    assert kernel.cancel(dropped)
    outcome = kernel.run()
    assert log == ["c", "a", "b"] and (outcome.reason, outcome.events, outcome.now) == ("idle", 3, -2)
    assert kernel.pending == 0 and kernel.peek_time() is None


def _by_hand(trace: tuple[TraceEntry, ...]) -> str:
    """The fingerprint as the module docstring defines it, one line per event, hashed here."""
    import hashlib
    import json

    h = hashlib.sha256(b"zephon-sim-trace/1\n")
    for e in trace:
        h.update(f"{e.time} {e.priority} {e.seq} {json.dumps(e.label, ensure_ascii=True)}\n".encode("ascii"))
    return h.hexdigest()


def test_the_fingerprint_hashes_every_line_however_they_are_batched() -> None:
    """The kernel hashes trace lines in batches; the digest must be the line-by-line one at
    any moment: mid-run from inside an action, after run() to idle, after step() and across
    several thousand events (more than one batch), with labels that need JSON escaping."""
    kernel = Kernel()
    seen: list[tuple[str, str]] = []

    def probe() -> None:
        seen.append((kernel.fingerprint(), _by_hand(kernel.trace)))

    for t in range(3000):
        kernel.schedule(probe if t in (0, 1023, 1024, 2500) else (lambda: None), at=t // 3,
                        priority=t % 2, label="é\n" if t % 7 == 0 else f"e{t % 5}")
    kernel.step()
    assert kernel.fingerprint() == _by_hand(kernel.trace)
    kernel.run()
    assert kernel.events_run == 3000 and len(seen) == 4
    assert all(mine == want for mine, want in seen)
    assert kernel.fingerprint() == _by_hand(kernel.trace)
    kernel.schedule(lambda: None, after=1, label="one more")
    kernel.run(until=kernel.now + 5)
    assert kernel.fingerprint() == _by_hand(kernel.trace)


def test_post_is_schedule_without_a_handle() -> None:
    """post() runs the same events in the same order with the same seqs (so the same
    fingerprint) as schedule(), and refuses the same calls, changing nothing."""
    def plan(kernel: Kernel, use_post: bool) -> list[str]:
        log: list[str] = []
        add = kernel.post if use_post else kernel.schedule
        for i, (at, prio) in enumerate([(3, 0), (1, 1), (1, 0), (2, -1), (1, 0)]):
            add(partial(log.append, f"a{i}"), at=at, priority=prio, label=f"a{i}")
        add(partial(log.append, "late"), after=4, label="late")
        return log

    a, b = Kernel(start=1), Kernel(start=1)
    la, lb = plan(a, False), plan(b, True)
    a.run()
    b.run()
    assert la == lb and a.trace == b.trace and a.fingerprint() == b.fingerprint()
    bad: list[dict[str, object]] = [{}, {"at": 1, "after": 1}, {"at": 1.5}, {"at": True}, {"after": -1},
                                    {"after": 1, "priority": 0.5}, {"after": 1, "label": 3}, {"at": 0}]
    for kwargs in bad:
        with pytest.raises((ConfigError, ConfigTypeError, SchedulingInPast)):
            b.post(lambda: None, **{"label": "x", **kwargs})  # type: ignore[arg-type]
    with pytest.raises(ConfigTypeError):
        b.post("not callable", at=10, label="x")  # type: ignore[arg-type]
    assert b.pending == 0 and b.fingerprint() == a.fingerprint()


@settings(max_examples=120, deadline=None, database=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 4),
            st.integers(-1, 1),
            st.lists(st.tuples(st.integers(0, 2), st.integers(-1, 1)), max_size=3),
            st.booleans(),
            st.booleans(),
        ),
        min_size=1,
        max_size=30,
    )
)
def test_run_to_idle_runs_exactly_the_key_order_whatever_the_queue(
        plan: list[tuple[int, int, list[tuple[int, int]], bool, bool]]) -> None:
    """Without choices, run() to idle keeps same-key events in a FIFO beside the heap; every
    event (roots and the children their actions post or schedule, some cancelled by an
    earlier event) must run in the order step() by step() gives (which reads the heap alone):
    at each moment the pending event with the smallest (time, priority, seq)."""

    def build() -> tuple[Kernel, list[int]]:
        kernel = Kernel()
        cancelled: list[int] = []
        handles: list[EventHandle] = []
        for i, (at, prio, kids, use_post, cancel_prev) in enumerate(plan):

            def act(kids: list[tuple[int, int]] = kids, i: int = i, cancel_prev: bool = cancel_prev) -> None:
                for j, (delay, p) in enumerate(kids):
                    (kernel.post if (i + j) % 2 else kernel.schedule)(lambda: None, after=delay, priority=p,
                                                                       label=f"c{i}.{j}")
                if cancel_prev and i + 1 < len(handles) and kernel.cancel(handles[i + 1]):
                    cancelled.append(handles[i + 1].seq)

            handles.append(kernel.schedule(act, at=at, priority=prio, label=f"e{i}"))
            if use_post:
                kernel.post(lambda: None, at=at, priority=prio, label=f"p{i}")
        return kernel, cancelled

    fast, cancelled = build()
    fast.run()
    times = [e.time for e in fast.trace]
    assert times == sorted(times) and not set(cancelled) & {e.seq for e in fast.trace}
    # the roots that nobody cancelled, all pending from the start, run in key order
    roots = [(e.time, e.priority, e.seq) for e in fast.trace if e.label[0] in "ep"]
    assert roots == sorted(roots)
    slow, _ = build()
    while slow.step() is not None:
        pass
    assert slow.trace == fast.trace and slow.fingerprint() == fast.fingerprint()
    assert fast.pending == 0 and slow.pending == 0

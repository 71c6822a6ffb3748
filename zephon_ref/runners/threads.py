"""The threads runner: a pump thread per operator and a worker pool for ``process_many``.

Theory of operation
-------------------
Each operator's accumulator stays serial on its own pump thread (the rules are
:class:`~zephon_ref.engine.stage.OpStage`'s); ``process_many`` fans out to a
shared pool and results are released in sequence order, so with
``deterministic=True`` the output equals the inline runner's, micro-batch for
micro-batch.  ``deterministic=False`` releases in completion order: faster, but
ordering and elastic resume are given up.  Every pump turns one input message
into exactly one output message, so the consumer knows how many admitted
micro-batches are still on their way (``in_flight``).

Every engine call — admission, delivery, eviction, checkpoints — happens on the consumer's
thread (the one iterating), so the engine needs no lock; the pumps run only their stage's
accumulator (serial, as :class:`~zephon_ref.engine.stage.OpStage` requires) and hand
``process_many`` to the pool.  Operators never call back into the engine (chunk mixtures
and end-of-data travel with the data).

Feeding (the engine's policy, :meth:`Engine.feed <zephon_ref.engine.core.Engine.feed>`): when
delivery is stuck the consumer admits while fewer than ``queue_size`` admitted messages are
on their way (every pump answers each message with one, so it knows how many are), then
waits for the last pump's next message:

* ``demand``: only for the lane the tail waits on; a lane is never fed more than
  ``queue_size`` items past the point where its next item appeared (the bound counts them:
  :func:`sim.invariants.inflight_bound`);
* ``round_robin`` (zephon's): round robin over the lanes, up to ``queue_size`` in flight.

The first queue holds at most ``queue_size`` messages, so a put never blocks; every admitted
message comes back, so the consumer never waits on a queue that nothing will fill (no
deadlock at a lane that needs more input than the queues hold, at a finished lane, at end of
data, where the close marker is one more message, or while a restored lane replays).

Threads, queues and the pool live here and nowhere else.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from zephon_ref.engine.core import Engine
from zephon_ref.engine.stage import Entries, OpStage

__all__ = ["ThreadsRunner"]


_DONE = object()


class ThreadsRunner:
    """A pump thread per operator and a shared worker pool for ``process_many``."""

    name = "threads"

    def __init__(self, *, workers: int = 4, queue_size: int = 8, deterministic: bool = True) -> None:
        self.workers = max(1, workers)
        self.queue_size = max(1, queue_size)
        self.deterministic = deterministic

    def run(self, engine: Engine) -> Iterator[Any]:
        """Drive a started engine to the end; yield its delivered items."""
        if not engine.started:
            raise RuntimeError("threads runner: expected a started engine (Engine.start()), "
                               "received a fresh one")
        stages = engine.stages
        qs: list[queue.Queue[Any]] = [queue.Queue(self.queue_size) for _ in range(len(stages) + 1)]
        stop = threading.Event()
        errors: list[BaseException] = []
        pool = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="zephon-ref-worker")

        def put(q: queue.Queue[Any], v: Any) -> bool:
            while not stop.is_set():
                try:
                    q.put(v, timeout=0.05)
                    return True
                except queue.Full:
                    continue
            return False

        def get(q: queue.Queue[Any]) -> Any:
            while not stop.is_set():
                try:
                    return q.get(timeout=0.05)
                except queue.Empty:
                    continue
            return _DONE

        def process(st: OpStage, entries: Entries) -> list[Any]:
            # one operator's process_many calls never overlap: they run one after another in a pool
            # worker (operators run beside each other, each in its own pump).  An operator may hold
            # an object that is not safe to share between threads, a Hugging Face fast tokenizer whose
            # truncation setting is state on the tokenizer: two concurrent tokenize_chat calls raced on
            # it and delivered 2 or 3 items where the inline runner delivers 1 (7 runs in 12,
            # tests/conformance/test_chat_owned_ranges.py case 33); zephon gives each worker its own copy.
            def run_all() -> list[Any]:
                out: list[Any] = []
                for control, elems in entries:  # in sequence order
                    out.extend(elems if control else st.op.process_many(list(elems)))
                return out

            future: Future[list[Any]] = pool.submit(run_all)
            return future.result()

        # Messages are (final, elements).  The final message of a stage carries the output
        # of its last input *and* of its close(), as one micro-batch: exactly the grouping
        # the inline runner produces at upstream close.
        def pump(i: int, st: OpStage) -> None:
            try:
                while True:
                    msg = get(qs[i])
                    if msg is _DONE:
                        return
                    final, batch = msg
                    if final:
                        put(qs[i + 1], (True, process(st, st.enqueue(batch) + st.close())))
                        return
                    if not put(qs[i + 1], (False, process(st, st.enqueue(batch)))):
                        return
            except BaseException as exc:  # noqa: BLE001 (handed to the consumer)
                errors.append(exc)
                put(qs[i + 1], (True, []))

        threads = [
            threading.Thread(target=pump, args=(i, st), name=f"zephon-ref-pump-{st.name}", daemon=True)
            for i, st in enumerate(stages)
        ]
        for t in threads:
            t.start()
        in_flight = 0  # messages admitted here and not yet back from the last pump
        try:
            while True:
                x = engine.deliver()
                if x is not None:
                    yield x
                    continue
                if engine.finished or errors:
                    break
                # invariant: in_flight < queue_size, so the first queue has room for every put
                while in_flight < self.queue_size and (msg := engine.feed(in_flight=in_flight)) is not None:
                    qs[0].put(msg)
                    in_flight += 1
                # invariant: delivery is stuck, so either something is on its way or the policy fed
                assert in_flight > 0, "threads runner: delivery waits, nothing in flight, nothing admitted"
                got = get(qs[-1])
                if got is _DONE:
                    break
                in_flight -= 1
                final, batch = got
                if errors:
                    break
                engine.offer(batch, final=final)
            if errors:
                raise errors[0]
            if not engine.finished:  # pragma: no cover - deliver() drains to the end once upstream is done
                raise AssertionError("engine: upstream done but the tail did not drain")
        finally:
            stop.set()
            for t in threads:
                t.join(timeout=5)
            pool.shutdown(wait=True, cancel_futures=True)

"""The threads runner: a pump thread per operator and a worker pool for ``process_many``.

Theory of operation
-------------------
Each operator's accumulator stays serial on its own pump thread (the rules are
:class:`~zephon_ref.engine.stage.OpStage`'s); ``process_many`` fans out to a
shared pool and results are released in sequence order, so with
``deterministic=True`` the output equals the inline runner's, micro-batch for
micro-batch.  ``deterministic=False`` releases in completion order: faster, but
ordering and elastic resume are given up.  The feeder pulls the engine's source
(admission happens under the engine lock); the consumer hands every output to
the engine's tail on its own thread.  Threads, queues and the pool live here and
nowhere else in the engine.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from zephon_ref.engine.stage import Entries, OpStage

__all__ = ["ThreadsRunner"]


_DONE = object()


class ThreadsRunner:
    """A pump thread per operator and a shared worker pool for ``process_many``."""

    name = "threads"

    def __init__(self, stages: list[OpStage], *, workers: int = 4, queue_size: int = 8,
                 deterministic: bool = True) -> None:
        self.stages = stages
        self.workers = max(1, workers)
        self.queue_size = max(1, queue_size)
        self.deterministic = deterministic

    def run(self, upstream: Iterable[Any]) -> Iterator[Any]:
        qs: list[queue.Queue[Any]] = [queue.Queue(self.queue_size) for _ in range(len(self.stages) + 1)]
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
            futures: list[Future[list[Any]] | list[Any]] = [
                elems if control else pool.submit(st.op.process_many, list(elems)) for control, elems in entries
            ]
            if not self.deterministic:
                return [x for f in futures for x in (f if isinstance(f, list) else f.result())]
            out: list[Any] = []
            for f in futures:  # release strictly in sequence order
                out.extend(f if isinstance(f, list) else f.result())
            return out

        # Messages are (final, elements).  The final message of a stage carries the output
        # of its last input *and* of its close(), as one micro-batch: exactly the grouping
        # the inline runner produces at upstream close.
        def feeder() -> None:
            try:
                for item in upstream:
                    if not put(qs[0], (False, [item])):
                        return
            except BaseException as exc:  # noqa: BLE001 (handed to the consumer)
                errors.append(exc)
            put(qs[0], (True, []))

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

        threads = [threading.Thread(target=feeder, name="zephon-ref-source", daemon=True)]
        threads += [threading.Thread(target=pump, args=(i, st), name=f"zephon-ref-pump-{st.name}", daemon=True)
                    for i, st in enumerate(self.stages)]
        for t in threads:
            t.start()
        try:
            while True:
                msg = get(qs[-1])
                if msg is _DONE:
                    break
                final, batch = msg
                if errors:
                    break
                yield from batch
                if final:
                    break
            if errors:
                raise errors[0]
        finally:
            stop.set()
            for t in threads:
                t.join(timeout=5)
            pool.shutdown(wait=True, cancel_futures=True)

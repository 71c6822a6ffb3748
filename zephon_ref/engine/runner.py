"""Runners: drive the operator chain over the source stream, serially or with threads.

Theory of operation
-------------------
:class:`OpStage` applies the runner contract of one operator to a micro-batch:
regular elements are collected and pushed through the accumulator
(``push_many``); each ready batch goes through ``process_many``; sentinels never
do.  At a sentinel the collected elements are pushed first, then:

* a **tombstone** passes through;
* an **end-of-data** announcement (first time per lane and component) calls
  ``on_source_exhausted`` and passes through;
* a **flush sentinel** for lane L at boundary b calls ``flush(reset=True,
  lane_id=L)``, emits the result, then the sentinel.  A lane still pending
  afterwards is a contract violation (ContractError naming operator and lane).
  The one allowed stall: ``Batch(drop_last=True)`` with data pending for L holds
  the sentinel back; every later push asks ``try_epoch_reset(b, L)`` and
  releases it once no buffered record of L predates b.

At upstream close every lane is flushed and stalled sentinels are released.
The output of one upstream element, concatenated over the ready batches, is the
next operator's input micro-batch: that grouping is part of the semantics, and
both runners produce exactly the same groups.

* :class:`InlineRunner` runs everything on the caller's thread.
* :class:`ThreadsRunner` runs one pump thread per operator (accumulators stay
  serial) and fans ``process_many`` out to a worker pool; results are released
  in sequence order, so with ``deterministic=True`` its output equals the inline
  runner's.  ``deterministic=False`` releases in completion order: faster, but
  ordering and elastic resume are given up.

Execution settings (runner, parallelism, queue sizes) never reach the data path.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from zephon_ref.errors import ContractError
from zephon_ref.ops.base import Accumulator, BaseOp, SourceExhaustion
from zephon_ref.ops.batch import Batch
from zephon_ref.types import (
    EOD_CONTINUES_TAG,
    EOD_FINAL_TAG,
    TAG_BOUNDARY_CID,
    TAG_SOURCE_EXHAUSTED,
    SampleRecord,
)

__all__ = ["InlineRunner", "OpStage", "ThreadsRunner", "is_sentinel", "make_runner"]


def is_sentinel(elem: Any) -> bool:
    return isinstance(elem, SampleRecord) and elem.meta.is_sentinel


class OpStage:
    """One operator with its accumulator and the runner contract around it."""

    def __init__(self, name: str, op: BaseOp, *, deterministic: bool, ctx: dict[str, Any]) -> None:
        self.name = name
        self.op = op
        self._exhaustion: dict[int, SourceExhaustion] = {}
        ctx = dict(ctx)
        ctx.setdefault("get_source_exhaustion", self._get_exhaustion)
        self.acc: Accumulator[Any] = op.accumulator(deterministic=deterministic, ctx=ctx)
        self.can_stall = isinstance(op, Batch) and op.drop_last
        self._stalled: dict[int, list[SampleRecord]] = {}
        self._seen_eod: set[tuple[int, int]] = set()

    def _get_exhaustion(self, lane: int) -> SourceExhaustion:
        return self._exhaustion.get(lane, SourceExhaustion())

    # Each returned entry is (is_control, elements): control entries bypass process_many.
    def enqueue(self, elems: Iterable[Any]) -> list[tuple[bool, list[Any]]]:
        out: list[tuple[bool, list[Any]]] = []
        regular: list[Any] = []
        for e in elems:
            if is_sentinel(e):
                if regular:
                    self._push(regular, out)
                    regular = []
                self._sentinel(e, out)
            else:
                regular.append(e)
        if regular:
            self._push(regular, out)
        return out

    def close(self) -> list[tuple[bool, list[Any]]]:
        out = [(False, b) for b, _ in self.acc.flush()]
        for lane in sorted(self._stalled):
            out.extend((True, [s]) for s in self._stalled.pop(lane))
        return out

    def _push(self, regular: list[Any], out: list[tuple[bool, list[Any]]]) -> None:
        out.extend((False, b) for b, _ in self.acc.push_many(regular))
        for lane in sorted(self._stalled):
            pending = self._stalled[lane]
            while pending and self.acc.try_epoch_reset(pending[0].meta.tags[TAG_BOUNDARY_CID], lane):
                out.append((True, [pending.pop(0)]))
            if not pending:
                del self._stalled[lane]

    def _sentinel(self, s: SampleRecord, out: list[tuple[bool, list[Any]]]) -> None:
        meta = s.meta
        lane = meta.lane_id
        if meta.tombstone:
            out.append((True, [s]))
            return
        if meta.is_eod_sentinel:
            comp = int(meta.tags[TAG_SOURCE_EXHAUSTED])
            if (lane, comp) in self._seen_eod:
                return
            self._seen_eod.add((lane, comp))
            ex = self._exhaustion.get(lane, SourceExhaustion())
            cont = bool(meta.tags.get(EOD_CONTINUES_TAG))
            self._exhaustion[lane] = SourceExhaustion(
                exhausted=ex.exhausted | {comp},
                continuing=ex.continuing | ({comp} if cont else set()),
                final_component=comp if meta.tags.get(EOD_FINAL_TAG) else ex.final_component,
            )
            out.extend((False, b) for b, _ in self.acc.on_source_exhausted(lane, comp))
            out.append((True, [s]))
            return
        # flush sentinel
        if lane in self._stalled:
            self._stalled[lane].append(s)
            return
        if self.can_stall and self.acc.has_pending_data(lane):
            self._stalled[lane] = [s]
            return
        out.extend((False, b) for b, _ in self.acc.flush(reset=True, lane_id=lane))
        if self.acc.has_pending_data(lane):
            raise ContractError(
                f"operator {self.name!r}: flush(reset=True, lane_id={lane}) left pending data; "
                "expected the lane to be drained and reset (the only allowed stall is batch(drop_last=True))"
            )
        out.append((True, [s]))


def _apply(stage: OpStage, entries: list[tuple[bool, list[Any]]]) -> list[Any]:
    result: list[Any] = []
    for control, elems in entries:
        result.extend(elems if control else stage.op.process_many(list(elems)))
    return result


class InlineRunner:
    """Everything on the caller's thread."""

    name = "inline"

    def __init__(self, stages: list[OpStage]) -> None:
        self.stages = stages

    def run(self, upstream: Iterable[Any]) -> Iterator[Any]:
        stages = self.stages
        for item in upstream:
            current: list[Any] = [item]
            for st in stages:
                current = _apply(st, st.enqueue(current))
                if not current:
                    break
            yield from current
        pending: list[Any] = []
        for st in stages:
            pending = _apply(st, st.enqueue(pending) + st.close())
        yield from pending


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

        def process(st: OpStage, entries: list[tuple[bool, list[Any]]]) -> list[Any]:
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


def make_runner(kind: str, stages: list[OpStage], *, workers: int, queue_size: int,
                deterministic: bool) -> InlineRunner | ThreadsRunner:
    if kind == "inline":
        return InlineRunner(stages)
    return ThreadsRunner(stages, workers=workers, queue_size=queue_size, deterministic=deterministic)


"""One executor for the long runs: seed sweeps, property campaigns, checkpoint surveys, mutation scores.

Theory of operation
-------------------
A long run is a list of :class:`Task` (a unique ``key``, a picklable module-level function,
its arguments, and ``meta``: plain data copied into every record of the task, e.g. the seed
and the command that reproduces it on a laptop).  :func:`run_tasks` runs the tasks on a
*backend* and turns each into exactly one JSON record, appended to a JSONL file (one line,
flushed) the moment it arrives, so a killed driver leaves every finished task on disk:

* ``status "done"``: the function returned a dict; the record is ``meta`` plus that dict;
* ``status "error"``: the function raised (the record carries the exception and its
  traceback, and ``ok: false``), or its worker process died more than ``retries`` times;
* ``status "timeout"``: the task ran past ``budget_s`` seconds of wall time (``ok: false``):
  reported once, never retried (a budget is a verdict, not a transient fault).

Every record also has ``task`` (the key), ``attempts``, ``seconds`` and ``cpu_seconds`` (wall
and CPU time of the last attempt; measured, so they never reach a summary or a fingerprint).  A worker that
dies (killed, out of memory) is a transient fault: its task runs again, up to ``retries``
more times, so a sweep loses no task to a dead worker.  ``resume`` reads an earlier JSONL
of the same run and skips every task that already has a record there (a torn last line, the
trace of a killed driver, is dropped); the returned list holds the old records and the new.

Backends (:func:`make_backend`): :class:`InlineBackend` (this process, one task at a time),
:class:`ProcessBackend` (``jobs`` persistent worker processes, each serving one task at a
time over a pipe: a worker's per-process caches survive from task to task), and
:class:`RayBackend` (a Ray cluster at an address, or a local instance; Ray is imported only
when this backend is built, it is the optional ``cluster`` extra).  The time budget is kept
inside the worker (a ``SIGALRM`` timer raising :class:`TaskTimeout`, a ``BaseException`` so a
task's own ``except Exception`` cannot swallow it), with a hard kill from the driver as a
backstop for code that never returns to the interpreter.  Records arrive in completion
order; callers that summarise sort them (a sweep by seed), so the summary does not depend on
which worker finished first, nor on the backend.

What may not live here: what a task computes (sim.sweep, properties.campaigns), or any
decision of a simulated run (wall time is read here only to enforce budgets: ``# clock-ok``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import multiprocessing
import os
import signal
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from pathlib import Path
from types import FrameType
from typing import Any, Protocol

from zephon_ref.errors import ConfigError, ContractError

__all__ = ["Backend", "ExecutorError", "InlineBackend", "ProcessBackend", "RayBackend", "Task", "TaskTimeout",
           "code_digest", "make_backend", "read_records", "run_tasks"]

Record = dict[str, Any]
#: statuses a task can end in (each one is final: a resumed run does not run the task again)
STATUSES = ("done", "error", "timeout")


class ExecutorError(ContractError):
    """The executor cannot go on (a cluster whose code differs from this checkout, a resume file of
    another run); a task's own failure is a record, never this."""


class TaskTimeout(BaseException):  # noqa: N818 - named for what it is; BaseException so `except Exception` misses it
    """Raised inside a task when its time budget runs out."""


@dataclass(frozen=True, slots=True)
class Task:
    """One unit of a long run (see the module docstring)."""

    key: str
    fn: Callable[..., Mapping[str, Any]]
    args: tuple[Any, ...] = ()
    meta: Mapping[str, Any] = field(default_factory=dict)


# -- the worker side: one attempt of one task, the same in every backend ------------------------

@contextlib.contextmanager
def alarm(seconds: float | None, error: Callable[[], BaseException]) -> Iterator[None]:
    """Raise ``error()`` in this thread once ``seconds`` of wall time have passed inside the block (a SIGALRM
    timer; a no-op off the main thread, where no signal can be delivered, or for ``seconds`` None or <= 0).
    The one watchdog of the project's long runs: the executor's task budgets, the bad-value fuzzer's hang
    limit and the loader suite's move limit."""
    usable = seconds is not None and seconds > 0 and hasattr(signal, "setitimer") and \
        threading.current_thread() is threading.main_thread()
    if not usable:
        yield
        return
    assert seconds is not None

    def fire(signum: int, frame: FrameType | None) -> None:
        raise error()

    before = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, before)


def _alarm(budget_s: float | None) -> contextlib.AbstractContextManager[None]:
    """:func:`alarm` raising :class:`TaskTimeout` after a task's budget (the driver's hard kill is the only
    budget off the main thread)."""
    return alarm(budget_s, lambda: TaskTimeout(budget_s or 0.0))


def execute(fn: Callable[..., Mapping[str, Any]], args: tuple[Any, ...], budget_s: float | None) -> Record:
    """Run one attempt; always returns a record body (``status`` plus the function's dict or the failure)."""
    # clock-ok below: the record's seconds, never a decision of a run
    t0, c0 = time.perf_counter(), time.process_time()  # clock-ok
    try:
        with _alarm(budget_s):
            out = fn(*args)
        if not isinstance(out, Mapping):
            raise TypeError(f"a task function must return a dict, {getattr(fn, '__name__', fn)!r} returned "
                            f"{type(out).__name__}")
        body: Record = {**out, "status": "done"}
    except TaskTimeout:
        if budget_s is None:
            raise  # an enclosing budget's (a batch of seeds runs each through execute): the batch times out
        body = {"status": "timeout", "ok": False, "error": f"timeout: ran past its budget of {budget_s:g} s"}
    except Exception as exc:  # a task's exception is a failing record with its traceback, never a lost task
        body = {"status": "error", "ok": False, "error": f"{type(exc).__name__}: {exc}"[:500],
                "traceback": traceback.format_exc(limit=30)[-8000:]}
    body["seconds"] = round(time.perf_counter() - t0, 4)  # clock-ok
    body["cpu_seconds"] = round(time.process_time() - c0, 4)  # clock-ok
    return body


def _finish(task: Task, body: Record, attempts: int) -> Record:
    rec: Record = {**task.meta, **body, "task": task.key, "attempts": attempts}
    return rec


def _died(task: Task, attempts: int, why: str) -> Record:
    return _finish(task, {"status": "error", "ok": False, "seconds": 0.0,
                          "error": f"worker died on each of {attempts} attempts (last: {why})"}, attempts)


def _timed_out(task: Task, attempts: int, budget_s: float | None, seconds: float) -> Record:
    return _finish(task, {"status": "timeout", "ok": False, "seconds": round(seconds, 4),
                          "error": f"timeout: ran past its budget of {budget_s:g} s (killed by the driver)"},
                   attempts)


# -- backends ---------------------------------------------------------------------------------

class Backend(Protocol):
    """Runs tasks and yields one final record per task, in completion order."""

    name: str

    def run(self, tasks: Sequence[Task], *, budget_s: float | None, retries: int) -> Iterator[Record]: ...

    def close(self) -> None: ...


class InlineBackend:
    """This process, one task after another (a worker that dies here takes the driver with it)."""

    name = "inline"

    def run(self, tasks: Sequence[Task], *, budget_s: float | None, retries: int) -> Iterator[Record]:
        for t in tasks:
            yield _finish(t, execute(t.fn, t.args, budget_s), 1)

    def close(self) -> None:
        pass


def _serve(conn: Connection) -> None:
    """A ProcessBackend worker: run what the pipe sends until it sends None."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the driver handles ^C and stops its workers
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        if msg is None:
            return
        fn, args, budget = msg
        conn.send(execute(fn, args, budget))


@dataclass
class _Worker:
    proc: Any  # multiprocessing.Process (of the chosen context)
    conn: Connection
    task: Task | None = None
    attempts: int = 0
    started: float = 0.0


class ProcessBackend:
    """``jobs`` worker processes of this machine (fork where the platform has it, else spawn; ``start_method``
    chooses: spawn gives fresh interpreters, e.g. to measure a worker's own memory)."""

    name = "processes"
    #: the driver kills a task this long past its budget (the in-worker timer should have fired)
    GRACE_S = 5.0

    def __init__(self, jobs: int, *, start_method: str | None = None) -> None:
        if type(jobs) is not int or jobs < 1:
            raise ConfigError(f"jobs: expected an int >= 1, received {jobs!r}")
        methods = multiprocessing.get_all_start_methods()
        if start_method is not None and start_method not in methods:
            raise ConfigError(f"start_method: expected one of {methods}, received {start_method!r}")
        self.jobs = jobs
        self._ctx: Any = multiprocessing.get_context(
            start_method or ("fork" if "fork" in methods else "spawn")
        )
        self._workers: list[_Worker] = []

    def _spawn(self) -> _Worker:
        parent, child = self._ctx.Pipe()
        proc = self._ctx.Process(target=_serve, args=(child,), daemon=True)
        proc.start()
        child.close()
        return _Worker(proc, parent)

    def _stop(self, w: _Worker, *, kill: bool) -> None:
        if kill:
            w.proc.kill()
        else:
            with contextlib.suppress(OSError, BrokenPipeError):
                w.conn.send(None)
        w.proc.join(timeout=10)
        if w.proc.is_alive():
            w.proc.kill()
            w.proc.join()
        w.conn.close()

    def run(self, tasks: Sequence[Task], *, budget_s: float | None, retries: int) -> Iterator[Record]:
        queue: deque[tuple[Task, int]] = deque((t, 0) for t in tasks)
        while len(self._workers) < min(self.jobs, max(len(tasks), 1)):
            self._workers.append(self._spawn())
        pending = len(tasks)
        while pending:
            for w in self._workers:
                if w.task is None and queue:
                    t, before = queue.popleft()
                    w.task, w.attempts, w.started = t, before + 1, time.perf_counter()  # clock-ok
                    w.conn.send((t.fn, t.args, budget_s))
            busy = [w for w in self._workers if w.task is not None]
            timeout = None
            if budget_s is not None:
                now = time.perf_counter()  # clock-ok
                timeout = max(0.0, min(w.started + budget_s + self.GRACE_S - now for w in busy))
            ready = set(wait([w.conn for w in busy] + [w.proc.sentinel for w in busy], timeout=timeout))
            now = time.perf_counter()  # clock-ok
            for i, w in enumerate(self._workers):
                if w.task is None:
                    continue
                t = w.task
                died: str | None = None
                if w.conn in ready or w.proc.sentinel in ready:
                    try:
                        body = w.conn.recv() if w.conn.poll() else None
                    except (EOFError, OSError):
                        body = None
                    if body is not None:
                        w.task = None
                        pending -= 1
                        yield _finish(t, body, w.attempts)
                        continue
                    w.proc.join(timeout=5)
                    died = f"exit code {w.proc.exitcode}"
                elif budget_s is not None and now - w.started > budget_s + self.GRACE_S:
                    self._stop(w, kill=True)
                    self._workers[i] = self._spawn()
                    pending -= 1
                    yield _timed_out(t, w.attempts, budget_s, now - w.started)
                    continue
                else:
                    continue
                # the worker died with the task: a transient fault, the task runs again on a fresh worker
                self._stop(w, kill=True)
                self._workers[i] = self._spawn()
                if w.attempts <= retries:
                    queue.appendleft((t, w.attempts))
                else:
                    pending -= 1
                    yield _died(t, w.attempts, died)

    def close(self) -> None:
        for w in self._workers:
            self._stop(w, kill=w.task is not None)
        self._workers = []


def _remote_digest(roots: tuple[str, ...]) -> dict[str, str]:
    return {"digest": code_digest(roots), "python": sys.version.split()[0]}


class RayBackend:
    """Tasks on a Ray cluster (``address``: ``"auto"``, ``"host:port"``, ``"ray://..."``), or on a local
    instance started here when ``address`` is None (``num_cpus``, a small ``object_store_memory``).

    Ray retries a task whose worker process died (``max_retries``); an exception of the task is
    caught inside it (a record, never retried).  At most ``inflight_per_cpu`` tasks per cluster CPU
    are submitted at a time (results stream back, the driver's memory stays flat on 10,000 seeds).
    ``task_memory_mb`` reserves that much memory per task (Ray's ``memory`` resource), so a node runs only as
    many big seeds at once as it can hold (docs/scale-out.md: a 64x512 seed's memory grows with its steps).
    Before the first task, one probe task checks that the cluster runs this checkout's code
    (:func:`code_digest`): results from other code would be silently wrong.  The instance is shut
    down on :meth:`close` only if this backend started it.
    """

    name = "ray"
    GRACE_S = 30.0

    def __init__(
        self,
        address: str | None = None,
        *,
        num_cpus: int | None = None,
        object_store_memory: int = 300 * 2**20,
        inflight_per_cpu: int = 4,
        code_roots: tuple[str, ...] = ("zephon_ref", "sim"),
        task_memory_mb: int | None = None,
    ) -> None:
        try:
            import ray as ray_module
        except ImportError as exc:  # the optional extra
            raise ExecutorError("--ray needs Ray: pip install 'zephon_ref[cluster]' (or pip install ray); "
                                f"received ImportError: {exc}") from None
        ray: Any = ray_module  # Ray's API is partly untyped (mypy --strict with the extra installed)
        self.ray = ray
        self.address = address
        self.code_roots = code_roots
        self.task_memory_mb = task_memory_mb
        self._owned = False
        if not ray.is_initialized():
            if address:
                ray.init(address=address, log_to_driver=False)
            else:
                ray.init(num_cpus=num_cpus, object_store_memory=object_store_memory, include_dashboard=False,
                         log_to_driver=False, configure_logging=False)
            self._owned = True
        self.cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))
        self.inflight = max(2, inflight_per_cpu * self.cpus)
        self._execute = ray.remote(execute)
        self._checked = False

    def check_code(self) -> None:
        """Raise :class:`ExecutorError` unless the cluster's workers import this checkout's code."""
        if self._checked:
            return
        mine = code_digest(self.code_roots)
        theirs = self.ray.get(self.ray.remote(_remote_digest).remote(self.code_roots), timeout=300)
        if theirs["digest"] != mine:
            raise ExecutorError(
                f"the Ray cluster at {self.address or 'local'} runs other zephon_ref/sim code "
                f"(digest {theirs['digest'][:12]}, this checkout {mine[:12]}): install "
                f"this checkout on its nodes (pip install -e '.[cluster]') or results would "
                f"not be this code's"
            )
        self._checked = True

    def run(self, tasks: Sequence[Task], *, budget_s: float | None, retries: int) -> Iterator[Record]:
        ray = self.ray
        self.check_code()
        opts: dict[str, Any] = {"max_retries": retries, "retry_exceptions": False}
        if self.task_memory_mb:  # Ray then runs at most as many tasks on a node as its memory holds
            opts["memory"] = self.task_memory_mb * 2**20
        remote = self._execute.options(**opts)
        todo = deque(tasks)
        live: dict[Any, tuple[Task, float]] = {}
        while todo or live:
            while todo and len(live) < self.inflight:
                t = todo.popleft()
                live[remote.remote(t.fn, t.args, budget_s)] = (t, time.perf_counter())  # clock-ok
            done, _ = ray.wait(list(live), num_returns=1, timeout=None if budget_s is None else 1.0)
            for ref in done:
                t, _ = live.pop(ref)
                try:
                    body = ray.get(ref)
                except Exception as exc:  # the worker died more than max_retries times, or the node did
                    yield _died(t, retries + 1, f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}")
                    continue
                yield _finish(t, body, 1)
            if budget_s is not None:
                # backstop: a task queued behind others started late, hence the allowance for the queue
                now = time.perf_counter()  # clock-ok
                allowance = budget_s * (1 + self.inflight / self.cpus) + self.GRACE_S
                for ref, (t, sent) in list(live.items()):
                    if now - sent > allowance:
                        ray.cancel(ref, force=True)
                        live.pop(ref)
                        yield _timed_out(t, 1, budget_s, now - sent)

    def close(self) -> None:
        if self._owned and self.ray.is_initialized():
            self.ray.shutdown()
        self._owned = False


def make_backend(*, jobs: int | None = None, ray: str | None | bool = False, budget_s: float | None = None,
                 num_cpus: int | None = None, code_roots: tuple[str, ...] = ("zephon_ref", "sim"),
                 task_memory_mb: int | None = None) -> Backend:
    """``ray`` False: local (``jobs`` <= 1 and no budget: this process; else ``jobs`` processes, at least
    one, since a budget needs a worker the driver can kill); ``ray`` True or None: a local Ray instance;
    a string: the Ray cluster at that address."""
    if ray is not False:
        return RayBackend(
            None if ray is True or not ray else str(ray),
            num_cpus=num_cpus,
            code_roots=code_roots,
            task_memory_mb=task_memory_mb,
        )
    n = jobs if jobs is not None else (os.cpu_count() or 1)
    if n <= 1 and budget_s is None:
        return InlineBackend()
    return ProcessBackend(max(1, n))


# -- the driver -------------------------------------------------------------------------------

def read_records(path: Path | str) -> tuple[Record | None, list[Record]]:
    """The header (first line, if it is one) and the task records of a JSONL file; a torn last line is
    dropped, a torn line elsewhere is an error (the file is not one this executor wrote)."""
    header: Record | None = None
    records: list[Record] = []
    lines = Path(path).read_text().splitlines()
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            if i == len(lines) - 1:
                break  # the driver was killed while writing it
            raise ExecutorError(f"{path}: line {i + 1} is not JSON; expected a JSONL file written by a sweep "
                                f"or campaign, received {line[:80]!r}") from None
        if i == 0 and "header" in rec:
            header = rec["header"]
        elif isinstance(rec, dict) and "task" in rec:
            records.append(rec)
    return header, records


def _drop_torn_tail(path: Path) -> None:
    """Cut a last line without its newline (a record torn by a killed driver) so appending starts clean."""
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        with path.open("r+b") as f:
            f.truncate(data.rfind(b"\n") + 1)


def _progress(total: int, initial: int, enabled: bool, what: str) -> Any:
    from sim.progress import progress, shown

    if not shown(quiet=not enabled):  # off with --quiet, and when stderr is not a terminal (logs, CI)
        return None
    bar = progress(total, desc=f"{what}s", unit=what)
    bar.update(initial)
    return bar


def run_tasks(tasks: Sequence[Task], backend: Backend, *, jsonl: Path | str | None = None,
              header: Mapping[str, Any] | None = None, resume: bool = False, budget_s: float | None = None,
              retries: int = 3, progress: bool = False, what: str = "task",
              on_record: Callable[[Record], None] | None = None) -> list[Record]:
    """Run ``tasks`` on ``backend``, streaming each record to ``jsonl`` (see the module docstring).

    With ``resume`` (needs ``jsonl``), tasks that already have a record in ``jsonl`` are not run again,
    and ``header`` must equal the file's (the same run); the file is appended to.  Returns the old
    records and the new ones (completion order)."""
    keys = [t.key for t in tasks]
    if len(set(keys)) != len(keys):
        raise ConfigError("tasks: expected unique keys, received duplicates "
                          f"{sorted({k for k in keys if keys.count(k) > 1})[:5]}")
    if budget_s is not None and not budget_s > 0:
        raise ConfigError(f"budget_s: expected seconds > 0 or None, received {budget_s!r}")
    if type(retries) is not int or retries < 0:
        raise ConfigError(f"retries: expected an int >= 0, received {retries!r}")
    old: list[Record] = []
    path = Path(jsonl) if jsonl is not None else None
    if resume:
        if path is None or not path.exists():
            raise ConfigError(
                f"resume: expected an existing JSONL file of an earlier run, received {jsonl!r}"
            )
        theirs, old = read_records(path)
        _drop_torn_tail(path)
        want = json.loads(json.dumps(dict(header or {})))
        if header is not None and theirs is not None and theirs != want:
            diff = sorted(k for k in set(theirs) | set(want) if theirs.get(k) != want.get(k))
            raise ExecutorError(
                f"resume: {path} is another run's (its header differs in {diff}: "
                f"{ {k: theirs.get(k) for k in diff} } here { {k: want.get(k) for k in diff} })"
            )
        known = set(keys)
        old = [r for r in old if r["task"] in known]
    finished = {r["task"] for r in old}
    todo = [t for t in tasks if t.key not in finished]
    out = list(old)
    sink = None
    if path is not None:
        sink = path.open("a" if resume else "w")
        if not resume:
            sink.write(json.dumps({"header": dict(header or {})}, sort_keys=True) + "\n")
            sink.flush()
    bar = _progress(len(tasks), len(old), progress, what)
    failed = sum(1 for r in old if r.get("ok") is False)
    try:
        for rec in backend.run(todo, budget_s=budget_s, retries=retries):
            out.append(rec)
            if sink is not None:
                sink.write(json.dumps(rec, sort_keys=True, default=repr) + "\n")
                sink.flush()
            if on_record is not None:
                on_record(rec)
            failed += rec.get("ok") is False
            if bar is not None:
                bar.set_postfix_str(f"{failed} failed", refresh=False)
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()
        if sink is not None:
            sink.close()
    return out


def code_digest(roots: Iterable[str] = ("zephon_ref", "sim")) -> str:
    """sha256 of the source of the packages a task may run (file names and bytes, in sorted order)."""
    h = hashlib.sha256()
    for name in roots:
        mod = sys.modules.get(name) or __import__(name)
        base = Path(next(iter(mod.__path__)))
        for p in sorted(base.rglob("*.py")):
            h.update(str(p.relative_to(base.parent)).encode())
            h.update(p.read_bytes())
    return h.hexdigest()

"""Task wrappers that inject the cluster's faults into an executor run: a worker killed, a hang, a crash.

Theory of operation
-------------------
The executor's claims (:mod:`sim.executor`: a dead worker loses no task, a budget is a
verdict, an exception is a record) are checked by running ordinary tasks through these
wrappers.  They are module-level functions (picklable by reference, so a local process or a
Ray worker imports them from this checkout) and leave a trace in a directory of the caller's,
one file per attempt, so a test can see that an attempt happened and where it ran:

* :func:`announced`: writes ``<dir>/<key>.<pid>`` and waits ``delay_s`` before the task, so a
  test can find the worker process running it and kill it from outside;
* :func:`dies_once`: the first attempt SIGKILLs its own worker process (no reply, no
  traceback: what the out-of-memory killer does); the next attempt runs the task;
* :func:`sleeps` and :func:`sleeps_deaf`: a task that takes ``seconds``; the deaf one blocks
  SIGALRM first, so only the driver's hard kill can stop it.

What may not live here: anything a real sweep runs.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

__all__ = ["announced", "dies_once", "sleeps", "sleeps_deaf"]

TaskFn = Callable[..., Mapping[str, Any]]


def announced(
    trace_dir: str, key: str, delay_s: float, fn: TaskFn, args: tuple[Any, ...]
) -> Mapping[str, Any]:
    Path(trace_dir, f"{key}.{os.getpid()}").write_text(str(os.getpid()))
    time.sleep(delay_s)  # clock-ok: a window for the test to kill this worker
    return fn(*args)


def dies_once(trace_dir: str, key: str, fn: TaskFn, args: tuple[Any, ...]) -> Mapping[str, Any]:
    marker = Path(trace_dir, f"{key}.died")
    if not marker.exists():
        marker.write_text(str(os.getpid()))
        os.kill(os.getpid(), signal.SIGKILL)
    return fn(*args)


def sleeps(seconds: float) -> Mapping[str, Any]:
    time.sleep(seconds)  # clock-ok
    return {"slept": seconds}


def sleeps_deaf(seconds: float) -> Mapping[str, Any]:
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
    try:
        time.sleep(seconds)  # clock-ok
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGALRM})
    return {"slept": seconds}

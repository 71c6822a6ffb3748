"""Runners: who drives an engine's steps.  A runner takes a started engine and yields its deliveries.

Theory of operation
-------------------
The engine (:mod:`zephon_ref.engine.core`) is a sans-IO state machine: ``admit``,
``run_stage(i)`` and ``deliver`` in any order give the same delivered stream.  A runner
only decides *who* calls them and when:

* ``inline`` (:func:`zephon_ref.runners.inline.run`): lazily on the caller's thread, one
  admitted item through every stage before the next;
* ``threads`` (:class:`zephon_ref.runners.threads.ThreadsRunner`): a pump thread per
  operator and a worker pool for ``process_many``, with every engine call (admission,
  delivery, checkpoint) on the consumer's thread.

Runners are machinery: the semantics never import them (house rule 10); the pipeline
facade (:mod:`zephon_ref.pipeline`) picks one from ``options(runner=...)``.  Execution
settings (runner, workers, queue sizes) never reach the data path.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from zephon_ref.engine.core import Engine
from zephon_ref.runners.inline import run as run_inline
from zephon_ref.runners.threads import ThreadsRunner

__all__ = ["RUNNERS", "ThreadsRunner", "drive", "run_inline"]

#: The runners of this package; zephon's "process" and "remote" run as threads here (docs/options.md).
RUNNERS = ("inline", "threads")


def drive(engine: Engine, *, runner: str, workers: int, queue_size: int,
          deterministic: bool) -> Iterator[Any]:
    """The delivered items of a started engine, driven by ``runner`` ("inline" or "threads")."""
    if runner == "inline":
        return run_inline(engine)
    if runner == "threads":
        return ThreadsRunner(workers=workers, queue_size=queue_size, deterministic=deterministic).run(engine)
    raise ValueError(f"drive(): expected runner 'inline' or 'threads', received {runner!r}")

"""The inline runner: the engine's steps, lazily, on the caller's thread.

A source item is admitted only when delivery needs input (which lane: the engine's
feeding policy), and it runs through every stage before the next one is admitted: the
grouping of the inline runner.  With this runner the checkpoint after ``n`` delivered
items is the same bytes in every run.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from zephon_ref.engine.core import Engine

__all__ = ["run"]


def run(engine: Engine) -> Iterator[Any]:
    """Yield a started engine's delivered items, each notified before it is yielded."""
    if not engine.started:
        raise RuntimeError("inline runner: expected a started engine (Engine.start()), received a fresh one")
    while True:
        x = engine.deliver()
        if x is not None:
            yield x
            continue
        if engine.finished:
            return
        if not engine.step():  # pragma: no cover - delivery is stuck and every stage ran dry
            raise AssertionError(f"engine: delivery waits but the {engine.feeding} policy admits nothing")

"""The engine's steps as names a driver draws from: ``admit``, ``stage:<i>``, ``deliver``.

The engine (zephon_ref/engine/core.py) says what can run (:meth:`Engine.can_admit`,
:meth:`Engine.ready_stages`, :meth:`Engine.can_deliver`); naming the steps, so that a seeded
choice or a Hypothesis draw can pick one, is the simulator's business and lives here.
"""

from __future__ import annotations

from typing import Any

__all__ = ["runnable", "take"]


def runnable(engine: Any) -> list[str]:
    """The steps that can do something now, in a fixed order: 'admit', 'stage:<i>'..., 'deliver'."""
    steps = ["admit"] if engine.can_admit() else []
    steps += [f"stage:{i}" for i in engine.ready_stages()]
    if engine.can_deliver():
        steps.append("deliver")
    return steps


def take(engine: Any, step: str) -> Any | None:
    """Run one named step; the delivered item for 'deliver' (None if it delivered nothing)."""
    if step == "admit":
        engine.admit()
    elif step == "deliver":
        return engine.deliver()
    elif step.startswith("stage:"):
        engine.run_stage(int(step.split(":", 1)[1]))
    else:
        raise ValueError(f"step: expected 'admit', 'stage:<i>' or 'deliver', received {step!r}")
    return None

"""zephon's ``dump_semaphore_registry``: zephon_ref tracks no semaphores (its runners are in-process)."""

from __future__ import annotations

__all__ = ["dump_semaphore_registry"]


def dump_semaphore_registry() -> None:
    """Print debug info about tracked semaphores: there are none in zephon_ref, so nothing is printed
    (zephon prints nothing either while it tracks none)."""

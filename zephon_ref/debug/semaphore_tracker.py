"""zephon's semaphore-leak hooks: no-ops, since zephon_ref's runners create no multiprocessing
semaphores (threads and in-process runners only); ``RegistrationInfo`` keeps zephon's fields."""

from __future__ import annotations

from dataclasses import dataclass

from zephon_ref.errors import ConfigTypeError, expected

__all__ = ["RegistrationInfo", "dump_semaphore_leak_report", "install_debug_hooks"]


@dataclass
class RegistrationInfo:
    """What zephon records when a semaphore is registered (never created here)."""

    name: str
    timestamp: float
    stack_trace: str
    thread_name: str
    thread_id: int


def dump_semaphore_leak_report(*, force: bool = False) -> None:
    """zephon prints its leak analysis; zephon_ref has no semaphores to analyse, so nothing is printed."""
    if not isinstance(force, bool):
        raise ConfigTypeError(expected("dump_semaphore_leak_report force", "a bool", force))


def install_debug_hooks() -> None:
    """zephon patches multiprocessing's resource tracker; zephon_ref starts no processes: a no-op."""

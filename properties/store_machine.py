"""One stateful machine that checks a real durable store against its reference model.

Theory of operation
-------------------
:class:`StoreMachine` drives :mod:`zephon_ref.checkpoint.store` over one
:class:`StoreBackend` (a POSIX directory, an S3 prefix, or the simulator's in-memory disk
behind a fault injector) and :class:`zephon_ref.checkpoint.model.StoreModel` side by side:
saves of real engine states (some with an injected I/O fault at a drawn step), loads of the
newest, of a drawn published generation and of an absent one, ``gc(keep)``, and power losses
(on the simulated disk).  After every step the listing and the newest complete generation
must be the model's, and every load must return exactly what the model says.  A backend
that cannot inject faults or crash simply never draws those steps.

Build a machine class for a backend with :func:`machine_for` and run it with Hypothesis'
``run_state_machine_as_test`` (tests/checkpoint/test_store_model.py, tests/s3/).
"""

from __future__ import annotations

import errno
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from zephon_ref.checkpoint import store
from zephon_ref.checkpoint.model import StoreModel
from zephon_ref.storage.errors import CheckpointNotFound, PublishConflict, StorageError

__all__ = ["FAULT_OPS", "StoreBackend", "StoreMachine", "machine_for", "sample_states"]

#: the storage steps a save goes through, where a fault may be injected
FAULT_OPS = ("create", "write", "sync", "close", "seal", "link", "remove", "sync_dir", "make_dirs", "list")


@dataclass
class StoreBackend:
    """Where a machine's store lives: ``directory`` (a path or an ``s3://`` URL) over ``storage``
    (None: the default for that directory), ``faults`` (the fault list of a
    :class:`sim.storage.FaultyStorage` in front of it, or None when faults cannot be injected)
    and ``crash`` (a power loss of the storage, or None)."""

    name: str
    directory: str
    storage: Any = None
    faults: list[Any] | None = None
    crash: Callable[[], None] | None = None


_STATES: list[dict[str, Any]] = []


def sample_states() -> list[dict[str, Any]]:
    """Six real engine states of a small two-lane pipeline (computed once per process)."""
    if not _STATES:
        from properties.pipelines import real_state

        _STATES.extend(real_state(seed, canonical_replicas=2, items=n) for seed, n in
                       ((1, 0), (1, 3), (2, 7), (3, 11), (4, 2), (5, 16)))
    return _STATES


class StoreMachine(RuleBasedStateMachine):
    """The real store and the model, step by step (see the module docstring)."""

    make_backend: Callable[[], StoreBackend]

    def __init__(self) -> None:
        super().__init__()
        self.backend = type(self).make_backend()
        self.model = StoreModel()
        self.states = sample_states()

    # -- helpers ------------------------------------------------------------------------------
    def _kw(self) -> dict[str, Any]:
        return {} if self.backend.storage is None else {"storage": self.backend.storage}

    def _save(self, state: dict[str, Any]) -> None:
        b = self.backend
        try:
            g = store.save(state, b.directory, **self._kw())
        except PublishConflict as exc:  # one saver alone never races: its store picked a taken number
            raise AssertionError(f"a lone saver's generation is not above every earlier one: {exc}") from exc
        except StorageError:
            self.model.settle(state, store.list_generations(b.directory, **self._kw()))
        else:
            self.model.saved(g, state)

    # -- rules ----------------------------------------------------------------------------------
    @rule(i=st.integers(0, 5))
    def save(self, i: int) -> None:
        self._save(self.states[i])

    @precondition(lambda self: self.backend.faults is not None)
    @rule(i=st.integers(0, 5), op=st.sampled_from(FAULT_OPS), nth=st.integers(1, 6),
          code=st.sampled_from([errno.EIO, errno.ENOSPC]))
    def save_with_fault(self, i: int, op: str, nth: int, code: int) -> None:
        from sim.storage import Fault

        faults = self.backend.faults
        assert faults is not None
        fault = Fault(op, code, nth=nth)
        faults.append(fault)
        try:
            self._save(self.states[i])
        finally:
            faults.remove(fault)

    @rule()
    def load_newest(self) -> None:
        b = self.backend
        if self.model.newest() is None:
            try:
                store.load_checkpoint(b.directory, **self._kw())
            except CheckpointNotFound:
                return
            raise AssertionError("a load from an empty store returned a state")
        got = store.load_checkpoint(b.directory, **self._kw())
        assert got.generation == self.model.newest()
        assert got.state == self.model.load(), "the newest load differs from what its save was given"

    @precondition(lambda self: bool(self.model.generations))
    @rule(data=st.data())
    def load_one(self, data: st.DataObject) -> None:
        g = data.draw(st.sampled_from(self.model.listing()))
        got = store.load_checkpoint(self.backend.directory, g, **self._kw())
        assert got.generation == g and got.state == self.model.load(g)

    @rule()
    def load_absent(self) -> None:
        gone = [g for g in range(1, self.model.high + 2) if g not in self.model.generations]
        try:
            store.load_checkpoint(self.backend.directory, gone[-1], **self._kw())
        except CheckpointNotFound:
            return
        raise AssertionError(f"generation {gone[-1]} is not published, yet a load returned it")

    @rule(keep=st.integers(1, 3))
    def gc(self, keep: int) -> None:
        report = store.gc(self.backend.directory, keep=keep, **self._kw())
        assert list(report.removed_generations) == self.model.gc(keep)

    @precondition(lambda self: self.backend.crash is not None)
    @rule()
    def power_loss(self) -> None:
        crash = self.backend.crash
        assert crash is not None
        crash()
        self.model.crashed(store.list_generations(self.backend.directory, **self._kw()))

    # -- invariants -------------------------------------------------------------------------------
    @invariant()
    def listing_is_the_models(self) -> None:
        b = self.backend
        assert store.list_generations(b.directory, **self._kw()) == self.model.listing()
        assert store.latest_complete_generation(b.directory, **self._kw()) == self.model.newest()


def machine_for(make_backend: Callable[[], StoreBackend]) -> type[StoreMachine]:
    """A :class:`StoreMachine` class whose every run gets a fresh backend from ``make_backend``."""
    return type("StoreMachineFor", (StoreMachine,), {"make_backend": staticmethod(make_backend)})

"""The durable store against its reference model (zephon_ref/checkpoint/model.py), one stateful machine
(properties/store_machine.py) over a POSIX directory with injected faults and over the simulator's
in-memory disk with faults and power losses; the S3 store runs the same machine in tests/s3."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from properties.store_machine import StoreBackend, machine_for, sample_states
from sim.storage import FaultyStorage, MemStorage
from zephon_ref.checkpoint import store
from zephon_ref.checkpoint.model import StoreModel
from zephon_ref.storage.errors import CheckpointNotFound
from zephon_ref.storage.posix import PosixStorage

RUNS = settings(max_examples=12, stateful_step_count=12, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


def posix_backends(root: Path) -> StoreBackend:
    counter = itertools.count()

    def make() -> StoreBackend:
        faults: list = []  # type: ignore[type-arg]
        return StoreBackend("posix", str(root / f"run-{next(counter)}"),
                            FaultyStorage(PosixStorage(), faults=faults), faults)

    return make  # type: ignore[return-value]


def make_mem() -> StoreBackend:
    mem = MemStorage()
    faults: list = []  # type: ignore[type-arg]
    return StoreBackend("mem", "/ckpt", FaultyStorage(mem, faults=faults), faults,
                        crash=lambda: mem.crash(lambda d, n: False))


def test_posix_store_keeps_the_models_promises(tmp_path: Path) -> None:
    run_state_machine_as_test(machine_for(posix_backends(tmp_path)), settings=RUNS)  # type: ignore[arg-type]


def test_simulated_disk_store_keeps_the_models_promises_through_faults_and_power_loss() -> None:
    run_state_machine_as_test(machine_for(make_mem), settings=RUNS)


#: a planted bug's budget: no shrinking (catching is what counts; shrinking the failing stateful run
#: took 60-70 of these tests' 80 s and 46 s in CI)
CATCH = settings(RUNS, max_examples=60, phases=[Phase.explicit, Phase.generate])


def test_the_machine_catches_a_store_that_reuses_a_generation_number(monkeypatch: pytest.MonkeyPatch) -> None:
    # a planted store bug: after gc, the next save takes a collected number again
    real = store._next_generation
    monkeypatch.setattr(store, "_next_generation",
                        lambda names: min(real(names), 1 + len(store._manifest_generations(names))))
    with pytest.raises(AssertionError, match="above every earlier one"):
        run_state_machine_as_test(machine_for(make_mem), settings=CATCH)


def test_the_machine_catches_a_store_whose_gc_keeps_one_too_few(monkeypatch: pytest.MonkeyPatch) -> None:
    real = store.gc
    monkeypatch.setattr(store, "gc", lambda d, *, keep, storage=None: real(d, keep=max(1, keep - 1),
                                                                             storage=storage))
    with pytest.raises(AssertionError):
        run_state_machine_as_test(machine_for(make_mem), settings=CATCH)


def test_the_model_refuses_what_the_store_must_not_do() -> None:
    s = sample_states()
    m = StoreModel()
    m.saved(1, s[0])
    m.saved(3, s[1])  # a gap is allowed
    with pytest.raises(AssertionError):
        m.saved(3, s[2])  # never the same number twice
    with pytest.raises(AssertionError):
        m.saved(2, s[2])  # never below a published one
    assert m.settle(s[2], [1, 3]) is None  # a failed save that published nothing
    assert m.settle(s[2], [1, 3, 4]) == 4 and m.unsure == {4}
    with pytest.raises(AssertionError):
        m.settle(s[3], [1, 3, 4, 5, 6])
    m.crashed([1, 3])  # the unsure one may vanish...
    with pytest.raises(AssertionError):
        m.crashed([1])  # ...a returned save may not
    assert m.gc(1) == [1] and m.listing() == [3] and m.load() == s[1]
    with pytest.raises(CheckpointNotFound):
        m.load(1)

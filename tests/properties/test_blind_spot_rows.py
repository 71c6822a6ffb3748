"""The rows that close the suite's blind spots (issue 32 item 4): each passes on zephon_ref and
catches the bug planted for it (a canary, patched in for the test only)."""

from __future__ import annotations

from typing import Any

import pytest

from properties import conformance
from properties.adapters import load_adapter
from zephon_ref.coordination import protocol


def _row(name: str, examples: int) -> conformance.Row:
    (row,) = conformance.run_suite(load_adapter("inline"), examples=examples, only=[name], shrink_seconds=5)
    return row


# -- aggregation --------------------------------------------------------------------------------------

def test_the_aggregation_row_passes_on_zephon_ref() -> None:
    row = _row("aggregation", 40)
    assert row.failure is None and row.skipped is None and row.passed >= 40, row


def test_the_aggregation_row_catches_a_leader_closing_on_a_subset_of_ranks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def lanes_only(self: Any) -> bool:  # planted: every lane reported, by whichever ranks
        covered = set().union(*self.lanes_of_rank.values()) if self.lanes_of_rank else set()
        return bool(covered == set(range(self.world.canonical_replicas)))

    monkeypatch.setattr(protocol.Coverage, "complete", lanes_only)
    row = _row("aggregation", 40)
    assert row.failure is not None and "peers" in row.failure, row
    assert row.found_at is not None and row.found_at <= 20, row


def test_an_adapter_without_round_machines_skips_the_row() -> None:
    (row,) = conformance.run_suite(load_adapter("zephon"), examples=2, only=["aggregation"])
    assert row.skipped == "the adapter lacks the 'aggregation' feature"


# -- cross-lane order ---------------------------------------------------------------------------------

def test_the_cross_lane_order_row_passes_on_zephon_ref() -> None:
    row = _row("cross-lane order", 30)
    assert row.failure is None and row.skipped is None and row.passed >= 30, row


def test_the_cross_lane_order_row_catches_a_pointer_reused_from_an_earlier_topology(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from zephon_ref.engine.core import Engine

    load = Engine._load

    def keep_every_pointer(self: Engine, state: Any) -> Any:  # planted: stale rr entries survive
        targets = load(self, state)
        self.rr_next_idx = dict(state.get("rr_next_idx") or {})
        return targets

    monkeypatch.setattr(Engine, "_load", keep_every_pointer)
    row = _row("cross-lane order", 60)
    assert row.failure is not None and "after the boundary differs" in row.failure, row
    # the rows that compared lanes only pass it
    assert _row("lane remap", 30).failure is None


# -- bounded inflight at the drawn depth --------------------------------------------------------------

def test_the_bounded_inflight_row_catches_an_admission_window_one_too_large(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from zephon_ref.engine.core import Engine
    from zephon_ref.runners.threads import ThreadsRunner

    wanted, init = Engine._wanted, ThreadsRunner.__init__

    def wide_wanted(self: Engine, in_flight: int) -> Any:
        return wanted(self, max(0, in_flight - 1))  # planted: the engine admits one message too many

    def wide_init(self: ThreadsRunner, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        self.queue_size += 1  # ... and so does the runner's consumer

    monkeypatch.setattr(Engine, "_wanted", wide_wanted)
    monkeypatch.setattr(ThreadsRunner, "__init__", wide_init)
    row = _row("bounded inflight", 100)  # (the draws depend on the examples setting: 100, as the CLI's)
    assert row.failure is not None and "'runner': 'threads'" in row.failure, row
    assert row.found_at is not None and row.found_at <= 30, row


# -- torch ----------------------------------------------------------------------------------------------

torch_needed = pytest.mark.skipif(
    __import__("importlib").util.find_spec("torch") is None, reason="the torch row needs torch"
)


def _tracked_only() -> Any:
    from properties.adapters import ADAPTERS, PipelineAdapter

    class Tracked(PipelineAdapter):
        @property
        def torch_kinds(self) -> tuple[str, ...]:
            return ("tracked",)

    inline = ADAPTERS["inline"]
    return Tracked("inline", "zephon_ref", dict(inline.execution), inline.features)


@torch_needed
def test_the_torch_row_passes_on_the_tracked_dataset() -> None:
    (row,) = conformance.run_suite(_tracked_only(), examples=12, only=["torch"], shrink_seconds=5)
    assert row.failure is None and row.skipped is None and row.passed >= 12, row


@torch_needed
def test_the_torch_row_catches_a_resumed_pass_state_that_forgets_the_role_offset(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from zephon_ref.torch.stateful import stateful_dataset_class

    cls = stateful_dataset_class()
    state_dict = cls.state_dict

    def forgetful(self: Any, **kwargs: Any) -> dict[str, Any]:  # planted: offset lost before an item
        state: dict[str, Any] = state_dict(self, **kwargs)
        if self._last_role is None:
            state["next_role"] = 0
        return state

    monkeypatch.setattr(cls, "state_dict", forgetful)
    (row,) = conformance.run_suite(_tracked_only(), examples=25, only=["torch"], shrink_seconds=5)
    assert row.failure is not None and "start of a pass resumed" in row.failure, row


@torch_needed
def test_the_torch_row_catches_a_loader_dataset_without_worker_states(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pytest.importorskip("torchdata.stateful_dataloader")
    from zephon_ref.torch.dataset import loader_stateful_class
    from zephon_ref.torch.device import worker_slot

    cls = loader_stateful_class()
    state_dict = cls.state_dict

    def none_in_workers(self: Any) -> Any:  # planted: the state before issue 34's fix
        return None if worker_slot().in_loader else state_dict(self)

    monkeypatch.setattr(cls, "state_dict", none_in_workers)
    row = _row("torch", 25)
    assert row.failure is not None and "loader dataset" in row.failure, row


def _resume_from_a_resumed_start(impl: str, workers: int, k: int, persistent: bool = False) -> Any:
    """(the whole pass, the items of a loader resumed from the state taken at the start of a pass
    that was itself resumed after ``k`` items, before its first item) under torchdata's
    StatefulDataLoader over ``to_torch_dataset()``; a zephon_ref loader's state is read with zephon's
    worker-0 patch lifted (properties/torch_row.py), so the test passes whether or not this process
    imported zephon."""
    import copy
    import warnings

    from torchdata.stateful_dataloader import StatefulDataLoader

    from properties.pipelines import PipelineConfig, build_pipeline, item_view
    from properties.torch_row import loader_state

    cfg = PipelineConfig(chain=[("batch", {"microbatch_size": 2})], layout={"web": (12, 8), "code": (6,)},
                         weights={"web": 0.7, "code": 0.3}, source_kwargs={"chunk_size": 4, "seed": 1},
                         options={"runner": "inline", "canonical_replicas": 2})

    def loader() -> Any:
        return StatefulDataLoader(build_pipeline(impl, cfg).to_torch_dataset(), batch_size=None,
                                  num_workers=workers, persistent_workers=persistent)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        full = [item_view(x) for x in loader()]
        first = loader()
        it = iter(first)
        for _ in range(k):
            next(it)
        after_k = copy.deepcopy(loader_state(first, impl))
        del it
        resumed = loader()
        resumed.load_state_dict(after_k)
        it = iter(resumed)
        at_start = copy.deepcopy(loader_state(resumed, impl))  # before the resumed pass's first item
        del it
        again = loader()
        again.load_state_dict(at_start)
        return full, [item_view(x) for x in again]


@torch_needed
@pytest.mark.parametrize(("workers", "persistent"), [(1, False), (2, False), (2, True)])
def test_to_torch_dataset_resumes_from_the_start_of_a_resumed_pass_with_workers(
    workers: int, persistent: bool,
) -> None:
    # found by the torch row (issue 34): with a None in-worker state torchdata replayed the consumed
    # items and counted them twice, so from this state 1 worker resumed k items short and 2 workers
    # were refused for odd k ("last_yielded_worker_id does not match") and k short for even k
    for k in (1, 2):
        full, again = _resume_from_a_resumed_start("zephon_ref", workers, k, persistent)
        assert again == full[k:], (k, len(again), len(full) - k)


@torch_needed
def test_to_torch_dataset_resumes_from_a_resumed_start_as_zephon_does() -> None:
    # zephon 0.2.0 with 1 worker (with 2 it hangs at the end of a pass here: docs/divergences.md D-50)
    pytest.importorskip("zephon")
    ours, ours_again = _resume_from_a_resumed_start("zephon_ref", 1, 1)
    theirs, theirs_again = _resume_from_a_resumed_start("zephon", 1, 1)
    assert ours == theirs and ours_again == theirs_again == ours[1:]


@torch_needed
def test_zephons_torchdata_patch_hands_worker_1_worker_0s_state_and_the_refusal_says_so() -> None:
    # the mechanism behind "torchdata handed worker 1 worker 0's state" (issue 34): not torchdata, but
    # the patch import zephon installs on StatefulDataLoader.state_dict (docs/divergences.md D-50)
    import copy
    import warnings

    pytest.importorskip("zephon")
    from torchdata.stateful_dataloader import StatefulDataLoader

    from properties.pipelines import PipelineConfig, build_pipeline
    from properties.torch_row import loader_state
    from zephon_ref.errors import StateMismatchError

    cfg = PipelineConfig(chain=[("batch", {"microbatch_size": 2})], layout={"web": (12, 8), "code": (6,)},
                         weights={"web": 0.7, "code": 0.3}, source_kwargs={"chunk_size": 4, "seed": 1},
                         options={"runner": "inline", "canonical_replicas": 2})

    def loader() -> Any:
        return StatefulDataLoader(build_pipeline("zephon_ref", cfg).to_torch_dataset(), batch_size=None,
                                  num_workers=2)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        first = loader()
        it = iter(first)
        next(it)
        patched = copy.deepcopy(first.state_dict())  # zephon's patch: worker 0's snapshot for both
        lifted = copy.deepcopy(loader_state(first, "zephon_ref"))
        del it

    def owners(state: Any) -> dict[str, int]:
        snapshots = state["_snapshot"]["_worker_snapshots"]
        return {k: v["dataset_state"]["worker_id"] for k, v in snapshots.items()}

    assert owners(patched) == {"worker_0": 0, "worker_1": 0}
    assert owners(lifted) == {"worker_0": 0, "worker_1": 1}
    again = loader()
    again.load_state_dict(patched)
    with pytest.raises(StateMismatchError, match="importing zephon 0.2.0 patched"):
        next(iter(again))

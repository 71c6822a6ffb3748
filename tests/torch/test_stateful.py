"""The stateful dataset under a plain DataLoader: state_dict() at every cut resumes exactly.

Same worker count: the resumed items continue the uninterrupted run item for item
(role rotation). Another worker count: every lane continues exactly and the run's
items are the same multiset. The state describes what the trainer consumed, not
what the workers prefetched (otherwise a cut would skip the prefetched batches).
"""

from __future__ import annotations

import hashlib
import warnings
from collections import defaultdict
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="the torch path needs torch (pip install 'zephon_ref[torch]')")

from torch.utils.data import DataLoader  # noqa: E402

from zephon_ref.errors import ConfigError, ConfigTypeError, StateFormatError, StateMismatchError  # noqa: E402
from zephon_ref.pipeline import Pipeline  # noqa: E402
from zephon_ref.synthetic import synthetic_corpus  # noqa: E402
from zephon_ref.torch import STATE_FORMAT, StampedItem, to_stateful_dataset  # noqa: E402
from zephon_ref.types import SampleBatch  # noqa: E402
from zephon_ref.work import StaticMixtureWorkSource  # noqa: E402

SMALL = {"web": (16, 12), "code": (10,), "books": (6,)}
LANES = 4


def small_pipeline(*, seed: int = 5, lanes: int = LANES) -> Pipeline:
    """tokenize -> pack -> shuffle -> ensure_mixture -> batch on a small corpus (about a dozen batches)."""
    corpus = synthetic_corpus(seed=seed, layout=SMALL, max_words=200)
    source = StaticMixtureWorkSource(list(corpus.datasets), {"web": 0.6, "code": 0.3, "books": 0.1},
                                     chunk_size=8, seed=seed)
    return (Pipeline(source)
            .tokenize(field="text", max_length=48, split_long_samples=True)
            .pack_sequences(128, num_bins=3)
            .shuffle(16, seed=seed)
            .ensure_mixture()
            .batch(2)
            .options(runner="inline", canonical_replicas=lanes))


def view(batch: SampleBatch) -> tuple[int, str]:
    """(lane, digest of every record's cursor and tokens)."""
    assert isinstance(batch, SampleBatch) and len(set(batch.lane_ids)) == 1
    h = hashlib.blake2b(digest_size=10)
    for rec in batch.records:
        h.update(repr(rec.meta.cursor.as_key()).encode())
        for seg in rec.payload["packed_samples"]:
            h.update(repr(list(seg["input_ids"])).encode())
    return batch.lane_ids[0], h.hexdigest()


def run(n: int, *, state: dict[str, Any] | None = None, stop: int | None = None,
        prefetch: int = 2) -> tuple[list[tuple[int, str]], dict[str, Any]]:
    """Views of the items a DataLoader with ``n`` workers hands out (up to ``stop``), and the state then."""
    ds = to_stateful_dataset(small_pipeline())
    if state is not None:
        ds.load_state_dict(state)
    kwargs: dict[str, Any] = {"prefetch_factor": prefetch} if n else {}
    out: list[tuple[int, str]] = []
    if stop == 0:
        return out, ds.state_dict()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch's "more workers than cores" advice
        for item in ds.track(DataLoader(ds, batch_size=None, num_workers=n, **kwargs)):
            out.append(view(item))
            if stop is not None and len(out) == stop:
                break
    return out, ds.state_dict()


def per_lane(views: list[tuple[int, str]]) -> dict[int, list[str]]:
    lanes: dict[int, list[str]] = defaultdict(list)
    for lane, digest in views:
        lanes[lane].append(digest)
    return dict(lanes)


@pytest.fixture(scope="module")
def reference() -> list[tuple[int, str]]:
    """The pipeline iterated directly: the oracle's stream."""
    return [view(b) for b in small_pipeline()]


@pytest.mark.parametrize("n", [0, 1, 2, 3, 4, 6])
def test_full_pass_equals_the_reference(n: int, reference: list[tuple[int, str]]) -> None:
    got, _ = run(n)
    assert per_lane(got) == per_lane(reference)
    if n <= 1:
        assert got == reference  # one stream: the pipeline's own interleaving


@pytest.mark.parametrize("n", [0, 2, 3])
def test_every_cut_resumes_exactly_under_the_same_worker_count(n: int) -> None:
    full, _ = run(n)
    assert len(full) >= 8
    for cut in range(len(full) + 1):
        head, state = run(n, stop=cut)
        assert head == full[:cut]
        tail, _ = run(n, state=state)
        assert head + tail == full, f"num_workers={n}: resume at cut {cut} diverged"


@pytest.mark.parametrize(("before", "after"), [(2, 4), (4, 1), (0, 2), (3, 6), (6, 0), (1, 3)])
def test_cuts_resume_under_another_worker_count(before: int, after: int,
                                                 reference: list[tuple[int, str]]) -> None:
    for cut in (1, 4, 7):
        head, state = run(before, stop=cut)
        tail, _ = run(after, state=state)
        assert sorted(head + tail) == sorted(reference), f"{before}->{after} at cut {cut}"
        assert per_lane(head + tail) == per_lane(reference)


def test_the_state_is_what_was_consumed_not_what_was_prefetched() -> None:
    # a deep prefetch: the workers run far ahead of the one item handed out
    head, state = run(2, stop=1, prefetch=8)
    engine = state["engine"]
    consumed = sum(int(v) for v in engine["lane_emitted"].values())
    assert consumed == 1
    tail, _ = run(2, state=state)
    assert head + tail == run(2)[0]


def test_the_engine_state_restores_a_plain_pipeline(reference: list[tuple[int, str]]) -> None:
    head, state = run(2, stop=5)
    p = small_pipeline()
    p.restore(state["engine"])
    rest = [view(b) for b in p]
    assert per_lane(head + rest) == per_lane(reference)


def test_consecutive_passes_continue_the_stream(reference: list[tuple[int, str]]) -> None:
    ds = to_stateful_dataset(small_pipeline())
    first = [view(b) for _, b in zip(range(3), ds.track(DataLoader(ds, batch_size=None, num_workers=0)),
                                     strict=False)]
    second = [view(b) for b in ds.track(DataLoader(ds, batch_size=None, num_workers=0))]
    assert first + second == reference


def test_bare_iteration_yields_stamped_items() -> None:
    ds = to_stateful_dataset(small_pipeline())
    item = next(iter(ds))
    assert isinstance(item, StampedItem) and item.role == 0 and item.num_workers == 1
    assert item.state["lane_emitted"]


def test_collated_items_and_pinning() -> None:
    ds = to_stateful_dataset(small_pipeline(), device="cpu")
    loader = DataLoader(ds, batch_size=None, num_workers=2)
    first = next(iter(ds.track(loader)))
    assert set(first) >= {"input_ids", "position_ids"} and first["input_ids"].dtype == torch.int64


@pytest.mark.parametrize(("kwargs", "error"), [
    ({"batch_size": 2}, ConfigError),
    ({"batch_size": None, "num_workers": 1, "persistent_workers": True}, ConfigError),
])
def test_configurations_that_cannot_be_checkpointed_are_refused(kwargs: dict[str, Any],
                                                                 error: type[Exception]) -> None:
    ds = to_stateful_dataset(small_pipeline())
    with pytest.raises(error, match="expected"):
        ds.track(DataLoader(ds, **kwargs))


def test_a_loader_over_another_dataset_is_refused() -> None:
    ds = to_stateful_dataset(small_pipeline())
    other = to_stateful_dataset(small_pipeline())
    with pytest.raises(ConfigError, match="this dataset"):
        ds.track(DataLoader(other, batch_size=None))
    with pytest.raises(ConfigTypeError, match="DataLoader"):
        ds.track([1, 2])
    with pytest.raises(ConfigTypeError, match="StampedItem"):
        ds.observe("not stamped")


def test_bad_states_are_refused_and_change_nothing() -> None:
    full, _ = run(2)
    head, state = run(2, stop=3)
    ds = to_stateful_dataset(small_pipeline())
    ds.load_state_dict(state)
    for bad, error in [
        ("nope", StateFormatError),
        ({**state, "format": "x"}, StateFormatError),
        ({**state, "num_workers": 0}, StateFormatError),
        ({**state, "next_role": 2}, StateFormatError),
        ({**state, "engine": []}, StateFormatError),
    ]:
        with pytest.raises(error):
            ds.load_state_dict(bad)
    # another pipeline's state (other data settings): refused by the pipeline's own checks
    other = to_stateful_dataset(small_pipeline(seed=6))
    with pytest.raises(StateMismatchError):
        ds.load_state_dict(other.state_dict())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        tail = [view(b) for b in ds.track(DataLoader(ds, batch_size=None, num_workers=2))]
    assert head + tail == full
    assert state["format"] == STATE_FORMAT


@pytest.mark.skipif(not torch.cuda.is_available(), reason="pinned memory needs a CUDA device")
def test_pin_memory_pins_the_stamped_items_tensors_only() -> None:
    ds = to_stateful_dataset(small_pipeline(), device="cpu")
    items = list(ds.track(DataLoader(ds, batch_size=None, num_workers=2, pin_memory=True)))
    assert items and all(t.is_pinned() for item in items for t in item.values())
    head, state = run(2, stop=3)
    assert state["engine"]["lane_emitted"]  # the stamp itself stays a plain dict


def test_a_pass_superseded_by_a_newer_iter_refuses_next_instead_of_ending_quietly() -> None:
    """to_torch_dataset() closes its previous pass when a new iter() starts (torchdata restoring a state
    taken after a pass ended opens the restored pass and at once the next one: docs/divergences.md D-100);
    the superseded pass must not read as a shortened whole stream: next() on it is a ContractError."""
    from zephon_ref.errors import ContractError

    whole = [view(b) for b in small_pipeline().to_torch_dataset()]
    ds = small_pipeline().to_torch_dataset()
    first = iter(ds)
    head = view(next(first))
    second = iter(ds)
    with pytest.raises(ContractError, match="superseded"):
        next(first)
    assert [head] == whole[:1]
    assert [view(b) for b in second] == whole  # the newer pass is the whole stream from the start

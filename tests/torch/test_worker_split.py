"""to_torch_dataset under real DataLoader workers: the lane split, idle workers, restore, pickling."""

from __future__ import annotations

import hashlib
import warnings
from collections import defaultdict
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="the torch path needs torch (pip install 'zephon_ref[torch]')")

from torch.utils.data import DataLoader  # noqa: E402

from zephon_ref.demo import build_demo_pipeline  # noqa: E402
from zephon_ref.engine.world import World, active_workers, worker_lanes  # noqa: E402
from zephon_ref.errors import ConfigError, ConfigTypeError, ContractError  # noqa: E402
from zephon_ref.pipeline import Pipeline  # noqa: E402
from zephon_ref.synthetic import synthetic_corpus  # noqa: E402
from zephon_ref.torch import to_torch_dataset  # noqa: E402
from zephon_ref.types import SampleBatch  # noqa: E402
from zephon_ref.work import StaticMixtureWorkSource  # noqa: E402

SMALL = {"web": (30, 22), "code": (18,), "books": (10,)}


def small_pipeline(lanes: int, **options: Any) -> Pipeline:
    """The demo chain (tokenize -> pack -> shuffle -> ensure_mixture -> batch) on a small corpus."""
    corpus = synthetic_corpus(seed=5, layout=SMALL, max_words=200)
    source = StaticMixtureWorkSource(list(corpus.datasets), {"web": 0.6, "code": 0.3, "books": 0.1},
                                     chunk_size=8, seed=5)
    return (Pipeline(source)
            .tokenize(field="text", max_length=48, split_long_samples=True)
            .pack_sequences(128, num_bins=3)
            .shuffle(16, seed=5)
            .ensure_mixture()
            .batch(2)
            .options(runner="inline", canonical_replicas=lanes, **options))


def view(batch: SampleBatch) -> tuple[int, str]:
    """(lane, digest of every record's cursor and tokens): equal views = identical batches."""
    assert isinstance(batch, SampleBatch) and len(set(batch.lane_ids)) == 1, "batches are lane-pure"
    h = hashlib.blake2b(digest_size=12)
    for rec in batch.records:
        h.update(repr(rec.meta.cursor.as_key()).encode())
        for seg in rec.payload["packed_samples"]:
            h.update(repr(list(seg["input_ids"])).encode())
    return batch.lane_ids[0], h.hexdigest()


class TagWorker:
    """A collate that runs in the worker: (worker id or -1 in the main process, lane, digest)."""

    def __call__(self, batch: SampleBatch) -> tuple[int, int, str]:
        info = torch.utils.data.get_worker_info()
        lane, digest = view(batch)
        return (-1 if info is None else info.id), lane, digest


def per_lane(views: list[tuple[int, str]]) -> dict[int, list[str]]:
    out: dict[int, list[str]] = defaultdict(list)
    for lane, digest in views:
        out[lane].append(digest)
    return dict(out)


def load(dataset: Any, num_workers: int, context: str = "fork") -> list[Any]:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*worker processes in total.*")
        loader = DataLoader(dataset, batch_size=None, num_workers=num_workers,
                            multiprocessing_context=context if num_workers else None)
        return list(loader)


_REFERENCE: dict[tuple[int, tuple[tuple[str, Any], ...]], list[tuple[int, str]]] = {}


def reference(lanes: int, **options: Any) -> list[tuple[int, str]]:
    """The single-process stream (memoised: every test compares with the same run)."""
    key = (lanes, tuple(sorted(options.items())))
    if key not in _REFERENCE:
        _REFERENCE[key] = [view(b) for b in small_pipeline(lanes, **options)]
    return _REFERENCE[key]


@pytest.mark.parametrize("lanes", [1, 2, 4, 6])
@pytest.mark.parametrize("num_workers", [0, 1, 2, 3, 4])
def test_each_lane_stream_is_identical_under_any_worker_count(num_workers: int, lanes: int) -> None:
    ref = reference(lanes)
    got = load(to_torch_dataset(small_pipeline(lanes), collate=TagWorker()), num_workers)
    # each lane delivers the single-process lane's batches, in order: nothing skipped or repeated
    assert per_lane([(lane, d) for _, lane, d in got]) == per_lane(ref)
    group = list(range(lanes))
    if num_workers == 0:
        assert {w for w, _, _ in got} == {-1}
    else:
        active = active_workers(lanes, num_workers)
        for w in range(num_workers):
            delivered = {lane for wid, lane, _ in got if wid == w}
            # worker w delivers exactly its World.worker_lanes share; idle workers deliver nothing
            assert delivered == set(worker_lanes(group, w, num_workers))
            if w >= active:
                assert delivered == set()
    if num_workers <= 1:  # one engine over every lane: the very same interleaving as iter(pipeline)
        assert [(lane, d) for _, lane, d in got] == ref


@pytest.mark.parametrize(("options", "num_workers"), [
    ({"world_size": 2, "global_rank": 1}, 2),
    ({"world_size": 2, "global_rank": 0, "mapping_strategy": "interleaved"}, 3),
    ({"world_size": 4, "global_rank": 3, "dp_degree": 2, "dp_group_id": 1}, 2),
])
def test_worker_split_applies_to_the_dp_groups_lanes(options: dict[str, Any], num_workers: int,
                                                     tmp_path: Any) -> None:
    lanes = 6
    group = World.resolve(canonical_replicas=lanes, **options).group_lanes
    options = {**options, "aggregate_dir": str(tmp_path)}  # world_size > 1 needs a backend (unused here)
    ref = reference(lanes, **options)
    assert {lane for lane, _ in ref} == set(group)
    got = load(to_torch_dataset(small_pipeline(lanes, **options), collate=TagWorker()), num_workers)
    assert per_lane([(lane, d) for _, lane, d in got]) == per_lane(ref)
    for w in range(num_workers):
        assert {lane for wid, lane, _ in got if wid == w} == set(worker_lanes(group, w, num_workers))


def test_restore_applies_to_every_workers_owned_lanes() -> None:
    lanes = 4
    ref = per_lane(reference(lanes))
    p = small_pipeline(lanes)
    it = iter(p)
    head = [view(next(it)) for _ in range(7)]
    state = p.checkpoint()
    for num_workers in (0, 3):
        resumed = small_pipeline(lanes).restore(state)
        tail = per_lane([(lane, d) for _, lane, d in load(to_torch_dataset(resumed, collate=TagWorker()),
                                                         num_workers)])
        done = per_lane(head)
        assert {lane: done.get(lane, []) + tail.get(lane, []) for lane in ref} == ref


def test_outside_a_dataloader_the_dataset_is_the_pipelines_own_iteration() -> None:
    p = small_pipeline(4)
    ds = to_torch_dataset(p)
    it = iter(ds)
    head = [view(next(it)) for _ in range(5)]
    state = p.checkpoint()  # the dataset drove the pipeline's own engine
    assert head == reference(4)[:5]
    rest = [view(b) for b in small_pipeline(4).restore(state)]
    assert head + rest == reference(4)


def test_device_collation_in_workers_yields_cpu_tensors() -> None:
    got = load(to_torch_dataset(small_pipeline(2), device="cpu"), 2)
    assert len(got) == len(reference(2))
    for item in got:
        assert set(item) == {"input_ids", "attention_mask", "segment_ids", "position_ids"}
        assert all(t.dtype == torch.int64 and t.device.type == "cpu" for t in item.values())


def test_spawned_workers_unpickle_the_dataset() -> None:
    got = load(to_torch_dataset(small_pipeline(2), collate=TagWorker()), 1, context="spawn")
    assert [(lane, d) for _, lane, d in got] == reference(2)


def test_a_cuda_device_inside_a_worker_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # forked workers inherit the patch
    ds = to_torch_dataset(small_pipeline(2), device="cuda")
    with pytest.raises(ContractError, match="device inside a DataLoader worker: expected 'cpu' or 'auto'"):
        load(ds, 1)


def test_argument_refusals() -> None:
    with pytest.raises(ConfigTypeError, match="pipeline: expected a zephon_ref Pipeline, received 'list'"):
        to_torch_dataset([])  # type: ignore[arg-type]
    with pytest.raises(ConfigTypeError, match="collate: expected None or a callable"):
        to_torch_dataset(small_pipeline(1), collate=3)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="device: expected None when a custom collate is given"):
        to_torch_dataset(small_pipeline(1), collate=TagWorker(), device="cpu")
    with pytest.raises(ConfigError, match="device: expected"):
        to_torch_dataset(small_pipeline(1), device="tpu")


def test_the_demo_pipeline_splits_the_same_way() -> None:
    ref = per_lane([view(b) for b in build_demo_pipeline(0, 4)])
    got = load(to_torch_dataset(build_demo_pipeline(0, 4), collate=TagWorker()), 2)
    assert per_lane([(lane, d) for _, lane, d in got]) == ref


def test_pipeline_method_is_the_module_function() -> None:
    from zephon_ref.demo import build_demo_pipeline

    direct = [b.records[0].meta.cursor for b in build_demo_pipeline(lanes=2).to_torch_dataset()]
    assert direct and direct == [b.records[0].meta.cursor for b in build_demo_pipeline(lanes=2)]

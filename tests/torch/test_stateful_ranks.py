"""The stateful dataset with several ranks, in one process: every worker shard joins one aggregation round.

Two "ranks" (two pipelines with world_size=2 and a shared aggregate_dir) each read
through a DataLoader with 2 workers; their state_dict() calls run concurrently (one
thread per rank, and inside each one thread per worker shard) and must return the
same merged state, which resumes a single-process pipeline lane by lane.
"""

from __future__ import annotations

import threading
import warnings
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="the torch path needs torch (pip install 'zephon_ref[torch]')")

from torch.utils.data import DataLoader  # noqa: E402

from zephon_ref.coordination.merge import merge  # noqa: E402
from zephon_ref.errors import ContractError  # noqa: E402
from zephon_ref.pipeline import Pipeline  # noqa: E402
from zephon_ref.synthetic import synthetic_corpus  # noqa: E402
from zephon_ref.torch import to_stateful_dataset  # noqa: E402
from zephon_ref.types import SampleBatch  # noqa: E402
from zephon_ref.work import StaticMixtureWorkSource  # noqa: E402

SMALL = {"web": (16, 12), "code": (10,), "books": (6,)}


def pipeline(**options: Any) -> Pipeline:
    corpus = synthetic_corpus(seed=5, layout=SMALL, max_words=200)
    source = StaticMixtureWorkSource(list(corpus.datasets), {"web": 0.6, "code": 0.3, "books": 0.1},
                                     chunk_size=8, seed=5)
    return (Pipeline(source).tokenize(field="text", max_length=48, split_long_samples=True)
            .pack_sequences(128, num_bins=3).shuffle(16, seed=5).ensure_mixture().batch(2)
            .options(runner="inline", canonical_replicas=4, **options))


def key(batch: SampleBatch) -> tuple[int, tuple[Any, ...]]:
    return batch.lane_ids[0], tuple(r.meta.cursor.as_key() for r in batch.records)


@pytest.mark.filterwarnings("ignore:checkpoint taken mid-window")
def test_every_worker_shard_of_every_rank_joins_one_round(tmp_path: Path) -> None:
    ranks = [to_stateful_dataset(pipeline(world_size=2, global_rank=r, aggregate_dir=str(tmp_path / "agg"),
                                          aggregate_timeout_s=60.0)) for r in range(2)]
    consumed: list[tuple[int, tuple[Any, ...]]] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        for ds, count in zip(ranks, (3, 2), strict=True):
            for _, batch in zip(range(count), ds.track(DataLoader(ds, batch_size=None, num_workers=2)),
                                strict=False):
                consumed.append(key(batch))
    states: dict[int, dict[str, Any]] = {}
    errors: list[BaseException] = []

    def checkpoint(rank: int) -> None:
        try:
            states[rank] = ranks[rank].state_dict()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=checkpoint, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert states[0]["engine"] == states[1]["engine"], "every participant gets the same merged state"
    engine = states[0]["engine"]
    assert sum(int(v) for v in engine["lane_emitted"].values()) == len(consumed) == 5
    # the merged state resumes one process: consumed + rest == the whole stream, lane by lane
    whole = [key(b) for b in pipeline()]
    resumed = pipeline()
    resumed.restore(engine)
    rest = [key(b) for b in resumed]
    assert sorted(consumed + rest) == sorted(whole)
    for lane in range(4):
        assert [k for k in consumed + rest if k[0] == lane] == [k for k in whole if k[0] == lane]


def test_a_custom_aggregate_gets_the_single_shard_and_is_refused_with_several(tmp_path: Path) -> None:
    opts = {"world_size": 2, "aggregate_dir": str(tmp_path)}
    ds0 = to_stateful_dataset(pipeline(global_rank=0, **opts))
    other = pipeline(global_rank=1, **opts).local_state()
    calls: list[Any] = []

    def aggregate(local: dict[str, Any], world: Any) -> tuple[dict[str, Any], str]:
        calls.append(world)
        return merge([local, other], warn_mid_window=False), "round-1"

    for _ in zip(range(2), ds0.track(DataLoader(ds0, batch_size=None, num_workers=0)), strict=False):
        pass
    state = ds0.state_dict(aggregate=aggregate)
    assert len(calls) == 1 and calls[0].global_rank == 0
    assert sum(int(v) for v in state["engine"]["lane_emitted"].values()) == 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        # the next pass starts from the state_dict() just taken (no round of its own)
        for _ in zip(range(2), ds0.track(DataLoader(ds0, batch_size=None, num_workers=2)), strict=False):
            pass
        with pytest.raises(ContractError, match="custom aggregate"):
            ds0.state_dict(aggregate=aggregate)
        # consumed items and no state_dict(): a new pass would need the ranks' round, so it is refused
        with pytest.raises(ContractError, match="state_dict"):
            ds0.track(DataLoader(ds0, batch_size=None, num_workers=0))

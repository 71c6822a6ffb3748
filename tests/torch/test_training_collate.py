"""collate_for_training (labels, loss mask, cu_seqlens / max_seqlen) and move_batch (pinned, non-blocking)."""

from __future__ import annotations

import warnings
from collections import defaultdict
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="the torch path needs torch (pip install 'zephon_ref[torch]')")

from torch.utils.data import DataLoader  # noqa: E402

from zephon_ref.demo import build_demo_pipeline  # noqa: E402
from zephon_ref.errors import ConfigTypeError  # noqa: E402
from zephon_ref.torch import (  # noqa: E402
    IGNORE_INDEX,
    TRAINING_FIELDS,
    collate_for_training,
    move_batch,
    to_torch_dataset,
)
from zephon_ref.types import SampleBatch, SampleMeta, SampleRecord  # noqa: E402

CUDA = torch.cuda.is_available()


def rec(payload: Any, offset: int = 0) -> SampleRecord:
    return SampleRecord(SampleMeta((0, 0, offset), 0, 0, offset), payload)


def packed(*segments: list[int], mask: list[list[int]] | None = None) -> SampleRecord:
    masks = mask or [[1] * len(s) for s in segments]
    return rec(
        {
            "packed_samples": [
                {"input_ids": list(s), "attention_mask": m} for s, m in zip(segments, masks, strict=True)
            ]
        }
    )


def rows(t: Any) -> list[list[int]]:
    return [list(map(int, r)) for r in t.tolist()]


def test_training_layout_is_exactly_the_documented_one() -> None:
    out = collate_for_training(SampleBatch((packed([5, 6, 7], [8, 9]), packed([3]), packed())))
    assert tuple(out) == TRAINING_FIELDS
    x = IGNORE_INDEX
    assert rows(out["labels"]) == [[6, 7, x, 9, x], [x] * 5, [x] * 5]
    assert rows(out["loss_mask"]) == [[1, 1, 0, 1, 0], [0] * 5, [0] * 5]
    assert out["cu_seqlens"].tolist() == [0, 3, 5, 6] and out["cu_seqlens"].dtype == torch.int32
    assert int(out["max_seqlen"]) == 3 and out["max_seqlen"].dim() == 0
    assert rows(out["position_ids"]) == [[0, 1, 2, 0, 1], [0] * 5, [0] * 5]


def test_masked_tokens_are_never_targets_and_ignore_index_is_a_knob() -> None:
    out = collate_for_training(SampleBatch((packed([1, 2, 3, 4], mask=[[1, 1, 0, 1]]),)), ignore_index=-1)
    assert rows(out["labels"]) == [[2, -1, 4, -1]]
    assert rows(out["loss_mask"]) == [[1, 0, 1, 0]]
    with pytest.raises(ConfigTypeError, match="ignore_index"):
        collate_for_training(SampleBatch((packed([1]),)), ignore_index=True)


def test_demo_batches_round_trip_through_cu_seqlens() -> None:
    checked = 0
    for batch in build_demo_pipeline(seed=3):
        out = collate_for_training(batch)
        segments = [list(seg["input_ids"]) for r in batch.records for seg in r.payload["packed_samples"]]
        flat = out["input_ids"][out["segment_ids"] > 0].tolist()
        flat_labels = out["labels"][out["segment_ids"] > 0].tolist()
        cu = out["cu_seqlens"].tolist()
        assert len(cu) == len(segments) + 1 and cu[-1] == len(flat)
        assert int(out["max_seqlen"]) == max(len(s) for s in segments)
        for i, seg in enumerate(segments):
            assert flat[cu[i]:cu[i + 1]] == seg
            assert flat_labels[cu[i]:cu[i + 1]] == seg[1:] + [IGNORE_INDEX]
        checked += 1
    assert checked >= 5


@pytest.mark.parametrize("n", [0, 1, 2, 4])
def test_worker_collated_tensors_equal_the_reference_batches(n: int) -> None:
    """Tensors collated in DataLoader workers equal collation of the pipeline's own batches, per lane."""
    want: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for batch in build_demo_pipeline(seed=1):
        want[batch.lane_ids[0]].append(collate_for_training(batch))
    ds = to_torch_dataset(build_demo_pipeline(seed=1), collate=LaneAndTensors())
    got: dict[int, list[dict[str, Any]]] = defaultdict(list)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        for lane, tensors in DataLoader(ds, batch_size=None, num_workers=n):
            got[int(lane)].append(tensors)
    assert sorted(got) == sorted(want)
    for lane, items in want.items():
        assert len(got[lane]) == len(items)
        for a, b in zip(got[lane], items, strict=True):
            assert tuple(a) == TRAINING_FIELDS
            for key in TRAINING_FIELDS:
                assert a[key].dtype == b[key].dtype and torch.equal(a[key], b[key]), (lane, key)


class LaneAndTensors:
    def __call__(self, batch: SampleBatch) -> tuple[int, dict[str, Any]]:
        return batch.lane_ids[0], collate_for_training(batch)


def test_move_batch_to_the_cpu_is_the_identity_and_walks_containers() -> None:
    t = torch.arange(4)
    moved = move_batch({"a": t, "b": [t, (t, "x")]}, "cpu")
    assert moved["a"] is t and moved["b"][0] is t and moved["b"][1][0] is t and moved["b"][1][1] == "x"
    with pytest.raises(ConfigTypeError, match="pin_memory"):
        move_batch(t, "cpu", pin_memory="yes")


@pytest.mark.skipif(not CUDA, reason="needs a CUDA device")
def test_move_batch_to_cuda_is_pinned_non_blocking_and_equal() -> None:
    batch = collate_for_training(next(iter(build_demo_pipeline(seed=2))))
    moved = move_batch(batch, "cuda")
    torch.cuda.synchronize()
    for key, value in batch.items():
        assert moved[key].device.type == "cuda"
        assert torch.equal(moved[key].cpu(), value)
    on_gpu = collate_for_training(next(iter(build_demo_pipeline(seed=2))), device="cuda")
    for key, value in on_gpu.items():
        assert value.device.type == "cuda" and torch.equal(value.cpu(), batch[key])

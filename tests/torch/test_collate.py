"""collate_batch: the documented tensor layout, token round trips, refusals and device selection."""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="the torch path needs torch (pip install 'zephon_ref[torch]')")

import numpy as np  # noqa: E402

from zephon_ref.demo import build_demo_pipeline  # noqa: E402
from zephon_ref.errors import ConfigError, ConfigTypeError  # noqa: E402
from zephon_ref.torch import COLLATED_FIELDS, collate_batch, resolve_device  # noqa: E402
from zephon_ref.types import SampleBatch, SampleMeta, SampleRecord  # noqa: E402


def rec(payload: Any, offset: int = 0) -> SampleRecord:
    return SampleRecord(SampleMeta((0, 0, offset), 0, 0, offset), payload)


def packed(*segments: list[int]) -> SampleRecord:
    return rec({"packed_samples": [{"input_ids": list(s), "attention_mask": [1] * len(s)} for s in segments]})


def rows(t: Any) -> list[list[int]]:
    return [list(map(int, r)) for r in t.tolist()]


def test_packed_layout_is_exactly_the_documented_one() -> None:
    out = collate_batch(SampleBatch((packed([5, 6, 7], [8, 9]), packed([3]), packed())))
    assert tuple(out) == COLLATED_FIELDS
    assert rows(out["input_ids"]) == [[5, 6, 7, 8, 9], [3, 0, 0, 0, 0], [0, 0, 0, 0, 0]]
    assert rows(out["attention_mask"]) == [[1, 1, 1, 1, 1], [1, 0, 0, 0, 0], [0, 0, 0, 0, 0]]
    assert rows(out["segment_ids"]) == [[1, 1, 1, 2, 2], [1, 0, 0, 0, 0], [0, 0, 0, 0, 0]]
    assert rows(out["position_ids"]) == [[0, 1, 2, 0, 1], [0, 0, 0, 0, 0], [0, 0, 0, 0, 0]]
    for t in out.values():
        assert t.dtype == torch.int64 and t.device.type == "cpu" and tuple(t.shape) == (3, 5)


def test_plain_token_records_are_one_segment_each_and_fields_auto_detect() -> None:
    batch = SampleBatch((rec({"tokens": (4, 2)}), rec({"ids": np.array([7, 1, 9], dtype=np.int32)}, 1),
                         rec({"token_ids": torch.tensor([11])}, 2)))
    out = collate_batch(batch, pad_token_id=-1)
    assert rows(out["input_ids"]) == [[4, 2, -1], [7, 1, 9], [11, -1, -1]]
    assert rows(out["segment_ids"]) == [[1, 1, 0], [1, 1, 1], [1, 0, 0]]
    assert rows(out["position_ids"]) == [[0, 1, 0], [0, 1, 2], [0, 0, 0]]
    assert rows(out["attention_mask"]) == [[1, 1, 0], [1, 1, 1], [1, 0, 0]]


def test_a_lone_record_is_a_batch_of_one_and_pad_to_fixes_the_width() -> None:
    out = collate_batch(rec({"input_ids": [1, 2]}), pad_to=4)
    assert rows(out["input_ids"]) == [[1, 2, 0, 0]]
    with pytest.raises(ConfigError, match=r"pad_to: expected >= the longest row \(2 tokens\), received 1"):
        collate_batch(rec({"input_ids": [1, 2]}), pad_to=1)
    empty = collate_batch(SampleBatch(()))
    assert all(tuple(t.shape) == (0, 0) for t in empty.values())


def test_a_segments_own_attention_mask_is_kept() -> None:
    out = collate_batch(rec({"input_ids": [4, 5, 0], "attention_mask": [1, 1, 0]}))
    assert rows(out["attention_mask"]) == [[1, 1, 0]]
    with pytest.raises(ConfigError, match="'attention_mask': expected 3 values in {0, 1}"):
        collate_batch(rec({"input_ids": [4, 5, 0], "attention_mask": [1, 1]}))


def test_explicit_tokens_field() -> None:
    r = rec({"input_ids": [1], "labels": [7, 8]})
    assert rows(collate_batch(r, tokens_field="labels")["input_ids"]) == [[7, 8]]
    with pytest.raises(
        ConfigError, match=r"record 0 segment 0 field 'tokens': expected present, received \["
    ):
        collate_batch(r, tokens_field="tokens")


def test_demo_batches_round_trip_their_tokens_and_collate_deterministically() -> None:
    batches = list(build_demo_pipeline(0, 2))[:12]
    assert batches
    for batch in batches:
        out = collate_batch(batch)
        again = collate_batch(batch)
        assert all(torch.equal(out[k], again[k]) for k in COLLATED_FIELDS)
        for r, record in enumerate(batch.records):
            segs = record.payload["packed_samples"]
            ids, seg_ids = out["input_ids"][r], out["segment_ids"][r]
            for k, seg in enumerate(segs, start=1):
                assert ids[seg_ids == k].tolist() == list(seg["input_ids"])
            n = sum(len(s["input_ids"]) for s in segs)
            assert int(out["attention_mask"][r].sum()) == n  # tokenize's masks are all ones
            assert int((seg_ids > 0).sum()) == n


@pytest.mark.parametrize(("item", "error", "message"), [
    ("text", ConfigTypeError, "batch: expected a SampleBatch, a SampleRecord or a list of SampleRecords"),
    ([3], ConfigTypeError, "batch record 0: expected a SampleRecord, received 'int'"),
    ([rec("text")], ConfigTypeError, "record 0 segment 0: expected a dict payload with a token field"),
    ([rec({"text": "a"})], ConfigError, "record 0 segment 0: expected one of the token fields"),
    ([rec({"input_ids": [1, 2.5]})], ConfigTypeError, "'input_ids' element: expected an int, received 2.5"),
    ([rec({"input_ids": [True]})], ConfigTypeError, "'input_ids' element: expected an int, received True"),
    ([rec({"input_ids": [[1], [2]]})], ConfigTypeError, "element: expected an int, received \\[1\\]"),
    ([rec({"input_ids": np.zeros((2, 2), dtype=np.int64)})], ConfigError, "expected a 1-D sequence of ints"),
    ([rec({"input_ids": [2**63]})], ConfigError, "expected an int that fits int64"),
    ([rec({"packed_samples": "x"})], ConfigTypeError, "record 0 packed_samples: expected a list of segment"),
])
def test_bad_items_are_refused_with_typed_errors(item: Any, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        collate_batch(item)


def test_bad_arguments_are_refused() -> None:
    r = rec({"input_ids": [1]})
    with pytest.raises(ConfigTypeError, match="pad_token_id: expected an int that fits int64, received True"):
        collate_batch(r, pad_token_id=True)
    with pytest.raises(ConfigError, match="pad_to: expected None or an int >= 0, received -1"):
        collate_batch(r, pad_to=-1)
    with pytest.raises(ConfigTypeError, match="tokens_field: expected 'auto' or a field name"):
        collate_batch(r, tokens_field="")


# -- devices ------------------------------------------------------------------------------------

def test_device_defaults_to_cpu() -> None:
    assert resolve_device(None).type == "cpu"
    assert resolve_device("cpu").type == "cpu"
    assert resolve_device(torch.device("cpu")).type == "cpu"


def test_without_cuda_auto_and_cuda_fall_back_to_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert resolve_device("auto").type == "cpu"  # silent: auto means "best available"
    with pytest.warns(
        RuntimeWarning, match="'cuda:0' requested but CUDA is not available: collating on the CPU"
    ):
        assert resolve_device("cuda:0").type == "cpu"
    with pytest.warns(RuntimeWarning):
        out = collate_batch(rec({"input_ids": [1, 2]}), device="cuda")
    assert out["input_ids"].device.type == "cpu"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_with_cuda_the_tensors_land_there_and_equal_the_cpu_ones() -> None:
    batch = next(iter(build_demo_pipeline(0, 2)))
    cpu, gpu = collate_batch(batch), collate_batch(batch, device="cuda")
    assert all(gpu[k].device.type == "cuda" and torch.equal(gpu[k].cpu(), cpu[k]) for k in COLLATED_FIELDS)


def test_bad_devices_are_refused() -> None:
    with pytest.raises(ConfigError, match="device: expected a 'cpu' or 'cuda' device, received 'meta'"):
        resolve_device("meta")
    with pytest.raises(
        ConfigError, match="device: expected None, 'auto', 'cpu', 'cuda' or 'cuda:N', received"
    ):
        resolve_device("not a device")
    with pytest.raises(
        ConfigTypeError, match="device: expected None, 'auto', a device string or a torch.device"
    ):
        resolve_device(3)


# -- torch stays optional -------------------------------------------------------------------------

def test_importing_zephon_ref_never_imports_torch() -> None:
    code = ("import sys, zephon_ref, zephon_ref.torch, zephon_ref.pipeline, zephon_ref.demo; "
            "assert 'torch' not in sys.modules, 'torch was imported'")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[2])


def test_missing_torch_is_a_typed_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` now raises ImportError
    with pytest.raises(
        ConfigError, match=r"torch: expected an importable torch \(pip install 'zephon_ref\[torch\]'\)"
    ):
        collate_batch(rec({"input_ids": [1]}))

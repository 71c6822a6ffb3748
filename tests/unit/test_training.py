"""Unit tests of ``SampleBatch.to_training`` (zephon_ref/training.py): refusals, warnings, lists and numpy.

The outputs themselves are compared with zephon 0.2.0 in
tests/conformance/test_to_training_conformance.py; these cases need neither zephon nor torch.
"""

from __future__ import annotations

import copy
import warnings
from typing import Any

import numpy as np
import pytest

from zephon_ref.errors import ConfigError, ConfigTypeError, ZephonRefError
from zephon_ref.training import NumpyLibrary, resolve_tensorizer, to_training
from zephon_ref.types import TAG_PACKING_METADATA, SampleBatch, SampleMeta, SampleRecord


def rec(i: int, payload: Any, pad: int | None = None) -> SampleRecord:
    tags = {} if pad is None else {TAG_PACKING_METADATA: {"padding_length": pad}}
    return SampleRecord(SampleMeta((0, 0, i), 0, 0, i, tags=tags), payload)


def batch() -> SampleBatch:
    return SampleBatch((
        rec(0, {"input_ids": [1, 5, 2, 1, 6, 2], "positions": [0, 1, 2, 0, 1, 2], "text": "a"}),
        rec(1, {"input_ids": [1, 7, 2, 0, 0, 0], "positions": [0, 1, 2, 0, 1, 2], "text": "b"}, pad=3),
    ))


BAD_KNOBS: list[tuple[dict[str, Any], type[Exception], str]] = [
    (dict(exclude_fields="ids"), ConfigTypeError, "exclude_fields"),
    (dict(return_loss_mask=True), ConfigError, "return_loss_mask"),
    (dict(return_padding_mask=True, extra_fields=["padding_mask"]), ConfigError, "padding_mask"),
    (dict(position_mode="continuous"), ConfigError, "position_mode"),
    (dict(return_labels=True, eos_mask_loss=True, eos_token_id=-1), ConfigError, "eos_token_id"),
    (dict(return_labels=True, eos_mask_loss=True, eos_token_id=True), ConfigError, "eos_token_id"),
    (dict(return_labels=True, eos_mask_loss=True, eos_token_id=2.0), ConfigError, "eos_token_id"),
    (dict(eos_mask_loss=True, eos_token_id=2), ConfigError, "eos_mask_loss"),
    (dict(return_labels=True, eos_mask_loss=True), ConfigError, "eos_token_id"),
    (dict(return_cu_seqlens=True, extra_fields=["max_seqlen"]), ConfigError, "cu_seqlens"),
    (dict(return_num_valid_tokens=True), ConfigError, "return_num_valid_tokens"),
    (dict(return_labels=True, return_num_valid_tokens=True, extra_fields=["num_valid_tokens"]), ConfigError,
     "num_valid_tokens"),
    (dict(return_labels=True, extra_fields=["loss_mask"]), ConfigError, "loss_mask"),
    (dict(tokens_field="tokens"), ConfigError, "'tokens'"),
    (dict(extra_fields=["attention_mask"]), ConfigError, "attention_mask"),
    (dict(extra_fields=["input_ids"]), ConfigError, "input_ids"),
    (dict(rename_fields={"labels": "y"}), ConfigError, "labels"),
    (dict(rename_fields={"input_ids": "texts"}), ConfigError, "texts"),
    (dict(rename_fields=[("input_ids", "x")]), ConfigError, "rename_fields"),
    (dict(rename_fields=["input_ids"]), ConfigTypeError, "rename_fields"),
]


@pytest.mark.parametrize(("knobs", "error", "names"), BAD_KNOBS)
@pytest.mark.parametrize("dtype", [None, np.int64])
def test_bad_knobs_are_typed_and_name_expected_and_received(knobs: dict[str, Any], error: type[Exception],
                                                           names: str, dtype: Any) -> None:
    b = batch()
    before = copy.deepcopy([r.payload for r in b])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(error) as info:
            b.to_training(dtype=dtype, **knobs)
    assert isinstance(info.value, ZephonRefError)
    msg = str(info.value)
    assert "expected" in msg and "received" in msg and names in msg, msg
    assert [r.payload for r in b] == before


@pytest.mark.parametrize(("payloads", "error"), [
    ([{"input_ids": [1, 2]}, [1, 2]], ConfigTypeError),        # a dict batch with a list in it
    ([np.array([1, 2]), {"input_ids": [1, 2]}], ConfigTypeError),  # an array batch with a dict in it
    ([[1, 2], [3, 4]], ConfigTypeError),                       # neither dicts nor shaped arrays
    ([{"text": "no tokens"}], ConfigError),                    # nothing auto-detects
    ([{"input_ids": [1, 2], "positions": [0, 1]}, {"input_ids": [1, 2]}], ConfigError),
    ([{"input_ids": [1, 2], "loss_mask": [1]}], ConfigError),  # misaligned supervision mask
])
def test_bad_payloads_are_typed(payloads: list[Any], error: type[Exception]) -> None:
    b = SampleBatch(tuple(rec(i, p) for i, p in enumerate(payloads)))
    with pytest.raises(error, match="expected .* received"):
        b.to_training(dtype=np.int64)


@pytest.mark.parametrize("dtype", [None, np.int64])
def test_boundaries_refuse_positions_that_do_not_start_at_zero(dtype: Any) -> None:
    b = SampleBatch((rec(0, {"input_ids": [1, 2, 3], "positions": [1, 2, 0]}),))
    with pytest.raises(ConfigError, match="positions"):
        b.to_training(dtype=dtype, return_cu_seqlens=True)
    with pytest.raises(ConfigError, match="positions"):
        SampleBatch((rec(0, {"input_ids": [1, 2, 3]}),)).to_training(dtype=dtype, return_cu_seqlens=True)


@pytest.mark.parametrize("dtype", [None, np.int64])
def test_padding_length_beyond_its_row_is_a_config_error(dtype: Any) -> None:
    """zephon 0.2.0 trips an AssertionError here (docs/divergences.md, to_training)."""
    b = SampleBatch((rec(0, {"input_ids": [1, 2, 3]}, pad=5),))
    with pytest.raises(ConfigError, match="padding_length"):
        b.to_training(dtype=dtype, return_labels=True)
    with pytest.raises(ConfigError, match="padding_length"):
        b.to_training(dtype=dtype, return_padding_mask=True)


def test_eos_token_id_without_masking_warns_at_the_caller() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        batch().to_training(dtype=None, eos_token_id=2)
    assert [w.category for w in caught] == [UserWarning]
    assert caught[0].filename == __file__


def test_labels_masks_and_boundaries_by_hand() -> None:
    """The docstring's packed ``[BOS, A, EOS, BOS, B, EOS]`` rows, worked out on paper."""
    out = batch().to_training(dtype=None, return_labels=True, eos_mask_loss=True, eos_token_id=2,
                              return_loss_mask=True, return_num_valid_tokens=True, return_cu_seqlens=True,
                              return_padding_mask=True, position_mode="sequence")
    assert list(out) == ["ids", "texts", "padding_mask", "input_ids", "labels", "positions", "loss_mask",
                         "num_valid_tokens", "cu_seqlens", "max_seqlen"]
    assert out["input_ids"] == [[1, 5, 2, 1, 6], [1, 7, 2, 0, 0]]
    # row 0: the EOS -> BOS prediction is masked; row 1: the three pad labels (the first of them
    # is also the prediction made from EOS)
    assert out["labels"] == [[5, 2, -100, 6, 2], [7, 2, -100, -100, -100]]
    assert out["loss_mask"] == [[1.0, 1.0, 0.0, 1.0, 1.0], [1.0, 1.0, 0.0, 0.0, 0.0]]
    assert out["num_valid_tokens"] == 6
    assert out["padding_mask"] == [[False] * 5, [False, False, False, True, True]]
    assert out["positions"] == [[0, 1, 2, 3, 4]] * 2  # numbered per row
    assert out["cu_seqlens"] == [[0, 3, 5], [0, 3, 5]]  # from the payload positions, input-aligned
    assert out["max_seqlen"] == [3, 3]
    flat = batch().to_training(dtype=np.int64, return_labels=True, return_cu_seqlens=True, flatten=True)
    assert flat["cu_seqlens"].tolist() == [0, 3, 5, 8, 10] and flat["cu_seqlens"].dtype == np.int32
    assert flat["max_seqlen"] == 3 and type(flat["max_seqlen"]) is int
    assert flat["input_ids"].shape == (10,)


def test_empty_batch() -> None:
    out = SampleBatch(()).to_training(return_labels=True, return_num_valid_tokens=True, return_loss_mask=True,
                                      return_padding_mask=True, return_cu_seqlens=True, flatten=True,
                                      position_mode="sequence", rename_fields={"labels": "y", "ids": "i"})
    assert out == {"i": [], "texts": [], "num_valid_tokens": 0, "loss_mask": [], "padding_mask": [],
                   "positions": [], "cu_seqlens": [0], "max_seqlen": 0}


def test_rename_swaps_and_exclusion_after_renaming() -> None:
    out = batch().to_training(dtype=None, return_labels=True,
                              rename_fields={"input_ids": "labels", "labels": "input_ids"},
                              exclude_fields=("texts", "input_ids", "absent"))
    assert list(out) == ["ids", "labels", "positions"]
    assert out["labels"][0] == [1, 5, 2, 1, 6]


def test_dtype_choice() -> None:
    assert resolve_tensorizer(None) is None
    assert resolve_tensorizer("int64") is None  # a dtype no library claims gives lists, as in zephon
    assert resolve_tensorizer("auto", libraries=()) is None
    numpy_only = resolve_tensorizer("auto", libraries=(NumpyLibrary(),))
    assert numpy_only is not None and numpy_only.library == "numpy"
    out = to_training(batch().records, dtype="auto", libraries=(NumpyLibrary(),))
    assert out["input_ids"].dtype == np.int64
    assert isinstance(batch().to_training(dtype=np.float32)["input_ids"], np.ndarray)


def test_auto_without_torch_is_numpy_int64(monkeypatch: pytest.MonkeyPatch) -> None:
    """zephon's rule: torch.long if torch imports, else np.int64."""
    import sys

    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` now raises ImportError
    out = batch().to_training(return_labels=True, return_loss_mask=True)
    assert isinstance(out["input_ids"], np.ndarray) and out["input_ids"].dtype == np.int64
    assert out["loss_mask"].dtype == np.float32


def test_ids_are_plain_tuples_as_in_zephon() -> None:
    """zephon's records carry ``sample_id`` as a plain tuple and ``to_training()["ids"]`` holds them;
    zephon_ref's records carry a SampleId (a NamedTuple of the same ints): ``ids`` holds plain tuples,
    so code testing ``type(i) is tuple`` or serialising with a strict encoder sees zephon's values."""
    from zephon_ref.types import SampleBatch, SampleId, SampleMeta, SampleRecord

    rec = SampleRecord(SampleMeta(sample_id=SampleId(1, 2, 3), lane_id=0, chunk_id=0), {"input_ids": [1, 2]})
    ids = SampleBatch([rec]).to_training()["ids"]
    assert ids == [(1, 2, 3)] and type(ids[0]) is tuple

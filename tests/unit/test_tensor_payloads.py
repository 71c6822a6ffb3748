"""Tensor payloads in the semantics without zephon: the joins and pads of zephon_ref.ops.tensors worked by
hand, tokenize's return_tensors, and that none of it imports torch unless a tensor is asked for
(house rule 10).  tests/conformance/test_tensor_payloads.py compares all of it with zephon 0.2.0."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from properties.opkit import rec, run
from zephon_ref.errors import ConfigError, ConfigTypeError, ContractError
from zephon_ref.ops import PackSequences, Tokenize
from zephon_ref.ops.tensors import is_tensor, join_tensors

ROOT = Path(__file__).resolve().parents[2]


def test_the_packing_semantics_and_numpy_arrays_load_no_torch() -> None:
    code = ("import sys, zephon_ref\n"
            "from zephon_ref.ops import PackSequences, Tokenize\n"
            "from properties.opkit import rec, run\n"
            "recs = [rec(0, 0, i, payload={'text': 'a b c'}) for i in range(3)]\n"
            "out = run(Tokenize(field='text', return_tensors='np'), [recs])\n"
            "assert type(out[0].payload['input_ids']).__name__ == 'ndarray'\n"
            "run(PackSequences(8, output='flat', num_bins=1, pad_token_id=0), [out])\n"
            "assert 'torch' not in sys.modules, 'torch was imported'\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def test_is_tensor_reads_the_type_only() -> None:
    class Tensor:  # a class of that name elsewhere is not torch's
        pass

    assert not is_tensor(Tensor()) and not is_tensor(np.arange(2)) and not is_tensor([1])


@pytest.fixture
def torch() -> object:
    return pytest.importorskip("torch")


def test_join_tensors_by_hand(torch: Any) -> None:
    a, b = torch.tensor([1, 2], dtype=torch.int32), torch.tensor([3], dtype=torch.int64)
    got = join_tensors([a, b])
    assert got.tolist() == [1, 2, 3] and got.dtype == torch.int64  # torch's promotion
    d = join_tensors([{"x": a, "y": a}, {"x": b, "y": b, "z": b}])
    assert list(d) == ["x", "y"] and d["x"].tolist() == [1, 2, 3]  # the first entry's keys
    with pytest.raises(ConfigTypeError, match="torch tensors"):
        join_tensors([a, [3]])
    with pytest.raises(ConfigTypeError, match="dicts like the first"):
        join_tensors([{"x": a}, b])
    with pytest.raises(ConfigError, match="every key of the first"):
        join_tensors([{"x": a, "y": a}, {"x": b}])
    with pytest.raises(ContractError, match="0-dim"):
        join_tensors([torch.tensor(1), torch.tensor(2)])
    with pytest.raises(ContractError, match="trailing sizes"):
        join_tensors([torch.ones(2, 2), torch.ones(2, 3)])


def test_pack_flat_pads_a_tensor_row_in_its_dtype(torch: Any) -> None:
    recs = [rec(0, 0, 0, payload={"input_ids": torch.tensor([5, 6], dtype=torch.int16),
                                  "m": torch.tensor([True, True])})]
    (row,) = run(PackSequences(5, output="flat", num_bins=1, pad_token_id=9), [recs])
    p = row.payload
    assert p["input_ids"].dtype == torch.int16 and p["input_ids"].tolist() == [5, 6, 9, 9, 9]
    assert p["m"].tolist() == [True, True, False, False, False]
    assert p["positions"].tolist() == [0, 1, 0, 1, 2] and p["positions"].dtype == np.int32
    with pytest.raises(ConfigError, match="representable in torch.uint8"):
        run(PackSequences(5, output="flat", num_bins=1, pad_token_id=300),
            [[rec(0, 0, 0, payload={"input_ids": torch.tensor([1], dtype=torch.uint8)})]])
    with pytest.raises(ConfigTypeError, match="concatenate"):
        run(PackSequences(5, output="flat", num_bins=1, pad_token_id=0),
            [[rec(0, 0, 0, payload={"input_ids": torch.tensor([1])}),
              rec(0, 0, 1, payload={"input_ids": [2]})]])


def test_tokenize_return_tensors_by_hand(torch: Any) -> None:
    recs = [rec(0, 0, 0, payload={"text": "a b"}), rec(0, 0, 1, payload={"text": ""})]
    pt = run(Tokenize(field="text", return_tensors="pt", special_tokens="none"), [recs])
    assert pt[0].payload["input_ids"].dtype == torch.int64 and len(pt[0].payload["input_ids"]) == 2
    assert pt[1].payload["input_ids"].dtype == torch.float32  # torch.tensor([]), as zephon emits
    np_ = run(Tokenize(field="text", return_tensors="np"), [recs])
    assert np_[1].payload["attention_mask"].tolist() == [1, 1]
    assert np_[1].payload["input_ids"].dtype == np.int64
    with pytest.raises(ContractError, match="tensorflow"):
        run(Tokenize(field="text", return_tensors="tf"), [recs])


@pytest.mark.parametrize("value", [np.array(3), np.int64(3), np.float32(3.0), np.bool_(True)],
                         ids=["0-d array", "np.int64", "np.float32", "np.bool_"])
def test_a_numpy_scalar_beside_the_tokens_is_refused_as_zephon_refuses_it(value: Any) -> None:
    """zephon 0.2.0 measures a numpy scalar or 0-d array as a length and refuses it (ValueError); a
    Python int / float (np.float64 is one) is left out of the row, on both."""
    pack = PackSequences(8, output="flat", num_bins=1, pad_token_id=0)
    with pytest.raises(ConfigError, match="payload field 's'"):
        run(pack, [[rec(0, 0, 0, payload={"input_ids": [1, 2, 3], "s": value})]])
    (row,) = run(pack, [[rec(0, 0, 0, payload={"input_ids": [1, 2, 3], "s": np.float64(3.0)})]])
    assert sorted(row.payload) == ["input_ids", "positions"]


def test_numpy_fields_that_do_not_join_are_refused_typed() -> None:
    """A 2-D numpy field cannot take pack_flat's 1-D pad (zephon: numpy's bare ValueError)."""
    pack = PackSequences(8, output="flat", num_bins=1, pad_token_id=0)
    with pytest.raises(ConfigError, match="field 'e' to pad with 0"):
        run(pack, [[rec(0, 0, 0, payload={"input_ids": np.arange(3), "e": np.ones((3, 2))})]])
    (row,) = run(PackSequences(3, output="flat", num_bins=1, pad_token_id=0),
                 [[rec(0, 0, 0, payload={"input_ids": np.arange(3), "e": np.ones((3, 2))})]])
    assert row.payload["e"].shape == (3, 2)  # a full row needs no pad

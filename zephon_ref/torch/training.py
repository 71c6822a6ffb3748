"""torch as a tensor library of ``SampleBatch.to_training`` (the semantics are :mod:`zephon_ref.training`).

Theory of operation
-------------------
The semantics compute on numpy arrays; this module supplies the two ends for torch dtypes:

* :meth:`_TorchTensorizer.stack` builds the torch tensor of the payload rows exactly as
  zephon 0.2.0 would (``torch.stack`` of tensor rows, ``torch.from_numpy`` of numpy rows,
  ``torch.tensor`` of anything else, then the dtype), so values, rounding and refusals are
  torch's; it hands the semantics that tensor's values as a numpy array of the *compute*
  dtype: the same dtype where numpy has one, ``float64`` for ``bfloat16`` (every bfloat16
  value is exact in float64, and the fills, comparisons and counts are exact there too).
* :meth:`_TorchTensorizer.emit` turns a finished array back into a CPU tensor of the requested
  dtype (or ``float32``, ``bool``, ``int32`` for the fixed kinds).

:func:`install` puts the library first among ``to_training``'s libraries, so ``dtype="auto"``
means ``torch.long`` whenever torch imports (as in zephon).  Importing this module never imports
torch; :meth:`TorchLibrary.available` tries it on first use.

What may not live here: any step of the conversion itself (that is :mod:`zephon_ref.training`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from zephon_ref.errors import ConfigError, ConfigTypeError, ContractError, expected
from zephon_ref.training import Kind, Tensorizer, install_tensor_library

__all__ = ["TorchLibrary", "install"]


def _numpy_twin(dtype: Any) -> Any:
    """numpy's dtype of the same name, or None (bfloat16, the float8s, quantized dtypes)."""
    try:
        return np.dtype(str(dtype).removeprefix("torch."))
    except TypeError:
        return None


def _compute_dtype(dtype: Any) -> Any:
    twin = _numpy_twin(dtype)
    if twin is not None:
        return twin
    if getattr(dtype, "is_floating_point", False):
        return np.float64  # every value of a narrower float is exact in float64
    raise ConfigTypeError(expected("dtype", "a torch dtype numpy has a twin of, or a floating one", dtype))


@dataclass(frozen=True, slots=True)
class _TorchTensorizer:
    torch: Any
    dtype: Any
    compute: Any
    library: str = "torch"

    def stack(self, rows: list[Any], what: str) -> np.ndarray:
        torch = self.torch
        try:
            if isinstance(rows[0], torch.Tensor):
                t = torch.stack(rows).to(dtype=self.dtype)
            elif "numpy" in type(rows[0]).__module__:
                t = torch.from_numpy(np.array(rows)).to(dtype=self.dtype)
            else:
                t = torch.tensor(rows, dtype=self.dtype)
        except (TypeError, ValueError, RuntimeError) as exc:
            msg = f"{expected(what, f'rows torch can stack as {self.dtype}', type(rows[0]).__name__)}: {exc}"
            if isinstance(exc, TypeError):
                raise ConfigTypeError(msg) from exc
            if isinstance(exc, ValueError):
                raise ConfigError(msg) from exc
            raise ContractError(msg) from exc
        t = t.detach().cpu()
        if _numpy_twin(t.dtype) is None:
            t = t.to(torch.float64)
        return np.asarray(t.numpy(), dtype=self.compute)

    def emit(self, array: np.ndarray, kind: Kind) -> Any:
        torch = self.torch
        target = {"data": self.dtype, "float32": torch.float32, "bool": torch.bool,
                  "int32": torch.int32}[kind]
        return torch.from_numpy(np.ascontiguousarray(array)).to(dtype=target)

    def _cast(self, value: Any, dtype: Any) -> Any:
        t = self.torch.tensor(value).to(dtype)
        return (t.to(self.torch.float64) if _numpy_twin(dtype) is None else t).item()

    def scalar(self, value: Any) -> Any:
        # torch compares a tensor with a Python scalar in their common dtype (a same-kind scalar
        # takes the tensor's dtype: -100 next to uint8 is 156)
        return self._cast(value, self.torch.result_type(self.torch.empty(0, dtype=self.dtype), value))

    def fill(self, array: np.ndarray, where: np.ndarray, value: Any, *, promote: bool) -> np.ndarray:
        # masked_fill keeps the tensor's dtype, casting the value into it
        out: np.ndarray = array.copy()
        out[where] = self._cast(value, self.dtype)
        return out


@dataclass(frozen=True, slots=True)
class TorchLibrary:
    """torch tensors; ``"auto"`` means ``torch.long``."""

    name: str = "torch"

    def available(self) -> bool:
        try:
            import torch  # noqa: F401
        except ImportError:
            return False
        return True

    def tensorizer(self, dtype: Any) -> Tensorizer:
        import torch

        if isinstance(dtype, str) and dtype == "auto":
            dtype = torch.long
        return _TorchTensorizer(torch, dtype, _compute_dtype(dtype))

    def array(self, values: list[Any]) -> Any:
        import torch

        return torch.tensor(values)


def install() -> None:
    """Make torch the preferred library of ``to_training`` (idempotent)."""
    install_tensor_library(TorchLibrary())

"""Torch tensors in payloads: what packing does with them, without importing torch.

Theory of operation
-------------------
zephon 0.2.0 packs payload fields that are torch tensors with torch's own operations, and so does
zephon_ref (measured against zephon 0.2.0 in tests/conformance/test_tensor_payloads.py):

* ``pack_flat`` joins a field's slices along the first axis when the *first* slice is a tensor
  (:func:`concat_tensors`): torch's type promotion decides the dtype (int32 beside int64 gives
  int64, an int beside a float a float, bool beside int an int); a later slice that is a list or a
  numpy array is refused (TypeError), slices of another number of dims or other trailing sizes too
  (RuntimeError, as torch's);
* a partial row is padded (:func:`pad_tensor`) with a one-dimensional run of the pad value in the
  field's dtype (and device): the token field with ``pad_token_id``, the other aligned fields with
  0; a pad id outside an integer dtype's range is refused (ValueError), bool and floating dtypes
  take it as torch casts it (``9`` is ``True`` in a bool field); a field of more than one dim
  cannot take a one-dimensional pad (RuntimeError);
* ``pack_sequences(pack_payloads="torch_tensor")`` (:func:`join_tensors`) joins a bin's entries:
  bare tensors are concatenated; dict entries give one tensor per key of the *first* entry (a key
  only later entries have is dropped), the concatenation of that key's values.  Per key, in the
  first entry's order: every entry must be a dict holding the key (else a typed ConfigTypeError /
  ConfigError: zephon raises IndexError / KeyError there, divergence D-8), every value a tensor
  (TypeError), and the tensors must concatenate (RuntimeError: 0-dim tensors, other trailing sizes).

A tensor can exist only once torch has been imported, so the module that made it is in
``sys.modules``: :func:`torch_of` takes it from there.  Nothing here imports torch (house rule 10)
and nothing is kept between calls (house rule 8): every function is a pure function of the values
it is given.  Errors are zephon_ref's, of the builtin torch (or zephon) raises, naming what was
expected and what was received.

What may not live here: importing torch; making a tensor out of Python values (``tokenize``'s
``return_tensors`` asks the installed tensor libraries of :mod:`zephon_ref.training`, which the
torch path fills, because torch need not be loaded there).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import Any

from zephon_ref.errors import ConfigError, ConfigTypeError, ContractError, expected

__all__ = ["concat_tensors", "is_tensor", "join_entries", "join_tensors", "pad_tensor", "torch_of"]


def is_tensor(value: Any) -> bool:
    """Whether ``value`` is a ``torch.Tensor`` (or a subclass: a Parameter), told by its type alone."""
    return any(c.__name__ == "Tensor" and c.__module__ == "torch" for c in type(value).__mro__)


def torch_of(value: Any) -> Any:
    """The torch module that made the tensor ``value`` (already imported: no import happens)."""
    assert is_tensor(value), f"torch_of needs a tensor, got {type(value).__name__}"
    return sys.modules["torch"]


def _ours(exc: Exception, what: str, want: str) -> Exception:
    """A zephon_ref error of the builtin kind torch raised (TypeError, ValueError or RuntimeError)."""
    msg = expected(what, want, f"{type(exc).__name__}: {exc}")
    if isinstance(exc, TypeError):
        return ConfigTypeError(msg)
    if isinstance(exc, ValueError):
        return ConfigError(msg)
    return ContractError(msg)


def _cat(parts: list[Any], what: str) -> Any:
    torch = torch_of(parts[0])
    try:
        return torch.cat(parts, dim=0)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise _ours(exc, what, "tensors torch.cat joins along the first axis (same number of dims "
                    "and trailing sizes, not 0-dim)") from exc


def concat_tensors(parts: list[Any], name: str) -> Any:
    """pack_flat: the slices of field ``name`` joined along the first axis (the first is a tensor)."""
    return _cat(parts, f"field {name!r} to concatenate")


def pad_tensor(value: Any, count: int, fill: int, name: str) -> Any:
    """``value`` with ``count`` copies of ``fill`` (in its dtype and on its device) appended."""
    torch = torch_of(value)
    dtype = value.dtype
    if not (dtype.is_floating_point or dtype.is_complex or dtype == torch.bool):
        info = torch.iinfo(dtype)
        if not info.min <= fill <= info.max:
            raise ConfigError(expected(f"pad value for field {name!r}",
                                       f"an id representable in {dtype} (or widen the dtype)", fill))
    return _cat([value, value.new_full((count,), fill)], f"field {name!r} to pad with {fill}")


def join_entries(entries: list[Any], kind: str, joined: Callable[[list[Any], str], Any]) -> Any:
    """``pack_payloads=kind`` (``"torch_tensor"``, ``"numpy_array"``): a bin's entries joined by
    ``joined(parts, what)`` under the per-key rule of the module docstring, the same for both kinds."""
    first = entries[0]
    if not isinstance(first, Mapping):
        return joined(entries, "payloads")
    out: dict[Any, Any] = {}
    for key in first:
        parts = []
        for e in entries:
            if not isinstance(e, Mapping):
                raise ConfigTypeError(expected(f"pack_payloads={kind!r} payloads",
                                               "dicts like the first", type(e).__name__))
            if key not in e:
                raise ConfigError(expected(f"pack_payloads={kind!r} payload keys",
                                           f"every key of the first payload {list(first)}", sorted(e)))
            parts.append(e[key])
        out[key] = joined(parts, f"values of {key!r}")
    return out


def join_tensors(entries: list[Any]) -> Any:
    """``pack_payloads="torch_tensor"``: a bin's entries joined (see the module docstring)."""
    def joined(parts: list[Any], what: str) -> Any:
        kinds = sorted({type(x).__name__ for x in parts if not is_tensor(x)})
        if kinds:
            raise ConfigTypeError(expected(f"pack_payloads='torch_tensor' {what}", "torch tensors", kinds))
        return _cat(parts, f"pack_payloads='torch_tensor' {what}")

    return join_entries(entries, "torch_tensor", joined)

"""Training tensors from a batch: the semantics of ``SampleBatch.to_training`` (zephon 0.2.0's knobs).

Theory of operation
-------------------
:func:`to_training` turns the records of one batch into the dict a training step consumes:
``ids`` and ``texts`` (always lists), ``input_ids``, and on request next-token ``labels``,
payload fields, masks, positions and packed-sequence metadata.  It runs in four steps:

1. **Knobs** are checked before any record is read (:func:`check_knobs`), in zephon's order,
   so the first bad knob is the one named.
2. **Extraction** reads the payloads: dict payloads give the token field (``tokens_field``, or
   the first of :data:`TOKEN_FIELD_CANDIDATES` that has a length), ``text``, the
   ``extra_fields``, the automatic ``positions`` and ``loss_mask`` fields; array payloads
   (anything with a ``shape``) are the token rows themselves.
3. **Computation** happens in one of two forms, chosen by ``dtype``: Python lists of rows
   (``dtype=None``, or a dtype no tensor library claims), or numpy arrays.  Every mask, shift,
   fill, count and boundary below is written once per form, here.
4. **Emission**: in array form a :class:`Tensorizer` stacks the payload rows into numpy arrays
   (its *compute* dtype) and turns each finished array into the library's output
   (numpy itself, or torch tensors), of one of four kinds: the requested dtype (``"data"``),
   ``float32`` (a returned loss mask), ``bool`` (a padding mask), ``int32`` (boundaries and
   per-row maxima).

Per record, in this order: labels are ``tokens[1:]`` and inputs ``tokens[:-1]``; the
record's trailing ``meta.padding_length`` labels become ``ignore_index`` (an all-padding row
keeps one fewer, since the shift dropped one); a payload ``loss_mask`` shifted into label
alignment masks the labels it zeroes; ``eos_mask_loss`` masks the labels whose *input* is
``eos_token_id``; then the loss mask and the valid-token count read the labels, boundaries
(``cu_seqlens``, ``max_seqlen``) read the input-aligned payload positions, ``position_mode=
"sequence"`` replaces the positions by ``0..S-1``, ``flatten`` joins rows, and finally
``rename_fields`` and ``exclude_fields`` rename and drop output keys.

Which tensor library a dtype belongs to is decided by name (the dtype's module, its type's
module, its text), among the libraries installed with :func:`install_tensor_library`; numpy
is built in.  The semantics never import a tensor library: the machinery installs it
(``zephon_ref.torch.training``, installed when the package is imported), and ``dtype="auto"``
takes the first installed library that is available (torch before numpy), as zephon does.

What may not live here: any import of torch, I/O, or knowledge of operators and engine state.
"""

from __future__ import annotations

import warnings
from collections import Counter
from collections.abc import Mapping, Sequence, Sized
from dataclasses import dataclass
from numbers import Integral
from typing import Any, Literal, Protocol

import numpy as np

from zephon_ref.errors import ConfigError, ConfigTypeError, ContractError, expected

__all__ = [
    "OUTPUT_KINDS",
    "TOKEN_FIELD_CANDIDATES",
    "TrainingConversion",
    "NumpyLibrary",
    "TensorLibrary",
    "Tensorizer",
    "check_knobs",
    "install_tensor_library",
    "installed_tensor_libraries",
    "resolve_tensorizer",
    "tensor_library",
    "to_training",
]

#: Token field names ``tokens_field="auto"`` tries, in order (zephon 0.2.0's list).
TOKEN_FIELD_CANDIDATES = ("input_ids", "tokens", "token_ids", "ids")

Kind = Literal["data", "float32", "bool", "int32"]
#: What an emitted array is: the requested dtype, or one of the fixed dtypes.
OUTPUT_KINDS: tuple[Kind, ...] = ("data", "float32", "bool", "int32")

_INT32_MAX = 2**31 - 1


class Tensorizer(Protocol):
    """The array form's two ends: payload rows in, library values out."""

    @property
    def library(self) -> str:
        """The library's name (``"numpy"``, ``"torch"``)."""
        ...

    def stack(self, rows: list[Any], what: str) -> np.ndarray:
        """The rows as one numpy array in the compute dtype (same values the library would hold)."""
        ...

    def emit(self, array: np.ndarray, kind: Kind) -> Any:
        """The finished array as the library's value of ``kind``."""
        ...

    def scalar(self, value: Any) -> Any:
        """``value`` as the library sees it when compared with an array of the compute dtype."""
        ...

    def fill(self, array: np.ndarray, where: np.ndarray, value: Any, *, promote: bool) -> np.ndarray:
        """A copy of ``array`` holding ``value`` where ``where`` is True, by the library's casting
        rule: ``promote`` asks for the dtype a select would give (numpy's ``where``) rather than
        an assignment into the array's own dtype."""
        ...


class TensorLibrary(Protocol):
    """A tensor library ``dtype`` can name.  ``name`` is the marker looked for in a dtype's name."""

    @property
    def name(self) -> str: ...

    def available(self) -> bool:
        """Whether ``dtype="auto"`` may pick this library."""
        ...

    def tensorizer(self, dtype: Any) -> Tensorizer:
        """The tensorizer for ``dtype`` (``"auto"``: the library's default integer dtype)."""
        ...

    def array(self, values: list[Any]) -> Any:
        """The library's array of a Python list, in the dtype the library infers (``numpy.array``,
        ``torch.tensor``: ints give int64, an empty list the default float dtype): what
        ``tokenize(return_tensors=...)`` emits per field."""
        ...


def _reraise_as_ours(exc: BaseException, what: str, want: str, got: Any) -> Exception:
    """A zephon_ref error of the same builtin kind as ``exc`` (what the library raised)."""
    msg = f"{expected(what, want, got)}: {exc}"
    if isinstance(exc, TypeError):
        return ConfigTypeError(msg)
    if isinstance(exc, ValueError):
        return ConfigError(msg)
    return ContractError(msg)


@dataclass(frozen=True, slots=True)
class _NumpyTensorizer:
    dtype: Any
    library: str = "numpy"

    def stack(self, rows: list[Any], what: str) -> np.ndarray:
        try:
            return np.stack([np.asarray(r, dtype=self.dtype) for r in rows])
        except (TypeError, ValueError) as exc:  # an OverflowError passes through, as in zephon
            raise _reraise_as_ours(exc, what, f"rows numpy can stack as {self.dtype!r}",
                                   type(rows[0]).__name__) from exc

    def emit(self, array: np.ndarray, kind: Kind) -> Any:
        if kind == "data":
            return array
        return array.astype({"float32": np.float32, "bool": np.bool_, "int32": np.int32}[kind])

    def scalar(self, value: Any) -> Any:
        return value

    def fill(self, array: np.ndarray, where: np.ndarray, value: Any, *, promote: bool) -> np.ndarray:
        if promote:
            return np.where(where, value, array)
        out: np.ndarray = array.copy()
        out[where] = value
        return out


@dataclass(frozen=True, slots=True)
class NumpyLibrary:
    """numpy arrays; ``"auto"`` means ``np.int64``."""

    name: str = "numpy"

    def available(self) -> bool:
        return True

    def tensorizer(self, dtype: Any) -> Tensorizer:
        return _NumpyTensorizer(np.int64 if isinstance(dtype, str) and dtype == "auto" else dtype)

    def array(self, values: list[Any]) -> Any:
        return np.array(values)


# The installed libraries, most preferred first.  Written only by install_tensor_library, which the
# package runs once at import (zephon_ref/__init__.py); the value depends on nothing but that.
_LIBRARIES: list[TensorLibrary] = [NumpyLibrary()]


def install_tensor_library(library: TensorLibrary) -> None:
    """Prefer ``library`` over those installed before it (re-installing a name replaces it)."""
    _LIBRARIES[:] = [library] + [lib for lib in _LIBRARIES if lib.name != library.name]


def installed_tensor_libraries() -> tuple[TensorLibrary, ...]:
    return tuple(_LIBRARIES)


def tensor_library(name: str) -> TensorLibrary | None:
    """The installed library called ``name`` (``"numpy"``, ``"torch"``), or None."""
    return next((lib for lib in _LIBRARIES if lib.name == name), None)


def resolve_tensorizer(dtype: Any, libraries: Sequence[TensorLibrary] | None = None) -> Tensorizer | None:
    """The tensorizer ``dtype`` selects, or None for lists.

    ``None`` means lists; ``"auto"`` the first available library; anything else the first
    library whose name appears in the dtype's own module, else its type's module, else its
    text.  A dtype no library claims gives lists (as zephon 0.2.0 does).
    """
    libs = tuple(_LIBRARIES if libraries is None else libraries)
    if dtype is None:
        return None
    if isinstance(dtype, str) and dtype == "auto":
        for lib in libs:
            if lib.available():
                return lib.tensorizer("auto")
        return None
    probes = (str(getattr(dtype, "__module__", "") or ""), str(type(dtype).__module__), str(dtype))
    for probe in probes:
        for lib in libs:
            if lib.name in probe:
                return lib.tensorizer(dtype)
    return None


# --------------------------------------------------------------------------------------------
# 1. knobs


def check_knobs(
    *,
    return_labels: bool,
    extra_fields: Sequence[str],
    exclude_fields: Sequence[str],
    return_num_valid_tokens: bool,
    return_loss_mask: bool,
    return_cu_seqlens: bool,
    return_padding_mask: bool,
    eos_mask_loss: bool,
    eos_token_id: Any,
    position_mode: Any,
    stacklevel: int = 2,
) -> None:
    """Refuse contradictory or malformed knobs before any record is read (zephon's order)."""
    if isinstance(exclude_fields, str):
        raise ConfigTypeError(expected("exclude_fields", "a sequence of field names, not a string",
                                       exclude_fields))
    if return_loss_mask and not return_labels:
        raise ConfigError(expected("return_loss_mask=True", "return_labels=True", return_labels))
    if return_padding_mask and "padding_mask" in extra_fields:
        raise ConfigError(expected("extra_fields with return_padding_mask=True",
                                   "no 'padding_mask' (it is generated)", list(extra_fields)))
    if position_mode not in ("preserve", "sequence"):
        raise ConfigError(expected("position_mode", "'preserve' or 'sequence'", position_mode))
    if eos_token_id is not None and (
        isinstance(eos_token_id, bool) or not isinstance(eos_token_id, Integral) or eos_token_id < 0
    ):
        raise ConfigError(expected("eos_token_id", "a nonnegative integer or None", eos_token_id))
    if eos_mask_loss and not return_labels:
        raise ConfigError(expected("eos_mask_loss=True", "return_labels=True", return_labels))
    if eos_mask_loss and eos_token_id is None:
        raise ConfigError(expected("eos_mask_loss=True", "an explicit eos_token_id", eos_token_id))
    if eos_token_id is not None and not eos_mask_loss:
        warnings.warn(
            f"eos_token_id={eos_token_id!r} is ignored when eos_mask_loss=False; "
            "set eos_mask_loss=True to mask the labels predicted from EOS tokens.",
            UserWarning,
            stacklevel=stacklevel,
        )
    if return_cu_seqlens and {"cu_seqlens", "max_seqlen"}.intersection(extra_fields):
        raise ConfigError(expected("extra_fields with return_cu_seqlens=True",
                                   "no 'cu_seqlens' or 'max_seqlen' (they are generated)",
                                   list(extra_fields)))
    if return_num_valid_tokens:
        if not return_labels:
            raise ConfigError(expected("return_num_valid_tokens=True", "return_labels=True", return_labels))
        if "num_valid_tokens" in extra_fields:
            raise ConfigError(expected("extra_fields with return_num_valid_tokens=True",
                                       "no 'num_valid_tokens' (it is generated)", list(extra_fields)))
    if return_labels and "loss_mask" in extra_fields:
        raise ConfigError(expected(
            "extra_fields with return_labels=True",
            "no 'loss_mask' (extra fields are input-aligned; use return_loss_mask=True for the "
            "label-aligned mask, or return_labels=False for the raw one)",
            list(extra_fields),
        ))


# --------------------------------------------------------------------------------------------
# 2. extraction


def _has_length(value: Any) -> bool:
    """Whether ``tokens_field="auto"`` accepts ``value`` (an int, sized, a scalar or shaped array)."""
    if isinstance(value, (int, Sized)):
        return True
    if callable(getattr(value, "item", None)):
        return True
    shape = getattr(value, "shape", None)
    return shape is not None and len(shape) > 0


@dataclass(slots=True)
class _Extracted:
    tokens: list[Any]
    texts: list[str]
    extras: dict[str, list[Any]]  # in output order; "positions" last when surfaced automatically
    loss_masks: list[Any] | None


def _extract_dicts(payloads: list[Any], tokens_field: str, extra_fields: Sequence[str]) -> _Extracted:
    for p in payloads:
        if not isinstance(p, dict):
            raise ConfigTypeError(expected("payload", "a dict (the first payload is one)", type(p).__name__))
    first = payloads[0]
    name = tokens_field
    if tokens_field == "auto":
        found = [c for c in TOKEN_FIELD_CANDIDATES if c in first and _has_length(first[c])]
        if not found:
            raise ConfigError(expected("tokens_field='auto'",
                                       f"a payload key among {', '.join(TOKEN_FIELD_CANDIDATES)}",
                                       list(first.keys())))
        name = found[0]

    def column(field: str, label: str) -> list[Any]:
        for i, p in enumerate(payloads):
            if field not in p:
                raise ConfigError(expected(f"{label} {field!r} of payload {i}", "present",
                                           f"keys {list(p.keys())}"))
        return [p[field] for p in payloads]

    tokens = column(name, "token field")
    extras: dict[str, list[Any]] = {}
    for field in extra_fields:
        if field not in extras:
            extras[field] = column(field, "extra field")
    if "positions" in first and "positions" not in extras:
        extras["positions"] = column("positions", "'positions' (present in payload 0)")
    masks: list[Any] | None = None
    if "loss_mask" in first:
        masks = column("loss_mask", "'loss_mask' (present in payload 0)")
        for i, (m, t) in enumerate(zip(masks, tokens, strict=True)):
            if not isinstance(m, Sized) or not isinstance(t, Sized):
                raise ConfigError(expected(f"'loss_mask' and {name!r} of payload {i}", "sequences",
                                           (type(m).__name__, type(t).__name__)))
            if len(m) != len(t):
                raise ConfigError(expected(f"'loss_mask' of payload {i}", f"length {len(t)} (as {name!r})",
                                           len(m)))
    return _Extracted(tokens, [str(p.get("text", "")) for p in payloads], extras, masks)


def _extract_arrays(payloads: list[Any]) -> _Extracted:
    for i, p in enumerate(payloads):
        if isinstance(p, dict):
            raise ConfigTypeError(expected(f"payload {i}", "an array (the first payload is one)", "a dict"))
        if not hasattr(p, "shape"):
            raise ConfigTypeError(expected(f"payload {i}", "a dict or an array with a shape (numpy, torch)",
                                           type(p).__name__))
    return _Extracted(list(payloads), [""] * len(payloads), {}, None)


# --------------------------------------------------------------------------------------------
# 3. computation: each step in list form and in array form


def _is_scalar(value: Any) -> bool:
    return not isinstance(value, (list, tuple, dict, str, bytes)) and getattr(value, "ndim", 0) == 0


def _drop_last(x: Any) -> Any:
    return x[..., :-1] if isinstance(x, np.ndarray) else [row[:-1] for row in x]


def _drop_first(x: Any) -> Any:
    return x[..., 1:] if isinstance(x, np.ndarray) else [row[1:] for row in x]


def _padding_mask(tokens: Any, pads: list[int], shifted: bool) -> Any:
    """True exactly on each row's trailing ``pads[i]`` tokens (after the shift, one fewer)."""
    if isinstance(tokens, np.ndarray):
        if tokens.ndim != 2:
            raise ConfigError(expected("return_padding_mask", "2-D token rows", f"{tokens.ndim}-D"))
        lengths = [tokens.shape[1]] * tokens.shape[0]
    else:
        lengths = [len(row) for row in tokens]
    for i, (n, length) in enumerate(zip(pads, lengths, strict=True)):
        if not 0 <= n <= length:
            raise ConfigError(expected(f"padding_length of record {i}", f"within [0, {length}]", n))
    shift = int(shifted)
    if isinstance(tokens, np.ndarray):
        width = max(0, tokens.shape[1] - shift)
        columns = np.arange(width)
        return np.stack([columns >= tokens.shape[1] - n for n in pads])
    return [[j >= length - n for j in range(max(0, length - shift))]
            for n, length in zip(pads, lengths, strict=True)]


def _mask_tails(labels: Any, counts: list[int], value: int, tz: Tensorizer | None) -> Any:
    """Set the last ``counts[i]`` labels of row ``i`` to ``value``."""
    if isinstance(labels, np.ndarray):
        assert tz is not None
        width = labels.shape[-1]
        tail = np.zeros(labels.shape, dtype=bool)
        for i, n in enumerate(counts):
            if not 0 <= n <= width:
                raise ConfigError(expected(f"padding_length of record {i}", f"within [0, {width + 1}]", n))
            if n:
                tail[i, ..., width - n:] = True
        return tz.fill(labels, tail, value, promote=False) if tail.any() else labels
    rows = []
    for i, (row, n) in enumerate(zip(labels, counts, strict=True)):
        if not 0 <= n <= len(row):
            raise ConfigError(expected(f"padding_length of record {i}", f"within [0, {len(row) + 1}]", n))
        row = list(row)
        if n:
            row[len(row) - n:] = [value] * n
        rows.append(row)
    return rows


def _mask_where(labels: Any, drop: Any, value: int, tz: Tensorizer | None) -> Any:
    """Labels with ``value`` where ``drop`` (an array of bools, or per-row predicates' results)."""
    if isinstance(labels, np.ndarray):
        assert tz is not None
        return tz.fill(labels, drop, value, promote=True)
    return [[value if d else lab for lab, d in zip(row, drow, strict=True)]
            for row, drow in zip(labels, drop, strict=True)]


def _cu_seqlens(positions: Any, flatten: bool) -> tuple[Any, Any]:
    """Segment boundaries (where a position is 0) and the longest segment, per row or compact."""
    if isinstance(positions, np.ndarray):
        if positions.ndim != 2:
            raise ConfigError(expected("return_cu_seqlens", "2-D positions", f"{positions.ndim}-D"))
        rows = [positions[i] for i in range(positions.shape[0])]
        if positions.shape[1] and any(r[0] != 0 for r in rows):
            raise ConfigError(expected("positions", "0 first in every nonempty row",
                                       positions[:, 0].tolist()))
        if (positions.size if flatten else positions.shape[1]) > _INT32_MAX:
            raise ConfigError(expected("cumulative sequence lengths", "within the int32 range",
                                       positions.size))
    else:
        rows = list(positions)
        for r in rows:
            if not all(_is_scalar(v) for v in r):
                raise ConfigError(expected("return_cu_seqlens", "2-D positions", "nested values"))
            if len(r) and r[0] != 0:
                raise ConfigError(expected("positions", "0 first in every nonempty row", r[0]))
    per_row = []
    for r in rows:
        starts = [j for j, v in enumerate(r) if v == 0]
        per_row.append(starts + [len(r)])
    longest = [max((b - a for a, b in zip(cu, cu[1:], strict=False)), default=0) for cu in per_row]
    if flatten:
        compact: list[int] = []
        offset = 0
        for cu in per_row:
            compact.extend(offset + s for s in cu[:-1])
            offset += cu[-1]
        compact.append(offset)
        top = max(longest, default=0)
        if isinstance(positions, np.ndarray):
            return np.asarray(compact, dtype=np.int32), int(top)
        return compact, top
    k = max((len(cu) for cu in per_row), default=0)
    padded = [cu + [cu[-1]] * (k - len(cu)) for cu in per_row]
    if isinstance(positions, np.ndarray):
        return (np.asarray(padded, dtype=np.int32).reshape(len(padded), k),
                np.asarray(longest, dtype=np.int32))
    return padded, longest


def _sequence_positions(inputs: Any) -> Any:
    if isinstance(inputs, np.ndarray):
        if inputs.ndim != 2:
            raise ConfigError(expected("position_mode='sequence'", "2-D input_ids", f"{inputs.ndim}-D"))
        try:
            numbers = np.arange(inputs.shape[1], dtype=inputs.dtype)
        except TypeError as exc:  # bool holds no 0..S-1
            raise ConfigTypeError(expected("position_mode='sequence'", "an input dtype that counts",
                                           inputs.dtype)) from exc
        return np.tile(numbers, (inputs.shape[0], 1))
    if not all(_is_scalar(v) for row in inputs for v in row):
        raise ConfigError(expected("position_mode='sequence'", "2-D input_ids", "nested values"))
    return [list(range(len(row))) for row in inputs]


def _flat(x: Any) -> Any:
    return x.reshape(-1) if isinstance(x, np.ndarray) else [v for row in x for v in row]


# --------------------------------------------------------------------------------------------
# 4. names


def _rename_exclude(out: dict[str, Any], rename: Mapping[str, str] | None, exclude: Sequence[str],
                    *, empty: bool) -> dict[str, Any]:
    if rename:
        missing = [k for k in rename if k not in out]
        if missing and not empty:
            raise ConfigError(expected("rename_fields source keys", f"among the emitted keys {list(out)}",
                                       missing))
        if not isinstance(rename, Mapping):
            raise ConfigTypeError(expected("rename_fields", "a mapping {emitted key: new key}",
                                           type(rename).__name__))
        finals = Counter(rename.get(k, k) for k in out)
        clashes = sorted(k for k, n in finals.items() if n > 1)
        if clashes:
            raise ConfigError(expected("rename_fields target keys", "unique final names", clashes))
        out = {rename.get(k, k): v for k, v in out.items()}
    for name in exclude:
        out.pop(name, None)
    return out


def to_training(
    records: Sequence[Any],
    *,
    tokens_field: str = "auto",
    return_labels: bool = False,
    dtype: Any = "auto",
    extra_fields: Sequence[str] = (),
    ignore_index: int = -100,
    rename_fields: Mapping[str, str] | None = None,
    flatten: bool = False,
    exclude_fields: Sequence[str] = (),
    return_num_valid_tokens: bool = False,
    return_loss_mask: bool = False,
    return_cu_seqlens: bool = False,
    return_padding_mask: bool = False,
    eos_mask_loss: bool = False,
    eos_token_id: int | None = None,
    position_mode: Literal["preserve", "sequence"] = "preserve",
    libraries: Sequence[TensorLibrary] | None = None,
    stacklevel: int = 2,
) -> dict[str, Any]:
    """The training dict of ``records`` (see the module docstring and ``SampleBatch.to_training``)."""
    check_knobs(
        return_labels=return_labels, extra_fields=extra_fields, exclude_fields=exclude_fields,
        return_num_valid_tokens=return_num_valid_tokens, return_loss_mask=return_loss_mask,
        return_cu_seqlens=return_cu_seqlens, return_padding_mask=return_padding_mask,
        eos_mask_loss=eos_mask_loss, eos_token_id=eos_token_id, position_mode=position_mode,
        stacklevel=stacklevel + 1,
    )
    items = list(records)
    if not items:
        empty: dict[str, Any] = {"ids": [], "texts": []}
        if return_num_valid_tokens:
            empty["num_valid_tokens"] = 0
        if return_loss_mask:
            empty["loss_mask"] = []
        if return_padding_mask:
            empty["padding_mask"] = []
        if position_mode == "sequence":
            empty["positions"] = []
        if return_cu_seqlens:
            empty["cu_seqlens"] = [0] if flatten else []
            empty["max_seqlen"] = 0 if flatten else []
        return _rename_exclude(empty, rename_fields, exclude_fields, empty=True)

    payloads = [r.payload for r in items]
    ex = (_extract_dicts(payloads, tokens_field, extra_fields) if isinstance(payloads[0], dict)
          else _extract_arrays(payloads))
    if return_cu_seqlens:
        if "positions" not in ex.extras:
            raise ConfigError(expected("return_cu_seqlens=True", "a 'positions' field in every payload "
                                       "(pack_flat(emit_positions=True))", "none"))
        for i, (t, p) in enumerate(zip(ex.tokens, ex.extras["positions"], strict=True)):
            if not isinstance(p, Sized) or not isinstance(t, Sized) or len(p) != len(t):
                raise ConfigError(expected(f"'positions' of payload {i}", "the token sequence's length",
                                           len(p) if isinstance(p, Sized) else type(p).__name__))

    tz = resolve_tensorizer(dtype, libraries)

    def stack(rows: list[Any], what: str) -> Any:
        return [list(r) for r in rows] if tz is None else tz.stack(rows, what)

    out: dict[str, Any] = {"ids": [tuple(r.meta.sample_id) for r in items], "texts": ex.texts}
    kinds: dict[str, Kind] = {}  # the array-valued keys and what they are
    tokens = stack(ex.tokens, "token rows")
    pads = [r.meta.padding_length or 0 for r in items] if (return_labels or return_padding_mask) else []
    if return_padding_mask:
        out["padding_mask"] = _padding_mask(tokens, pads, shifted=return_labels)
        kinds["padding_mask"] = "bool"
    if return_labels:
        out["input_ids"] = _drop_last(tokens)
        labels = _drop_first(tokens)
        if any(pads):
            # an all-padding row lost one of its pad labels to the shift
            tails = [n - int(0 < n == len(row)) for n, row in zip(pads, ex.tokens, strict=True)]
            labels = _mask_tails(labels, tails, ignore_index, tz)
        out["labels"] = labels
        kinds["labels"] = "data"
    else:
        out["input_ids"] = tokens
    kinds["input_ids"] = "data"

    for name, rows in ex.extras.items():
        if name in out:
            raise ConfigError(expected(f"extra field {name!r}", "a name no generated field has", name))
        if name == "positions" and position_mode == "sequence" and not return_cu_seqlens:
            continue  # replaced below; only boundaries need the payload's own positions
        value = stack(rows, f"extra field {name!r}")
        out[name] = _drop_last(value) if return_labels else value
        kinds[name] = "data"

    if ex.loss_masks is not None:
        masks = stack(ex.loss_masks, "'loss_mask' rows")
        if return_labels:
            # label i supervises token i+1: the mask shifts like the labels
            shifted = _drop_first(masks)
            if isinstance(shifted, np.ndarray):
                if shifted.shape != out["labels"].shape:
                    raise ConfigError(expected("'loss_mask' rows", f"shape {out['labels'].shape}",
                                               shifted.shape))
                drop = shifted == 0
            else:
                drop = [[not m for m in row] for row in shifted]
            out["labels"] = _mask_where(out["labels"], drop, ignore_index, tz)
        elif "loss_mask" not in out:
            out["loss_mask"] = masks
            kinds["loss_mask"] = "data"

    if eos_mask_loss:
        inputs = out["input_ids"]
        at_eos = (inputs == tz.scalar(eos_token_id) if isinstance(inputs, np.ndarray) and tz is not None
                  else [[tok == eos_token_id for tok in row] for row in inputs])
        out["labels"] = _mask_where(out["labels"], at_eos, ignore_index, tz)

    if return_loss_mask:
        lab = out["labels"]
        out["loss_mask"] = ((lab != tz.scalar(ignore_index)) if isinstance(lab, np.ndarray) and tz is not None
                            else [[float(v != ignore_index) for v in row] for row in lab])
        kinds["loss_mask"] = "float32"

    valid: int | None = None
    if return_num_valid_tokens:
        lab = out["labels"]
        valid = (int((lab != tz.scalar(ignore_index)).sum()) if isinstance(lab, np.ndarray) and tz is not None
                 else int(sum(v != ignore_index for row in lab for v in row)))

    boundaries: dict[str, Any] = {}
    if return_cu_seqlens:
        pos = out["positions"]
        if isinstance(pos, np.ndarray) and pos.shape != out["input_ids"].shape:
            raise ConfigError(expected("'positions'", f"the input_ids shape {out['input_ids'].shape}",
                                       pos.shape))
        cu, top = _cu_seqlens(pos, flatten=bool(flatten))
        boundaries = {"cu_seqlens": cu, "max_seqlen": top}

    if position_mode == "sequence":
        out["positions"] = _sequence_positions(out["input_ids"])
        kinds["positions"] = "data"

    if flatten:
        out = {k: v if k in ("ids", "texts") else _flat(v) for k, v in out.items()}

    if tz is not None:
        out = {k: tz.emit(v, kinds[k]) if k in kinds else v for k, v in out.items()}
        boundaries = {k: tz.emit(v, "int32") if isinstance(v, np.ndarray) else v
                      for k, v in boundaries.items()}
    if valid is not None:
        out["num_valid_tokens"] = valid
    out.update(boundaries)
    return _rename_exclude(out, rename_fields, exclude_fields, empty=False)


class TrainingConversion:
    """``SampleBatch.to_training``: the method, kept beside the conversion it delegates to.

    :class:`~zephon_ref.types.SampleBatch` inherits it, so the record types hold records only and
    this module the whole of zephon 0.2.0's training conversion.  Slotted and stateless: the
    subclass's ``records`` is the one thing it reads.
    """

    __slots__ = ()
    records: tuple[Any, ...]

    def to_training(
        self,
        *,
        tokens_field: str = "auto",
        return_labels: bool = False,
        dtype: Any = "auto",
        extra_fields: Sequence[str] = (),
        ignore_index: int = -100,
        rename_fields: Mapping[str, str] | None = None,
        flatten: bool = False,
        exclude_fields: Sequence[str] = (),
        return_num_valid_tokens: bool = False,
        return_loss_mask: bool = False,
        return_cu_seqlens: bool = False,
        return_padding_mask: bool = False,
        eos_mask_loss: bool = False,
        eos_token_id: int | None = None,
        position_mode: Literal["preserve", "sequence"] = "preserve",
    ) -> dict[str, Any]:
        """The batch as a training dict: ``ids``, ``texts``, ``input_ids`` and what the knobs ask for.

        zephon 0.2.0's method, knob for knob (its docstring is the reference): ``return_labels``
        shifts tokens into inputs and next-token labels, masking each record's trailing
        ``meta.padding_length`` labels, the labels a payload ``loss_mask`` zeroes and, with
        ``eos_mask_loss``, the labels predicted from ``eos_token_id``; ``dtype`` picks lists
        (``None``), numpy or torch (``"auto"``: torch when it imports).  The steps and their order
        are in :mod:`zephon_ref.training`; differences from zephon are rows of docs/divergences.md
        ("to_training").
        """
        return to_training(
            self.records,
            tokens_field=tokens_field, return_labels=return_labels, dtype=dtype,
            extra_fields=extra_fields, ignore_index=ignore_index, rename_fields=rename_fields,
            flatten=flatten, exclude_fields=exclude_fields,
            return_num_valid_tokens=return_num_valid_tokens, return_loss_mask=return_loss_mask,
            return_cu_seqlens=return_cu_seqlens, return_padding_mask=return_padding_mask,
            eos_mask_loss=eos_mask_loss, eos_token_id=eos_token_id, position_mode=position_mode,
            stacklevel=3,
        )

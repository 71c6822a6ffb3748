"""The torch path: an IterableDataset over a Pipeline, the DataLoader worker split, collation.

Theory of operation
-------------------
:func:`to_torch_dataset` wraps a :class:`~zephon_ref.pipeline.Pipeline` in a
``torch.utils.data.IterableDataset``.  Where its ``__iter__`` runs decides what
it yields:

* **outside a DataLoader, or with** ``num_workers=0``: ``iter(pipeline)``
  itself, i.e. the whole DP group's stream in the pipeline's own order (the
  pipeline's engine is the one iterated, so ``pipeline.checkpoint()`` keeps
  working);
* **in DataLoader worker** ``w`` **of** ``n``: ``pipeline.for_worker(w, n)``,
  a copy whose engine owns exactly the lanes
  :func:`~zephon_ref.engine.world.worker_lanes` gives worker ``w`` (section 3.1
  of the zephon notes: ``active`` = the largest count <= ``n`` dividing the
  group's lane count; worker ``w < active`` owns list indices ``i`` with
  ``i mod active == w``).  Workers ``w >= active`` are idle and yield nothing.
  A pending ``pipeline.restore(state)`` is applied to each worker's owned lanes.

Every lane's stream depends only on the lane (its work source clone, its chunk
numbering, per-lane operator state), never on which engine runs it, so each
lane delivers the same batches in the same order whatever ``num_workers`` is;
only the interleaving of lanes across workers is the DataLoader's.

:func:`collate_batch` turns a delivered item into padded ``int64`` tensors
(layout in its docstring).  It is a pure function of the item: same item, same
tensors, on any device.

torch is imported inside functions only: ``import zephon_ref`` (and this module)
never needs it; every entry point raises :class:`~zephon_ref.errors.ConfigError`
naming the ``torch`` extra when it is missing.

What may not live here: pipeline logic (lanes, ordering, notification and
replay all belong to the engine), and mutation of the Pipeline's state.  Not
done yet: a stateful ``state_dict()`` across DataLoader workers (each worker's
engine state must be merged by the multi-rank aggregation round).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from zephon_ref.errors import ConfigError, ConfigTypeError, ContractError, expected
from zephon_ref.ops.pack import TOKEN_FIELD_CANDIDATES, detect_token_field
from zephon_ref.types import SampleBatch, SampleRecord

if TYPE_CHECKING:
    import torch as _torch

    from zephon_ref.pipeline import Pipeline

__all__ = [
    "COLLATED_FIELDS",
    "WorkerSlot",
    "collate_batch",
    "resolve_device",
    "to_torch_dataset",
    "worker_slot",
]

#: The keys of :func:`collate_batch`'s result, in order.
COLLATED_FIELDS = ("input_ids", "attention_mask", "segment_ids", "position_ids")

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def _require_torch() -> Any:
    """The torch module, or a typed refusal naming the extra."""
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - exercised only without torch
        raise ConfigError(expected("torch", "an importable torch (pip install 'zephon_ref[torch]')",
                                   f"ImportError: {exc}")) from exc
    return torch


# -- where are we: the DataLoader worker slot ---------------------------------------------------

@dataclass(frozen=True, slots=True)
class WorkerSlot:
    """Which DataLoader worker this process is; ``in_loader`` is False outside a worker process."""

    worker_id: int = 0
    num_workers: int = 1
    in_loader: bool = False


def _in_worker_process() -> bool:
    torch = _require_torch()
    return torch.utils.data.get_worker_info() is not None


def worker_slot() -> WorkerSlot:
    """The calling process's DataLoader worker slot (from ``torch.utils.data.get_worker_info()``)."""
    info = _require_torch().utils.data.get_worker_info()
    if info is None:
        return WorkerSlot()
    return WorkerSlot(int(info.id), int(info.num_workers), True)


# -- devices ------------------------------------------------------------------------------------

def resolve_device(device: Any = None) -> _torch.device:
    """The torch device collation writes to.

    ``None`` or ``"cpu"``: the CPU.  ``"auto"``: CUDA when available in this
    process and this is not a DataLoader worker, else the CPU.  A CUDA device
    (``"cuda"``, ``"cuda:1"``, ``torch.device("cuda")``) without CUDA falls back
    to the CPU with a RuntimeWarning; inside a DataLoader worker it is refused
    (CUDA cannot be initialised in a forked worker: collate on the CPU there and
    move batches to the GPU in the main process).
    """
    torch = _require_torch()
    if device is None:
        return torch.device("cpu")  # type: ignore[no-any-return]
    if device == "auto":
        use_cuda = bool(torch.cuda.is_available()) and not _in_worker_process()
        return torch.device("cuda" if use_cuda else "cpu")  # type: ignore[no-any-return]
    if not isinstance(device, (str, torch.device)):
        raise ConfigTypeError(expected("device", "None, 'auto', a device string or a torch.device",
                                       type(device).__name__))
    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError) as exc:
        raise ConfigError(expected("device", "None, 'auto', 'cpu', 'cuda' or 'cuda:N'", device)) from exc
    if dev.type == "cpu":
        return dev  # type: ignore[no-any-return]
    if dev.type != "cuda":
        raise ConfigError(expected("device", "a 'cpu' or 'cuda' device", str(dev)))
    if not torch.cuda.is_available():
        warnings.warn(f"device {str(dev)!r} requested but CUDA is not available: collating on the CPU",
                      RuntimeWarning, stacklevel=2)
        return torch.device("cpu")  # type: ignore[no-any-return]
    if _in_worker_process():
        raise ContractError(expected("device inside a DataLoader worker", "'cpu' or 'auto' (collate on the CPU "
                                     "in workers, move batches to the GPU in the main process)", str(dev)))
    return dev  # type: ignore[no-any-return]


# -- collation ----------------------------------------------------------------------------------

def _token_list(value: Any, what: str) -> list[int]:
    """A 1-D sequence of ints (list, tuple, numpy or torch 1-D) as a list of Python ints."""
    if isinstance(value, (str, bytes, Mapping)) or not hasattr(value, "__len__"):
        raise ConfigTypeError(expected(what, "a 1-D sequence of ints", type(value).__name__))
    shape = getattr(value, "shape", None)
    if shape is not None and len(shape) != 1:
        raise ConfigError(expected(what, "a 1-D sequence of ints", f"shape {tuple(shape)}"))
    items = value.tolist() if hasattr(value, "tolist") else list(value)
    for t in items:
        if isinstance(t, bool) or not isinstance(t, int):
            raise ConfigTypeError(expected(f"{what} element", "an int", t))
        if not _INT64_MIN <= t <= _INT64_MAX:
            raise ConfigError(expected(f"{what} element", "an int that fits int64", t))
    return list(items)


def _segments_of(payload: Any, what: str) -> list[Any]:
    """The segments of one record: a packed envelope's entries, or the payload itself."""
    if isinstance(payload, Mapping) and "packed_samples" in payload:
        segs = payload["packed_samples"]
        if isinstance(segs, (str, bytes, Mapping)) or not isinstance(segs, Sequence):
            raise ConfigTypeError(expected(f"{what} packed_samples", "a list of segment dicts",
                                           type(segs).__name__))
        return list(segs)
    return [payload]


def _segment_tokens(seg: Any, tokens_field: str, what: str) -> tuple[list[int], list[int]]:
    """(tokens, attention mask) of one segment; the mask is the payload's own when aligned, else ones."""
    if not isinstance(seg, Mapping):
        raise ConfigTypeError(expected(what, "a dict payload with a token field", type(seg).__name__))
    if tokens_field == "auto":
        name = detect_token_field(seg)
        if name is None:
            raise ConfigError(expected(what, f"one of the token fields {TOKEN_FIELD_CANDIDATES}", sorted(seg)))
    else:
        if tokens_field not in seg:
            raise ConfigError(expected(f"{what} field {tokens_field!r}", "present", sorted(seg)))
        name = tokens_field
    tokens = _token_list(seg[name], f"{what} {name!r}")
    raw_mask = seg.get("attention_mask")
    if raw_mask is None or name == "attention_mask":
        return tokens, [1] * len(tokens)
    mask = _token_list(raw_mask, f"{what} 'attention_mask'")
    if len(mask) != len(tokens) or any(m not in (0, 1) for m in mask):
        raise ConfigError(expected(f"{what} 'attention_mask'", f"{len(tokens)} values in {{0, 1}} "
                                   f"(aligned with {name!r})", mask))
    return tokens, mask


def collate_batch(
    batch: SampleBatch | SampleRecord | Sequence[SampleRecord],
    *,
    tokens_field: str = "auto",
    device: Any = None,
    pad_token_id: int = 0,
    pad_to: int | None = None,
) -> dict[str, _torch.Tensor]:
    """Padded ``int64`` tensors of a delivered item.

    Layout: one row per record (``B`` rows; a lone SampleRecord is a batch of
    one), ``L`` = the longest row (or ``pad_to``).  A record whose payload is a
    packed envelope ``{"packed_samples": [seg, ...]}`` lays its segments side by
    side in envelope order; any other record is one segment.  A segment's tokens
    come from ``tokens_field`` (``"auto"``: the first of
    ``input_ids, tokens, token_ids, ids`` present).  Every tensor is ``[B, L]``:

    * ``input_ids``: the tokens, then ``pad_token_id``;
    * ``attention_mask``: 1 for a token, 0 for padding (a segment's own aligned
      ``attention_mask`` field is used for its tokens when present);
    * ``segment_ids``: ``k`` (1-based) for the tokens of the row's ``k``-th
      segment, 0 for padding: attention stays inside one segment;
    * ``position_ids``: the position inside the segment (restarts at 0 on each
      segment), 0 for padding.

    Row ``r``'s segment ``k`` is ``input_ids[r][segment_ids[r] == k]``.  The
    result is a pure function of the item (built on the CPU, then moved to
    :func:`resolve_device` ``(device)``).
    """
    torch = _require_torch()
    if isinstance(batch, SampleBatch):
        records: Sequence[Any] = batch.records
    elif isinstance(batch, SampleRecord):
        records = (batch,)
    elif isinstance(batch, Sequence) and not isinstance(batch, (str, bytes)):
        records = batch
    else:
        raise ConfigTypeError(expected("batch", "a SampleBatch, a SampleRecord or a list of SampleRecords",
                                       type(batch).__name__))
    if not isinstance(tokens_field, str) or not tokens_field:
        raise ConfigTypeError(expected("tokens_field", "'auto' or a field name", tokens_field))
    if isinstance(pad_token_id, bool) or not isinstance(pad_token_id, int) \
            or not _INT64_MIN <= pad_token_id <= _INT64_MAX:
        raise ConfigTypeError(expected("pad_token_id", "an int that fits int64", pad_token_id))
    if pad_to is not None and (isinstance(pad_to, bool) or not isinstance(pad_to, int) or pad_to < 0):
        raise ConfigError(expected("pad_to", "None or an int >= 0", pad_to))
    dev = resolve_device(device)

    rows: list[tuple[list[int], list[int], list[int], list[int]]] = []
    for r, rec in enumerate(records):
        if not isinstance(rec, SampleRecord):
            raise ConfigTypeError(expected(f"batch record {r}", "a SampleRecord", type(rec).__name__))
        ids: list[int] = []
        mask: list[int] = []
        seg_ids: list[int] = []
        pos: list[int] = []
        for k, seg in enumerate(_segments_of(rec.payload, f"record {r}"), start=1):
            tokens, seg_mask = _segment_tokens(seg, tokens_field, f"record {r} segment {k - 1}")
            ids += tokens
            mask += seg_mask
            seg_ids += [k] * len(tokens)
            pos += range(len(tokens))
        rows.append((ids, mask, seg_ids, pos))

    longest = max((len(row[0]) for row in rows), default=0)
    if pad_to is not None and longest > pad_to:
        raise ConfigError(expected("pad_to", f">= the longest row ({longest} tokens)", pad_to))
    width = longest if pad_to is None else pad_to
    flat: list[list[int]] = [[], [], [], []]
    # invariant: each of the four flat lists holds len(rows so far) * width values
    for row in rows:
        pad = width - len(row[0])
        for i, (col, fill) in enumerate(zip(row, (pad_token_id, 0, 0, 0), strict=True)):
            flat[i] += col
            flat[i] += [fill] * pad
    out: dict[str, _torch.Tensor] = {}
    for name, values in zip(COLLATED_FIELDS, flat, strict=True):
        t = torch.tensor(values, dtype=torch.int64).reshape(len(rows), width)
        out[name] = t.to(dev) if dev.type != "cpu" else t
    return out


# -- the dataset --------------------------------------------------------------------------------

_DATASET_CLASS: type[Any] | None = None


def _dataset_class() -> type[Any]:
    """Build (once) the IterableDataset subclass; it needs torch, so it cannot be defined at import."""
    global _DATASET_CLASS
    if _DATASET_CLASS is not None:
        return _DATASET_CLASS
    torch = _require_torch()

    class TorchPipelineDataset(torch.utils.data.IterableDataset):  # type: ignore[misc,name-defined]
        """An IterableDataset over a Pipeline (see :func:`to_torch_dataset`)."""

        def __init__(self, pipeline: Pipeline, collate: Callable[[Any], Any] | None) -> None:
            super().__init__()
            self.pipeline = pipeline
            self.collate = collate

        def __iter__(self) -> Iterator[Any]:
            slot = worker_slot()
            if not slot.in_loader:
                items: Iterator[Any] = iter(self.pipeline)
            else:
                # the worker's own copy owns only its World.worker_lanes share (none when idle,
                # so an idle worker's engine yields nothing); a pending restore travels with it
                items = iter(self.pipeline.for_worker(slot.worker_id, slot.num_workers))
            if self.collate is None:
                return items
            collate = self.collate
            return (collate(x) for x in items)

        def __getstate__(self) -> dict[str, Any]:
            return {"pipeline": self.pipeline, "collate": self.collate}

        def __setstate__(self, state: dict[str, Any]) -> None:
            self.pipeline = state["pipeline"]
            self.collate = state["collate"]

    TorchPipelineDataset.__module__ = __name__
    TorchPipelineDataset.__qualname__ = "TorchPipelineDataset"
    _DATASET_CLASS = TorchPipelineDataset
    return TorchPipelineDataset


def __getattr__(name: str) -> Any:
    # PEP 562: ``zephon_ref.torch.TorchPipelineDataset`` resolves lazily, so a dataset pickled
    # for a spawned DataLoader worker unpickles there (importing torch only then).
    if name == "TorchPipelineDataset":
        return _dataset_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def to_torch_dataset(
    pipeline: Pipeline,
    *,
    collate: Callable[[Any], Any] | None = None,
    device: Any = None,
) -> Any:
    """An IterableDataset yielding the pipeline's delivered items (see the module docstring).

    ``collate`` (called on each item, inside the worker that produced it)
    replaces the item with its result; with ``collate=None`` and a ``device``,
    items become :func:`collate_batch` tensors on that device; with neither,
    items are yielded as delivered (SampleBatch / SampleRecord).  Use it with
    ``DataLoader(dataset, batch_size=None)``: the pipeline batches already.
    """
    from zephon_ref.pipeline import Pipeline

    if not isinstance(pipeline, Pipeline):
        raise ConfigTypeError(expected("pipeline", "a zephon_ref Pipeline", type(pipeline).__name__))
    if collate is not None and not callable(collate):
        raise ConfigTypeError(expected("collate", "None or a callable", type(collate).__name__))
    if collate is not None and device is not None:
        raise ConfigError(expected("device", "None when a custom collate is given (the collate places its "
                                   "own tensors)", device))
    if collate is None and device is not None:
        resolve_device(device)  # validate eagerly (a CUDA device without CUDA warns here)
        collate = _DeviceCollate(device)
    return _dataset_class()(pipeline, collate)


@dataclass(frozen=True, slots=True)
class _DeviceCollate:
    """:func:`collate_batch` bound to a device (a picklable callable for spawned workers)."""

    device: Any

    def __call__(self, item: Any) -> dict[str, Any]:
        return collate_batch(item, device=self.device)

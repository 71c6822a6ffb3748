"""Where the torch path runs: the torch import, the DataLoader worker slot, and devices.

Theory of operation
-------------------
torch is optional, so it is imported here on first use only (:func:`require_torch`),
never at module import: ``import zephon_ref`` and ``import zephon_ref.torch`` work
without it, and every entry point that needs it raises
:class:`~zephon_ref.errors.ConfigError` naming the ``torch`` extra when it is missing.

:func:`worker_slot` says which DataLoader worker the calling process is (from
``torch.utils.data.get_worker_info()``); :func:`resolve_device` turns a device
argument into a ``torch.device`` under the rules in its docstring (CUDA is never
initialised inside a forked DataLoader worker).

What may not live here: collation (:mod:`.collate`), the dataset (:mod:`.dataset`).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from zephon_ref.errors import ConfigError, ConfigTypeError, ContractError, expected

if TYPE_CHECKING:
    import torch as _torch

__all__ = ["WorkerSlot", "in_worker_process", "move_batch", "require_torch", "resolve_device", "worker_slot"]


def require_torch() -> Any:
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


def in_worker_process() -> bool:
    """True inside a torch DataLoader worker process."""
    torch = require_torch()
    return torch.utils.data.get_worker_info() is not None


def worker_slot() -> WorkerSlot:
    """The calling process's DataLoader worker slot (from ``torch.utils.data.get_worker_info()``)."""
    info = require_torch().utils.data.get_worker_info()
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
    torch = require_torch()
    if device is None:
        return torch.device("cpu")  # type: ignore[no-any-return]
    if device == "auto":
        use_cuda = bool(torch.cuda.is_available()) and not in_worker_process()
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
    if in_worker_process():
        raise ContractError(
            expected(
                "device inside a DataLoader worker",
                "'cpu' or 'auto' (collate on the CPU "
                "in workers, move batches to the GPU in the main process)",
                str(dev),
            )
        )
    return dev  # type: ignore[no-any-return]


def move_batch(batch: Any, device: Any = "auto", *, pin_memory: bool = True) -> Any:
    """``batch`` (a tensor, or dicts / lists / tuples of them) on ``device`` (:func:`resolve_device`).

    To a CUDA device, CPU tensors are first put in pinned memory (unless
    ``pin_memory=False`` or already pinned) and copied with ``non_blocking=True``,
    so the copy overlaps the host's next step; torch orders it before any kernel
    that reads the tensor on the current stream.  To the CPU, tensors are returned
    as they are.  Non-tensor leaves pass through unchanged.
    """
    torch = require_torch()
    if not isinstance(pin_memory, bool):
        raise ConfigTypeError(expected("pin_memory", "a bool", pin_memory))
    dev = resolve_device(device)

    def move(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            if dev.type == "cpu":
                return value if value.device.type == "cpu" else value.to(dev)
            if pin_memory and value.device.type == "cpu" and not value.is_pinned():
                value = value.pin_memory()
            return value.to(dev, non_blocking=True)
        if isinstance(value, dict):
            return {k: move(v) for k, v in value.items()}
        if isinstance(value, list):
            return [move(v) for v in value]
        if isinstance(value, tuple):
            return tuple(move(v) for v in value)
        return value

    return move(batch)

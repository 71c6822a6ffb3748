"""``zephon.options`` as zephon 0.2.0 lays it out: ``RuntimeOptions`` and ``IpcTransport``.

Theory of operation
-------------------
:class:`RuntimeOptions` is a plain record of every key ``Pipeline.options(**hints)`` takes, in
zephon's order, with zephon's defaults as zephon holds them (the spawn context, a default
``StoreOptions``, ``ExecutionTrackingMode.OFF``; ``Pipeline.options`` itself starts from None, None
and "off", which mean the same: :mod:`zephon_ref.settings`).  Like zephon's, it checks nothing
itself: ``Pipeline.options`` checks each value at the call (:mod:`zephon_ref.settings`).
``p.options(**vars(opts))`` (or ``dataclasses.asdict``) applies one.  What zephon_ref does with
each key: docs/options.md; the execution settings never change a stream (seed 002).
"""

from __future__ import annotations

import multiprocessing
from dataclasses import dataclass, field
from typing import Any, Literal

from zephon_ref.io.options import StoreOptions
from zephon_ref.observability.config import ExecutionTrackingMode

__all__ = ["IpcTransport", "RuntimeOptions"]

IpcTransport = Literal["socketpair", "pipe"]


@dataclass
class RuntimeOptions:
    """Every ``Pipeline.options()`` key with zephon 0.2.0's default (the data settings
    ``canonical_replicas`` and ``flush_every_k_chunks`` among them, as in zephon)."""

    runner: str | None = None
    run_id: str = "default_run_id"
    per_stage_runner: dict[int, str] = field(default_factory=dict)
    mp_context: Any = field(default_factory=lambda: multiprocessing.get_context("spawn"))
    worker_allocation: Literal["fit_to_ops", "per_stage_fixed", "global", "autotune"] = "fit_to_ops"
    max_workers: int | None = None
    deterministic: bool = True
    prefetch_batches: int | None = None
    default_stage_prefetch: int | None = None
    per_stage_prefetch: dict[int, int] = field(default_factory=dict)
    op_queue_capacity: int | None = None
    ipc_transport: IpcTransport = "socketpair"
    ipc_buffer_bytes: int = 512 * 1024
    mixture_config: Any = None
    io_options: Any = field(default_factory=StoreOptions)
    allow_latency_flush_in_deterministic: bool = True
    flush_every_k_chunks: int | None = None
    shutdown_mode: Literal["graceful", "hard"] = "graceful"
    auto_validation: Literal["strict", "warn", "off"] = "strict"
    mtp_mode: bool = False
    mtp_buffer: int | None = None
    mtp_buffer_bytes: int = 8 * 1024 * 1024
    mtp_prefetch: int | None = None
    mtp_auto_checkpoint: bool = True
    world_size: int = 1
    global_rank: int = 0
    dp_degree: int | None = None
    dp_group_id: int | None = None
    canonical_replicas: int | None = None
    mapping_strategy: Literal["contiguous", "interleaved"] | None = None
    shm_enabled: bool = True
    shm_coalesce: bool = True
    shm_min_item_bytes: int = 4096
    shm_min_new_allocation_bytes: int = 1024 * 1024
    shm_min_forward_bytes: int = 128 * 1024
    shm_compact_above_ratio: float | None = 8.0
    shm_compact_min_savings_bytes: int = 16 * 1024 * 1024
    shm_max_coalesced_bytes: int | None = 64 * 1024 * 1024
    max_worker_retries: int = 3
    aggregate_dir: str | None = None
    aggregate_store: str | None = None
    aggregate_timeout_s: float = 180.0
    aggregate_serializer: str = "msgpack"
    aggregate_compressor: str = "zstd"
    execution_tracking: Any = ExecutionTrackingMode.OFF
    metrics_sink_config: Any = None

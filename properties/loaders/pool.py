"""One property check as a job a process pool can run (``python -m properties.loaders --jobs N``): the
functions live here, not in ``__main__``, so that a spawned process can import them."""

from __future__ import annotations

import os
import time
import warnings
from typing import Any

__all__ = ["check_one", "prepare_process"]


def prepare_process() -> None:
    """What every process that runs properties needs: file-descriptor headroom, offline Hugging Face,
    no warnings on the table."""
    try:  # headroom for worker processes and pipes (Streaming's own leak: adapters/streaming.py)
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ImportError, ValueError, OSError):
        pass
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    warnings.filterwarnings("ignore")


def check_one(job: tuple[Any, ...], cache: dict[Any, list[int]] | None = None,
               adapter: Any = None) -> tuple[Any, float]:
    """One property, timed: ``job`` is (loader, pins, property, examples, steps, derandomize,
    shrink_runs); in a pool process the adapter is resolved again there."""
    from properties.loaders.machine import check_property

    loader, pins, prop, examples, steps, derandomize, shrink_runs = job
    if adapter is None:
        from properties.loaders.core import Narrowed
        from properties.loaders.registry import resolve

        prepare_process()
        adapter = resolve(loader)
        if pins:
            adapter = Narrowed(adapter, **pins)
    t0 = time.perf_counter()  # clock-ok: progress only, not data
    r = check_property(adapter, prop, examples=examples, steps=steps, derandomize=derandomize,
                       cache=cache if cache is not None else {}, shrink_runs=shrink_runs)
    return r, time.perf_counter() - t0  # clock-ok

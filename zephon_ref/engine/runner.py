"""Runner names and the stage contract's public handles.

Theory of operation
-------------------
A runner decides only *who* drives the engine's steps (see
:mod:`zephon_ref.engine.core`): ``inline`` drives them lazily on the caller's
thread (``Engine.run`` -> ``Engine._run_inline``), ``threads`` runs a pump thread
per operator (:mod:`zephon_ref.engine.threads`).  The rules every runner obeys
live in :mod:`zephon_ref.engine.stage`.  Execution settings (runner, parallelism,
queue sizes) never reach the data path.
"""

from __future__ import annotations

from zephon_ref.engine.stage import OpStage, apply_entries, is_sentinel
from zephon_ref.engine.threads import ThreadsRunner

__all__ = ["RUNNERS", "OpStage", "ThreadsRunner", "apply_entries", "is_sentinel"]

RUNNERS = ("inline", "threads")

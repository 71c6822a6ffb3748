"""zephon's ``zephon.debug``: a raw-payload dataset inspector and the semaphore-leak hooks.

Theory of operation
-------------------
:class:`~zephon_ref.debug.inspector.DatasetInspector` reads raw payloads of one dataset by shard
and row, without a work source or pipeline (zephon's interactive inspection tool).  The semaphore
functions debug zephon's process runner, which creates multiprocessing semaphores; zephon_ref's
runners are in-process and create none, so there is nothing to track: installing the hooks and
dumping the (empty) registry or leak report do nothing here.  Nothing in this package reaches the
data path.

What may not live here: pipeline logic, anything a run reads.
"""

from zephon_ref.debug.inspector import DatasetInspector
from zephon_ref.debug.semaphore_registry import dump_semaphore_registry
from zephon_ref.debug.semaphore_tracker import dump_semaphore_leak_report, install_debug_hooks

__all__ = ["DatasetInspector", "dump_semaphore_leak_report", "dump_semaphore_registry", "install_debug_hooks"]

"""Moved to :mod:`zephon_ref.storage.posix` (this path keeps working: it re-exports it)."""

import sys

from zephon_ref.storage import posix as _moved

sys.modules[__name__] = _moved

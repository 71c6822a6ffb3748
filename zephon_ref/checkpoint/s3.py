"""Moved to :mod:`zephon_ref.storage.s3` (this path keeps working: it re-exports it)."""

import sys

from zephon_ref.storage import s3 as _moved

sys.modules[__name__] = _moved

"""Moved to :mod:`zephon_ref.codec` (semantics: the byte encoding of state, no I/O); this path keeps
working: it is that module."""

import sys

from zephon_ref import codec as _moved

sys.modules[__name__] = _moved

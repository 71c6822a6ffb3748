"""``zephon.ops.traits``: an operator's declared traits (defined in :mod:`zephon_ref.ops.base`)."""

from zephon_ref.ops.base import OpTraits

__all__ = ["OpTraits"]

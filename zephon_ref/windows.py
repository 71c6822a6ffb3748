"""Global windows: a checkpoint cut inside one.

A global step delivers one item from each of the C canonical lanes, in strict round robin; a
whole state (one participant's that owns every lane, or a merge) whose per-lane delivered counts
(``lane_emitted``) are all known and unequal was cut inside a window.  A resume on the same
topology continues the window exactly; a resume onto another topology permutes the window's rest
(seed 002: nothing is lost or repeated).  zephon 0.2.0 warns then; so does zephon_ref, from the
two places that produce a whole state (``Builder.checkpoint`` and ``coordination.merge``).

What may not live here: the state schema's checks (:mod:`zephon_ref.state`), the merge itself.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping

__all__ = ["warn_if_mid_window"]


def warn_if_mid_window(lane_emitted: Mapping[int, int], canonical_replicas: int, *, stacklevel: int) -> None:
    """Warn when a whole state (one participant's or a merge's; keys distinct lanes of [0, C)) is cut
    inside a global window: all C delivered counts known (zephon 0.2.0's rule) and unequal.  A resume
    onto another topology permutes the window's rest (seed 002).  ``stacklevel``: from the caller."""
    lo, hi = min(lane_emitted.values(), default=0), max(lane_emitted.values(), default=0)
    if len(lane_emitted) == canonical_replicas and lo != hi:
        warnings.warn(f"checkpoint taken mid-window: expected equal per-lane delivered counts "
                      f"(lane_emitted) at a global-step boundary, received counts in [{lo}..{hi}] across "
                      f"{canonical_replicas} lanes; resuming on another topology permutes the rest of the "
                      "current window (nothing is lost or repeated)", RuntimeWarning,
                      stacklevel=stacklevel + 1)

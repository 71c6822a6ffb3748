"""Restore one merged state into many participants, validating it once: the simulator's shortcut.

Theory of operation
-------------------
A simulated job restores the same merged checkpoint into every (rank, worker) pipeline.
Plainly, each ``Pipeline.restore(state)`` validates the whole state (every lane) and
checks its integrity digest: O(participants x lanes) for one restart.
:class:`SharedRestore` validates the merged state and verifies its digest **once**, keeps
a private copy, and hands each participant only the universal fields and its own lanes'
entries, re-sealed (:func:`zephon_ref.state.seal`): a participant-shaped state that the
pipeline's ordinary ``restore`` validates in O(owned lanes).

It is owned by the simulated world (one per restart) and is the only place a sliced
state is made.  Invariant (why it may exist): restoring ``shared.for_lanes(owned)`` gives
every participant exactly the engine, stream and refusals of restoring the whole state;
``tests/sim/test_restore_shared.py`` checks it against the plain restore on drawn cuts.
The re-seal vouches only for what was verified: the digest of the whole state is checked
before any slice exists, and a slice is a projection of the verified copy.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any

from zephon_ref import state as schema

__all__ = ["SharedRestore"]


class SharedRestore:
    """One merged state, validated and digest-checked once, sliced per participant."""

    __slots__ = ("_state", "canonical_replicas")

    def __init__(self, state: Mapping[str, Any]) -> None:
        self.canonical_replicas = schema.validate(state)
        schema.verify_integrity(state)
        self._state: dict[str, Any] = copy.deepcopy(dict(state))  # never handed out or changed

    def whole(self) -> dict[str, Any]:
        """A fresh copy of the whole state."""
        return copy.deepcopy(self._state)

    def for_lanes(self, lanes: Iterable[int]) -> dict[str, Any]:
        """The universal fields and the given lanes' entries (lanes the state lacks are left out:
        the pipeline's restore refuses a missing owned lane), as a fresh, sealed state."""
        c, wanted = self.canonical_replicas, set(lanes)
        part: dict[str, Any] = {}
        for name, value in self._state.items():
            if name not in schema.LANE_FIELDS or value is None:
                part[name] = copy.deepcopy(value)
            else:
                part[name] = {key: copy.deepcopy(v) for key, v in value.items()
                              if schema.lane_key(key, f"lane key of {name!r}", c) in wanted}
        return schema.seal(part)

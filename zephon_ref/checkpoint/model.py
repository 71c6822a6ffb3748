"""The durable store's promises as a plain model: generations in a dict.

Theory of operation
-------------------
:mod:`zephon_ref.checkpoint.store` publishes generations of immutable files over a
:class:`~zephon_ref.storage.Storage` (POSIX, S3, the simulator's faulty disk).  Whatever
the files, it promises exactly what :class:`StoreModel` does with a dict:

* **publish-if-absent** — a save publishes one new generation under a number above every
  number published before (numbers only grow; a save that failed or lost a race may leave a
  number unused, so gaps are allowed), and a published generation is never changed or
  replaced;
* **a failure changes nothing it did not finish** — a save that raises published nothing, or
  (a failure after the manifest became visible) exactly the state it was given, under a
  fresh number; which one is a fact the caller reads back (:meth:`StoreModel.settle`);
* **newest complete** — the newest generation is the newest *published* one: torn saves are
  invisible;
* **load** returns exactly what the save of that generation was given; an unpublished or
  collected generation is not found;
* **gc(keep)** keeps the ``keep`` newest published generations and removes the others;
* **a crash** (power loss) keeps every generation whose save returned; a generation whose
  save raised after publication may or may not survive it.

The model is the specification the stateful machine of ``properties/store_machine.py``
checks every real store against, operation by operation.  It holds no bytes, files,
digests or clocks: about the size of the promises, not of the system.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from zephon_ref.errors import ConfigError, expected
from zephon_ref.storage.errors import CheckpointNotFound

__all__ = ["StoreModel"]


@dataclass
class StoreModel:
    """Published generations (number -> the state its save was given) and what may still vanish."""

    #: invariant: every key is > 0 and the values are never changed once set
    generations: dict[int, dict[str, Any]] = field(default_factory=dict)
    #: invariant: the highest number ever published (>= every key; gc and crashes do not lower it)
    high: int = 0
    #: invariant: a subset of ``generations``: published by a save that raised (a crash may drop them)
    unsure: set[int] = field(default_factory=set)

    # -- what the store may answer ------------------------------------------------------------
    def listing(self) -> list[int]:
        """The published generations, ascending (``store.list_generations``)."""
        return sorted(self.generations)

    def newest(self) -> int | None:
        """The newest published generation (``store.latest_complete_generation``)."""
        return max(self.generations) if self.generations else None

    def load(self, generation: int | None = None) -> dict[str, Any]:
        """What a load of ``generation`` (the newest if None) returns."""
        g = self.newest() if generation is None else generation
        if g is None or g not in self.generations:
            raise CheckpointNotFound(expected("generation", f"one of {self.listing()}", generation))
        return copy.deepcopy(self.generations[g])

    # -- what the store does --------------------------------------------------------------------
    def saved(self, generation: int, state: Mapping[str, Any]) -> None:
        """A save returned ``generation`` for ``state``: check the number, publish it."""
        self._publish(generation, state)

    def settle(self, state: Mapping[str, Any], visible: list[int]) -> int | None:
        """A save of ``state`` raised; ``visible`` is the store's listing afterwards.  Returns the
        generation it published anyway (at most one, above every earlier one), or None."""
        new = [g for g in visible if g not in self.generations]
        if len(new) > 1:
            raise AssertionError(f"a failed save published several generations {new}")
        if not new:
            return None
        self._publish(new[0], state)
        self.unsure.add(new[0])
        return new[0]

    def gc(self, keep: int) -> list[int]:
        """``gc(keep=keep)``: the generations it removes."""
        if type(keep) is not int or keep < 1:
            raise ConfigError(expected("gc keep", "an int >= 1", keep))
        gone = self.listing()[:-keep]
        for g in gone:
            del self.generations[g]
            self.unsure.discard(g)
        return gone

    def crashed(self, visible: list[int]) -> None:
        """A power loss happened; ``visible`` is the listing afterwards.  Only generations whose
        save raised may have vanished; nothing new may appear."""
        lost = set(self.generations) - set(visible)
        if not lost <= self.unsure:
            returned = sorted(lost - self.unsure)
            raise AssertionError(f"a crash lost generations whose save returned: {returned}")
        extra = set(visible) - set(self.generations)
        if extra:
            raise AssertionError(f"a crash made generations appear: {sorted(extra)}")
        for g in lost:
            del self.generations[g]
        self.unsure -= lost

    def _publish(self, generation: int, state: Mapping[str, Any]) -> None:
        if type(generation) is not int or generation <= self.high:
            raise AssertionError(
                f"generation {generation!r} published, "
                f"expected a number above every earlier one ({self.high})")
        self.generations[generation] = copy.deepcopy(dict(state))
        self.high = generation

"""Routing of global chunks to lanes: which lane owns global chunk ``g``.

Global chunk ``g`` belongs to slot ``g mod C`` of routing block ``g div C``.  Under
``lane_assignment="permute"`` (zephon 0.2.0's default) block ``b``'s slot -> lane order is
:func:`lane_permutation`, a seeded shuffle of the ``C`` lanes; under ``"modulo"`` it is
the identity (lane ``g mod C``).  Pure functions: nothing here holds state.
"""

from __future__ import annotations

from random import Random  # seeded instances only: never the global generator

from zephon_ref.work.cursor import GOLDEN

__all__ = ["lane_permutation", "lane_slots"]


def lane_permutation(seed: int, block: int, canonical_replicas: int) -> tuple[int, ...]:
    """Slot -> lane in routing block ``block`` (``permute`` lane assignment)."""
    order = list(range(canonical_replicas))
    Random(seed + block * GOLDEN).shuffle(order)
    return tuple(order)


def lane_slots(permutation: tuple[int, ...]) -> tuple[int, ...]:
    """The inverse of a :func:`lane_permutation`: lane -> its slot."""
    slots = [0] * len(permutation)
    for slot, lane in enumerate(permutation):
        slots[lane] = slot
    return tuple(slots)

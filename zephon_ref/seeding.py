"""Seed derivation: every random choice comes from a generator seeded by ``(seed, label)``.

``derive_seed`` hashes with BLAKE2b, never Python's ``hash()`` (which is salted
per process for strings), so a derived seed is the same in every process and on
every machine.
"""

from __future__ import annotations

import hashlib

__all__ = ["derive_seed"]


def derive_seed(seed: int, label: str) -> int:
    """A 64-bit seed that depends only on ``seed`` and ``label``."""
    digest = hashlib.blake2b(f"{int(seed)}\x00{label}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")

"""World: which canonical lanes a rank (and a DataLoader worker) owns.

Theory of operation
-------------------
``canonical_replicas`` C lanes are split among ``dp_degree`` D data-parallel
groups.  ``contiguous`` (default) gives group g the next ``C div D`` (+1 for
the first ``C mod D`` groups) consecutive lanes; ``interleaved`` gives it every
lane ``l`` with ``l mod D == g``.  Ranks sharing a ``dp_group_id`` (tensor or
pipeline peers) own the same lanes and compute identical streams without
talking.  Inside a DataLoader the group's lane list is split again: ``active``
workers (the largest count <= num_workers that divides the list length), worker
w owning list indices ``i`` with ``i mod active == w``; the rest idle.

Pure functions and one frozen dataclass; nothing here holds mutable state.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

from zephon_ref.errors import ConfigError, expected

__all__ = ["MAPPING_STRATEGIES", "World", "active_workers", "lanes_for_group", "worker_lanes"]

MAPPING_STRATEGIES = ("contiguous", "interleaved")


def _int(name: str, v: object, lo: int) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < lo:
        raise ConfigError(expected(name, f"an int >= {lo}", v))
    return v


def lanes_for_group(
    canonical_replicas: int, dp_degree: int, group: int, strategy: str = "contiguous"
) -> list[int]:
    """The canonical lanes data-parallel group ``group`` owns."""
    if strategy == "interleaved":
        return list(range(group, canonical_replicas, dp_degree))
    base, rem = divmod(canonical_replicas, dp_degree)
    start = group * base + min(group, rem)
    return list(range(start, start + base + (1 if group < rem else 0)))


def active_workers(n_lanes: int, num_workers: int) -> int:
    """Largest worker count <= num_workers (and <= n_lanes) that divides n_lanes; at least 1."""
    active = max(1, min(num_workers, n_lanes))
    while active > 1 and n_lanes % active:
        active -= 1
    return active


def worker_lanes(lanes: list[int], worker_id: int, num_workers: int) -> list[int]:
    """The lanes of ``lanes`` that DataLoader worker ``worker_id`` owns (empty when idle)."""
    active = active_workers(len(lanes), num_workers)
    if worker_id >= active:
        return []
    return [lane for i, lane in enumerate(lanes) if i % active == worker_id]


@dataclass(frozen=True, slots=True)
class World:
    """The topology of one participant: rank, DP group, and the lanes it owns."""

    canonical_replicas: int
    world_size: int = 1
    global_rank: int = 0
    dp_degree: int = 1
    dp_group_id: int = 0
    mapping_strategy: str = "contiguous"
    worker_id: int = 0
    num_workers: int = 1

    @classmethod
    def resolve(cls, *, world_size: int = 1, global_rank: int = 0, dp_degree: int | None = None,
                dp_group_id: int | None = None, canonical_replicas: int | None = None,
                mapping_strategy: str | None = None, worker_id: int = 0, num_workers: int = 1) -> World:
        """Apply zephon's defaults, then validate (every refusal names the argument)."""
        ws = _int("world_size", world_size, 1)
        rank = _int("global_rank", global_rank, 0)
        if rank >= ws:
            raise ConfigError(expected("global_rank", f"an int in [0, world_size={ws})", rank))
        d = ws if dp_degree is None else _int("dp_degree", dp_degree, 1)
        if d > ws:
            raise ConfigError(expected("dp_degree", f"<= world_size={ws}", d))
        if ws % d:
            raise ConfigError(expected("world_size", f"a multiple of dp_degree={d}", ws))
        g = rank if dp_group_id is None else _int("dp_group_id", dp_group_id, 0)
        if g >= d:
            raise ConfigError(expected("dp_group_id", f"an int in [0, dp_degree={d})", g))
        c = d if canonical_replicas is None else _int("canonical_replicas", canonical_replicas, 1)
        if c < d:
            raise ConfigError(expected("canonical_replicas", f">= dp_degree={d}", c))
        strategy = "contiguous" if mapping_strategy is None else mapping_strategy
        if strategy not in MAPPING_STRATEGIES:
            raise ConfigError(expected("mapping_strategy", "'contiguous' or 'interleaved'", strategy))
        if c % d:
            warnings.warn(f"canonical_replicas={c} is not divisible by dp_degree={d}: groups own unequal "
                          "lane counts and global steps cannot be aligned across topologies", RuntimeWarning,
                          stacklevel=3)
        _int("num_workers", num_workers, 1)
        _int("worker_id", worker_id, 0)
        return cls(c, ws, rank, d, g, strategy, worker_id, num_workers)

    @property
    def group_lanes(self) -> list[int]:
        return lanes_for_group(
            self.canonical_replicas, self.dp_degree, self.dp_group_id, self.mapping_strategy
        )

    @property
    def owned_lanes(self) -> list[int]:
        return worker_lanes(self.group_lanes, self.worker_id, self.num_workers)

    @property
    def active_workers(self) -> int:
        return active_workers(len(self.group_lanes), self.num_workers)

    def mapping(self) -> dict[int, list[int]]:
        return {g: lanes_for_group(self.canonical_replicas, self.dp_degree, g, self.mapping_strategy)
                for g in range(self.dp_degree)}

    def rr_key(self) -> str:
        """Key of the round-robin pointer: worker, active workers and owned lanes (not the rank)."""
        return f"{self.worker_id}/{self.active_workers}:{','.join(map(str, self.owned_lanes))}"

"""StaticMixtureWorkSource: a fixed mixture of datasets, cut into chunks, routed to lanes.

Theory of operation
-------------------
Every lane clone enumerates the *whole* global chunk sequence ``g = 0, 1, 2, ...``
and keeps only the chunks it owns ("compute everywhere, discard locally"), so
lanes never talk to each other and the union of all lanes' chunks is exactly the
global sequence, each chunk once.

One global chunk is produced in two steps:

1. *Quotas*: how many samples each dataset gives.  ``accumulator`` (default)
   carries a fractional accumulator per dataset (Bresenham style): add
   ``w * chunk_size``, truncate, then hand out or take back the rounding
   difference by largest (smallest) remainder so the quotas sum to
   ``chunk_size``.  ``legacy_fixed`` uses one fixed largest-remainder split with
   at least one sample per dataset.
2. *Exhaustion*: a dataset whose epoch cannot fill its quota is, by policy,
   clamped (``redistribute``), reset to its next epoch and the whole quota
   computation retried from the saved accumulators (``repeat``), or the stream
   ends (``stop``, a repeat cap, ``stop_after_passes``).  Every terminal return
   restores the accumulators first: a refused chunk has no side effects, which
   matters because the engine may ask ahead and then checkpoint.

Owner of ``g``: ``g mod C`` (``modulo``) or slot ``g mod C`` of the permutation
of ``0..C-1`` drawn by ``random.Random(seed + (g div C) * GOLDEN)`` (``permute``,
default), so each block of C chunks gives every lane exactly one.

Arithmetic: weights and accumulators are IEEE floats computed in the same order
as zephon 0.2.0, because the quotas must agree with it chunk for chunk.  They
are deterministic on every conforming platform; exact rationals would drift
from zephon after a few chunks (divergence D-25).

State: the global chunk index, each cursor's ``(epoch, position, block
snapshot)`` and the accumulators: restore is O(1) in training progress.

Skipping other lanes' chunks: a lane advances its cursors and accumulators over every
chunk another lane owns, one by one, without building it (C lanes: O(C) quota
computations per chunk a lane keeps).  A clone given a :class:`~zephon_ref.fast.walk.ChunkWalk`
by its owner (the engine, the simulated world) jumps over a run of them instead, in
O(datasets + log window), with the same result (:mod:`zephon_ref.fast.walk` says when
and why; ``properties.shortcuts`` checks it).

What may not live here: chunk ids, inflight tracking, sentinels (the engine's).
"""

from __future__ import annotations

import math
import sys
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, TypeAlias

from zephon_ref.errors import (
    ConfigError,
    ConfigTypeError,
    ContractError,
    DropLedger,
    StateFormatError,
    StateMismatchError,
    expected,
)
from zephon_ref.types import SampleId
from zephon_ref.work.base import SOURCE_POSITION_KEYS, SharedWalk, WorkChunk, WorkSource
from zephon_ref.work.cursor import DatasetCursor
from zephon_ref.work.dataset import Dataset
from zephon_ref.work.mixture import MixtureSpec, normalize_weights
from zephon_ref.work.routing import lane_permutation
from zephon_ref.work.token_estimation import TokenCostTable, TokenEstimation, TokenRatio, prime_token_ratios

__all__ = ["STATIC_MIXTURE_SCHEMA", "ShuffleBlockSpec", "StaticMixtureWorkSource"]

#: What ``shuffle_block_size`` takes (zephon's name for it): a size, ``"auto"``, ``"global"`` or None.
ShuffleBlockSpec: TypeAlias = "int | Literal['auto', 'global'] | None"

STATIC_MIXTURE_SCHEMA = "zephon_ref.static_mixture/1"
AUTO_BLOCK_FACTOR = 8
_POLICIES = ("stop", "redistribute", "repeat")
_MODES = ("accumulator", "legacy_fixed", "token_aware")
_MAX_PASSES = 1 << 40  # stop_after_passes / max_repeats bound: epochs count in machine ints downstream


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()


def _per_dataset(value: Any, names: Sequence[str], *, default: Any, arg: str) -> dict[str, Any]:
    if isinstance(value, Mapping):
        unknown = [k for k in value if k not in names]
        if unknown:
            raise ConfigError(
                expected(arg, f"keys among the dataset names {list(names)}", f"unknown {unknown}")
            )
        return {n: value.get(n, default) for n in names}
    return dict.fromkeys(names, value)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


class _Config:
    """The immutable allocation parameters (shared by lane clones)."""

    __slots__ = ("chunk_size", "max_repeats", "order", "policy", "redistributing", "reshuffle",
                 "stop_after_passes", "weights")

    def __init__(self, order: tuple[str, ...], weights: dict[str, float], chunk_size: int,
                 policy: dict[str, str], reshuffle: dict[str, bool], max_repeats: dict[str, int | None],
                 stop_after_passes: int | None) -> None:
        self.order = order
        self.weights = weights
        self.chunk_size = chunk_size
        self.policy = policy
        self.reshuffle = reshuffle
        self.max_repeats = max_repeats
        self.stop_after_passes = stop_after_passes
        self.redistributing = frozenset(n for n in order if policy[n] == "redistribute")

    def unbounded(self) -> bool:
        if self.stop_after_passes is not None:
            return False
        survivors = [n for n in self.order if n not in self.redistributing]
        return bool(survivors) and all(
            self.policy[n] == "repeat" and self.max_repeats[n] is None for n in survivors
        )

    def effective_remaining(self, name: str, cur: DatasetCursor) -> int | None:
        """Samples ``name`` can still give before it ends for good; None if never."""
        if self.policy[name] == "repeat":
            cap = self.max_repeats[name]
            if cap is None:
                return None
            return cur.remaining + max(0, cap - cur.epoch) * cur.total
        return cur.remaining

    def passes_reached(self, cursors: Mapping[str, DatasetCursor], exhausting: str | None = None) -> bool:
        """Has every dataset completed ``stop_after_passes`` passes (False without that bound)?"""
        if self.stop_after_passes is None:
            return False
        for n in self.order:
            cur = cursors[n]
            done = cur.epoch + (1 if (n == exhausting or cur.remaining == 0) else 0)
            if done < self.stop_after_passes:
                return False
        return True

    def repeats(self, name: str, cursors: Mapping[str, DatasetCursor]) -> bool:
        """May dataset ``name``, too short for its quota, start its next pass?  Not under 'stop',
        at its ``max_repeats`` cap, or once ``stop_after_passes`` is reached: the stream ends."""
        if self.policy[name] != "repeat":
            return False
        cap = self.max_repeats[name]
        if cap is not None and cursors[name].epoch >= cap:
            return False
        return not self.passes_reached(cursors, name)

    def without_redistributing(self, shares: dict[str, float]) -> dict[str, float]:
        """``shares`` renormalised over the datasets that never leave the mixture (what a
        repeat dataset's share grows to once every 'redistribute' dataset has run dry)."""
        if not self.redistributing:
            return shares
        surv = {n: w for n, w in shares.items() if n not in self.redistributing}
        tot = sum(surv.values())
        return {n: w / tot for n, w in surv.items()}


class _Allocator:
    """Quota policy plus exhaustion handling; owns only its carry state."""

    mode = ""

    def __init__(self, cfg: _Config) -> None:
        self.cfg = cfg
        self.last_failed: str | None = None

    def active_weights(self, cursors: Mapping[str, DatasetCursor]) -> dict[str, float]:
        cfg = self.cfg
        if not cfg.redistributing:
            return cfg.weights
        active = {
            n: w for n, w in cfg.weights.items() if n not in cfg.redistributing or cursors[n].remaining > 0
        }
        if len(active) == len(cfg.weights):
            return cfg.weights
        total = sum(active.values())
        return {n: w / total for n, w in active.items()}

    def target_mixture(self, cursors: Mapping[str, DatasetCursor]) -> dict[str, float] | None:
        return dict(self.active_weights(cursors)) if self.cfg.redistributing else None

    def quotas(self, cursors: dict[str, DatasetCursor]) -> dict[str, int] | None:
        raise NotImplementedError

    def produce(self, cursors: dict[str, DatasetCursor]) -> dict[str, list[SampleId]] | None:
        q = self.quotas(cursors)
        if q is None:
            return None
        out: dict[str, list[SampleId]] = {}
        for n in self.cfg.order:
            k = q.get(n, 0)
            if k <= 0:
                continue
            got = cursors[n].next_many(k)
            # invariant: the exhaustion pass guaranteed every quota fits
            assert len(got) == k, (n, len(got), k)
            out[n] = got
        return out

    def skip(self, cursors: dict[str, DatasetCursor]) -> bool:
        """Advance exactly as :meth:`produce` would, without building the pointer lists.

        For a chunk another lane owns.  Returns whether a chunk was produced.
        """
        q = self.quotas(cursors)
        if q is None:
            return False
        any_taken = False
        for n, k in q.items():  # the order of advances does not matter: cursors are independent
            if k > 0:
                # invariant: the exhaustion pass guaranteed every quota fits
                got = cursors[n].advance(k)
                assert got == k, (n, got, k)
                any_taken = True
        return any_taken

    def state(self) -> dict[str, float] | None:
        return None

    def draws_per_chunk(self) -> dict[str, float]:
        """Average samples each dataset gives per chunk (what ``len()`` estimates from)."""
        return {n: self.cfg.weights[n] * self.cfg.chunk_size for n in self.cfg.order}

    def clone(self) -> _Allocator:
        raise NotImplementedError

    def check_liveness(self, cursors: Mapping[str, DatasetCursor]) -> None:
        """Refuse a repeat dataset too small to ever fill one chunk's quota."""


class _AccumulatorAllocator(_Allocator):
    mode = "accumulator"

    def __init__(self, cfg: _Config, acc: Mapping[str, float] | None = None) -> None:
        super().__init__(cfg)
        self.acc: dict[str, float] = dict(acc) if acc is not None else dict.fromkeys(cfg.order, 0.0)

    def clone(self) -> _AccumulatorAllocator:
        return _AccumulatorAllocator(self.cfg, self.acc)

    def state(self) -> dict[str, float]:
        return {n: float(v) for n, v in self.acc.items()}

    def check_liveness(self, cursors: Mapping[str, DatasetCursor]) -> None:
        cfg = self.cfg
        shares = cfg.without_redistributing(cfg.weights)
        for n in cfg.order:
            if cfg.policy[n] != "repeat":
                continue
            share = shares[n] * cfg.chunk_size
            need = int(share) if share.is_integer() else min(math.ceil(share) + 1, cfg.chunk_size)
            if cursors[n].total < need:
                raise ConfigError(
                    expected(
                        f"dataset {n!r} size",
                        f">= {need} samples for exhausted_policy='repeat' (one chunk's worst-case "
                        f"quota at weight {shares[n]:.4g} x chunk_size {cfg.chunk_size})",
                        cursors[n].total,
                    ) + "; use a larger dataset or a smaller chunk_size"
                )

    def _advance(self, weights: Mapping[str, float]) -> dict[str, int]:
        cfg = self.cfg
        acc = self.acc
        size = cfg.chunk_size
        names = cfg.order if weights is cfg.weights else [n for n in cfg.order if n in weights]
        q: dict[str, int] = {}
        total = 0
        for n in names:
            a = acc[n] + weights[n] * size
            k = int(a)  # truncation toward zero
            acc[n] = a - k
            q[n] = k
            total += k
        diff = size - total
        if diff > 0:
            # largest remainder first, ties to the earlier component (the sort is stable, also reversed)
            for n in sorted(names, key=acc.__getitem__, reverse=True)[:diff]:
                q[n] += 1
                acc[n] -= 1.0
                diff -= 1
        elif diff < 0:
            for n in sorted(names, key=acc.__getitem__):
                if diff >= 0:
                    break
                if q[n] > 0:
                    q[n] -= 1
                    acc[n] += 1.0
                    diff += 1
        if diff != 0:
            raise ContractError(expected("quota sum", str(size), size - diff))
        return q

    def quotas(self, cursors: dict[str, DatasetCursor]) -> dict[str, int] | None:
        cfg = self.cfg
        weights = self.active_weights(cursors)
        if not weights:
            return None
        zero_carry = any(n not in weights and self.acc[n] != 0.0 for n in cfg.redistributing)
        while True:
            saved = dict(self.acc)
            if zero_carry:
                self.acc = dict.fromkeys(cfg.order, 0.0)
            q = self._advance(weights)
            retry = False
            for n in cfg.order:
                k = q.get(n, 0)
                cur = cursors[n]
                if cur.remaining >= k:
                    continue
                self.last_failed = n
                if cfg.policy[n] == "redistribute":
                    q[n] = cur.remaining
                    continue
                if not cfg.repeats(n, cursors):
                    self.acc = saved
                    return None
                if k > cur.total:
                    self.acc = saved
                    raise ContractError(
                        f"dataset {n!r} ({cur.total} samples) drew a quota of {k} in one chunk: more "
                        "than a full pass, so a repeat cannot fill it (the liveness bound was violated)"
                    )
                cur.reset(reshuffle=cfg.reshuffle[n])
                self.acc = saved
                retry = True
                break
            if retry:
                continue
            if cfg.passes_reached(cursors):
                self.acc = saved
                return None
            return q


class _LegacyFixedAllocator(_Allocator):
    mode = "legacy_fixed"

    def __init__(self, cfg: _Config) -> None:
        super().__init__(cfg)
        if cfg.redistributing:
            raise ConfigError(expected("exhausted_policy with allocation_mode='legacy_fixed'",
                                       "no 'redistribute' dataset", sorted(cfg.redistributing)))
        self.fixed = self._split()

    def _split(self) -> dict[str, int]:
        cfg = self.cfg
        small = [n for n in cfg.order if cfg.chunk_size * cfg.weights[n] < 1.0]
        if small:
            need = math.ceil(1.0 / min(cfg.weights[n] for n in small))
            raise ConfigError(expected(
                "chunk_size with allocation_mode='legacy_fixed'",
                f">= {need} so every component gets at least one sample per chunk", cfg.chunk_size,
            ) + f" (components below one sample: {small})")
        q = dict.fromkeys(cfg.order, 1)
        left = cfg.chunk_size - len(cfg.order)
        extras = [(max(0.0, cfg.chunk_size * cfg.weights[n] - 1.0), i, n) for i, n in enumerate(cfg.order)]
        fracs = []
        for ex, i, n in sorted(extras, key=lambda t: (-t[0], t[1])):
            if left > 0:
                give = min(int(math.floor(ex)), left)
                q[n] += give
                left -= give
            fracs.append((ex - math.floor(ex), i, n))
        for _, _, n in sorted(fracs, key=lambda t: (-t[0], t[1])):
            if left <= 0:
                break
            q[n] += 1
            left -= 1
        if left != 0:
            raise ContractError(expected("legacy quota slots left", "0", left))
        return q

    def clone(self) -> _LegacyFixedAllocator:
        return _LegacyFixedAllocator(self.cfg)  # the fixed split is a pure function of the config

    def check_liveness(self, cursors: Mapping[str, DatasetCursor]) -> None:
        for n in self.cfg.order:
            if self.cfg.policy[n] == "repeat" and cursors[n].total < self.fixed[n]:
                raise ConfigError(expected(
                    f"dataset {n!r} size", f">= {self.fixed[n]} samples (its fixed quota per chunk with "
                    "allocation_mode='legacy_fixed' and exhausted_policy='repeat')", cursors[n].total))

    def quotas(self, cursors: dict[str, DatasetCursor]) -> dict[str, int] | None:
        # stop_after_passes ends the stream as in accumulator mode: divergence D-72
        cfg = self.cfg
        for n in cfg.order:
            cur = cursors[n]
            if cur.remaining >= self.fixed[n]:
                continue
            self.last_failed = n
            if not cfg.repeats(n, cursors):
                return None
            cur.reset(reshuffle=cfg.reshuffle[n])
        if cfg.passes_reached(cursors):
            return None
        return dict(self.fixed)

    def remaining_samples(self, cursors: Mapping[str, DatasetCursor]) -> int:
        """Exactly what the stream still yields (precondition: bounded), in O(datasets).

        With fixed quotas, dataset ``n`` (quota ``q``, ``total`` T, at ``(epoch e, position p)``)
        is short of its quota at the start of chunks ``c_j = k0 + j*k`` (``k0 = (T-p)//q``,
        ``k = T//q``), and counts ``e + 1 + (c-k0)//k`` completed passes from ``c = k0`` on
        (``e`` before).  The stream stops at the first chunk where a ``stop`` dataset or a
        capped one (``e + j >= max_repeats``) is short, or where every dataset has
        completed ``stop_after_passes`` passes.
        """
        cfg = self.cfg
        sap = cfg.stop_after_passes
        end = math.inf
        last_pass = 0
        for n in cfg.order:
            cur, q = cursors[n], self.fixed[n]
            k0 = cur.remaining // q
            if cfg.policy[n] != "repeat":
                end = min(end, k0)
                continue
            k = cur.total // q  # >= 1: check_liveness
            cap = cfg.max_repeats[n]
            if cap is not None:
                end = min(end, k0 + max(0, cap - cur.epoch) * k)
            if sap is not None:
                need = sap - cur.epoch
                last_pass = max(last_pass, 0 if need <= 0 else k0 + (need - 1) * k)
        if sap is not None:
            end = min(end, last_pass)
        assert not math.isinf(end), "remaining_samples of an unbounded source"
        return int(end) * cfg.chunk_size

class _TokenAllocator(_Allocator):
    """Per-draw token deficits: each draw serves the component owed the most tokens.

    Every draw charges the drawn pointer's estimated cost ``c``: each active
    component's deficit grows by ``w_k * c`` and the chosen one's shrinks by
    ``c`` (the smooth weighted round robin's update, in token units; ties go to
    the earlier component).  A ``repeat`` cursor that runs dry rolls the whole
    attempt back (deficits and cursors), starts that dataset's next epoch and
    retries; more than ``MAX_RESETS`` resets of one dataset within a chunk means
    the carried deficit asks for more than a pass, and raises.  A dry
    ``redistribute`` cursor ends the chunk early (short chunk).
    """

    mode = "token_aware"
    LIVENESS_SAFETY = 2.0
    MAX_RESETS = 3

    def __init__(self, cfg: _Config, table: TokenCostTable, ratios: Mapping[str, float],
                 deficits: Mapping[str, float] | None = None) -> None:
        super().__init__(cfg)
        self.table = table
        self.ratios = dict(ratios)
        self.deficits: dict[str, float] = (
            dict(deficits) if deficits is not None else dict.fromkeys(cfg.order, 0.0)
        )

    def skip(self, cursors: dict[str, DatasetCursor]) -> bool:
        # every draw's cost depends on the drawn pointer's shard: the pointers must be drawn
        return bool(self.produce(cursors))

    def clone(self) -> _TokenAllocator:
        return _TokenAllocator(self.cfg, self.table, self.ratios, self.deficits)

    def state(self) -> dict[str, float]:
        return {n: float(v) for n, v in self.deficits.items()}

    def target_mixture(self, cursors: Mapping[str, DatasetCursor]) -> dict[str, float] | None:
        return dict(self.active_weights(cursors))  # the declared token mixture, always

    def effective_shares(self) -> dict[str, float]:
        """Long-run sample shares: ``normalize(w_k / mean_cost_k)``."""
        cfg = self.cfg
        raw = {n: cfg.weights[n] / self.table.mean_cost(n) for n in cfg.order}
        total = sum(raw.values())
        return {n: v / total for n, v in raw.items()}

    def draws_per_chunk(self) -> dict[str, float]:
        return {n: v * self.cfg.chunk_size for n, v in self.effective_shares().items()}

    def check_liveness(self, cursors: Mapping[str, DatasetCursor]) -> None:
        cfg = self.cfg
        if "repeat" not in cfg.policy.values():
            return
        shares = cfg.without_redistributing(self.effective_shares())
        for n in cfg.order:
            if cfg.policy[n] != "repeat":
                continue
            need = min(cfg.chunk_size, math.ceil(shares[n] * cfg.chunk_size * self.LIVENESS_SAFETY))
            if cursors[n].total < need:
                raise ConfigError(
                    expected(
                        f"dataset {n!r} size",
                        f">= {need} samples for exhausted_policy='repeat' in token-aware allocation "
                        f"(min(chunk_size, ceil(sample share {shares[n]:.4g} x chunk_size {cfg.chunk_size} "
                        f"x {self.LIVENESS_SAFETY})))",
                        cursors[n].total,
                    ) + "; use a larger dataset or a smaller chunk_size"
                )

    def produce(self, cursors: dict[str, DatasetCursor]) -> dict[str, list[SampleId]] | None:
        cfg = self.cfg
        weights = self.active_weights(cursors)
        if not weights:
            return None
        order = [n for n in cfg.order if n in weights]
        w = [weights[n] for n in order]
        k = len(order)
        cost = self.table.cost
        # the rollback point: every cursor as it was before this chunk (a reset moves it)
        start = {n: cur.state() for n, cur in cursors.items()}
        resets: dict[str, int] = {}
        while True:
            # a dataset may complete its last pass exactly on the previous chunk boundary
            if cfg.passes_reached(cursors):
                return None
            d = [self.deficits[n] for n in order]
            drawn: list[list[SampleId]] = [[] for _ in order]
            retry = False
            for _ in range(cfg.chunk_size):
                best = 0
                for i in range(1, k):
                    if d[i] > d[best]:  # strict: ties go to the earlier component
                        best = i
                name = order[best]
                sid = cursors[name].next_one()
                if sid is None:
                    self.last_failed = name
                    if cfg.policy[name] == "redistribute":
                        break  # keep the short chunk; the component leaves the next target
                    self._rollback(cursors, start)
                    if not cfg.repeats(name, cursors):
                        return None
                    resets[name] = resets.get(name, 0) + 1
                    if resets[name] > self.MAX_RESETS:
                        raise ContractError(
                            f"dataset {name!r} ({cursors[name].total} samples) ran dry {resets[name]} times "
                            f"while filling one chunk: its carried token deficit ({self.deficits[name]:.0f}) "
                            "asks for more than a full pass per attempt; use a larger dataset, a smaller "
                            "chunk_size, or bound the run with max_repeats / stop_after_passes"
                        )
                    cursors[name].reset(reshuffle=cfg.reshuffle[name])
                    start[name] = cursors[name].state()
                    retry = True
                    break
                c = cost(name, sid[1])
                for i in range(k):
                    d[i] += w[i] * c
                d[best] -= c
                drawn[best].append(sid)
            if retry:
                continue
            for i, n in enumerate(order):
                self.deficits[n] = d[i]
            return {n: got for n, got in zip(order, drawn, strict=True) if got}

    def _rollback(self, cursors: dict[str, DatasetCursor], start: Mapping[str, Mapping[str, Any]]) -> None:
        for n, st in start.items():
            cur = cursors[n]
            if cur.epoch == st["epoch"] and cur.position == st["position"]:
                continue
            cur.seek(st["epoch"], st["position"], reshuffle=self.cfg.reshuffle[n],
                     block_rng_snapshot=st.get("block_rng_snapshot"))


def _make_allocator(mode: str, cfg: _Config, acc: Mapping[str, float] | None = None) -> _Allocator:
    if mode == "accumulator":
        return _AccumulatorAllocator(cfg, acc)
    assert mode == "legacy_fixed", mode  # token_aware is built with its cost table
    return _LegacyFixedAllocator(cfg)


class StaticMixtureWorkSource(WorkSource):
    """A weighted mixture of datasets emitted in chunks of ``chunk_size`` pointers.

    Arguments and defaults follow zephon 0.2.0; ``allocation_mode`` (keyword-only) is a
    zephon_ref addition (divergence D-22).
    """

    def __init__(
        self,
        datasets: Sequence[Dataset],
        mixture: MixtureSpec | Mapping[str, float],
        chunk_size: int = 16384,
        seed: int = 0,
        shuffle_shards: bool = True,
        shuffle_within_shard: bool = False,
        shuffle_block_size: int | str | None = None,
        exhausted_policy: str | Mapping[str, str] | None = None,
        reshuffle_on_repeat: Any = UNSET,
        max_repeats: Any = None,
        stop_after_passes: Any = UNSET,
        lane_assignment: str = "permute",
        token_estimation: Any = None,
        *,
        allocation_mode: str = "accumulator",
    ) -> None:
        super().__init__()
        # -- validate everything before building anything ------------------------------
        if not _is_int(chunk_size) or chunk_size <= 0:
            raise ConfigError(expected("chunk_size", "an int > 0", chunk_size))
        if not _is_int(seed) or seed < 0:
            raise ConfigError(expected("seed", "an int >= 0", seed))
        if isinstance(datasets, (str, bytes)) or not isinstance(datasets, Sequence):
            raise ConfigTypeError(expected("datasets", "a list of Dataset", type(datasets).__name__))
        if not datasets:
            raise ConfigError(expected("datasets", "at least one Dataset", list(datasets)))
        for d in datasets:
            if not isinstance(d, Dataset):
                raise ConfigTypeError(
                    expected("datasets entry", "a zephon_ref.work.Dataset", type(d).__name__)
                )
        names = tuple(d.name for d in datasets)
        if len(set(names)) != len(names):
            raise ConfigError(expected("dataset names", "unique names", list(names)))
        if lane_assignment not in ("modulo", "permute"):
            raise ConfigError(expected("lane_assignment", "'modulo' or 'permute'", lane_assignment))
        if allocation_mode not in ("accumulator", "legacy_fixed"):
            raise ConfigError(expected(
                "allocation_mode", "'accumulator' or 'legacy_fixed' (token-aware allocation is chosen by "
                "passing token_estimation)", allocation_mode))
        ratios: dict[str, float] | None = None
        token_ratios: dict[str, TokenRatio] | None = None
        primed = True
        if token_estimation is not None:
            if not isinstance(token_estimation, TokenEstimation):
                # a ValueError, like every other refused source argument (test_source_rules pins it)
                raise ConfigError(expected("token_estimation", "None or a zephon_ref.work.TokenEstimation",
                                           type(token_estimation).__name__))
            if allocation_mode != "accumulator":
                raise ConfigError(
                    expected(
                        "allocation_mode with token_estimation",
                        "the default (token_estimation selects 'token_aware')",
                        allocation_mode,
                    )
                )
            pinned = token_estimation.pinned(names)
            # unpinned datasets are measured by prime() (the builder runs it before the first run);
            # until then a provisional allocator on the fallback ratio stands in (it never produces)
            provisional = TokenRatio(token_estimation.fallback_tokens_per_byte, "fallback")
            token_ratios = {n: pinned.get(n, provisional) for n in names}
            ratios = {n: r.tokens_per_byte for n, r in token_ratios.items()}
            primed = len(pinned) == len(names)
            allocation_mode = "token_aware"
        for flag, v in (("shuffle_shards", shuffle_shards), ("shuffle_within_shard", shuffle_within_shard)):
            if not isinstance(v, bool):
                raise ConfigTypeError(expected(flag, "a bool", v))
        if isinstance(mixture, MixtureSpec):
            spec = mixture
        elif isinstance(mixture, Mapping):
            spec = MixtureSpec(mixture)
        else:
            raise ConfigTypeError(
                expected("mixture", "a MixtureSpec or a mapping name -> weight", type(mixture).__name__)
            )
        spec.validate_for(names)
        block_sizes = self._resolve_block_sizes(shuffle_block_size, datasets)

        explicit = frozenset(
            k for k, given in (
                ("exhausted_policy", exhausted_policy is not None),
                ("reshuffle_on_repeat", reshuffle_on_repeat is not UNSET),
                ("max_repeats", max_repeats is not None),
                ("stop_after_passes", stop_after_passes is not UNSET),
            ) if given
        )
        if stop_after_passes is UNSET:
            stop_after_passes = 1 if (exhausted_policy is None and max_repeats is None) else None
        if stop_after_passes is not None and (
            not _is_int(stop_after_passes) or not 1 <= stop_after_passes <= _MAX_PASSES
        ):
            raise ConfigError(
                expected("stop_after_passes", f"None or an int in [1, {_MAX_PASSES}]", stop_after_passes)
            )
        default_policy = "repeat" if stop_after_passes is not None else "stop"
        policy = _per_dataset(exhausted_policy if exhausted_policy is not None else default_policy,
                              names, default=default_policy, arg="exhausted_policy")
        for n, p in policy.items():
            if p not in _POLICIES:
                raise ConfigError(expected(f"exhausted_policy[{n!r}]", f"one of {list(_POLICIES)}", p))
        if stop_after_passes is not None:
            bad = sorted(n for n, p in policy.items() if p != "repeat")
            if bad:
                raise ConfigError(expected(
                    "exhausted_policy with stop_after_passes", "'repeat' for every dataset",
                    {n: policy[n] for n in bad},
                ))
            if max_repeats is not None:
                raise ConfigError(
                    expected("max_repeats with stop_after_passes", "None (use one or the other)", max_repeats)
                )
        reshuffle = _per_dataset(True if reshuffle_on_repeat is UNSET else reshuffle_on_repeat,
                                 names, default=True, arg="reshuffle_on_repeat")
        for n, v in reshuffle.items():
            if not isinstance(v, bool):
                raise ConfigTypeError(expected(f"reshuffle_on_repeat[{n!r}]", "a bool", v))
        caps = _per_dataset(max_repeats, names, default=None, arg="max_repeats")
        for n, v in caps.items():
            if v is not None and (not _is_int(v) or not 0 <= v <= _MAX_PASSES):
                raise ConfigError(expected(f"max_repeats[{n!r}]", f"None or an int in [0, {_MAX_PASSES}]", v))
        has_repeat = "repeat" in policy.values()
        for arg, given, default in (
            ("max_repeats", max_repeats, None),
            ("reshuffle_on_repeat", reshuffle_on_repeat, True),
        ):
            if given is UNSET:
                continue
            if isinstance(given, Mapping):
                for n, v in given.items():
                    if v != default and policy[n] != "repeat":
                        warnings.warn(
                            f"{arg}[{n!r}]={v!r} has no effect with exhausted_policy[{n!r}]={policy[n]!r}",
                            RuntimeWarning,
                            stacklevel=2,
                        )
            elif given != default and not has_repeat:
                warnings.warn(
                    f"{arg}={given!r} has no effect without a repeating dataset", RuntimeWarning, stacklevel=2
                )
        for d in datasets:
            if policy[d.name] == "stop" and d.total() == 0:
                raise ConfigError(
                    expected(f"dataset {d.name!r}", "at least one sample with exhausted_policy='stop'", 0)
                )

        # -- build -------------------------------------------------------------------------
        self._datasets = list(datasets)
        self._names = names
        self._dataset_ids = {n: i for i, n in enumerate(names)}
        self._seed = seed
        #: the run's dropped-data counts (the engine sets its own on every lane clone); never state
        self.drops = DropLedger()
        self._shuffle_shards = shuffle_shards
        self._shuffle_within_shard = shuffle_within_shard
        self._block_spec = shuffle_block_size
        self._block_sizes = block_sizes
        self._lane_assignment = lane_assignment
        self._explicit = explicit
        self._cfg = _Config(
            names, spec.normalized_for(names), chunk_size, policy, reshuffle, caps, stop_after_passes
        )
        self._cursors = self._fresh_cursors(block_sizes, seed=seed, shuffle_shards=shuffle_shards,
                                            within=shuffle_within_shard)
        self._token_estimation: TokenEstimation | None = token_estimation
        #: token-aware: every dataset's ratio with its provenance (what the state records); None otherwise
        self._token_ratios: dict[str, TokenRatio] | None = token_ratios
        #: False while a measuring token-aware source waits for prime() (or a restore)
        self._primed = primed
        self._alloc: _Allocator
        if ratios is not None:
            self._alloc = _TokenAllocator(self._cfg, TokenCostTable(self._datasets, ratios), ratios)
        else:
            self._alloc = _make_allocator(allocation_mode, self._cfg)
        if not any(c.total for c in self._cursors.values()):
            raise ConfigError(expected("datasets", "at least one sample in total", 0))
        self._g = 0
        self._perm: tuple[int, tuple[int, ...]] = (-1, ())
        self._walk: SharedWalk | None = None  # a lane clone's shared walk, if its owner gave it one
        if primed:
            self._check_producible()
        self._refuse_an_infinite_length(weights_given=spec.weights)

    def _check_producible(self) -> None:
        """Quota liveness, and the first chunk must be producible (on throwaway copies)."""
        self._alloc.check_liveness(self._cursors)
        chunk_size = self._cfg.chunk_size
        trial = self._alloc.clone()
        if not trial.produce({n: c.clone() for n, c in self._cursors.items()}):
            who = f"dataset {trial.last_failed!r}" if trial.last_failed else "a dataset"
            raise ConfigError(
                f"first chunk: expected every dataset to supply its quota of a {chunk_size}-sample chunk, "
                f"received too few samples from {who}; reduce chunk_size or change the mixture or policies"
            )

    # -- token-aware priming (zephon's hook names) ---------------------------------------------------
    @property
    def requires_token_priming(self) -> bool:
        """True while a token-aware source still has datasets to measure (:meth:`prime`); a source
        with pinned ratios, or restored from a checkpoint (which carries the ratios), is primed."""
        return not self._primed

    def prime(self, *, count: Callable[[Any], int | None] | None = None, **_: Any) -> None:
        """Measure the unpinned datasets' tokens/byte ratios (the calibration pass of
        :func:`~zephon_ref.work.token_estimation.prime_token_ratios`, deterministic in the seed,
        the datasets and ``count``, the pipeline's token counter) once; then check the first chunk.
        Idempotent; keeps ratios a restore brought.  zephon's other keywords (``io_options``,
        ``mp_context``, ...) are execution settings: accepted, unused."""
        if self._primed:
            return
        est = self._token_estimation
        assert est is not None and self._token_ratios is not None, "only a token-aware source is unprimed"
        got = prime_token_ratios(datasets=self._datasets, dataset_ids=self._dataset_ids, estimation=est,
                                 count=count, seed=self._seed)
        ratios = {n: got[n].tokens_per_byte for n in self._cfg.order}
        alloc = _TokenAllocator(self._cfg, TokenCostTable(self._datasets, ratios), ratios)
        before = (self._alloc, self._token_ratios)
        self._alloc, self._token_ratios = alloc, {n: got[n] for n in self._cfg.order}
        try:
            self._check_producible()
        except ConfigError:
            self._alloc, self._token_ratios = before  # a failed prime changes nothing
            raise
        self._primed = True

    def token_ratios(self) -> dict[str, TokenRatio] | None:
        """The ratios in effect (token-aware), with provenance; None for a sample-unit source."""
        return None if self._token_ratios is None else dict(self._token_ratios)

    # -- construction helpers ------------------------------------------------------------------
    @staticmethod
    def _resolve_block_sizes(spec: Any, datasets: Sequence[Dataset]) -> dict[str, int | None]:
        if spec is None:
            return {d.name: None for d in datasets}
        if spec == "auto":
            biggest = max(d.max_count() for d in datasets)
            if biggest <= 0:
                raise ConfigError(
                    expected("shuffle_block_size='auto'", "at least one non-empty shard", "only empty shards")
                )
            return {d.name: min(AUTO_BLOCK_FACTOR * biggest, d.total()) for d in datasets}
        if spec == "global":
            return {d.name: d.total() for d in datasets}
        if _is_int(spec) and spec > 0:
            return {d.name: min(spec, d.total()) for d in datasets}
        raise ConfigError(expected("shuffle_block_size", "None, an int > 0, 'auto' or 'global'", spec))

    def _fresh_cursors(self, block_sizes: Mapping[str, int | None], *, seed: int, shuffle_shards: bool,
                       within: bool) -> dict[str, DatasetCursor]:
        return {
            d.name: DatasetCursor(
                i, d.ids(), d.counts(), seed=seed, shuffle_shards=shuffle_shards,
                shuffle_within_shard=within, block_size=block_sizes[d.name],
            )
            for i, d in enumerate(self._datasets)
        }

    # -- WorkSource surface -------------------------------------------------------------------
    def clone_for_lane(self, lane_id: int, canonical_replicas: int) -> StaticMixtureWorkSource:
        """A lane clone sharing the immutable orders and copying only cursor state."""
        self._check_clone_args(lane_id, canonical_replicas)
        c = object.__new__(type(self))
        c.__dict__.update(self.__dict__)
        c._cursors = {n: cur.clone() for n, cur in self._cursors.items()}
        c._alloc = self._alloc.clone()
        c._perm = (-1, ())
        c._walk = None
        c._cloned = True
        c._lane, c._canon = int(lane_id), int(canonical_replicas)
        c._leftover_warned, c._boundary_skipped = False, {}  # diagnostics of this clone's own stream
        return c

    def share_walk(self, walk: SharedWalk | None) -> None:
        """Use ``walk`` (a :class:`~zephon_ref.fast.walk.ChunkWalk` the caller owns and shares among
        the clones whose calls it serialises) from the next chunk on; None walks plainly.  The
        clone's chunks and states are the same either way (it only skips other lanes' chunks
        faster)."""
        if walk is not None and not isinstance(walk, SharedWalk):
            raise ConfigTypeError(
                expected("walk", "None or a shared chunk walk (zephon_ref.work.base.SharedWalk)",
                         type(walk).__name__)
            )
        self._walk = walk

    def chunk_size_hint(self) -> int:
        return self._cfg.chunk_size

    @property
    def datasets_by_id(self) -> dict[int, Dataset]:
        return dict(enumerate(self._datasets))

    @property
    def dataset_ids(self) -> dict[str, int]:
        return dict(self._dataset_ids)

    def component_ids(self) -> dict[str, int]:
        return dict(self._dataset_ids)

    def continues_after_exhaustion(self) -> frozenset[str]:
        return self._cfg.redistributing

    @property
    def global_chunk_index(self) -> int:
        return self._g

    @property
    def allocation_mode(self) -> str:
        return self._alloc.mode

    @property
    def total_samples(self) -> int | float:
        return float("inf") if self._cfg.unbounded() else self._remaining()

    def __len__(self) -> int:
        """An estimate of the samples still to come (exact for all-redistribute and legacy_fixed)."""
        if self._cfg.unbounded():
            raise TypeError("len() of an unbounded work source (a 'repeat' dataset with max_repeats=None)")
        n = self._remaining()
        if n > sys.maxsize:
            raise ContractError(
                expected("len() of the work source", f"at most sys.maxsize ({sys.maxsize})", n)
                + "; read total_samples instead (a component's weight is tiny against its size)"
            )
        return n

    def _refuse_an_infinite_length(self, *, weights_given: Mapping[str, Any]) -> None:
        """Construction check: the remaining length of a bounded source is a finite number.

        A component whose share of a chunk is tiny against its size (``{'a': 3.6e307, 'b': 1}``)
        needs more chunks than a float can count; :meth:`_remaining` would overflow on every
        ``len()``.  Such a mixture is refused here, typed, before anything reads it.
        """
        if self._cfg.unbounded():
            return
        try:
            self._remaining()
        except OverflowError:
            raise ConfigError(expected(
                "mixture weights", "shares that let every component be read in a finite number of chunks",
                f"{dict(weights_given)!r} (a share of {min(self._cfg.weights.values())!r} of a "
                f"{self._cfg.chunk_size}-sample chunk: an infinite remaining length)")) from None

    def _remaining(self) -> int:
        cfg = self._cfg
        if isinstance(self._alloc, _LegacyFixedAllocator):
            return self._alloc.remaining_samples(self._cursors)
        rate = self._alloc.draws_per_chunk()
        if cfg.stop_after_passes is not None:
            chunks = 0.0
            for n in cfg.order:
                cur = self._cursors[n]
                if rate[n] > 0 and cur.epoch < cfg.stop_after_passes:
                    left = cur.remaining + (cfg.stop_after_passes - cur.epoch - 1) * cur.total
                    chunks = max(chunks, left / rate[n])
            return int(chunks) * cfg.chunk_size
        if len(cfg.redistributing) == len(cfg.order):
            return sum(c.remaining for c in self._cursors.values())
        limit = math.inf
        for n in cfg.order:
            eff = cfg.effective_remaining(n, self._cursors[n])
            if n not in cfg.redistributing and eff is not None and rate[n] > 0:
                limit = min(limit, eff / rate[n])
        if math.isinf(limit):
            return 0
        if cfg.redistributing:
            return int(sum(min(self._cursors[n].remaining, rate[n] * limit) if n in cfg.redistributing
                           else rate[n] * limit for n in cfg.order))
        return int(limit) * cfg.chunk_size

    def lane_for_chunk(self, g: int) -> int:
        """The lane that owns global chunk ``g``."""
        _, canon = self._require_lane()
        if self._lane_assignment == "modulo":
            return g % canon
        block, slot = divmod(g, canon)
        if self._walk is not None:
            return self._walk.routing(self._seed, canon, block)[0][slot]
        if self._perm[0] != block:  # this clone's routing of the block its walk is in
            self._perm = (block, lane_permutation(self._seed, block, canon))
        return self._perm[1][slot]

    def _quota_step(self, acc: tuple[float, ...]) -> tuple[tuple[float, ...], tuple[int, ...]] | None:
        """One chunk of the accumulator quota rule, from ``acc`` (a
        :data:`~zephon_ref.work.base.QuotaStep`)."""
        order = self._cfg.order
        scratch = _AccumulatorAllocator(self._cfg, dict(zip(order, acc, strict=True)))
        try:
            q = scratch._advance(self._cfg.weights)
        except ContractError:
            return None
        return tuple(scratch.acc[n] for n in order), tuple(q[n] for n in order)

    def _jump(self, g: int) -> bool:
        """Move from chunk ``g`` (another lane's) towards this lane's next chunk through the shared
        walk (see :mod:`zephon_ref.fast.walk`); False when it cannot (the caller walks one)."""
        walk, alloc, cfg = self._walk, self._alloc, self._cfg
        if walk is None or type(alloc) is not _AccumulatorAllocator or cfg.redistributing:
            return False
        lane, canon = self._require_lane()
        if self._lane_assignment == "modulo":
            target = g + (lane - g) % canon
        else:
            target = walk.next_own(self._seed, canon, lane, g)
        order, cursors = cfg.order, self._cursors
        keep: tuple[int, ...] = ()
        sap = cfg.stop_after_passes
        if sap is not None:
            keep = tuple(
                2 if cursors[n].epoch + 1 < sap else 1 if cursors[n].epoch < sap else 0 for n in order
            )
        rule = (order, tuple(cfg.weights[n] for n in order), cfg.chunk_size)
        got = walk.jump(rule, self._quota_step, g, tuple(alloc.acc[n] for n in order), target,
                        tuple(cursors[n].remaining for n in order), keep)
        if got is None:
            return False
        g2, acc, taken = got
        for n, k in zip(order, taken, strict=True):
            if k:
                moved = cursors[n].advance(k)
                assert moved == k, (n, moved, k)  # invariant: the walk stopped before any shortage
        alloc.acc = dict(zip(order, acc, strict=True))
        self._g = g2
        return True

    def next_chunk(self) -> WorkChunk | None:
        """This lane's next chunk, or None when the stream has ended."""
        lane, _ = self._require_lane()
        lane_for_chunk, skip, cursors = self.lane_for_chunk, self._alloc.skip, self._cursors
        while True:
            g = self._g
            if lane_for_chunk(g) != lane:
                # another lane's chunk: jump over a run of them, else advance cursors and carry by
                # one, build nothing
                if self._jump(g):
                    continue
                if not skip(cursors):
                    self._warn_leftover(lane, owner=False)
                    return None
                self._g = g + 1
                continue
            target = self._alloc.target_mixture(self._cursors)
            before = {n: (c.epoch, c.remaining) for n, c in self._cursors.items()}  # diagnostics only
            comps = self._alloc.produce(self._cursors)
            if not comps:
                # refusals are side-effect free: asking again gives None again
                self._warn_leftover(lane, owner=True)
                return None
            self._note_boundary_leftovers(before)
            self._g = g + 1
            return WorkChunk(comps, seed=self._seed, target_mixture=target,
                             source_exhausted=self._exhausted_names())

    def _note_boundary_leftovers(self, before: Mapping[str, tuple[int, int]]) -> None:
        """Count the samples an epoch boundary skipped in this lane's chunk (a repeat dataset whose
        remaining samples could not fill its quota starts its next pass).  Diagnostics only: a
        new mapping each time (lane clones share ``__dict__`` values), never state."""
        skipped = {n: r for n, (e, r) in before.items() if r and self._cursors[n].epoch > e}
        if skipped:
            old: Mapping[str, int] = self.__dict__.get("_boundary_skipped", {})
            self._boundary_skipped = {**old, **{n: old.get(n, 0) + r for n, r in skipped.items()}}

    def _warn_leftover(self, lane: int, *, owner: bool) -> None:
        """The stream ended for this lane: report what the source skipped, once.

        Counted: the samples epoch boundaries skipped in this lane's chunks, and on the lane
        that owns the first chunk that cannot be produced (``owner``: so a global leftover is
        reported by one lane) each dataset's samples of its first pass never read (a dataset
        that began a second pass delivered every sample at least once).  Diagnostics only:
        ``_leftover_warned`` and ``_boundary_skipped`` are not state.
        """
        if self.__dict__.get("_leftover_warned"):
            return
        self._leftover_warned = True
        left = {
            n: c.remaining for n, c in self._cursors.items() if owner and c.epoch == 0 and c.remaining > 0
        }
        skipped: Mapping[str, int] = self.__dict__.get("_boundary_skipped", {})
        parts = []
        if left:
            parts.append("never delivered at the end: " + ", ".join(f"{n} {k}" for n, k in left.items())
                         + f" (the next {self._cfg.chunk_size}-sample chunk's quotas could not be filled; "
                           "'redistribute' delivers every sample)")
        if skipped:
            parts.append("skipped at epoch boundaries in this lane's chunks: "
                         + ", ".join(f"{n} {k}" for n, k in skipped.items())
                         + " (a pass's remaining samples fewer than the quota)")
        if parts:
            self.drops.add(op="StaticMixtureWorkSource", cause="source_leftover", lane=lane,
                           records=sum(left.values()) + sum(skipped.values()), detail="; ".join(parts))

    def _exhausted_names(self) -> tuple[str, ...]:
        cfg = self._cfg
        return tuple(n for n in cfg.order if cfg.effective_remaining(n, self._cursors[n]) == 0)

    # -- state ----------------------------------------------------------------------------
    def _layout(self) -> dict[str, list[list[int]]]:
        return {d.name: [list(p) for p in d.layout()] for d in self._datasets}

    def state_configuration(self, state: Mapping[str, Any]) -> dict[str, Any] | None:
        """Every key of the state but the positions (:data:`zephon_ref.work.base.SOURCE_POSITION_KEYS`):
        seed, weights, policies, layout, ... (a restore may still take ``allocation_mode`` from the
        state: :data:`zephon_ref.work.base.SOURCE_RESTORABLE_KEYS`).  Where this source measures token
        ratios, ``token_ratios`` is the checkpoint's to bring (a resume keeps the measured ratios)."""
        est = self._token_estimation
        measures = est is not None and len(est.pinned(list(self._cfg.order))) < len(self._cfg.order)
        return {k: v for k, v in state.items()
                if k not in SOURCE_POSITION_KEYS and not (measures and k == "token_ratios")}

    def state_dict(self) -> dict[str, Any]:
        """Everything a fresh clone of the same source needs to continue identically."""
        lane, canon = self._require_lane()
        cfg = self._cfg
        return {
            "schema": STATIC_MIXTURE_SCHEMA,
            "lane_id": lane,
            "canonical_replicas": canon,
            "chunk_size_hint": cfg.chunk_size,
            "seed": self._seed,
            "chunk_size": cfg.chunk_size,
            "knobs": {
                "shuffle_shards": self._shuffle_shards,
                "shuffle_within_shard": self._shuffle_within_shard,
            },
            "shuffle_block_size_spec": self._block_spec,
            "cursor_block_sizes": dict(self._block_sizes),
            "global_chunk_index": self._g,
            "weights": dict(cfg.weights),
            "component_order": list(cfg.order),
            "dataset_ids": dict(self._dataset_ids),
            "layout": self._layout(),
            "cursor_states": {n: c.state() for n, c in self._cursors.items()},
            "exhausted_policy": dict(cfg.policy),
            "reshuffle_on_repeat": dict(cfg.reshuffle),
            "max_repeats": dict(cfg.max_repeats),
            "stop_after_passes": cfg.stop_after_passes,
            "lane_assignment": self._lane_assignment,
            "allocation_mode": self._alloc.mode,
            "accumulators": self._alloc.state() if self._alloc.mode == "accumulator" else None,
            "token_deficits": self._alloc.state() if isinstance(self._alloc, _TokenAllocator) else None,
            "token_ratios": ({n: r.to_state() for n, r in self._token_ratios.items()}
                             if self._token_ratios is not None else None),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from ``state``.  Validates everything first; a refusal changes nothing."""
        if not isinstance(state, Mapping):
            raise StateFormatError(expected("work source state", "a mapping", type(state).__name__))
        if state.get("schema") != STATIC_MIXTURE_SCHEMA:
            raise StateFormatError(
                expected("work source state schema", repr(STATIC_MIXTURE_SCHEMA), state.get("schema"))
            )
        try:
            self._verify_base_state(state["lane_id"], state["canonical_replicas"])
            dataset_ids = {str(k): int(v) for k, v in state["dataset_ids"].items()}
            if dataset_ids != self._dataset_ids:
                raise StateMismatchError(expected("state dataset_ids", str(self._dataset_ids), dataset_ids))
            layout = {str(k): [list(map(int, p)) for p in v] for k, v in state["layout"].items()}
            if layout != self._layout():
                raise StateMismatchError(
                    expected(
                        "state dataset layout (shard ids and counts)",
                        "this source's layout",
                        "a different layout",
                    )
                    + "; differing datasets: "
                    f"{sorted(n for n in self._names if layout.get(n) != self._layout()[n])}"
                )
            order = tuple(str(n) for n in state["component_order"])
            if order != self._names:
                raise StateMismatchError(
                    expected("state component_order", str(list(self._names)), list(order))
                )
            mode = state["allocation_mode"]
            if mode not in _MODES:
                raise StateFormatError(expected("state allocation_mode", f"one of {list(_MODES)}", mode))
            seed = state["seed"]
            chunk_size = state["chunk_size"]
            if not _is_int(seed) or seed < 0 or not _is_int(chunk_size) or chunk_size <= 0:
                raise StateFormatError(
                    expected("state seed / chunk_size", "ints >= 0 / > 0", (seed, chunk_size))
                )
            normalize_weights(
                {str(k): v for k, v in state["weights"].items()}, what="state weights"
            )  # validates
            weights = {n: float(state["weights"][n]) for n in order}  # stored already normalised
            policy = {n: str(state["exhausted_policy"][n]) for n in order}
            if any(p not in _POLICIES for p in policy.values()):
                raise StateFormatError(
                    expected("state exhausted_policy", f"values in {list(_POLICIES)}", policy)
                )
            reshuffle = {n: bool(state["reshuffle_on_repeat"][n]) for n in order}
            caps = {
                n: (None if state["max_repeats"][n] is None else int(state["max_repeats"][n])) for n in order
            }
            raw_sap = state["stop_after_passes"]
            sap = None if raw_sap is None else int(raw_sap)
            cfg = _Config(order, weights, chunk_size, policy, reshuffle, caps, sap)
            conflicts = [
                f"{arg}: constructor={mine!r} != checkpoint={theirs!r}"
                for arg, mine, theirs in (
                    ("exhausted_policy", self._cfg.policy, cfg.policy),
                    ("reshuffle_on_repeat", self._cfg.reshuffle, cfg.reshuffle),
                    ("max_repeats", self._cfg.max_repeats, cfg.max_repeats),
                    ("stop_after_passes", self._cfg.stop_after_passes, cfg.stop_after_passes),
                ) if arg in self._explicit and mine != theirs
            ]
            if conflicts:
                raise StateMismatchError("explicit exhaustion-policy arguments contradict the checkpoint: "
                                         + "; ".join(conflicts))
            lane_assignment = state["lane_assignment"]
            if lane_assignment not in ("modulo", "permute"):
                raise StateFormatError(
                    expected("state lane_assignment", "'modulo' or 'permute'", lane_assignment)
                )
            knobs = state["knobs"]
            shuffle_shards, within = bool(knobs["shuffle_shards"]), bool(knobs["shuffle_within_shard"])
            block_sizes = {
                n: (None if state["cursor_block_sizes"][n] is None else int(state["cursor_block_sizes"][n]))
                for n in order
            }
            g = state["global_chunk_index"]
            if not _is_int(g) or g < 0:
                raise StateFormatError(expected("state global_chunk_index", "an int >= 0", g))
            acc = None
            if mode == "accumulator":
                acc = {n: float(state["accumulators"][n]) for n in order}
            token_mode = isinstance(self._alloc, _TokenAllocator)
            if (mode == "token_aware") != token_mode:
                raise StateMismatchError(expected(
                    "state allocation_mode", "'token_aware' (this source has token_estimation)" if token_mode
                    else "a sample mode (this source has no token_estimation)", mode))
            token_alloc: _TokenAllocator | None = None
            restored_ratios: dict[str, TokenRatio] | None = None
            if mode == "token_aware":
                restored_ratios = {n: TokenRatio.from_state(state["token_ratios"][n]) for n in order}
                ratios = {n: r.tokens_per_byte for n, r in restored_ratios.items()}
                deficits = {n: float(state["token_deficits"][n]) for n in order}
                if any(not math.isfinite(v) for v in deficits.values()):
                    raise StateFormatError(expected("state token_deficits", "finite numbers", deficits))
                token_alloc = _TokenAllocator(cfg, TokenCostTable(self._datasets, ratios), ratios, deficits)
            cursor_states = state["cursor_states"]
            # build the replacement completely before touching self
            cursors = self._fresh_cursors(
                block_sizes, seed=seed, shuffle_shards=shuffle_shards, within=within
            )
            for n in order:
                cs = cursor_states[n]
                ep, pos = cs["epoch"], cs["position"]
                if not _is_int(ep) or ep < 0 or not _is_int(pos) or not 0 <= pos <= cursors[n].total:
                    raise StateFormatError(
                        expected(f"state cursor {n!r}", "epoch >= 0 and 0 <= position <= total", cs)
                    )
                cursors[n].seek(
                    ep, pos, reshuffle=reshuffle[n], block_rng_snapshot=cs.get("block_rng_snapshot")
                )
            alloc = token_alloc if token_alloc is not None else _make_allocator(mode, cfg, acc)
        except (StateFormatError, StateMismatchError, ConfigError):
            raise
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise StateFormatError(f"work source state is malformed: {type(exc).__name__}: {exc}") from exc
        # -- commit (nothing below can fail) ----------------------------------------------------
        self._seed, self._shuffle_shards, self._shuffle_within_shard = seed, shuffle_shards, within
        self._block_spec = state.get("shuffle_block_size_spec")
        self._block_sizes = block_sizes
        self._lane_assignment = lane_assignment
        self._cfg = cfg
        self._cursors = cursors
        self._alloc = alloc
        if restored_ratios is not None:  # the checkpoint's ratios: a resume never re-measures
            self._token_ratios, self._primed = restored_ratios, True
        self._g = g
        self._perm = (-1, ())

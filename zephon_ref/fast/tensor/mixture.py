"""ensure_mixture for one lane: smooth weighted round robin over buffered units.

Theory of operation
-------------------
Per lane: one FIFO per component for single-component units, one FIFO of
multi-component units (packs), a target adopted when a unit arrives from a
chunk later than the last adopted one (the explicit ``mixture``, or that
chunk's mixture), and a deficit round robin (:class:`Deficits`: normalised
target ``T``, emitted mass ``E``, ``deficit_k = T_k * max(1, sum E) - E_k``,
ties to the earliest component in its order, initially ascending ids).

After each push the lane emits while it can: unless *forced* (buffer at
``max_buffer_size``, draining to ``drain_target_ratio`` of it) it waits until the
ideal (largest-deficit) component is buffered; then the ideal single, else the
best available single (no pack holds the ideal), else the pack with the largest
weighted deficit (among packs holding the ideal, if any).  A flush emits
everything (forced), or with ``max_buffer_size=None`` discards it; a boundary
flush resets the lane.  Floats in the order of the zephon 0.2.0 notes, so the
selections agree bit for bit.

Scope: a target change that adds or drops components (retirement groups,
obsolete records, exhaustion removals) is not implemented; it raises
:class:`~.config.UnsupportedKnob` when it happens (a source with redistributing
components is refused at build time).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import Any

import numpy as np

from zephon_ref.errors import ConfigError, expected
from zephon_ref.fast.tensor.config import MixtureSpec, UnsupportedKnob

__all__ = ["Deficits", "MixtureLane"]


class Deficits:
    """Target ``T``, emitted mass ``E`` and its running sum.  Every contribution is a whole
    number (tokens or samples) and the target's component set never changes here, so the
    running sum equals the reference's ``sum(E_k for k in T)`` exactly, in any order.
    :meth:`MixtureLane._finish` records an emission (inline, on the hot path)."""

    __slots__ = ("emitted", "keys", "order", "target", "total")

    def __init__(self, target: Mapping[int, float]) -> None:
        total = sum(w for w in target.values() if w > 0)
        self.target: dict[int, float] = (
            {k: w / total for k, w in target.items() if w > 0} if total > 0 else {}
        )
        self.order = sorted(self.target)
        self.keys = list(self.order)  # the target's keys in tie-break order
        self.emitted: dict[int, float] = {}
        self.total = 0.0

    def update(self, new: Mapping[int, float]) -> None:
        total = sum(w for w in new.values() if w > 0)
        self.target = {k: w / total for k, w in new.items() if w > 0} if total > 0 else {}
        for k in new:
            if k not in self.order:
                self.order.append(k)
        self.keys = [k for k in self.order if k in self.target]

    def best(self, keys: list[int]) -> int | None:
        if not keys:
            return None
        if len(keys) == 1:
            return keys[0]
        eff = max(1.0, self.total)
        t, e = self.target, self.emitted
        best = keys[0]
        best_d = t[best] * eff - e.get(best, 0.0)
        for k in keys[1:]:
            d = t[k] * eff - e.get(k, 0.0)
            if d > best_d:
                best, best_d = k, d
        return best


_NEG = float("-inf")

#: buffered packs from which the best-pack scan runs as array operations
VECTOR_PACKS = 160


class PackTable:
    """The buffered multi-component units in arrival order, with their contributions as rows.

    Row ``i``: the component columns and weights of pack ``i`` in its own contribution
    order, padded with a column whose deficit is 0.0 and weight 0.0 (adding ``0.0`` leaves
    a float unchanged), so a score is the same left-to-right sum as the scalar loop.  The
    rows live as Python tuples; the arrays are built from them only when a scan is long
    enough to run as array operations (and kept until the table changes).  Column 0 is the
    padding; a component's column is fixed when it first appears (``cols``).
    """

    __slots__ = ("_arrays", "cols", "items", "rows", "width")

    def __init__(self, width: int) -> None:
        self.width = max(1, width)
        self.items: list[tuple[Any, dict[int, float]]] = []
        self.rows: list[tuple[tuple[int, ...], tuple[float, ...]]] = []
        self.cols: dict[int, int] = {}
        self._arrays: tuple[np.ndarray, np.ndarray] | None = None

    def __len__(self) -> int:
        return len(self.items)

    def append(self, unit: Any, contrib: dict[int, float]) -> None:
        width = self.width
        if len(contrib) > width:
            raise UnsupportedKnob(
                expected("ensure_mixture pack", f"at most {width} components", len(contrib))
            )
        cols = self.cols
        row_c, row_w = [0] * width, [0.0] * width
        for j, (c, w) in enumerate(contrib.items()):
            col = cols.get(c)
            if col is None:
                col = cols[c] = len(cols) + 1  # column 0 is the padding
            row_c[j] = col
            row_w[j] = w
        self.items.append((unit, contrib))
        self.rows.append((tuple(row_c), tuple(row_w)))
        self._arrays = None

    def pop(self, i: int) -> tuple[Any, dict[int, float]]:
        del self.rows[i]
        if self._arrays is not None:
            comp, weight = self._arrays
            self._arrays = (np.delete(comp, i, axis=0), np.delete(weight, i, axis=0))
        return self.items.pop(i)

    def best(self, dl: list[float], ideal: int | None) -> int:
        """Index of the first pack with the largest weighted deficit (among those holding
        ``ideal``); ``dl[col]`` is the deficit of the component in column ``col`` (0.0 for
        the padding and for components outside the target)."""
        n = len(self.items)
        cols = self.cols
        if n < VECTOR_PACKS:
            rows = self.rows
            # the scalar loop's left-to-right sums (0.0 + a + b + ... in the pack's own order;
            # padding adds 0.0 * 0.0, which changes no sum); the first of the largest is
            # scores.index(max(scores)) (no NaN: deficits and weights are finite)
            want = cols.get(ideal, -1) if ideal is not None else -1
            if self.width == 3:
                if ideal is None:
                    scores = [w0 * dl[c0] + w1 * dl[c1] + w2 * dl[c2] for (c0, c1, c2), (w0, w1, w2) in rows]
                else:  # packs without the ideal score -inf (a holder of it is buffered: has_ideal)
                    scores = [w0 * dl[c0] + w1 * dl[c1] + w2 * dl[c2] if want in (c0, c1, c2) else _NEG
                              for (c0, c1, c2), (w0, w1, w2) in rows]
                return scores.index(max(scores))
            if self.width == 2:
                scores = [w0 * dl[c0] + w1 * dl[c1] for (c0, c1), (w0, w1) in rows]
            else:
                scores = []
                for cs, ws in rows:
                    score = 0.0
                    for c, w in zip(cs, ws, strict=True):
                        score += w * dl[c]
                    scores.append(score)
            if ideal is None:
                return scores.index(max(scores))
            best_i, best = -1, 0.0
            for i, (cs, _ws) in enumerate(rows):
                if want in cs and (best_i < 0 or scores[i] > best):
                    best_i, best = i, scores[i]
            return best_i
        if self._arrays is None:
            self._arrays = (np.array([r[0] for r in self.rows], dtype=np.int64),
                            np.array([r[1] for r in self.rows], dtype=np.float64))
        comp, weight = self._arrays
        d = np.array(dl, dtype=np.float64)
        scores_a = 0.0 + weight[:, 0] * d[comp[:, 0]]
        for j in range(1, self.width):
            scores_a = scores_a + weight[:, j] * d[comp[:, j]]
        if ideal is not None:
            scores_a = np.where((comp == cols.get(ideal, -1)).any(axis=1), scores_a, -np.inf)
        return int(np.argmax(scores_a))


class MixtureLane:
    __slots__ = ("chunk_mixtures", "interval", "mixture", "packed", "spec", "st_pack_counts", "st_packs",
                 "st_since", "st_singles", "st_target_cid", "st_total", "swrr", "width")

    def __init__(self, spec: MixtureSpec, mixture: dict[int, float] | None, chunk_mixtures: dict[int, Any],
                 packed: bool, *, components: int = 8) -> None:
        self.spec = spec
        self.width = components
        self.mixture = mixture
        self.chunk_mixtures = chunk_mixtures
        self.packed = packed
        self.interval = int(1.0 / spec.obsolete_drain_rate) if spec.obsolete_drain_rate else None
        self._reset()

    def _reset(self) -> None:
        self.st_singles: dict[int, deque[Any]] = {}
        self.st_packs = PackTable(self.width)
        self.st_pack_counts: dict[int, int] = {}
        self.swrr: Deficits | None = None
        self.st_target_cid: int | None = None
        self.st_total = 0
        self.st_since = 0

    # -- weights and targets ------------------------------------------------------------------
    def _contributions(self, unit: Any) -> dict[int, float]:
        docs = unit[0]
        if self.spec.by_samples:
            out: dict[int, float] = {}
            for d in docs:
                out[d[3]] = out.get(d[3], 0.0) + 1.0
            if not self.packed:
                return {docs[0][3]: 1.0}
            return {c: float(n) for c, n in out.items()}
        if self.packed:
            # token counts summed as floats: whole numbers below 2**53, so exact (the same values as
            # float(sum of ints))
            tokens: dict[int, float] = {}
            get = tokens.get
            for d in docs:
                ids = d[6]
                if ids is not None:
                    n = len(ids)
                    if n:
                        tokens[d[3]] = get(d[3], 0.0) + n
            if not tokens:
                raise UnsupportedKnob(expected("ensure_mixture weight of an empty pack", "a pack with tokens",
                                               "a pack of empty documents"))
            return tokens
        d = docs[0]
        if d[6] is None:
            raise ConfigError(
                expected(f"payload of sample {d[0]!r} for ensure_mixture", "a token field", d[7])
            )
        return {d[3]: float(len(d[6])) * (1 / 1)}

    def _set_target(self, target: dict[int, float] | None) -> None:
        prev = None if self.swrr is None else set(self.swrr.target)
        if target is None:
            if prev is not None:
                raise UnsupportedKnob(
                    expected("ensure_mixture target", "a fixed set of components", "no target")
                )
            return
        filtered = {c: w for c, w in target.items() if w > 0}
        if self.swrr is None:
            self.swrr = Deficits(filtered)
        else:
            if set(filtered) != prev:
                raise UnsupportedKnob(
                    expected(
                        "ensure_mixture target",
                        f"the components {sorted(prev or ())} "
                        "(a change of the component set is not implemented)",
                        sorted(filtered),
                    )
                )
            self.swrr.update(filtered)

    def _buffer(self, unit: Any, contrib: dict[int, float]) -> None:
        target = self.swrr.target if self.swrr is not None else None
        if len(contrib) == 1:
            (c,) = contrib
            if target is None or c in target:
                q = self.st_singles.get(c)
                if q is None:
                    q = self.st_singles[c] = deque()
                q.append((unit, contrib))
                return
        elif (
            target is None
            or target.keys() >= contrib.keys()
            or (
                any(c in target for c in contrib)
                and not any(w > 0 and c not in target for c, w in contrib.items())
            )
        ):
            self.st_packs.append(unit, contrib)
            counts = self.st_pack_counts
            for c in contrib:
                counts[c] = counts.get(c, 0) + 1
            return
        raise UnsupportedKnob(
            expected(
                "ensure_mixture unit",
                "components within the target (obsolete records are not implemented)",
                sorted(contrib),
            )
        )

    # -- push / emit ----------------------------------------------------------------------------
    def push(self, units: list[Any], out: list[Any]) -> None:
        contributions, buffer = self._contributions, self._buffer
        for u in units:
            cid = u[0][0][1]
            if self.st_target_cid is None or cid > self.st_target_cid:
                target = self.mixture
                if not target:
                    target = dict(self.chunk_mixtures.get(cid) or {})
                self._set_target(target or None)
                self.st_target_cid = cid
            buffer(u, contributions(u))
            self.st_total += 1
        cap = self.spec.max_buffer_size
        force = cap is not None and self.st_total >= cap
        floor = int(self.spec.drain_target_ratio * cap) if cap is not None else 0
        emit = self._emit_one
        while self.st_total > 0:  # st_total counts the buffered units
            x = emit(force and self.st_total > floor)
            if x is None:
                break
            self.st_total -= 1
            out.append(x)

    def _finish(self, item: tuple[Any, dict[int, float]]) -> Any:
        swrr = self.swrr
        if swrr is not None:
            # Deficits.record, inline
            e, t = swrr.emitted, swrr.target
            for k, w in item[1].items():
                e[k] = e.get(k, 0.0) + w
                if k in t:
                    # whole numbers (asserted): the running sum is exact in any order
                    assert w == int(w)
                    swrr.total += w
        if self.interval is not None:
            self.st_since = min(self.st_since + 1, self.interval)
        return item[0]

    def _emit_one(self, force: bool) -> Any:
        swrr, singles, packs = self.swrr, self.st_singles, self.st_packs
        ideal = None
        dl = [0.0] * (len(packs.cols) + 1)  # deficit per pack column (0.0: padding, outside the target)
        if swrr is not None:
            # every deficit once (the formula of Deficits.best / deficits), in tie-break order; the
            # ideal is the first of the largest
            eff = max(1.0, swrr.total)
            t, e, cols = swrr.target, swrr.emitted, packs.cols
            best_d = 0.0
            for k in swrr.keys:
                v = t[k] * eff - e.get(k, 0.0)
                col = cols.get(k)
                if col is not None:
                    dl[col] = v
                if ideal is None or v > best_d:
                    ideal, best_d = k, v
        counts = self.st_pack_counts
        if ideal is not None:
            q = singles.get(ideal)
            if q:
                return self._finish(q.popleft())
            has_ideal = ideal in counts
        else:
            has_ideal = False
        if not force and not (swrr is None or has_ideal):
            return None  # the ideal component is not buffered: wait
        if not has_ideal:
            available = {c for c, q in singles.items() if q}
            if available:
                chosen = (
                    swrr.best([k for k in swrr.order if k in available and k in swrr.target])
                    if swrr
                    else None
                )
                if chosen is None:
                    chosen = min(available)
                return self._finish(singles[chosen].popleft())
        if len(packs):
            item = packs.pop(packs.best(dl, ideal if has_ideal else None))
            for c in item[1]:
                n = counts[c] - 1
                if n:
                    counts[c] = n
                else:
                    del counts[c]
            return self._finish(item)
        return None

    def flush(self, out: list[Any]) -> None:
        if self.spec.max_buffer_size is not None:
            while self.st_total > 0:
                x = self._emit_one(True)
                if x is None:
                    break
                self.st_total -= 1
                out.append(x)
        self._reset()

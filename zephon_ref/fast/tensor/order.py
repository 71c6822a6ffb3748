"""A chunk's offset order: the smooth weighted round robin over its components, memoised.

Theory of operation
-------------------
The samples of a work chunk are read in the order of a deficit round robin over
its non-empty components (section on chunk reading in the zephon 0.2.0 notes):
targets are each component's share of the chunk, normalised twice (the second
division can move a share by an ulp, which decides near-ties); at every step the
component with the largest ``T_k * max(1, emitted) - E_k`` among those still
believed to hold samples goes next, ties to the earlier component; a component
chosen when empty leaves the candidates.

The order depends only on the components' names and counts, so it is computed
once per distinct ``((name, count), ...)`` and kept as a pattern of
``(name, index)`` pairs.  Floats in the notes' order of operations.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["chunk_pattern"]

_MEMO: dict[tuple[tuple[str, int], ...], tuple[tuple[str, int], ...]] = {}
_MEMO_LIMIT = 4096


def _pattern(counts: tuple[tuple[str, int], ...]) -> tuple[tuple[str, int], ...]:
    names = [n for n, _ in counts]
    size = dict(counts)
    if len(names) <= 1:
        return tuple((n, i) for n in names for i in range(size[n]))
    total = 0.0
    for n in names:
        total += float(size[n])
    share = {n: float(size[n]) / total for n in names}
    again = 0.0
    for v in share.values():
        again += v
    share = {n: v / again for n, v in share.items()}
    emitted: dict[str, float] = {}
    pos = dict.fromkeys(names, 0)
    alive = list(names)
    done = 0
    out: list[tuple[str, int]] = []
    while alive:
        if len(alive) == 1:
            best = alive[0]
        else:
            scale = float(max(1, done))
            best = alive[0]
            best_d = share[best] * scale - emitted.get(best, 0.0)
            for k in alive[1:]:
                d = share[k] * scale - emitted.get(k, 0.0)
                if d > best_d:
                    best, best_d = k, d
        i = pos[best]
        if i >= size[best]:
            alive.remove(best)
            continue
        pos[best] = i + 1
        emitted[best] = emitted.get(best, 0.0) + 1.0
        done += 1
        out.append((best, i))
    return tuple(out)


def chunk_pattern(components: Mapping[str, Sequence[Any]]) -> tuple[tuple[str, int], ...]:
    """``(component, index)`` per offset of a chunk with these components."""
    key = tuple((str(n), len(v)) for n, v in components.items() if len(v) > 0)
    got = _MEMO.get(key)
    if got is None:
        if len(_MEMO) >= _MEMO_LIMIT:
            _MEMO.clear()
        got = _MEMO[key] = _pattern(key)
    return got

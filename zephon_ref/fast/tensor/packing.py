"""First-fit / best-fit packing of one lane's documents over integer lengths.

Theory of operation
-------------------
:class:`LanePacker` keeps one lane's open bins as parallel Python lists (the
remaining room of each bin and its document list) and places each document by
its integer length: first fit takes the first bin (creation order) with room,
best fit the tightest; a document longer than ``max_length`` is dropped (its
tombstone is never delivered) or refused.  A new bin that is already full is
emitted at once; otherwise the oldest (``fifo``) or fullest bin is closed while
``num_bins`` are open.  A bin is full when its room is below
``min_sequence_length`` or it holds ``max_sequences_per_bin`` documents.
``flush()`` emits the open bins in creation order and forgets the lane
(boundary or end of data).

Closing flags of split documents: per base offset ``(chunk, offset)`` a tally
``[binned windows, closer seen]``; a window's contributor closes iff the closer
of its offset was seen and no sibling window stays binned (so the flag moves to
the last-emitted sibling, whatever the bin order).

A pack is a tuple ``(documents, closing flags)``: which documents, in segment
order, and each one's contributor flag.  Nothing here builds records.
"""

from __future__ import annotations

from typing import Any

from zephon_ref.errors import ConfigError, expected
from zephon_ref.fast.tensor.config import PackSpec
from zephon_ref.fast.tensor.lanes import TOMB, Doc

__all__ = ["LanePacker", "Pack"]

Pack = tuple[tuple[Doc, ...], tuple[bool, ...]]


class LanePacker:
    __slots__ = ("bins", "rooms", "spec", "tally")

    def __init__(self, spec: PackSpec) -> None:
        self.spec = spec
        self.rooms: list[int] = []
        self.bins: list[list[Doc]] = []
        self.tally: dict[tuple[int, int], list[int]] = {}

    def _close(self, docs: list[Doc]) -> Pack:
        flags: list[bool] = []
        tally = self.tally
        for d in docs:
            if d[5] is None:
                flags.append(True)
                continue
            key = (d[1], d[2])
            tal = tally[key]
            tal[0] -= 1
            flags.append(bool(tal[1]) and tal[0] == 0)
            if tal[0] == 0:
                del tally[key]
        return tuple(docs), tuple(flags)

    def push(self, docs: list[Doc], out: list[Any]) -> None:
        spec = self.spec
        max_length, cap, min_len = spec.max_length, spec.max_sequences_per_bin, spec.min_sequence_length
        best_fit, num_bins, fullest = spec.best_fit, spec.num_bins, spec.fullest
        rooms, bins, tally, close = self.rooms, self.bins, self.tally, self._close
        for d in docs:
            ids = d[6]
            if ids is None:
                raise ConfigError(expected(f"payload of sample {d[0]!r} for pack_sequences",
                                           "a dict with a list 'input_ids'", d[7]))
            n = len(ids)
            closing = d[5]
            if n > max_length:
                if not spec.drop_oversized:
                    raise ConfigError(expected("record length", f"<= max_length={max_length} "
                                               "(drop_oversized=False)", n))
                if closing is None:
                    out.append(TOMB)  # its own tombstone
                elif closing:  # a closing window: a binned sibling carries the closer instead
                    tal = tally.get((d[1], d[2]))
                    if tal is not None:
                        tal[1] = 1
                    else:
                        out.append(TOMB)
                continue
            if closing is not None:
                key = (d[1], d[2])
                tal = tally.get(key)
                if tal is None:
                    tally[key] = [1, int(closing)]
                else:
                    tal[0] += 1
                    tal[1] = tal[1] or int(closing)
            chosen = -1
            if best_fit:
                for j, r in enumerate(rooms):
                    if r >= n and (chosen < 0 or r < rooms[chosen]):
                        chosen = j
            else:
                for j, r in enumerate(rooms):
                    if r >= n:
                        chosen = j
                        break
            if chosen >= 0:
                b = bins[chosen]
                b.append(d)
                left = rooms[chosen] = rooms[chosen] - n
                if left < min_len or (cap is not None and len(b) >= cap):
                    del rooms[chosen]
                    del bins[chosen]
                    out.append(close(b))
                continue
            room = max_length - n
            if room < min_len or (cap is not None and cap <= 1):
                out.append(close([d]))
                continue
            while bins and len(bins) >= num_bins:
                i = min(range(len(rooms)), key=rooms.__getitem__) if fullest else 0
                del rooms[i]
                out.append(close(bins.pop(i)))
            bins.append([d])
            rooms.append(room)

    def flush(self, out: list[Pack]) -> None:
        for b in self.bins:
            out.append(self._close(b))
        self.bins, self.rooms, self.tally = [], [], {}

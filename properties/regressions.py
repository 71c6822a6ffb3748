"""Fixed regression examples: configurations (and every draw of the check) that the conformance rows
built on ``st.data()`` run before their drawn examples.

Theory of operation
-------------------
A row of :mod:`properties.conformance` draws its configuration (:func:`properties.machines.machine_configs`)
and then, inside the check, its cut, topology, micro-batch change and so on through ``st.data()``.
Which drawn example first exposes a bug depends on the whole derandomized draw sequence: adding a knob
to the generator moves every later example, and a bug caught at example 79 of 80 survives a small change
of the strategies (the sentinel mutant of tests/quality/test_mutants.py did: stop 38).  A
:class:`Regression` pins one configuration *and* every value the check draws (by the draw's label), so it
is the same example whatever the strategies draw; the rows run each of theirs first, on top of the
``--examples`` budget (a row of N examples runs N drawn examples plus its regressions; the table's
``examples`` and ``passed`` columns count both).

:class:`PinnedData` stands in for Hypothesis's ``DataObject``: ``draw(strategy, label=...)`` returns the
pinned value of that label, and refuses (:class:`UnpinnedDraw`) a draw whose label it does not pin, so a
check that starts drawing something new fails its regressions loudly instead of silently testing another
example; a pin the check never draws fails the example too.  A pinned value is not checked against the
strategy: the regression says which value it means.

Each regression names the bug it stands for (``why``) and the minimal configuration found for it; the
mutants of tests/quality/test_mutants.py that a row catches by a regression are listed in docs/mutation.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from properties.generator import _batch_identity
from properties.pipelines import PipelineConfig
from properties.strategies import Topology

__all__ = ["REGRESSIONS", "PinnedData", "Regression", "UnpinnedDraw", "regressions_for"]


class UnpinnedDraw(LookupError):
    """A regression example's check drew a value its pins do not name (the check changed its draws)."""


@dataclass(frozen=True, slots=True)
class Regression:
    """One fixed example of a row: the configuration, the value of each labelled draw, and why."""

    cfg: PipelineConfig
    draws: Mapping[str, Any] = field(default_factory=dict)
    why: str = ""


class PinnedData:
    """A ``DataObject`` whose draws are the pinned values, by label (see the module docstring)."""

    def __init__(self, draws: Mapping[str, Any], *, row: str = "") -> None:
        self._draws = dict(draws)
        self._row = row
        self.drawn: list[str] = []

    def draw(self, strategy: Any, label: Any = None) -> Any:
        if label is None or label not in self._draws:
            raise UnpinnedDraw(f"regression example of row {self._row!r}: expected a pinned value for every "
                               f"draw, received a draw labelled {label!r} (pinned: {sorted(self._draws)})")
        self.drawn.append(str(label))
        return self._draws[label]

    def unused(self) -> list[str]:
        """Pinned labels the check never drew (a stale pin: the check changed its draws)."""
        return sorted(str(k) for k in self._draws if str(k) not in self.drawn)


# -- the regressions ----------------------------------------------------------------------------------

_SMALL = {"web": (6,), "code": (4,), "books": (2,)}

#: tests/quality/test_mutants.py "a sentinel splits every lane's push" (stage.py pushes every lane's
#: collected records at any lane's sentinel, zephon 0.2.0's grouping, D-26): a lane's stream then depends
#: on which lanes share its participant.  Smallest configuration found by shrinking the one the lane remap
#: row caught it on (greedy: drop an operator, a dataset, a shard, a lane; smaller sizes), with a remap at
#: cut 0 to one rank of two workers (from MIXTURE_GROUPING_MINIMAL: 13 items, three datasets,
#: a batch; here 17 items, two datasets, no batch).
SENTINEL_GROUPING = PipelineConfig(
    [("pack_sequences", {"max_length": 48, "num_bins": 1, "algorithm": "first_fit"}), ("ensure_mixture", {})],
    layout={"code": (32,), "books": (1,)}, weights={"code": 0.3, "books": 0.1},
    source_kwargs={"chunk_size": 4, "seed": 1},
    options={"runner": "inline", "canonical_replicas": 2, "flush_every_k_chunks": 2})

#: "tail multiplexer restarts at lane 0 after restore", "shuffle reseeded on restore" and "replay filter
#: drops one record too many": the smallest configuration found (a shuffle over two lanes of 12 records)
#: fails a restore at cut 1 under each of the three
SHUFFLE_TWO_LANES = PipelineConfig(
    [("shuffle", {"buffer_size": 4, "seed": 1})], layout=_SMALL, source_kwargs={"chunk_size": 2, "seed": 0},
    options={"runner": "inline", "canonical_replicas": 2, "flush_every_k_chunks": 1})

#: "eviction ignores cursor pinning": packs whose records span chunks pin a lane's replay cursor; the
#: checkpoint after the last item (cut 6) then names a chunk the mutant evicted (refused on restore)
PACK_TWO_LANES = PipelineConfig(
    [("pack_sequences", {"max_length": 48, "algorithm": "first_fit", "num_bins": 4})], layout=_SMALL,
    source_kwargs={"chunk_size": 2, "seed": 0},
    options={"runner": "inline", "canonical_replicas": 2, "flush_every_k_chunks": 2})

#: a map_batch that buffers (zephon 0.2.0's counting accumulator of 64 micro-batches) after a batch whose
#: drop_last stalls the epoch's flush sentinel holds the epoch's complete micro-batches until the next chunk
#: is admitted: 2 inflight chunks at the first checkpoint where K=1 allows 1 (docs/divergences.md D-102;
#: the drawn examples reached it after about 170 of them).  The minimal form of the finding, shrunk by hand
MAP_BATCH_STALL = PipelineConfig(
    [("shuffle", {"buffer_size": 2, "seed": 0}), ("batch", {"microbatch_size": 2}),
     ("map_batch", {"transform_fn": _batch_identity})],
    layout={"web": (10,)}, weights={"web": 1.0}, source_kwargs={"chunk_size": 3, "seed": 0},
    options={"runner": "inline", "canonical_replicas": 1, "flush_every_k_chunks": 1})

#: a source knob the end-to-end pipelines draw since issue 32 (``allocation_mode="legacy_fixed"``, a
#: zephon_ref keyword: divergence D-22): fixed quotas 2/1/1 of a 4-sample chunk over two lanes; the
#: mutant "_LegacyFixedAllocator.__init__ skips its base's" (static_mixture.py) fails it before an item
LEGACY_FIXED = PipelineConfig(
    [], layout=_SMALL, weights={"web": 2.0, "code": 1.0, "books": 1.0},
    source_kwargs={"chunk_size": 4, "seed": 0, "allocation_mode": "legacy_fixed"},
    options={"runner": "inline", "canonical_replicas": 2})

#: tests/properties/test_blind_spot_rows.py "a round-robin pointer reused from an earlier topology": a
#: block shuffle and batch(3) over two lanes, one rank cut mid-step after 5 items, then two ranks of
#: three interleaved workers with batch(1) to the global-step boundary of 15 records per lane (found by
#: a random run of the row under the planted bug when issue 32's allocation_mode draw moved the
#: derandomized sequence past the example that had caught it)
POINTER_REUSE = PipelineConfig(
    [("shuffle", {"buffer_size": 6, "seed": 5, "algorithm": "block"}), ("batch", {"microbatch_size": 3})],
    layout={"web": (20, 10), "code": (10,), "books": (6,)}, weights={"web": 0.6, "code": 0.3, "books": 0.1},
    source_kwargs={"chunk_size": 6, "seed": 2},
    options={"runner": "inline", "canonical_replicas": 2, "flush_every_k_chunks": 1}, corpus_seed=0)

#: wrap packing at max_length 1 cuts every sample into one-token slices: an envelope entry must hold its
#: slice's tokens, not the whole record (the mutation sample's pack.py `is_slice=True` -> False, caught
#: at example 91 of --examples 100 by the lineage row and at none of 20: the drawn chains rarely wrap
#: records longer than max_length early, and the oracle row's zephon second opinion declines most of its
#: first 20 configurations)
WRAP_SLICES = PipelineConfig(
    [("pack_sequences", {"max_length": 1, "algorithm": "wrap", "num_bins": None})],
    layout={"web": (1,), "code": (1,), "books": (1,)}, weights={"web": 1.0, "code": 1.0, "books": 1.0},
    source_kwargs={"chunk_size": 1, "seed": 0},
    options={"runner": "inline", "canonical_replicas": 1, "flush_every_k_chunks": 1})

#: row name -> its regression examples, run in this order before the drawn ones
REGRESSIONS: dict[str, tuple[Regression, ...]] = {
    "lineage": (
        Regression(WRAP_SLICES, {"cuts": []},  # no cut: no remap draw, whatever the features
                   why="a wrap slice's envelope entry holds the whole record (the sample of 30's pack.py "
                       "is_slice mutant)"),
        Regression(SHUFFLE_TWO_LANES, {"cuts": []},
                   why="two lanes of six chunks between them: a lane that consistently loses one of its "
                       "later chunks (tests/properties/test_oracle_and_lineage.py; the first drawn examples "
                       "are smaller and moved when issue 32 drew allocation_mode)"),
    ),
    "lane remap": (
        Regression(SENTINEL_GROUPING, {"cut": 0, "topology": Topology(1, 2, "contiguous")},
                   why="a sentinel splits every lane's push (tests/quality/test_mutants.py)"),
    ),
    "resume at cuts": (
        Regression(SHUFFLE_TWO_LANES, {"cuts": [1]},
                   why="tail multiplexer at lane 0 after restore; shuffle reseeded on restore; replay filter "
                       "drops one record too many (tests/quality/test_mutants.py)"),
        Regression(PACK_TWO_LANES, {"cuts": [6]},
                   why="eviction ignores cursor pinning (tests/quality/test_mutants.py)"),
        Regression(LEGACY_FIXED, {"cuts": [1]},
                   why="legacy_fixed allocation, a source knob drawn since issue 32 (the sample of 30's "
                       "static_mixture.py:347 mutant)"),
    ),
    "cross-lane order": (
        Regression(POINTER_REUSE, {"topology N": Topology(1, 1, "interleaved"), "M dp": 2, "M workers": 3,
                                   "M mapping": "interleaved", "M micro-batch": 1, "N participant 0 items": 5,
                                   "stop at frontier 9": False, "stop at frontier 12": False,
                                   "stop at frontier 15": True},
                   why="a round-robin pointer reused from an earlier topology "
                       "(tests/properties/test_blind_spot_rows.py)"),
    ),
    "bounded inflight": (
        Regression(MAP_BATCH_STALL, {"execution": {}},
                   why="map_batch holds an epoch's micro-batches behind a stalled batch (D-102)"),
    ),
    "checkpoint bytes": (
        Regression(SHUFFLE_TWO_LANES, {"cut": 1},
                   why="checkpoint bytes depend on dict insertion order (tests/quality/test_mutants.py)"),
    ),
}


def regressions_for(row: str) -> tuple[Regression, ...]:
    """The fixed examples of ``row`` (none for most rows)."""
    return REGRESSIONS.get(row, ())

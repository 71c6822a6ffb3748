"""A deterministic synthetic corpus shared by the demo, tests, simulator, notebooks and bench.

Theory of operation
-------------------
``synthetic_corpus(seed=..., datasets=..., ...)`` builds several datasets of
several shards each.  Every document is ``{"id", "dataset", "text"}`` where the
text has a heavy-tailed (log-normal, clipped) number of words drawn Zipf-like
from a fixed vocabulary ``w0..wN``, so packing and truncation see realistic
length spreads.  Each (dataset, shard) draws from its own generator seeded by
``derive_seed(seed, "<dataset>/<shard>")``: the corpus is a pure function of its
arguments, whatever the process, and adding a dataset does not change the others.

Machinery (house rule 10): test and demo data over :mod:`zephon_ref.work`'s in-memory shards; no rule
of the seeds lives here, and nothing in the semantics imports it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from zephon_ref.errors import ConfigError, ConfigTypeError, expected
from zephon_ref.seeding import derive_seed
from zephon_ref.work.dataset import Dataset, InMemoryShard

__all__ = ["DEFAULT_LAYOUT", "SyntheticCorpus", "synthetic_corpus"]

# name -> shard sizes: uneven on purpose (a small shard, a big one, an empty-ish tail)
DEFAULT_LAYOUT: Mapping[str, Sequence[int]] = {
    "web": (400, 250, 350),
    "code": (180, 120),
    "books": (60, 40, 20, 30),
}


@dataclass(frozen=True, slots=True)
class SyntheticCorpus:
    """The generated datasets, in layout order."""

    datasets: tuple[Dataset, ...]
    seed: int

    def by_name(self) -> dict[str, Dataset]:
        return {d.name: d for d in self.datasets}


_MAX_SHARD = 1 << 24  # rows per synthetic shard
_MAX_VOCAB = 1 << 24
_MAX_WORDS = 1 << 16  # words per document
_MAX_LOG = 20.0  # |mean_log_words|: e**20 words is already far past max_words


def _doc_lengths(rng: np.random.Generator, n: int, *, mean_log: float, max_words: int) -> np.ndarray:
    lengths = np.rint(rng.lognormal(mean=mean_log, sigma=1.0, size=n)).astype(np.int64)
    return np.clip(lengths, 1, max_words)


def synthetic_corpus(
    *,
    seed: int = 0,
    layout: Mapping[str, Sequence[int]] = DEFAULT_LAYOUT,
    vocab_size: int = 5000,
    mean_log_words: float = 3.5,
    max_words: int = 400,
) -> SyntheticCorpus:
    """Build the corpus.  ``layout`` maps dataset name -> shard sizes."""
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ConfigError(expected("seed", "an int >= 0", seed))
    if not isinstance(layout, Mapping):
        raise ConfigTypeError(
            expected("layout", "a mapping dataset name -> shard sizes", type(layout).__name__)
        )
    if not layout:
        raise ConfigError(expected("layout", "at least one dataset", dict(layout)))
    for name, sizes in layout.items():
        if not isinstance(name, str) or not name:
            raise ConfigError(expected("layout key", "a non-empty dataset name (str)", name))
        if isinstance(sizes, (str, bytes)) or not isinstance(sizes, Sequence):
            raise ConfigTypeError(expected(f"layout[{name!r}]", "a sequence of shard sizes", sizes))
        for sid, count in enumerate(sizes):
            if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count <= _MAX_SHARD:
                raise ConfigError(expected(f"layout[{name!r}][{sid}]", f"an int in [0, {_MAX_SHARD}]", count))
    for arg, v, hi in (("vocab_size", vocab_size, _MAX_VOCAB), ("max_words", max_words, _MAX_WORDS)):
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= hi:
            raise ConfigError(expected(arg, f"an int in [1, {hi}]", v))
    if isinstance(mean_log_words, bool) or not isinstance(mean_log_words, (int, float)) \
            or not -_MAX_LOG <= mean_log_words <= _MAX_LOG:
        raise ConfigError(
            expected("mean_log_words", f"a number in [-{_MAX_LOG}, {_MAX_LOG}]", mean_log_words)
        )
    ranks = np.arange(1, vocab_size + 1, dtype=np.float64)
    zipf = (1.0 / ranks) / np.sum(1.0 / ranks)
    datasets = []
    for name, sizes in layout.items():
        shards = {}
        for sid, count in enumerate(sizes):
            rng = np.random.default_rng(derive_seed(seed, f"{name}/{sid}"))
            lengths = _doc_lengths(rng, int(count), mean_log=mean_log_words, max_words=max_words)
            words = rng.choice(vocab_size, size=int(lengths.sum()), p=zipf)
            rows = []
            at = 0
            for i, ln in enumerate(lengths.tolist()):
                text = " ".join(f"w{w}" for w in words[at:at + ln].tolist())
                at += ln
                rows.append({"id": f"{name}/{sid}/{i}", "dataset": name, "text": text})
            shards[sid] = InMemoryShard(rows)
        datasets.append(Dataset.from_dict(name, shards))
    return SyntheticCorpus(tuple(datasets), seed)

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
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from zephon_ref.errors import ConfigError, expected
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

    def write_jsonl(self, root: str | Path) -> Path:
        """Write ``root/<dataset>/shard-<k>.jsonl``; :meth:`Dataset.from_path` reads it back."""
        root = Path(root)
        for d in self.datasets:
            ddir = root / d.name
            ddir.mkdir(parents=True, exist_ok=True)
            for pos, sid in enumerate(d.ids().tolist()):
                with (ddir / f"shard-{pos:05d}.jsonl").open("w", encoding="utf-8") as fh:
                    for i in range(int(d.counts()[pos])):
                        fh.write(json.dumps(d.get(sid, i), sort_keys=True) + "\n")
        return root


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
    if not layout:
        raise ConfigError(expected("layout", "at least one dataset", dict(layout)))
    if vocab_size < 1 or max_words < 1:
        raise ConfigError(expected("vocab_size / max_words", "ints >= 1", (vocab_size, max_words)))
    ranks = np.arange(1, vocab_size + 1, dtype=np.float64)
    zipf = (1.0 / ranks) / np.sum(1.0 / ranks)
    datasets = []
    for name, sizes in layout.items():
        shards = {}
        for sid, count in enumerate(sizes):
            if count < 0:
                raise ConfigError(expected(f"layout[{name!r}][{sid}]", "a count >= 0", count))
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

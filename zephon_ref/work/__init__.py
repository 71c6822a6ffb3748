"""The source layer: datasets, mixtures, chunks and work sources (no I/O in the sources)."""

from zephon_ref.work.base import WorkChunk, WorkSource
from zephon_ref.work.dataset import Dataset, InMemoryShard
from zephon_ref.work.mixture import MixtureSpec
from zephon_ref.work.static_mixture import StaticMixtureWorkSource
from zephon_ref.work.synthetic import SyntheticCorpus, synthetic_corpus
from zephon_ref.work.token_estimation import TokenEstimation

__all__ = [
    "Dataset",
    "InMemoryShard",
    "MixtureSpec",
    "StaticMixtureWorkSource",
    "SyntheticCorpus",
    "TokenEstimation",
    "WorkChunk",
    "WorkSource",
    "synthetic_corpus",
]

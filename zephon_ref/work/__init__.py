"""The source layer: datasets, mixtures, chunks and work sources (no I/O in the sources)."""

from zephon_ref.work.base import ComponentOrder, MixtureReadConfig, MixtureReadMode, WorkChunk, WorkSource
from zephon_ref.work.dataset import Dataset, InMemoryShard
from zephon_ref.work.mixture import MixtureSpec
from zephon_ref.work.static_mixture import StaticMixtureWorkSource
from zephon_ref.work.token_estimation import TokenEstimation

__all__ = [
    "ComponentOrder",
    "Dataset",
    "InMemoryShard",
    "MixtureReadConfig",
    "MixtureReadMode",
    "MixtureSpec",
    "StaticMixtureWorkSource",
    "TokenEstimation",
    "WorkChunk",
    "WorkSource",
]

"""zephon_ref: the formally tested reference implementation of Zephon's data-pipeline semantics.

``import zephon_ref as zephon`` works for the subset implemented here: the names below
match zephon 0.2.0's top-level names (``Pipeline``, ``Dataset``, ``InMemoryShard``,
``MixtureSpec``, ``StaticMixtureWorkSource``, ``WorkSource``, ``SampleBatch``,
``SampleMeta``, ``SampleRecord``) and its submodules of the same names (``ops``,
``pipeline``, ``types``, ``work``).  zephon's other top-level names are listed, each
with its reason, in docs/divergences.md ("Public surface").

Importing this package never imports torch: the torch path (:mod:`zephon_ref.torch`)
imports it on first use.
"""

from zephon_ref import ops, options, pipeline, types, validation, work
from zephon_ref.errors import (
    ConfigError,
    ConfigTypeError,
    ContractError,
    DataDroppedWarning,
    StateFormatError,
    StateMismatchError,
    ZephonRefError,
)
from zephon_ref.io import Dataset, InMemoryShard
from zephon_ref.pipeline import Pipeline
from zephon_ref.torch.training import install as _install_torch_tensors
from zephon_ref.types import (
    ContributorRef,
    SampleBatch,
    SampleCursor,
    SampleId,
    SampleMeta,
    SampleRecord,
)
from zephon_ref.work import MixtureSpec, StaticMixtureWorkSource, WorkSource

# SampleBatch.to_training's dtype="auto" means torch.long where torch imports (zephon's rule); the
# semantics never name torch, so the package installs it as a tensor library (torch is not imported).
_install_torch_tensors()

__version__ = "0.1.0"

__all__ = [
    "ConfigError",
    "ConfigTypeError",
    "ContractError",
    "ContributorRef",
    "DataDroppedWarning",
    "Dataset",
    "InMemoryShard",
    "MixtureSpec",
    "Pipeline",
    "SampleBatch",
    "SampleCursor",
    "SampleId",
    "SampleMeta",
    "SampleRecord",
    "StateFormatError",
    "StateMismatchError",
    "StaticMixtureWorkSource",
    "WorkSource",
    "ZephonRefError",
    "__version__",
    "ops",
    "options",
    "pipeline",
    "types",
    "validation",
    "work",
]

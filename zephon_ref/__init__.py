"""zephon_ref: the formally tested reference implementation of Zephon's data-pipeline semantics.

``import zephon_ref as zephon`` works for the subset implemented here: the names below
match zephon 0.2.0's public names.
"""

from zephon_ref.errors import (
    ConfigError,
    ConfigTypeError,
    ContractError,
    StateFormatError,
    StateMismatchError,
    ZephonRefError,
)
from zephon_ref.types import (
    ContributorRef,
    SampleBatch,
    SampleCursor,
    SampleId,
    SampleMeta,
    SampleRecord,
)

__version__ = "0.1.0"

__all__ = [
    "ConfigError",
    "ConfigTypeError",
    "ContractError",
    "ContributorRef",
    "SampleBatch",
    "SampleCursor",
    "SampleId",
    "SampleMeta",
    "SampleRecord",
    "StateFormatError",
    "StateMismatchError",
    "ZephonRefError",
    "__version__",
]

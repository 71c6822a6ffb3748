"""zephon 0.2.0's chunk-reader configuration (``zephon.work.base``): values with no effect on a stream.

zephon 0.2.0 still exports :class:`MixtureReadConfig` (a traversal mode, a seed, a within-component
order) and its two enums, but its engine no longer reads them (notes section 7): a chunk is
traversed in smooth weighted round robin, the only order zephon_ref implements.  They are here so
code that builds or passes one imports and runs; the fields are checked (divergence D-46) and never read.
"""

from __future__ import annotations

import enum
from collections.abc import MutableMapping
from dataclasses import dataclass
from typing import TypeAlias

from zephon_ref.errors import ConfigError, expected

__all__ = ["ComponentOrder", "MixtureComponent", "MixtureReadConfig", "MixtureReadMode",
           "SamplesPerComponent", "SourcedSampleId"]

#: A mixture component's name (a dataset name in StaticMixtureWorkSource).
MixtureComponent: TypeAlias = str
#: A sample pointer ``(dataset_id, shard_id, local_idx)`` with the component it was drawn for.
SourcedSampleId: TypeAlias = tuple[tuple[int, int, int], str]
#: A chunk's pointers grouped by component.
SamplesPerComponent: TypeAlias = MutableMapping[str, list[tuple[int, int, int]]]


class MixtureReadMode(str, enum.Enum):
    """Sampling strategies zephon once offered for iterating a WorkChunk."""

    WEIGHTED_RANDOM = "weighted_random"
    WEIGHTED_ROUND_ROBIN = "weighted_round_robin"


class ComponentOrder(str, enum.Enum):
    """How samples within one mixture component were traversed."""

    AS_IS = "as_is"
    SHUFFLE = "shuffle"


@dataclass(frozen=True)
class MixtureReadConfig:
    """A chunk reader's configuration, zephon's fields and defaults; read by no engine (see module)."""

    mode: MixtureReadMode = MixtureReadMode.WEIGHTED_ROUND_ROBIN
    seed: int | None = None
    precompute: bool = False
    within_component: ComponentOrder = ComponentOrder.AS_IS

    def __post_init__(self) -> None:
        # a value of the enum or its string is kept as given (zephon keeps the string too)
        if self.mode not in tuple(m.value for m in MixtureReadMode):
            modes = [m.value for m in MixtureReadMode]
            raise ConfigError(expected("MixtureReadConfig.mode", f"one of {modes}", self.mode))
        if self.within_component not in tuple(c.value for c in ComponentOrder):
            raise ConfigError(expected("MixtureReadConfig.within_component",
                                       f"one of {[c.value for c in ComponentOrder]}", self.within_component))
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int)):
            raise ConfigError(expected("MixtureReadConfig.seed", "None or an int", self.seed))
        if not isinstance(self.precompute, bool):
            raise ConfigError(expected("MixtureReadConfig.precompute", "a bool", self.precompute))

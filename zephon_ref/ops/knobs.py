"""Operator knobs: every keyword's declared domain, checked at the builder call and read by the suite.

Theory of operation
-------------------
Each built-in operator keeps its knobs in **one frozen config dataclass** in its own module
(``ShuffleConfig``, ``PackConfig``, ...), as ``op.config``, and reads them there: it keeps no
copy.  Every field is declared with :func:`knob`, which attaches a *domain*: a small value object
that

* checks a value (:meth:`Domain.check`), raising the typed error that names the knob, what
  was expected and what was received (ConfigTypeError for a value of the wrong kind,
  ConfigError for a value of the right kind out of range), and
* names its **value classes** (:meth:`Domain.classes`, :meth:`Domain.classify`): the kinds of
  value a property suite must draw at least once (``None``, the minimum, an int above it,
  each choice, ``True`` and ``False``, ...).

A config's ``__post_init__`` calls :func:`check_fields` (every field against its domain, in
declaration order) and then checks the rules *between* fields (``num_bins`` required for
first_fit, ...) itself.  Execution settings (``placement``, ``parallelism``) are not part
of any config: :func:`check_execution` validates them at the builder call and they are
never stored, so they cannot reach the data path (house rule 3).

What may not live here: drawing values (that is the suite's, in properties/), any
operator's rules, state.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from zephon_ref.errors import ConfigError, ConfigTypeError, expected

__all__ = [
    "EXECUTION",
    "Bool",
    "Choice",
    "Domain",
    "Float",
    "Func",
    "Int",
    "OneOf",
    "Opaque",
    "Text",
    "check_execution",
    "check_fields",
    "domains",
    "knob",
    "knob_values",
]


class Domain:
    """The values one knob accepts; subclasses are frozen value objects."""

    def accepts(self, value: Any) -> bool:
        """True when :meth:`check` would pass (used by :class:`OneOf`)."""
        try:
            self.check("value", value)
        except (ConfigError, ConfigTypeError):
            return False
        return True

    def check(self, name: str, value: Any) -> None:  # pragma: no cover - every subclass overrides
        raise NotImplementedError

    def describe(self) -> str:  # pragma: no cover - every subclass overrides
        raise NotImplementedError

    def classes(self) -> tuple[str, ...]:  # pragma: no cover - every subclass overrides
        raise NotImplementedError

    def classify(self, value: Any) -> str:  # pragma: no cover - every subclass overrides
        raise NotImplementedError


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True, slots=True)
class Int(Domain):
    """An int in ``[minimum, maximum]`` (``maximum=None``: unbounded), optionally None."""

    minimum: int
    maximum: int | None = None
    none: bool = False

    def check(self, name: str, value: Any) -> None:
        if value is None and self.none:
            return
        if not _is_int(value):
            raise ConfigTypeError(expected(name, self.describe(), value))
        if value < self.minimum or (self.maximum is not None and value > self.maximum):
            raise ConfigError(expected(name, self.describe(), value))

    def describe(self) -> str:
        top = "" if self.maximum is None else f" and <= {self.maximum}"
        return f"an int >= {self.minimum}{top}" + (" or None" if self.none else "")

    def classes(self) -> tuple[str, ...]:
        return (("None",) if self.none else ()) + ("minimum", "above minimum")

    def classify(self, value: Any) -> str:
        if value is None:
            return "None"
        return "minimum" if value == self.minimum else "above minimum"


@dataclass(frozen=True, slots=True)
class Float(Domain):
    """A finite real number (ints accepted) with open or closed bounds, optionally None."""

    minimum: float | None = None
    maximum: float | None = None
    min_open: bool = False
    max_open: bool = False
    none: bool = False

    def check(self, name: str, value: Any) -> None:
        if value is None and self.none:
            return
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigTypeError(expected(name, self.describe(), value))
        v = float(value) if _is_int(value) and abs(value) < 2**1023 else value
        if not isinstance(v, float) or not math.isfinite(v):
            raise ConfigError(expected(name, self.describe(), value))
        lo, hi = self.minimum, self.maximum
        if lo is not None and (v < lo or (self.min_open and v == lo)):
            raise ConfigError(expected(name, self.describe(), value))
        if hi is not None and (v > hi or (self.max_open and v == hi)):
            raise ConfigError(expected(name, self.describe(), value))

    def describe(self) -> str:
        parts = []
        if self.minimum is not None:
            parts.append(f"{'>' if self.min_open else '>='} {self.minimum}")
        if self.maximum is not None:
            parts.append(f"{'<' if self.max_open else '<='} {self.maximum}")
        return "a finite number" + (" " + " and ".join(parts) if parts else "") + (
            " or None" if self.none else "")

    def classes(self) -> tuple[str, ...]:
        out: tuple[str, ...] = ("None",) if self.none else ()
        if self.minimum is not None and not self.min_open:
            out += ("minimum",)
        if self.maximum is not None and not self.max_open:
            out += ("maximum",)
        return out + ("interior",)

    def classify(self, value: Any) -> str:
        if value is None:
            return "None"
        if self.minimum is not None and not self.min_open and value == self.minimum:
            return "minimum"
        if self.maximum is not None and not self.max_open and value == self.maximum:
            return "maximum"
        return "interior"


@dataclass(frozen=True, slots=True)
class Bool(Domain):
    """True or False (optionally None: "decide from the other knobs")."""

    none: bool = False

    def check(self, name: str, value: Any) -> None:
        if value is None and self.none:
            return
        if not isinstance(value, bool):
            raise ConfigTypeError(expected(name, self.describe(), value))

    def describe(self) -> str:
        return "a bool" + (" or None" if self.none else "")

    def classes(self) -> tuple[str, ...]:
        return (("None",) if self.none else ()) + ("True", "False")

    def classify(self, value: Any) -> str:
        return repr(value)


@dataclass(frozen=True, slots=True)
class Choice(Domain):
    """One of a fixed tuple of values (compared by type first: ``1 == True`` is not a match)."""

    values: tuple[Any, ...]

    def check(self, name: str, value: Any) -> None:
        # compare by type first: ``value in values`` would call an arbitrary ``__eq__``
        # (a numpy array compares elementwise and then refuses to be a bool)
        for c in self.values:
            if value is c or (type(value) is type(c) and value == c):
                return
        if value is None or isinstance(value, str):
            raise ConfigError(expected(name, self.describe(), value))
        raise ConfigTypeError(expected(name, self.describe(), value))

    def describe(self) -> str:
        return "one of " + ", ".join(repr(c) for c in self.values)

    def classes(self) -> tuple[str, ...]:
        return tuple(repr(c) for c in self.values)

    def classify(self, value: Any) -> str:
        return repr(value)


@dataclass(frozen=True, slots=True)
class Text(Domain):
    """A non-empty str (a field name, a tag), optionally None."""

    none: bool = False

    def check(self, name: str, value: Any) -> None:
        if value is None and self.none:
            return
        if not isinstance(value, str):
            raise ConfigTypeError(expected(name, self.describe(), value))
        if not value:
            raise ConfigError(expected(name, self.describe(), value))

    def describe(self) -> str:
        return "a non-empty str" + (" or None" if self.none else "")

    def classes(self) -> tuple[str, ...]:
        return (("None",) if self.none else ()) + ("text",)

    def classify(self, value: Any) -> str:
        return "None" if value is None else "text"


@dataclass(frozen=True, slots=True)
class Func(Domain):
    """A callable (a user function: its identity is its qualified name), optionally None."""

    none: bool = False

    def check(self, name: str, value: Any) -> None:
        if value is None and self.none:
            return
        if not callable(value):
            raise ConfigTypeError(expected(name, self.describe(), value))

    def describe(self) -> str:
        return "a callable" + (" or None" if self.none else "")

    def classes(self) -> tuple[str, ...]:
        return (("None",) if self.none else ()) + ("callable",)

    def classify(self, value: Any) -> str:
        return "None" if value is None else "callable"


@dataclass(frozen=True, slots=True)
class Opaque(Domain):
    """Any value of the given kinds, checked by the operator itself (a mapping, a tokenizer
    object); ``kinds`` name them for errors and for the coverage table."""

    kinds: tuple[type, ...]
    label: str
    none: bool = False

    def check(self, name: str, value: Any) -> None:
        if value is None and self.none:
            return
        if not isinstance(value, self.kinds):
            raise ConfigTypeError(expected(name, self.describe(), value))

    def describe(self) -> str:
        return self.label + (" or None" if self.none else "")

    def classes(self) -> tuple[str, ...]:
        return (("None",) if self.none else ()) + (self.label,)

    def classify(self, value: Any) -> str:
        return "None" if value is None else self.label


@dataclass(frozen=True, slots=True)
class OneOf(Domain):
    """The union of several domains, tried in order (``shuffle_block_size``: None, an int,
    "auto" or "global"); a value's class is the first accepting member's class."""

    members: tuple[Domain, ...]

    def check(self, name: str, value: Any) -> None:
        if any(m.accepts(value) for m in self.members):
            return
        # the error type of the member whose kind matches, else TypeError
        kinds_match = any(
            (isinstance(m, Choice) and any(type(value) is type(c) for c in m.values))
            or (isinstance(m, (Int,)) and _is_int(value))
            or (isinstance(m, Float) and isinstance(value, (int, float)) and not isinstance(value, bool))
            for m in self.members
        )
        err = ConfigError if kinds_match or value is None or isinstance(value, str) else ConfigTypeError
        raise err(expected(name, self.describe(), value))

    def describe(self) -> str:
        return " or ".join(m.describe() for m in self.members)

    def classes(self) -> tuple[str, ...]:
        out: list[str] = []
        for m in self.members:
            out += [c for c in m.classes() if c not in out]
        return tuple(out)

    def classify(self, value: Any) -> str:
        for m in self.members:
            if m.accepts(value):
                return m.classify(value)
        raise ConfigError(expected("value", self.describe(), value))


def knob(default: Any = dataclasses.MISSING, domain: Domain | None = None, *,
         doc: str = "") -> Any:
    """A config field with its domain (and a one-line meaning, shown by ``help``)."""
    if domain is None:
        raise TypeError("knob(): a domain is required")
    meta = {"domain": domain, "doc": doc}
    if default is dataclasses.MISSING:
        return dataclasses.field(metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def domains(config: Any) -> dict[str, Domain]:
    """``{field: domain}`` of a config class or instance, in declaration order."""
    return {f.name: f.metadata["domain"] for f in dataclasses.fields(config) if "domain" in f.metadata}


def check_fields(config: Any) -> None:
    """Check every declared field of ``config`` against its domain, in declaration order."""
    for name, dom in domains(config).items():
        dom.check(name, getattr(config, name))


def knob_values(config: Any) -> dict[str, str]:
    """``{field: value class}`` of a config instance: what the suite's coverage table counts."""
    return {name: dom.classify(getattr(config, name)) for name, dom in domains(config).items()}


#: The execution settings every operator's builder method takes: validated, never stored.
EXECUTION: Mapping[str, Domain] = {
    "placement": Text(),
    "parallelism": Int(1, none=True),
}


def check_execution(**settings: Any) -> None:
    """Validate an operator's execution settings (``placement``: a non-empty str, "auto",
    "local" or a runner tag; ``parallelism``: None for the operator's default or an int >= 1;
    0 is not "default")."""
    for name, value in settings.items():
        dom = EXECUTION.get(name)
        if dom is None:
            raise TypeError(f"check_execution(): unknown execution setting {name!r}")
        dom.check(name, value)

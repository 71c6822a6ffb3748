"""``add_op(name, process_many=..., ...)``: zephon's keyword form of a user operator.

Theory of operation
-------------------
zephon 0.2.0's ``Pipeline.add_op`` has two forms.  The instance form takes a prebuilt
:class:`~zephon_ref.ops.base.BaseOp`; the keyword form takes a name and callables and
builds the operator itself.  :class:`FunctionalOp` is that built operator:

* ``process_many(records) -> records`` maps each ready batch (it must not keep state between
  calls; an iterable of SampleRecords is accepted, anything else is a typed error when it runs);
* ``accumulator`` is a *factory* of the operator's :class:`~zephon_ref.ops.base.Accumulator`
  (default: a PassthroughAccumulator, each upstream micro-batch one ready batch).  As in zephon a
  factory whose signature has no parameters is called as ``factory()``; any other is called as
  ``factory(deterministic=..., ctx=...)``;
* the traits are the keywords (``preserves_cursor_order`` required; ``indexable``,
  ``calibration_replayable``, ``batch_shape_sensitive``, ``requires_serial_state`` default
  False, ``parallelism`` default 1); as in zephon, ``requires_serial_state=True`` with
  ``parallelism > 1`` is refused when a deterministic run starts (the engine checks it for
  every operator: ContractError, a RuntimeError);
* ``process_one`` (zephon's single-element fast path) and ``validation_samples`` (records for
  ``Pipeline.validate()``) are optional hooks; neither changes the stream.

:func:`resolve_add_op` decides the form and refuses a mixed call with zephon's builtins
(ValueError for a missing required keyword, an empty name, ``name=`` beside a positional name, or
a keyword-form keyword beside an instance).  Values zephon takes unchecked (``parallelism=0``,
``preserves_cursor_order=1``, a non-callable ``accumulator``) are refused here at the call
(# divergence D-60).

What may not live here: running the operator (the engine does), state across calls (a user's
accumulator owns it), threads.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from zephon_ref.errors import ConfigError, ConfigTypeError, expected
from zephon_ref.ops.base import Accumulator, BaseOp, OpTraits, PassthroughAccumulator
from zephon_ref.ops.knobs import Bool, Func, Text, check_execution, check_fields, knob
from zephon_ref.ops.stateful import checked_records
from zephon_ref.types import SampleRecord

__all__ = ["KEYWORD_FORM", "FunctionalConfig", "FunctionalOp", "resolve_add_op"]

#: the keywords of the keyword form that the instance form refuses (its traits and callables come
#: from the op itself); ``name`` and ``placement`` belong to both forms
KEYWORD_FORM: tuple[str, ...] = (
    "process_many", "preserves_cursor_order", "calibration_replayable", "accumulator", "process_one",
    "validation_samples", "parallelism", "indexable", "batch_shape_sensitive", "requires_serial_state",
)


@dataclass(frozen=True, slots=True, kw_only=True)
class FunctionalConfig:
    """The data knobs of a keyword-form operator (what its fingerprint reads).  No ``BUILDER``:
    ``add_op`` is drawn by its own conformance test, not by the generic generator."""

    name: str = knob(domain=Text(), doc="the operator's name in plans and state")
    process_many: Callable[[list[Any]], Any] = knob(domain=Func(), doc="records -> records, per ready batch")
    preserves_cursor_order: bool = knob(domain=Bool(), doc="a declared trait: output in cursor order")
    accumulator: Callable[..., Any] | None = knob(None, Func(none=True), doc="factory of the accumulator")
    process_one: Callable[[Any], Any] | None = knob(None, Func(none=True), doc="one record -> records")
    validation_samples: Callable[[], Any] | None = knob(None, Func(none=True), doc="records for validate()")
    indexable: bool = knob(False, Bool(), doc="a declared trait: 1:1 and deterministic")
    calibration_replayable: bool = knob(False, Bool(), doc="a declared trait")
    batch_shape_sensitive: bool = knob(False, Bool(), doc="a declared trait")
    requires_serial_state: bool = knob(False, Bool(), doc="a declared trait")

    def __post_init__(self) -> None:
        check_fields(self)


def _takes_no_arguments(factory: Callable[..., Any]) -> bool:
    """zephon's auto-detection: a factory with no parameters at all is the zero-argument form."""
    try:
        return not inspect.signature(factory).parameters
    except (TypeError, ValueError):  # no signature to read (some builtins): the keyword form
        return False


class FunctionalOp(BaseOp):
    """The operator the keyword form builds (see the module docstring)."""

    def __init__(self, name: str, *, process_many: Callable[[list[Any]], Any], preserves_cursor_order: bool,
                 accumulator: Callable[..., Any] | None = None,
                 process_one: Callable[[Any], Any] | None = None,
                 validation_samples: Callable[[], Any] | None = None, indexable: bool = False,
                 calibration_replayable: bool = False, batch_shape_sensitive: bool = False,
                 requires_serial_state: bool = False, parallelism: int | None = None,
                 placement: str = "auto") -> None:
        super().__init__()
        check_execution(placement=placement, parallelism=parallelism)
        self.config = FunctionalConfig(
            name=name, process_many=process_many, preserves_cursor_order=preserves_cursor_order,
            accumulator=accumulator, process_one=process_one, validation_samples=validation_samples,
            indexable=indexable, calibration_replayable=calibration_replayable,
            batch_shape_sensitive=batch_shape_sensitive, requires_serial_state=requires_serial_state)
        # an execution setting: in the traits (the planner reads it), never in the fingerprint
        self.parallelism = 1 if parallelism is None else parallelism

    def traits(self) -> OpTraits:
        c = self.config
        return OpTraits(preserves_cursor_order=c.preserves_cursor_order, indexable=c.indexable,
                        calibration_replayable=c.calibration_replayable, parallelism=self.parallelism,
                        batch_shape_sensitive=c.batch_shape_sensitive,
                        requires_serial_state=c.requires_serial_state)

    def accumulator(self, *, deterministic: bool, ctx: dict[str, Any]) -> Accumulator[Any]:
        factory = self.config.accumulator
        if factory is None:
            return PassthroughAccumulator()
        acc = factory() if _takes_no_arguments(factory) else factory(deterministic=deterministic, ctx=ctx)
        if not isinstance(acc, Accumulator):
            raise ConfigTypeError(expected(f"add_op {self.config.name!r} accumulator() result",
                                           "an Accumulator (the keyword is a factory)", acc))
        return acc

    def process_many(self, elems: list[Any]) -> list[Any]:
        return checked_records(f"add_op {self.config.name!r} process_many() result",
                               self.config.process_many(list(elems)))

    def process_one(self, elem: Any) -> list[Any]:
        one = self.config.process_one
        if one is None:
            return self.process_many([elem])
        return checked_records(f"add_op {self.config.name!r} process_one() result", one(elem))

    def validation_samples(self) -> list[SampleRecord] | None:
        factory = self.config.validation_samples
        return None if factory is None else list(factory())


def resolve_add_op(name_or_op: Any, *, name: str | None, placement: str,
                   keywords: Mapping[str, Any]) -> tuple[str, BaseOp]:
    """``(plan name, operator)`` of an ``add_op`` call; ``keywords`` holds the keyword-form
    keywords as passed (None where omitted).  Validates everything before returning."""
    given = [k for k in KEYWORD_FORM if keywords.get(k) is not None]
    if isinstance(name_or_op, BaseOp):
        if given:
            raise ConfigError(expected(
                "add_op(op) with a BaseOp instance", "no keyword-form keywords (traits and callables come "
                "from the op: override traits() / validation_samples(); or call add_op(name, ...))",
                ", ".join(given)))
        if name is not None and (not isinstance(name, str) or not name):
            raise ConfigTypeError(expected("add_op name", "None or a non-empty str", name))
        check_execution(placement=placement)
        traits = name_or_op.traits()
        if not isinstance(traits, OpTraits):
            raise ConfigTypeError(expected(f"{type(name_or_op).__name__}.traits()", "an OpTraits", traits))
        return name or type(name_or_op).__name__, name_or_op
    if name is not None:
        raise ConfigError(expected("add_op(name, ...) name=", "None (the keyword form takes the name "
                                   "positionally; name= is for the instance form)", name))
    for required in ("process_many", "preserves_cursor_order"):
        if keywords.get(required) is None:
            raise ConfigError(expected(f"add_op(name, ...) {required}", "given (the keyword form requires "
                                       "process_many and preserves_cursor_order; or pass a BaseOp)",
                                       "nothing"))
    if not isinstance(name_or_op, str):
        raise ConfigTypeError(expected("add_op's first argument", "a BaseOp instance or an operator name "
                                       "(str)", name_or_op))
    declared = {k: keywords[k] for k in ("indexable", "calibration_replayable", "batch_shape_sensitive",
                                         "requires_serial_state") if keywords.get(k) is not None}
    op = FunctionalOp(name_or_op, process_many=keywords["process_many"],
                      preserves_cursor_order=keywords["preserves_cursor_order"],
                      accumulator=keywords.get("accumulator"), process_one=keywords.get("process_one"),
                      validation_samples=keywords.get("validation_samples"),
                      parallelism=keywords.get("parallelism"), placement=placement, **declared)
    return name_or_op, op

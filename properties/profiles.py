"""Hypothesis profiles, registered on purpose, and the example budget they scale.

Theory of operation
-------------------
Three profiles, chosen by the environment variable ``HYPOTHESIS_PROFILE``
(``ci`` when unset: the README's test command and CI run the same suite, and this
line is the one place that decides it); tests/conftest.py calls :func:`load`
before any test module is imported, so every ``settings(...)`` built at import
time inherits from it:

* ``ci``: a fixed budget (the numbers the tests name), ``derandomize=True`` (the
  same examples on every run: a red CI is reproducible, and a green one does not
  depend on luck), ``database=None`` (nothing read or written between runs),
  no deadline (2 shared cores make timings meaningless), and ``print_blob`` so a
  failure prints its reproduction blob;
* ``dev``: random examples and the local example database (failures are replayed
  first), the same budget; for exploration (``HYPOTHESIS_PROFILE=dev``): what it
  finds becomes an ``@example`` beside the test plus a fix;
* ``nightly``: random, 10x the budget (:func:`examples` scales the counts the
  property suite's own tests pass).

A test that names ``max_examples`` itself keeps that number under ``ci`` and
``dev``; tests in tests/properties and tests/quality ask :func:`examples` instead,
so ``nightly`` multiplies them.  Nothing here touches the data path.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

__all__ = ["FACTORS", "PROFILES", "active", "examples", "load"]

ENV = "HYPOTHESIS_PROFILE"
DEFAULT = "ci"  # the one place: README command == CI run (issue 23)
PROFILES = ("ci", "dev", "nightly")
#: how each profile scales the example counts the property suite's tests name
FACTORS = {"ci": 1, "dev": 1, "nightly": 10}

_COMMON = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large]}

settings.register_profile("ci", derandomize=True, database=None, print_blob=True, max_examples=100, **_COMMON)
settings.register_profile("dev", max_examples=100, **_COMMON)
settings.register_profile("nightly", max_examples=1000, **_COMMON)


def active() -> str:
    """The profile the environment asks for (``ci`` when unset); an unknown name is an error."""
    name = os.environ.get(ENV, DEFAULT) or DEFAULT
    if name not in PROFILES:
        raise ValueError(f"{ENV}: expected one of {list(PROFILES)}, received {name!r}")
    return name


def load() -> str:
    """Load the active profile into Hypothesis and return its name."""
    name = active()
    settings.load_profile(name)
    return name


def examples(n: int) -> int:
    """``n`` examples scaled by the active profile (10x under ``nightly``)."""
    return n * FACTORS[active()]

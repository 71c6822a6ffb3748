"""The one progress display of the project's long commands (tqdm, on stderr).

Theory of operation
-------------------
:func:`progress` returns a tqdm bar on stderr that is *off* (draws nothing, costs
nothing) when ``quiet`` is set or stderr is not a terminal, so logs, pipes and CI
output never fill with carriage returns.  ``python -m sim sweep`` uses it per seed;
every other progress display should too (one library, one look).  Nothing here
touches virtual time or the data path: a bar only counts what its caller tells it.
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["progress", "shown"]


def shown(*, quiet: bool = False, stream: Any = None) -> bool:
    """Whether a bar would be drawn: not ``quiet`` and ``stream`` (default stderr) is a terminal."""
    stream = sys.stderr if stream is None else stream
    isatty = getattr(stream, "isatty", None)
    return not quiet and bool(isatty and isatty())


def progress(total: int | None, *, desc: str, unit: str, quiet: bool = False) -> Any:
    """A tqdm bar over ``total`` units on stderr; disabled when :func:`shown` is false."""
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, disable=not shown(quiet=quiet),
                dynamic_ncols=True, leave=True)

"""One signature for two public functions: a full-result call and its one-field convenience.

Where the API has a call returning a result object (``load_checkpoint`` -> ``LoadedCheckpoint``,
``aggregate_round`` -> ``RoundResult``) and zephon's name for the same call returning one
field of it (``load`` -> the state, ``aggregate`` -> the merged state), :func:`narrowed`
builds the second from the first, so the keyword list is written once and cannot drift.
``inspect.signature`` and ``help()`` show the full parameter list with the narrower return.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import ParamSpec, TypeVar

__all__ = ["narrowed"]

_P = ParamSpec("_P")
_R = TypeVar("_R")
_T = TypeVar("_T")


def narrowed(full: Callable[_P, _R], pick: Callable[[_R], _T], *, name: str, returns: str,
             doc: str) -> Callable[_P, _T]:
    """``full``'s parameters, returning ``pick(full(...))``; named ``name`` with ``doc``."""

    def call(*args: _P.args, **kwargs: _P.kwargs) -> _T:
        return pick(full(*args, **kwargs))

    call.__name__ = call.__qualname__ = name
    call.__module__ = full.__module__
    call.__doc__ = doc
    call.__signature__ = inspect.signature(full).replace(return_annotation=returns)  # type: ignore[attr-defined]
    return call

"""Keys of the aggregation backends: ``<namespace>/<name>``, list prefixes, values.

Theory of operation
-------------------
A key has exactly one ``/``; the namespace and the name are ``[A-Za-z0-9._-]`` and never
start with ``.`` (temp files do, so a listing never shows them).  A list prefix is
``<namespace>/<name>.``; a name is listed under it when what follows the prefix is not
empty and holds no ``.``.  Values are non-empty bytes.  Every backend refuses what these
functions refuse, with the same typed error.

What may not live here: storage, the protocol.
"""

from __future__ import annotations

import re

from zephon_ref.errors import ConfigError, expected

__all__ = ["check_key", "check_prefix", "listed", "nonempty", "split_key"]

_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]*")
# A whole valid key in one match: two _NAMEs around the one "/" (neither may hold a "/").
# The fast check of the hot path; a key it rejects goes through split_key, which refuses it.
_KEY = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]*/[A-Za-z0-9_-][A-Za-z0-9._-]*")


def check_key(key: str) -> None:
    """Refuse a bad key exactly as :func:`split_key` does, at one regex match for a good one."""
    if type(key) is not str or _KEY.fullmatch(key) is None:
        split_key(key)


def split_key(key: str) -> tuple[str, str]:
    """``"<namespace>/<name>"`` -> (namespace, name); ConfigError otherwise."""
    ns, sep, name = key.partition("/")
    if not sep or not _NAME.fullmatch(ns) or not _NAME.fullmatch(name):
        raise ConfigError(expected("storage key", "'<namespace>/<name>' of [A-Za-z0-9._-]", key))
    return ns, name


def check_prefix(prefix: str) -> tuple[str, str]:
    ns, sep, name = prefix.partition("/")
    if not sep or not _NAME.fullmatch(ns) or not name.endswith(".") or not _NAME.fullmatch(name):
        raise ConfigError(expected("list prefix", "'<namespace>/<name>.'", prefix))
    return ns, name


def listed(name: str, prefix_name: str) -> bool:
    return (
        name.startswith(prefix_name)
        and "." not in name[len(prefix_name) :]
        and len(name) > len(prefix_name)
    )


def nonempty(data: bytes, key: str) -> bytes:
    if not isinstance(data, bytes) or not data:
        raise ConfigError(expected(f"value for {key!r}", "non-empty bytes", type(data).__name__))
    return data

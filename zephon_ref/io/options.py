"""zephon's storage option objects (``zephon.io.options``): execution settings, accepted and recorded.

Theory of operation
-------------------
zephon 0.2.0 configures its readers with :class:`StoreOptions` (shard cache, Arrow pools, Parquet
reads and its decoded row-group cache, Vortex, Lance, footer retention).  Each of them says how
bytes are fetched, cached or decoded, never which rows a pipeline delivers, so under seed 002 they
are execution settings: zephon_ref accepts every one of them, checks it the way zephon 0.2.0 checks
it, keeps it, and delivers the same stream whatever it says.  Nothing here reads or writes a file.

What is zephon's and reproduced (found by running zephon 0.2.0; ``tests/unit/test_io_options.py``
compares the two on the same inputs):

* the fields, their defaults and ``repr``; an omitted field and an explicit one are told apart, so
  :meth:`merge` overlays only the fields the other object was given (a ``None`` given for a field
  whose default is not ``None`` reads back as the default, except the pool sizes, where ``None``
  means "leave the pool as it is" and is kept);
* ``from_any``: ``None`` -> the defaults, an object of the class -> itself, a ``dict`` -> the
  class built from it with its size fields passed through :func:`parse_size_bytes` (``"50gb"``)
  and nested dicts through the nested class's ``from_any``; anything else a TypeError;
* the range checks zephon makes (ValueError): pool sizes, ``metadata_cache_entries``, the
  row-group cache's limits, ``parquet.use_threads``;
* :meth:`StoreOptions.resolved_parquet_rg_cache`, the row-group cache's automatic defaults.

Where zephon crashes on a wrong type with an AttributeError or a bare comparison TypeError,
zephon_ref raises ConfigTypeError (a TypeError) naming field and value (docs/divergences.md).
"""

from __future__ import annotations

import dataclasses
import enum
import warnings
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from zephon_ref.errors import ConfigError, ConfigTypeError, ZephonRefError, expected

__all__ = ["ArrowOptions", "CacheOptions", "LanceOptions", "ParquetOptions", "ParquetRGCacheOptions",
           "StoreOptions", "VortexOptions", "parse_size_bytes"]

#: Size suffixes, binary multiples (``"1kb"`` is 1024 bytes), tried in this order.
SIZE_SUFFIXES: tuple[tuple[str, int], ...] = (
    ("tb", 1024**4), ("gb", 1024**3), ("mb", 1024**2), ("kb", 1024), ("b", 1),
)

#: Where zephon's shard cache lives by default, fixed when the module is imported (as zephon does).
DEFAULT_CACHE_ROOT = Path.home() / ".cache" / "zephon"
GIB = 1024**3


class SizeOverflowError(ConfigError, OverflowError):
    """A size string that names an infinite number of bytes (zephon raises OverflowError)."""


def parse_size_bytes(value: str | int | None) -> int | None:
    """A byte count from ``None``, an int (returned as it is) or a string such as ``"50gb"``.

    The string is stripped and lower-cased; an empty one means ``None``.  With a suffix
    (tb, gb, mb, kb, b; powers of 1024) the number before it is a float (``"1.5gb"``), and the
    product is truncated toward zero; without one it is an int literal (``"10"``, ``"5_000"``).
    No check of sign or range is made here, as in zephon.
    """
    if value is None:
        return None
    if isinstance(value, int):
        return value
    if not isinstance(value, str):
        raise ConfigTypeError(expected("size", "None, an int or a string such as '50gb'",
                                       type(value).__name__))
    text = value.strip().lower()
    if not text:
        return None
    for suffix, unit in SIZE_SUFFIXES:
        if text.endswith(suffix):
            number = text[: -len(suffix)]
            try:
                amount = float(number)
            except ValueError:
                raise ConfigError(
                    expected("size", "a number before the unit (e.g. '1.5gb')", value)
                ) from None
            try:
                return int(amount * unit)
            except OverflowError:
                raise SizeOverflowError(expected("size", "a finite number of bytes", value)) from None
            except ValueError:
                raise ConfigError(expected("size", "a number of bytes, not NaN", value)) from None
    try:
        return int(text)
    except ValueError:
        raise ConfigError(expected("size", "an int, or a number with a unit tb/gb/mb/kb/b", value)) from None


class _Omitted(enum.Enum):
    TOKEN = 0

    def __repr__(self) -> str:
        return "<omitted>"


#: The default of every field: "not given".  Typed Any so a field keeps its documented type.
OMITTED: Any = _Omitted.TOKEN

_O = TypeVar("_O", bound="_Options")


def _opt(default: Any, *, keep_none: bool = False) -> Any:
    """A field that may be omitted; ``default`` replaces an omitted value (and ``None`` unless kept)."""
    return dataclasses.field(default=OMITTED, metadata={"default": default, "keep_none": keep_none})


def _nested(cls: type[_Options]) -> Any:
    return dataclasses.field(default_factory=cls, metadata={"nested": cls})


class _Options:
    """Shared behaviour: omitted-field bookkeeping, checks, ``from_any`` and ``merge``."""

    #: Fields whose dict value goes through :func:`parse_size_bytes` in ``from_any``.
    _SIZE_FIELDS: ClassVar[tuple[str, ...]] = ()
    #: Words for error messages (``"cache options"``).
    _WHAT: ClassVar[str] = "options"
    #: A dict with a key that is not a field: refused (True) or ignored with a warning (False).
    _STRICT_KEYS: ClassVar[bool] = True
    _given: frozenset[str]

    def __post_init__(self) -> None:
        given = set()
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if "nested" in f.metadata:
                if not isinstance(value, f.metadata["nested"]):
                    raise ConfigTypeError(expected(f"{type(self).__name__}.{f.name}",
                                                   f"a {f.metadata['nested'].__name__}", value))
                continue
            if value is OMITTED:
                object.__setattr__(self, f.name, f.metadata["default"])
                continue
            given.add(f.name)
            if value is None and not f.metadata["keep_none"]:
                object.__setattr__(self, f.name, f.metadata["default"])
        self._given = frozenset(given)
        self._check()

    def _check(self) -> None:
        """The range checks zephon 0.2.0 makes for this class (ValueError), after defaults."""

    @classmethod
    def from_any(cls: type[_O], obj: Any) -> _O:
        """``None`` -> defaults; an instance -> itself; a dict -> built from it (sizes may be strings)."""
        if obj is None:
            return cls()
        if isinstance(obj, cls):
            return obj
        if type(obj) is not dict:
            raise ConfigTypeError(expected(cls._WHAT, f"None, a {cls.__name__} or a dict", repr(obj)))
        fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        kwargs: dict[str, Any] = {}
        for key, item in obj.items():
            f = fields.get(key)
            if f is None:
                if cls._STRICT_KEYS:
                    raise ConfigTypeError(expected(f"{cls.__name__} key", f"one of {sorted(fields)}", key))
                warnings.warn(f"{cls.__name__}.from_any ignores the unknown key {key!r} "
                              f"(keys: {sorted(fields)})", UserWarning, stacklevel=2)
                continue
            if "nested" in f.metadata:
                kwargs[key] = f.metadata["nested"].from_any(item)
            elif key in cls._SIZE_FIELDS:
                kwargs[key] = parse_size_bytes(item)
            else:
                kwargs[key] = item
        return cls(**kwargs)

    def merge(self: _O, other: _O) -> _O:
        """A new object: ``self`` with the fields ``other`` was given laid over it (nested ones merged)."""
        if not isinstance(other, type(self)):
            name = type(self).__name__
            raise ConfigTypeError(expected(f"{name}.merge argument", f"a {name}", type(other).__name__))
        kwargs: dict[str, Any] = {}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            mine, theirs = getattr(self, f.name), getattr(other, f.name)
            if "nested" in f.metadata:
                kwargs[f.name] = mine.merge(theirs)
            elif f.name in other._given:
                kwargs[f.name] = theirs
            elif f.name in self._given:
                kwargs[f.name] = mine
        return type(self)(**kwargs)


def _count(owner: str, value: Any, *, minimum: int, none_ok: bool) -> None:
    if none_ok and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(expected(owner, f"an int >= {minimum}" + (" or None" if none_ok else ""), value))


def _size(owner: str, value: Any, *, minimum: int, none_ok: bool) -> None:
    """A byte count where zephon accepts any number (it compares without a type check)."""
    if none_ok and value is None:
        return
    if not isinstance(value, (int, float)):
        raise ConfigTypeError(expected(owner, "a number of bytes" + (" or None" if none_ok else ""), value))
    if value < minimum:
        raise ConfigError(expected(owner, f"a number of bytes >= {minimum}", value))


@dataclasses.dataclass(eq=True)
class CacheOptions(_Options):
    """zephon's on-disk shard cache (remote shards downloaded once).  zephon_ref reads local files
    only and keeps no cache: every field is recorded, none is used; zephon checks none of them."""

    enabled: bool = _opt(False)
    root: str | Path = _opt(DEFAULT_CACHE_ROOT)
    limit_bytes: int | None = _opt(None)
    rg_cache_bytes: int | None = _opt(None)  # deprecated in zephon: parquet.rg_cache.limit_bytes
    keep_zip: bool = _opt(False)
    validate_hash: str | None = _opt(None)
    download_retry: int = _opt(12)
    download_timeout: float = _opt(180.0)
    open_retry_attempts: int = _opt(5)
    open_retry_initial_backoff: float = _opt(0.1)
    open_retry_max_backoff: float = _opt(2.0)
    min_slack_bytes: int = _opt(512 * 1024)
    max_slack_bytes: int = _opt(64 * 1024 * 1024)

    _SIZE_FIELDS: ClassVar[tuple[str, ...]] = ("limit_bytes", "rg_cache_bytes")
    _WHAT: ClassVar[str] = "cache options"


@dataclasses.dataclass(eq=True)
class ArrowOptions(_Options):
    """Arrow's process-wide CPU and I/O pool sizes (``None``: leave the pool as it is).  zephon_ref
    decodes Parquet in the calling thread; the sizes are checked and recorded."""

    cpu_threads: int | None = _opt(1, keep_none=True)
    io_threads: int | None = _opt(1, keep_none=True)

    _WHAT: ClassVar[str] = "Arrow options"

    def _check(self) -> None:
        _count("arrow.cpu_threads", self.cpu_threads, minimum=1, none_ok=True)
        _count("arrow.io_threads", self.io_threads, minimum=1, none_ok=True)


@dataclasses.dataclass(eq=True)
class ParquetRGCacheOptions(_Options):
    """zephon's node-shared cache of decoded Parquet row groups; defaults resolve against the shard
    cache in :meth:`StoreOptions.resolved_parquet_rg_cache`.  Recorded, never used here."""

    enabled: bool | None = _opt(None)
    root: str | Path | None = _opt(None)
    limit_bytes: int | None = _opt(None)
    min_free_bytes: int = _opt(GIB)

    _SIZE_FIELDS: ClassVar[tuple[str, ...]] = ("limit_bytes", "min_free_bytes")
    _WHAT: ClassVar[str] = "Parquet RG cache options"

    def _check(self) -> None:
        _size("parquet.rg_cache.limit_bytes", self.limit_bytes, minimum=1, none_ok=True)
        _size("parquet.rg_cache.min_free_bytes", self.min_free_bytes, minimum=0, none_ok=False)


@dataclasses.dataclass(eq=True)
class ParquetOptions(_Options):
    """Parquet reads: ``use_threads`` (parallel column decoding in zephon) and the row-group cache."""

    use_threads: bool = _opt(False)
    rg_cache: ParquetRGCacheOptions = _nested(ParquetRGCacheOptions)

    _WHAT: ClassVar[str] = "Parquet options"

    def _check(self) -> None:
        if not isinstance(self.use_threads, bool):
            raise ConfigError(expected("parquet.use_threads", "a bool", self.use_threads))


@dataclasses.dataclass(eq=True)
class VortexOptions(_Options):
    """Vortex's segment cache and worker pool.  zephon_ref reads no Vortex files; checked, recorded."""

    segment_cache_bytes: int = _opt(64 * 1024 * 1024)
    worker_threads: int | None = _opt(1, keep_none=True)

    _SIZE_FIELDS: ClassVar[tuple[str, ...]] = ("segment_cache_bytes",)
    _WHAT: ClassVar[str] = "Vortex options"

    def _check(self) -> None:
        _count("vortex.segment_cache_bytes", self.segment_cache_bytes, minimum=0, none_ok=False)
        _count("vortex.worker_threads", self.worker_threads, minimum=0, none_ok=True)


@dataclasses.dataclass(eq=True)
class LanceOptions(_Options):
    """Lance's worker pools.  zephon_ref reads no Lance datasets; checked, recorded."""

    worker_threads: int | None = _opt(2, keep_none=True)

    _WHAT: ClassVar[str] = "Lance options"

    def _check(self) -> None:
        _count("lance.worker_threads", self.worker_threads, minimum=1, none_ok=True)


@dataclasses.dataclass(eq=True)
class StoreOptions(_Options):
    """Every storage setting together (zephon passes it to its fetch stage).  Never changes a stream.

    ``from_any`` ignores (with a UserWarning; zephon silently) a key that is not a field.
    """

    cache: CacheOptions = _nested(CacheOptions)
    arrow: ArrowOptions = _nested(ArrowOptions)
    parquet: ParquetOptions = _nested(ParquetOptions)
    vortex: VortexOptions = _nested(VortexOptions)
    lance: LanceOptions = _nested(LanceOptions)
    metadata_cache_entries: int = _opt(256)

    _WHAT: ClassVar[str] = "store options"
    _STRICT_KEYS: ClassVar[bool] = False

    def _check(self) -> None:
        _count("metadata_cache_entries", self.metadata_cache_entries, minimum=0, none_ok=False)

    def resolved_parquet_rg_cache(self) -> ParquetRGCacheOptions:
        """The row-group cache with its automatic defaults filled in, as zephon resolves them.

        ``enabled`` None: on when the shard cache is on or a root is given; enabled without a root
        needs the shard cache.  ``limit_bytes`` omitted: the deprecated ``cache.rg_cache_bytes``
        when set, else the larger of 4 GiB and a tenth of the shard cache's limit (when the shard
        cache is on).  A set ``cache.rg_cache_bytes`` warns DeprecationWarning, as in zephon.  The
        root stays ``None`` when omitted (zephon puts it under the shard cache).
        """
        rg, cache = self.parquet.rg_cache, self.cache
        enabled = rg.enabled if rg.enabled is not None else bool(cache.enabled) or rg.root is not None
        if enabled and rg.root is None and not cache.enabled:
            raise ConfigError(expected("parquet.rg_cache.enabled=True", "parquet.rg_cache.root when "
                                       "cache.enabled=False", "no root"))
        if cache.rg_cache_bytes is not None:
            warnings.warn("cache.rg_cache_bytes is deprecated; use parquet.rg_cache.limit_bytes",
                          DeprecationWarning, stacklevel=2)
        limit = rg.limit_bytes
        if limit is None:
            if cache.rg_cache_bytes is not None:
                limit = cache.rg_cache_bytes
            else:
                tenth = int(cache.limit_bytes * 0.1) if cache.enabled and cache.limit_bytes is not None else 0
                limit = max(4 * GIB, tenth)
        return ParquetRGCacheOptions(enabled=enabled, root=rg.root, limit_bytes=limit,
                                     min_free_bytes=rg.min_free_bytes)


assert issubclass(SizeOverflowError, ZephonRefError)

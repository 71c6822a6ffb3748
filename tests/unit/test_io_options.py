"""zephon_ref.io.options against zephon 0.2.0's zephon.io.options on the same inputs.

Each case is a call made on both modules; the results must have the same ``repr`` (fields, defaults,
parsed sizes, merges) or both must raise, zephon_ref's error an instance of the builtin zephon
raised.  Where zephon crashes with an AttributeError on a wrong type, zephon_ref raises a TypeError
(docs/divergences.md, "Public surface").  The cases without zephon still run against fixed values.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import pytest

from properties.sources import zephon_available
from zephon_ref.errors import ZephonRefError
from zephon_ref.io import options as ours

SIZES = ["50gb", "50GB", " 50 gb ", "1.5gb", "50g", "50gib", "10", "10b", "1kb", "1mb", "1tb", "", "  ", None,
         0, -1, "-5gb", "abc", 1.5, True, "5 kb", "1e3", "0x10", "+5gb", "5_000", "1.7b", "0.3kb", "1e3kb",
         "inf gb", "nan gb", "5 0gb", "1.9", "KB", "2Tb", "1\ngb", "1bb", b"5gb", "-0.1kb", "00012kb"]

def call(dotted: str, *args: Any, **kwargs: Any) -> Callable[[Any], Any]:
    """``module -> module.<dotted>(*args, **kwargs)``; ``dotted`` may name a method after ``from_any``."""
    def run(m: Any) -> Any:
        head, _, method = dotted.partition(":")
        obj: Any = m
        for part in head.split("."):
            obj = getattr(obj, part)
        value = obj(*args, **kwargs)
        return getattr(value, method)() if method else value
    return run


FIELD_VALUES = (True, False, None, 0, 1, -1, "1", 1.0)
CHECKED_FIELDS = (("ArrowOptions", "cpu_threads"), ("ArrowOptions", "io_threads"),
                  ("LanceOptions", "worker_threads"), ("VortexOptions", "segment_cache_bytes"),
                  ("VortexOptions", "worker_threads"), ("ParquetRGCacheOptions", "limit_bytes"),
                  ("ParquetRGCacheOptions", "min_free_bytes"), ("ParquetOptions", "use_threads"),
                  ("StoreOptions", "metadata_cache_entries"), ("CacheOptions", "enabled"),
                  ("CacheOptions", "root"), ("CacheOptions", "download_retry"))
CACHE_INPUTS = (None, {}, {"limit_bytes": "50gb"}, {"limit_bytes": "50gb", "enabled": True, "root": "/tmp/x"},
                "50gb", 5, {"bogus": 1}, {"rg_cache_bytes": "1gb"}, {"min_slack_bytes": "1mb"},
                {"limit_bytes": None}, {"limit_bytes": ""}, {"limit_bytes": "abc"}, [("limit_bytes", 1)],
                {"root": None})
STORE_INPUTS = (None, {}, {"cache": {"limit_bytes": "1gb"}}, {"cache": None}, {"cache": "x"},
                {"parquet": {"use_threads": True,
                             "rg_cache": {"limit_bytes": "2gb", "min_free_bytes": "1mb"}}},
                {"metadata_cache_entries": "5"}, {"metadata_cache_entries": 0}, {"arrow": {"cpu_threads": 4}},
                {"vortex": {"segment_cache_bytes": "1mb"}}, {"lance": {"worker_threads": None}}, 3)
RESOLVE_INPUTS = ({}, {"cache": {"enabled": True, "rg_cache_bytes": "1gb"}},
                  {"cache": {"enabled": True, "limit_bytes": "100gb"}},
                  {"cache": {"enabled": True, "limit_bytes": "10gb"}},
                  {"parquet": {"rg_cache": {"root": "/x"}}},
                  {"parquet": {"rg_cache": {"enabled": True}}},
                  {"cache": {"enabled": False, "limit_bytes": "100gb"}},
                  {"cache": {"enabled": True, "limit_bytes": 53687091207}},
                  {"cache": {"enabled": True, "limit_bytes": 10**15 + 7}},
                  {"cache": {"enabled": True, "limit_bytes": "10gb", "rg_cache_bytes": "1gb"},
                   "parquet": {"rg_cache": {"limit_bytes": "2gb"}}})
CLASSES = ("StoreOptions", "CacheOptions", "ArrowOptions", "ParquetOptions", "ParquetRGCacheOptions",
           "LanceOptions", "VortexOptions")

CASES: list[tuple[str, Callable[[Any], Any]]] = [
    *[(f"parse_size_bytes({v!r})", call("parse_size_bytes", v)) for v in SIZES],
    *[(f"{c}()", call(c)) for c in CLASSES],
    *[(f"CacheOptions.from_any({v!r})", call("CacheOptions.from_any", v)) for v in CACHE_INPUTS],
    *[(f"StoreOptions.from_any({v!r})", call("StoreOptions.from_any", v)) for v in STORE_INPUTS],
    *[(f"{c}({f}={v!r})", call(c, **{f: v})) for c, f in CHECKED_FIELDS for v in FIELD_VALUES],
    *[(f"resolved_parquet_rg_cache({v!r})", call("StoreOptions.from_any:resolved_parquet_rg_cache", v))
      for v in RESOLVE_INPUTS],
    ("merge explicit over explicit",
     lambda m: m.CacheOptions(enabled=True).merge(m.CacheOptions(enabled=False))),
    ("merge omitted keeps", lambda m: m.CacheOptions(enabled=True).merge(m.CacheOptions())),
    ("merge None resets", lambda m: m.ParquetRGCacheOptions(limit_bytes=5).merge(
        m.ParquetRGCacheOptions(limit_bytes=None))),
    ("merge nested", lambda m: m.StoreOptions(metadata_cache_entries=3).merge(
        m.StoreOptions(cache=m.CacheOptions(limit_bytes=1)))),
    ("merge nested parquet",
     lambda m: m.ParquetOptions(rg_cache=m.ParquetRGCacheOptions(limit_bytes=5)).merge(
         m.ParquetOptions(use_threads=True))),
]


def outcome(module: Any, call: Callable[[Any], Any]) -> tuple[str, Any]:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        try:
            value = call(module)
        except Exception as exc:  # noqa: BLE001 - the error is the outcome compared
            return "raises", (exc, sorted({w.category.__name__ for w in seen}))
    return repr(value), sorted({w.category.__name__ for w in seen})


#: zephon raises AttributeError (not a typed error) where zephon_ref raises TypeError.
ATTRIBUTE_ERROR_CASES = {"StoreOptions.from_any({'cache': 'x'})"}


@pytest.mark.conformance
@pytest.mark.skipif(not zephon_available(), reason="zephon 0.2.0 not installed (pip install .[conformance])")
@pytest.mark.parametrize(("label", "call"), CASES, ids=[c[0] for c in CASES])
def test_same_outcome_as_zephon(label: str, call: Callable[[Any], Any]) -> None:
    from zephon.io import options as theirs

    mine, z = outcome(ours, call), outcome(theirs, call)
    if z[0] == "raises":
        assert mine[0] == "raises", f"{label}: zephon raises {z[1][0]!r}, zephon_ref returns {mine[0]}"
        err = mine[1][0]
        assert isinstance(err, ZephonRefError), f"{label}: untyped {err!r}"
        builtin = TypeError if isinstance(z[1][0], AttributeError) else type(z[1][0])
        assert isinstance(err, builtin), f"{label}: zephon raises {z[1][0]!r}, zephon_ref {err!r}"
    else:
        assert mine == z, f"{label}\nzephon_ref: {mine}\nzephon:     {z}"


def test_unknown_store_key_warns_and_is_ignored() -> None:
    with pytest.warns(UserWarning, match="bogus"):
        got = ours.StoreOptions.from_any({"bogus": 1})
    assert got == ours.StoreOptions()


def test_sizes_and_refusals_without_zephon() -> None:
    assert ours.parse_size_bytes("50gb") == 50 * 1024**3
    assert ours.parse_size_bytes("0.3kb") == 307 and ours.parse_size_bytes("-0.1kb") == -102
    assert ours.CacheOptions.from_any({"limit_bytes": "50gb"}).limit_bytes == 50 * 1024**3
    with pytest.raises(ValueError, match="50g"):
        ours.parse_size_bytes("50g")
    with pytest.raises(OverflowError):
        ours.parse_size_bytes("inf gb")
    with pytest.raises(TypeError):
        ours.StoreOptions(cache={"enabled": True})  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        ours.CacheOptions().merge(None)  # type: ignore[arg-type]
    a = ours.CacheOptions(limit_bytes=5)
    assert ours.CacheOptions.from_any(a) is a
    assert a.merge(ours.CacheOptions(enabled=True)) == ours.CacheOptions(limit_bytes=5, enabled=True)

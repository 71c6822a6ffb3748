"""Fuzzing helpers: bad values at every public entry point, mutated real checkpoints, isolation.

Theory of operation
-------------------
Three house rules are checked from here (ARCHITECTURE.md, rules 6 and 7, and the
checkpoint contract):

* **bad values** (:data:`ENTRY_POINTS`): every public argument of every public entry
  point is replaced, one at a time, by an arbitrary value inside an otherwise valid
  call.  :func:`classify` says how it ended: a typed error at the call, a typed error
  while the first items are drawn, accepted (the first items came out), or a failure:
  an untyped exception, a typed one whose message does not say what was expected, a
  hang, or a refused call that still changed the pipeline (rule 6).
* **restore fuzzing** (:func:`mutations`, :func:`restore_outcome`): real checkpoints,
  taken at every cut of small real pipelines, are mutated (a key dropped, a value
  retyped or re-ranged, a field or lane entry swapped with another checkpoint's, a
  mapping emptied, a sample id or knob made wrong).  ``restore`` must either refuse with
  a typed error and leave the pipeline producing what it produced before, or accept and
  deliver exactly the uninterrupted run's remainder.
* **isolation** (:func:`scramble`, :func:`clear_deep`): a checkpoint handed to the
  caller is the caller's; editing it must change nothing the pipeline does later.

``python -m properties.fuzz --report`` runs the deterministic sweeps and prints the
tables the issue asks for (``--no-restore`` / ``--no-bad-values`` for one half)
(counts per entry point and per mutation kind, and every distinct failure with a
one-line reproducer).  Example counts of the Hypothesis tests
scale with ``ZEPHON_FUZZ_EXAMPLES`` (an absolute count) so CI stays cheap and a nightly
run can raise it.

Nothing here re-implements pipeline logic: every expected stream is the real
pipeline's own uninterrupted output.
"""

from __future__ import annotations

import copy
import os
import sys
import tempfile
import warnings
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from properties.pipelines import PipelineConfig, build_pipeline, item_view
from sim.executor import alarm
from zephon_ref.errors import ZephonRefError

__all__ = [
    "ENTRY_POINTS",
    "RESTORE_CONFIGS",
    "EntryPoint",
    "HangError",
    "bad_values",
    "classify",
    "fuzz_settings",
    "n_examples",
    "restore_outcome",
    "time_limit",
]

EXAMPLES_ENV = "ZEPHON_FUZZ_EXAMPLES"
ITEMS = 3  # items drawn from an accepted object
CALL_TIMEOUT_S = 20.0  # a call or its first items taking longer than this is a hang
RESTORE_TIMEOUT_S = 8.0  # a restore plus the whole remainder of a small pipeline


def n_examples(default: int) -> int:
    """``ZEPHON_FUZZ_EXAMPLES`` if set (an absolute count); else ``default`` scaled by the
    loaded Hypothesis profile (``default`` at the stock 100 examples, 10x under a profile
    that asks for 1000), so a nightly profile raises every fuzz test at once."""
    raw = os.environ.get(EXAMPLES_ENV)
    if raw:
        return max(1, int(raw))
    return max(1, round(default * settings.default.max_examples / 100))


def fuzz_settings(default: int, **kw: Any) -> settings:
    return settings(max_examples=n_examples(default), deadline=None, print_blob=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.filter_too_much], **kw)


# ---------------------------------------------------------------------------------------------
# a hang guard (main thread only: SIGALRM)
# ---------------------------------------------------------------------------------------------
class HangError(BaseException):
    """Raised by :func:`time_limit`; a BaseException so no ``except Exception`` swallows it."""


def time_limit(seconds: float) -> AbstractContextManager[None]:
    """Raise :class:`HangError` after ``seconds`` (:func:`sim.executor.alarm`)."""
    return alarm(seconds, lambda: HangError(f"no result within {seconds:g} s"))


# ---------------------------------------------------------------------------------------------
# bad values
# ---------------------------------------------------------------------------------------------
class _Omit:
    def __repr__(self) -> str:
        return "OMIT"


OMIT: Any = _Omit()


class _Odd:
    """An object with no useful protocol at all."""

    def __repr__(self) -> str:
        return "_Odd()"


def _any_callable(*args: Any, **kwargs: Any) -> None:
    return None


_SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=6), st.binary(max_size=4),
)
SPECIAL_VALUES: list[Any] = [
    -1,
    0,
    1,
    2,
    3,
    2**31,
    2**63,
    -(2**63),
    0.0,
    -0.0,
    0.5,
    1.0,
    1.5,
    float("nan"),
    float("inf"),
    float("-inf"),
    "",
    "0",
    "1",
    "True",
    "False",
    "false",
    "no",
    "none",
    "None",
    "auto",
    "global",
    "inline",
    "threads",
    "repeat",
    "stop",
    "redistribute",
    "permute",
    "modulo",
    "first_fit",
    "best_fit",
    "streaming",
    "block",
    "contiguous",
    "interleaved",
    "text",
    "web",
    "accumulator",
    "legacy_fixed",
    "__fallback__",
    " ",
    b"",
    b"x",
    bytearray(b"ab"),
    (),
    [],
    {},
    set(),
    frozenset(),
    range(3),
    [1, 2],
    (1, 2),
    {"web": 1},
    {0: 1},
    [None],
    1j,
    Ellipsis,
    _Odd(),
    _any_callable,
    int,
    str,
    object,
]
_SPECIAL = st.sampled_from(SPECIAL_VALUES)


def _returns(value: Any) -> Callable[..., Any]:
    def wrong(*args: Any, **kwargs: Any) -> Any:
        return value
    wrong.__qualname__ = f"returns<{value!r}>"
    return wrong


WRONG_CALLABLE_VALUES = [
    _any_callable,
    str,
    int,
    object,
    _returns(5),
    _returns([1, 2]),
    _returns("x"),
    _returns((None, None)),
    _returns({"input_ids": "x"}),
    _returns(float("nan")),
    _returns(-1),
]
WRONG_CALLABLES = st.sampled_from(WRONG_CALLABLE_VALUES)

CALLABLE_ARGS = frozenset({"fn", "init_state", "push", "flush", "should_flush", "transform", "tokenizer",
                           "length_fn", "weight_by", "pack_payloads"})


def bad_values(int_cap: int | None = None) -> st.SearchStrategy[Any]:
    """Arbitrary values; ``int_cap`` bounds ints (for arguments whose size is a cost)."""
    scalars = _SCALARS
    special = _SPECIAL
    if int_cap is not None:
        def small(v: Any) -> bool:
            return not (isinstance(v, int) and not isinstance(v, bool) and abs(v) > int_cap)
        scalars = scalars.filter(small)
        special = special.filter(small)
    return st.one_of(
        special, scalars,
        st.lists(scalars, max_size=3), st.tuples(scalars, scalars),
        st.dictionaries(st.one_of(st.text(max_size=4), st.integers(-2, 5)), scalars, max_size=3),
    )


def safe_path_value(v: Any) -> bool:
    """Directory arguments: keep drawn strings relative and inside the scratch directory."""
    if isinstance(v, (str, bytes, bytearray)):
        s = v.decode("latin-1") if isinstance(v, (bytes, bytearray)) else v
        return not any(c in s for c in "/\\~") and s.strip(".") != "" or s == ""
    return True


# ---------------------------------------------------------------------------------------------
# baselines: a small valid pipeline every entry point substitutes into
# ---------------------------------------------------------------------------------------------
def _rows(name: str, sid: int, n: int) -> list[dict[str, Any]]:
    return [{"text": " ".join(f"{name}{sid}w{i}x{j}" for j in range(2 + (i % 5))), "id": f"{name}/{sid}/{i}"}
            for i in range(n)]


def base_shards(name: str = "web") -> dict[int, Any]:
    from zephon_ref.work import InMemoryShard

    sizes = {"web": (10, 7), "code": (6,)}.get(name, (8,))
    return {sid: InMemoryShard(_rows(name, sid, n)) for sid, n in enumerate(sizes)}


def base_datasets() -> list[Any]:
    from zephon_ref.work import Dataset

    return [Dataset.from_dict("web", base_shards("web")), Dataset.from_dict("code", base_shards("code"))]


BASE_SOURCE_KW: dict[str, Any] = {"chunk_size": 4, "seed": 1}


def base_source(**over: Any) -> Any:
    from zephon_ref.work import StaticMixtureWorkSource

    datasets = over.pop("datasets", None) or base_datasets()
    mixture = over.pop("mixture", None) or {
        d.name: w for d, w in zip(datasets, (0.7, 0.3, 0.2), strict=False)
    }
    return StaticMixtureWorkSource(datasets, mixture, **{**BASE_SOURCE_KW, **over})


BASE_OPTIONS: dict[str, Any] = {"runner": "inline", "canonical_replicas": 2}


def base_pipeline(source: Any = None) -> Any:
    from zephon_ref.pipeline import Pipeline

    return Pipeline(source if source is not None else base_source())


def finish(p: Any, **opts: Any) -> Any:
    """Options applied last (a builder call must come before them in zephon)."""
    return p.options(**{**BASE_OPTIONS, **opts})


def first_items(p: Any, n: int = ITEMS) -> list[Any]:
    it = iter(p)
    try:
        out = []
        for _ in range(n):
            x = next(it, None)
            if x is None:
                break
            out.append(item_view(x))
        return out
    finally:
        close = getattr(it, "close", None)
        if close is not None:
            close()


# ---------------------------------------------------------------------------------------------
# entry points
# ---------------------------------------------------------------------------------------------
@dataclass
class EntryPoint:
    """One public callable: ``call(ctx, value)`` substitutes ``value`` for ``arg`` in a valid call.

    ``setup()`` builds the context (usually a pipeline the method is called on) and
    ``use(result)`` draws the first items.  ``pipeline_of(ctx)`` (if set) is the pipeline
    a refused call must leave unchanged (rule 6).
    """

    name: str
    arg: str
    call: Callable[[Any, Any], Any]
    use: Callable[[Any], Any]
    setup: Callable[[], Any] = lambda: None
    pipeline_of: Callable[[Any], Any] | None = None
    int_cap: int | None = None
    path_like: bool = False
    valid: Any = None  # a value the call accepts (OMIT: leave the keyword out)

    @property
    def label(self) -> str:
        return f"{self.name}({self.arg}=)"

    def values(self) -> st.SearchStrategy[Any]:
        s = bad_values(self.int_cap)
        if self.arg in CALLABLE_ARGS:  # callables that return the wrong thing, half the time
            s = st.one_of(WRONG_CALLABLES, s)
        return s.filter(safe_path_value) if self.path_like else s


def _use_pipeline(p: Any) -> Any:
    return first_items(p)


def _use_source(src: Any) -> Any:
    return first_items(finish(base_pipeline(src).batch(2)))


def _use_dataset(d: Any) -> Any:
    # the substituted dataset next to a valid one, mixture over the real names
    from zephon_ref.work import Dataset

    other = Dataset.from_dict("zz_other", base_shards("code"))
    return _use_source(base_source(datasets=[d, other], mixture={d.name: 0.5, "zz_other": 0.5}))


_JSONL_DIR: list[str] = []


def jsonl_dir() -> str:
    if not _JSONL_DIR:
        import json

        _scratch()
        d = tempfile.mkdtemp(dir=_SCRATCH_ROOT[0])
        for sid, n in enumerate((9, 5)):
            with open(os.path.join(d, f"shard{sid}.jsonl"), "w", encoding="utf-8") as fh:
                for row in _rows("js", sid, n):
                    fh.write(json.dumps(row) + "\n")
        _JSONL_DIR.append(d)
    return _JSONL_DIR[0]


_SCRATCH_ROOT: list[str] = []


def _scratch() -> str:
    """A fresh scratch directory; the process works inside it (relative paths land there).

    All of them live under one temporary root that is removed at exit.
    """
    if not _SCRATCH_ROOT:
        import atexit
        import shutil

        _SCRATCH_ROOT.append(tempfile.mkdtemp(prefix="zephon-fuzz-"))
        atexit.register(shutil.rmtree, _SCRATCH_ROOT[0], True)
    d = tempfile.mkdtemp(dir=_SCRATCH_ROOT[0])
    os.chdir(d)
    return d


def _kw_entries(name: str, method: Callable[..., Any], valid: dict[str, Any], args: list[str],
                setup: Callable[[], Any], use: Callable[[Any], Any], *, positional: tuple[str, ...] = (),
                caps: dict[str, int] | None = None, on_pipeline: bool = True) -> list[EntryPoint]:
    out = []
    for a in args:
        def call(ctx: Any, v: Any, a: str = a) -> Any:
            kw = {**valid, a: v}
            if v is OMIT:
                if a in valid:
                    kw[a] = valid[a]
                else:
                    del kw[a]
            pos = [kw.pop(p) for p in positional if p in kw]
            return method(ctx, *pos, **kw)
        out.append(EntryPoint(name, a, call, use, setup, (lambda ctx: ctx) if on_pipeline else None,
                              int_cap=(caps or {}).get(a), valid=OMIT))
    return out


def _tok_pipeline() -> Any:
    return base_pipeline().tokenize(field="text")


def _build_entry_points() -> list[EntryPoint]:
    from zephon_ref.io import Dataset, InMemoryShard
    from zephon_ref.ops.map_transform import MapTransform
    from zephon_ref.pipeline import Pipeline
    from zephon_ref.work import MixtureSpec, StaticMixtureWorkSource

    eps: list[EntryPoint] = []
    # -- datasets ---------------------------------------------------------------------------
    eps.append(EntryPoint("Dataset.from_dict", "name", lambda c, v: Dataset.from_dict(v, base_shards("web")),
                          _use_dataset, valid="web"))
    eps.append(
        EntryPoint(
            "Dataset.from_dict",
            "shards",
            lambda c, v: Dataset.from_dict("web", base_shards("web") if v is OMIT else v),
            _use_dataset,
            valid=OMIT,
        )
    )
    eps.append(EntryPoint("Dataset.from_dict", "shards[0]",
                          lambda c, v: Dataset.from_dict("web", {**base_shards("web"), 0: v}), _use_dataset,
                          valid=InMemoryShard(_rows("web", 0, 5))))
    eps.append(EntryPoint("Dataset.from_path", "name", lambda c, v: Dataset.from_path(v, jsonl_dir()),
                          _use_dataset, valid="js"))
    eps.append(EntryPoint("Dataset.from_path", "path", lambda c, v: Dataset.from_path("js", jsonl_dir()
                                                                                      if v is OMIT else v),
                          _use_dataset, setup=_scratch, path_like=True, valid=OMIT))
    eps.append(
        EntryPoint(
            "Dataset.from_path",
            "fmt",
            lambda c, v: Dataset.from_path("js", jsonl_dir(), fmt=v),
            _use_dataset,
            valid="jsonl",
        )
    )
    eps.append(EntryPoint("InMemoryShard", "rows",
                          lambda c, v: Dataset.from_dict("web", {**base_shards("web"), 0: InMemoryShard(v)}),
                          _use_dataset, valid=_rows("web", 0, 4)))
    eps.append(
        EntryPoint(
            "MixtureSpec",
            "weights",
            lambda c, v: base_source(mixture=MixtureSpec(v)),
            _use_source,
            valid={"web": 2, "code": 1},
        )
    )
    # -- the work source: every keyword ----------------------------------------------------------
    src_valid: dict[str, Any] = {"chunk_size": 4, "seed": 1}
    for a in ("datasets", "mixture", "chunk_size", "seed", "shuffle_shards", "shuffle_within_shard",
              "shuffle_block_size", "exhausted_policy", "reshuffle_on_repeat", "max_repeats",
              "stop_after_passes", "lane_assignment", "token_estimation", "allocation_mode"):
        def call_src(c: Any, v: Any, a: str = a) -> Any:
            kw = {"datasets": base_datasets(), "mixture": {"web": 0.7, "code": 0.3}, **src_valid}
            if v is not OMIT:
                kw[a] = v
            return StaticMixtureWorkSource(kw.pop("datasets"), kw.pop("mixture"), **kw)
        eps.append(EntryPoint("StaticMixtureWorkSource", a, call_src, _use_source, valid=OMIT))
    eps.append(
        EntryPoint(
            "Pipeline",
            "work_source",
            lambda c, v: finish(Pipeline(base_source() if v is OMIT else v)),
            _use_pipeline,
            valid=OMIT,
        )
    )

    # -- builder methods: every keyword (the operators' from the API generator: signature + knob()) ----
    def _api_keywords(method: str) -> list[str]:
        from properties import generator as gen

        return [k.name for k in gen.api()[method].knobs]

    def then_finish(method: Callable[..., Any]) -> Callable[..., Any]:
        def run(p: Any, *a: Any, **kw: Any) -> Any:
            return finish(method(p, *a, **kw))
        return run

    def ident(payload: Any) -> Any:
        return payload

    def init_state() -> Any:
        return None

    def push(state: Any, recs: Any) -> Any:
        return state, recs

    eps += _kw_entries("Pipeline.map_transform", then_finish(Pipeline.map_transform),
                       {"fn": ident}, ["fn", "drop_none", "placement", "parallelism"], base_pipeline,
                       _use_pipeline, positional=("fn",))
    eps += _kw_entries("Pipeline.stateful_transform", then_finish(Pipeline.stateful_transform),
                       {"name": "st", "init_state": init_state, "push": push},
                       ["name", "init_state", "push", "flush", "should_flush", "transform", "placement",
                        "parallelism", "indexable", "preserves_cursor_order"], base_pipeline, _use_pipeline,
                       positional=("name",))
    eps += _kw_entries(
        "Pipeline.tokenize",
        then_finish(Pipeline.tokenize),
        {"field": "text"},
        _api_keywords("tokenize"),
        base_pipeline,
        _use_pipeline,
        caps={"max_length": 4096, "max_batch": 4096},
    )
    eps += _kw_entries("Pipeline.pack_sequences", then_finish(Pipeline.pack_sequences),
                       {"max_length": 64, "num_bins": 2},
                       _api_keywords("pack_sequences"),
                       _tok_pipeline, _use_pipeline, positional=("max_length",),
                       caps={"max_length": 4096, "num_bins": 64, "max_sequences_per_bin": 4096,
                             "candidate_pool_size": 4096, "max_candidate_age": 4096})
    eps += _kw_entries("Pipeline.pack_flat", then_finish(Pipeline.pack_flat),
                       {"max_length": 64, "num_bins": 2, "pad_token_id": 0},
                       ["max_length", "placement", "parallelism", "num_bins", "max_sequences_per_bin",
                        "algorithm", "tokens_field", "pad_token_id", "emit_positions", "drop_oversized",
                        "min_sequence_length", "shuffle_strategy", "shuffle_seed", "flush_strategy",
                        "candidate_pool_size", "max_candidate_age", "homogeneity", "groups"],
                       _tok_pipeline, _use_pipeline, positional=("max_length",),
                       caps={"max_length": 4096, "num_bins": 64, "max_sequences_per_bin": 4096,
                             "candidate_pool_size": 4096, "max_candidate_age": 4096})
    eps += _kw_entries("Pipeline.shuffle", then_finish(Pipeline.shuffle), {"buffer_size": 4},
                       _api_keywords("shuffle"),
                       base_pipeline, _use_pipeline, positional=("buffer_size",), caps={"buffer_size": 4096})
    eps += _kw_entries("Pipeline.ensure_mixture", then_finish(Pipeline.ensure_mixture), {},
                       _api_keywords("ensure_mixture"),
                       _tok_pipeline, _use_pipeline, caps={"max_buffer_size": 4096})
    eps += _kw_entries("Pipeline.batch", then_finish(Pipeline.batch), {"microbatch_size": 2},
                       _api_keywords("batch"), base_pipeline, _use_pipeline,
                       positional=("microbatch_size",), caps={"microbatch_size": 4096})
    eps += _kw_entries("Pipeline.add_op", then_finish(Pipeline.add_op), {"op": MapTransform(ident)},
                       ["op", "name", "placement"], base_pipeline, _use_pipeline, positional=("op",))
    # execution settings outside options() (docs/options.md)
    eps += _kw_entries("Pipeline.prefetch", then_finish(Pipeline.prefetch), {},
                       ["buffer_size", "parallelism", "placement"], base_pipeline, _use_pipeline,
                       positional=("buffer_size",), caps={"buffer_size": 4096})
    eps += _kw_entries("Pipeline.fetch", then_finish(Pipeline.fetch), {}, ["parallelism", "max_batch"],
                       base_pipeline, _use_pipeline)
    eps += _kw_entries("Pipeline.fetch_parallelism", then_finish(Pipeline.fetch_parallelism),
                       {"parallelism": 2}, ["parallelism", "max_batch"], base_pipeline, _use_pipeline,
                       positional=("parallelism",))
    eps += _kw_entries("Pipeline.enable_observability", then_finish(Pipeline.enable_observability), {},
                       ["tracking", "sink"], base_pipeline, _use_pipeline, positional=("tracking",))

    # -- options: every key (threads runner where the key only matters there) ----------------------
    threaded = {"max_workers", "deterministic", "op_queue_capacity", "prefetch_batches"}
    from zephon_ref.settings import EXEC_DEFAULTS

    listed = ("runner", "max_workers", "deterministic", "op_queue_capacity", "prefetch_batches", "run_id",
              "world_size", "global_rank", "dp_degree", "dp_group_id", "mapping_strategy", "aggregate_dir",
              "aggregate_store", "aggregate_timeout_s", "canonical_replicas", "flush_every_k_chunks")
    # and every other execution setting zephon 0.2.0 accepts (zephon_ref.settings), in table order
    for key in (*listed, *(k for k in EXEC_DEFAULTS if k not in listed)):
        def call_opt(p: Any, v: Any, key: str = key) -> Any:
            extra = {"runner": "threads"} if key in threaded else {}
            opts = {**BASE_OPTIONS, **extra}
            if v is not OMIT:
                opts[key] = v
            return p.options(**opts)
        eps.append(EntryPoint("Pipeline.options", key, call_opt, _use_pipeline,
                              lambda: base_pipeline().shuffle(4).batch(2), lambda p: p,
                              int_cap=64 if key in ("canonical_replicas", "max_workers", "world_size",
                                                    "dp_degree") else None,
                              path_like=key == "aggregate_dir", valid=OMIT))

    # -- restore, save/load, for_worker -----------------------------------------------------------
    def fresh() -> Any:
        return finish(base_pipeline().batch(2))

    def fresh_in_scratch() -> Any:
        _scratch()
        return fresh()

    eps.append(
        EntryPoint(
            "Pipeline.restore",
            "state",
            lambda p, v: p.restore(p.checkpoint() if v is OMIT else v),
            _use_pipeline,
            fresh,
            lambda p: p,
            valid=OMIT,
        )
    )
    eps.append(EntryPoint("Pipeline.save_checkpoint", "directory", lambda p, v: (p, p.save_checkpoint(v), v),
                          lambda r: _use_saved(*r), fresh_in_scratch, lambda p: p, path_like=True,
                          valid="ckdir"))

    def load_ctx() -> Any:
        p = fresh_in_scratch()
        p.save_checkpoint("saved")
        return p

    eps.append(EntryPoint("Pipeline.load_checkpoint", "directory", lambda p, v: (p.load_checkpoint(v), p)[1],
                          _use_pipeline, load_ctx, lambda p: p, path_like=True, valid="saved"))
    eps.append(EntryPoint("Pipeline.load_checkpoint", "generation",
                          lambda p, v: (p.load_checkpoint("saved", v), p)[1], _use_pipeline, load_ctx,
                          lambda p: p, valid=None))
    eps.append(EntryPoint("Pipeline.for_worker", "worker_id", lambda p, v: p.for_worker(v, 2), _use_pipeline,
                          fresh, lambda p: p, int_cap=64, valid=1))
    eps.append(
        EntryPoint(
            "Pipeline.for_worker",
            "num_workers",
            lambda p, v: p.for_worker(0, v),
            _use_pipeline,
            fresh,
            lambda p: p,
            int_cap=64,
            valid=2,
        )
    )
    return eps


def _use_saved(p: Any, gen: Any, directory: Any) -> Any:
    q = finish(base_pipeline().batch(2))
    q.load_checkpoint(directory)
    return first_items(q)


ENTRY_POINTS: list[EntryPoint] = _build_entry_points()


# ---------------------------------------------------------------------------------------------
# classification
# ---------------------------------------------------------------------------------------------
TYPED_CALL = "typed at call"
TYPED_LATER = "typed later"
ACCEPTED = "accepted"
USER_RAISED = "user code raised"
FAILURES = ("UNTYPED", "VAGUE", "HANG", "CHANGED-ON-REFUSAL")


@dataclass(frozen=True)
class Outcome:
    kind: str  # TYPED_CALL | TYPED_LATER | ACCEPTED | one of FAILURES
    where: str = ""  # "call" | "use" | ""
    exc: str = ""
    message: str = ""

    @property
    def failed(self) -> bool:
        return self.kind in FAILURES

    def line(self) -> str:
        return f"{self.kind}@{self.where} {self.exc}: {self.message[:160]}" if self.exc else self.kind


def typed_ok(exc: BaseException) -> bool:
    """Rule 7: a ZephonRefError that also derives from a builtin a caller would catch."""
    return isinstance(exc, ZephonRefError) and isinstance(
        exc, (ValueError, TypeError, RuntimeError, LookupError, OSError))


def says_expected(exc: BaseException) -> bool:
    return "expected" in str(exc).lower()


def _judge(exc: BaseException, where: str) -> Outcome:
    name = type(exc).__name__
    msg = str(exc).replace("\n", " ")
    if isinstance(exc, HangError):
        return Outcome("HANG", where, name, msg)
    if not typed_ok(exc):
        return Outcome("UNTYPED", where, name, msg)
    if not says_expected(exc):
        return Outcome("VAGUE", where, name, msg)
    return Outcome(TYPED_CALL if where == "call" else TYPED_LATER, where, name, msg)


class _UserRaised(Exception):
    pass


def _tag_user_errors(value: Any) -> Any:
    """A stand-in for a drawn callable that marks exceptions raised inside it (user code)."""
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return value(*args, **kwargs)
        except Exception as exc:
            exc.__zephon_fuzz_user__ = True  # type: ignore[attr-defined]
            raise
    wrapper.__qualname__ = f"user<{getattr(value, '__qualname__', type(value).__name__)}>"
    return wrapper


def _user_raised(exc: BaseException) -> bool:
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:  # also when zephon_ref chained it
        if getattr(e, "__zephon_fuzz_user__", False):
            return True
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return False


def classify(ep: EntryPoint, value: Any, *, timeout: float = CALL_TIMEOUT_S) -> Outcome:
    """Run ``ep`` with ``value`` substituted and say how it ended.

    A drawn callable for a callable argument is wrapped so an exception raised *inside*
    it (user code failing on a payload) is told apart from zephon_ref mishandling what
    the callable returned: the former propagates as the user's error ("user code raised"),
    the latter is a failure.
    """
    if ep.arg in CALLABLE_ARGS and callable(value):
        value = _tag_user_errors(value)
    cwd = os.getcwd()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ctx = ep.setup()
            try:
                with time_limit(timeout):
                    result = ep.call(ctx, value)
            except (Exception, HangError) as exc:
                out = _judge(exc, "call")
                if out.kind == TYPED_CALL and ep.pipeline_of is not None:
                    changed = unchanged_after_refusal(ep, ctx)
                    if changed:
                        return Outcome("CHANGED-ON-REFUSAL", "call", out.exc, changed)
                return out
            try:
                with time_limit(timeout):
                    ep.use(result)
            except (Exception, HangError) as exc:
                if _user_raised(exc) and not isinstance(exc, ZephonRefError):
                    return Outcome(USER_RAISED, "use", type(exc).__name__, str(exc))
                return _judge(exc, "use")
            return Outcome(ACCEPTED)
    finally:
        os.chdir(cwd)


def unchanged_after_refusal(ep: EntryPoint, ctx: Any) -> str:
    """'' when the refused call left the pipeline as a fresh one; else what differs."""
    assert ep.pipeline_of is not None
    p = ep.pipeline_of(ctx)
    ref = ep.pipeline_of(ep.setup())
    try:
        if p.fingerprint() != ref.fingerprint():
            return "fingerprint changed"
        if p._options != ref._options:
            return f"options changed: {sorted(k for k in p._options if p._options[k] != ref._options.get(k))}"
        with time_limit(CALL_TIMEOUT_S):
            a, b = first_items(finish(p)), first_items(finish(ref))
    except (Exception, HangError) as exc:
        return f"pipeline broken after the refusal: {type(exc).__name__}: {exc}"
    return "" if a == b else "first items differ from a fresh pipeline's"


# ---------------------------------------------------------------------------------------------
# restore fuzzing: real checkpoints of small real pipelines
# ---------------------------------------------------------------------------------------------
SMALL = {"web": (14, 9), "code": (8,), "books": (5,)}
SRC = {"chunk_size": 6, "seed": 3, "shuffle_within_shard": True}
FULL = [("pack_sequences", {"max_length": 160, "num_bins": 3}), ("shuffle", {"buffer_size": 4, "seed": 2}),
        ("ensure_mixture", {}), ("batch", {"microbatch_size": 2})]


def _cfg(chain: list[Any], lanes: int, k: int | None, **src: Any) -> PipelineConfig:
    return PipelineConfig(
        chain,
        layout=SMALL,
        source_kwargs={**SRC, **src},
        options={"runner": "inline", "canonical_replicas": lanes, "flush_every_k_chunks": k},
    )


RESTORE_CONFIGS: dict[str, Callable[[], Any]] = {
    "map/3": lambda: build_pipeline("zephon_ref", _cfg([], 3, None)),
    "batch/1": lambda: build_pipeline("zephon_ref", _cfg([("batch", {"microbatch_size": 3})], 1, None)),
    "pack/1": lambda: build_pipeline(
        "zephon_ref", _cfg([("pack_sequences", {"max_length": 160, "num_bins": 3})], 1, 2)
    ),
    "shuffle-blocks/3": lambda: build_pipeline(
        "zephon_ref", _cfg([("shuffle", {"buffer_size": 5, "seed": 5})], 3, 2, shuffle_block_size=4)
    ),
    "full/3": lambda: build_pipeline("zephon_ref", _cfg(FULL, 3, 2)),
    "mixture-redistribute/1": lambda: build_pipeline(
        "zephon_ref",
        _cfg([("ensure_mixture", {"max_buffer_size": 12})], 1, 2, exhausted_policy="redistribute"),
    ),
    "demo/3": lambda: _demo(3),
}


def _demo(lanes: int) -> Any:
    from zephon_ref.demo import build_demo_pipeline

    return build_demo_pipeline(0, lanes)


def views(p: Any, limit: int) -> list[Any]:
    """At most ``limit`` item views (a stream longer than expected is cut, not waited for)."""
    out = []
    it = iter(p)
    try:
        for x in it:
            out.append(item_view(x))
            if len(out) >= limit:
                break
    finally:
        it.close()
    return out


@cache
def real_run(name: str) -> tuple[list[Any], list[dict[str, Any]]]:
    """The uninterrupted stream of config ``name`` and a checkpoint after every cut 0..n."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p = RESTORE_CONFIGS[name]()
        items, cks = [], [copy.deepcopy(p.checkpoint())]
        for x in p:
            items.append(item_view(x))
            cks.append(copy.deepcopy(p.checkpoint()))
    return items, cks


Path_ = tuple[Any, ...]


def paths(obj: Any, prefix: Path_ = ()) -> Iterator[Path_]:
    """Every path into a checkpoint (long lists: first and last element only)."""
    if isinstance(obj, dict):
        for k in obj:
            yield (*prefix, k)
            yield from paths(obj[k], (*prefix, k))
    elif isinstance(obj, (list, tuple)):
        idx = range(len(obj)) if len(obj) <= 3 else (0, len(obj) - 1)
        for i in idx:
            yield (*prefix, i)
            yield from paths(obj[i], (*prefix, i))


def get_at(obj: Any, path: Path_) -> Any:
    for k in path:
        obj = obj[k]
    return obj


def set_at(obj: Any, path: Path_, value: Any) -> Any:
    """Set (copying tuples on the way, so the result is a fresh tree); returns the root."""
    if not path:
        return value
    head, rest = path[0], path[1:]
    if isinstance(obj, tuple):
        lst = list(obj)
        lst[head] = set_at(lst[head], rest, value)
        return tuple(lst)
    obj[head] = set_at(obj[head], rest, value)
    return obj


_DROP = object()


def drop_at(obj: Any, path: Path_) -> Any:
    parent = get_at(obj, path[:-1])
    if isinstance(parent, dict):
        del parent[path[-1]]
        return obj
    lst = list(parent)
    del lst[path[-1]]
    return set_at(obj, path[:-1], type(parent)(lst) if isinstance(parent, tuple) else lst)


def norm_path(path: Path_) -> str:
    """A path with lane ids, chunk ids and list indices folded to ``*`` (report grouping).

    Inside an inflight chunk's components the meaning of an index is kept: ``name`` /
    ``ids`` for a component pair, ``dataset_id`` / ``shard_id`` / ``local_idx`` in a sample id.
    """
    out = []
    in_comps = len(path) > 3 and path[0] == "inflight" and path[3] == "components"
    for i, k in enumerate(path):
        if isinstance(k, int) and not isinstance(k, bool):
            if in_comps and i == 5:
                out.append(("name", "ids")[k] if k in (0, 1) else "*")
            elif in_comps and i == 7:
                out.append(("dataset_id", "shard_id", "local_idx")[k] if k in (0, 1, 2) else "*")
            else:
                out.append("*")
        else:
            out.append(str(k))
    return "/".join(out)


@dataclass(frozen=True)
class Mutation:
    kind: str
    path: Path_
    value: Any = None
    label: str = ""  # what the value means, for grouping ("v+1", "other checkpoint", ...)

    def group(self) -> str:
        return self.label or (repr(self.value)[:40] if self.value is not _DROP else "dropped")

    def describe(self) -> str:
        v = "" if self.value is _DROP else f" = {self.value!r}"
        return f"{self.kind} at {'/'.join(map(str, self.path))}{v}"

    def apply(self, ck: dict[str, Any]) -> dict[str, Any]:
        out = copy.deepcopy(ck)
        if self.value is _DROP:
            return drop_at(out, self.path)
        return set_at(out, self.path, copy.deepcopy(self.value))


RETYPES: tuple[Any, ...] = (None, "x", "1", 1.5, [], {}, True, (1,))
KNOB_STRINGS: tuple[Any, ...] = ("False", "0", "", "no", 0, 1)


def _ints_for(v: int) -> list[int]:
    return sorted({-1, v + 1, v - 1, 2**63, 10**9} - {v})


def mutations(ck: dict[str, Any], other: dict[str, Any] | None = None) -> list[Mutation]:
    """Every mutation of ``ck`` the fuzzer knows (deterministic order)."""
    out: list[Mutation] = []
    for path in paths(ck):
        v = get_at(ck, path)
        parent = get_at(ck, path[:-1])
        if isinstance(parent, (dict, list)):
            out.append(Mutation("drop", path, _DROP))
        for r in RETYPES:
            if type(r) is not type(v) or r != v:
                out.append(Mutation("retype", path, r))
        if isinstance(v, int) and not isinstance(v, bool):
            out += [Mutation("rerange", path, x, "v+1" if x == v + 1 else "v-1" if x == v - 1 else repr(x))
                    for x in _ints_for(v)]
        if isinstance(v, float):
            out += [Mutation("rerange", path, x) for x in (v + 0.25, -v - 1.0, float("nan"), float("inf"))]
        if isinstance(v, dict) and v:
            out.append(Mutation("empty", path, {}))
        if isinstance(v, (list, tuple)) and v:
            out.append(Mutation("empty", path, type(v)()))
        if isinstance(v, bool) or path[-1:] and path[-1] in ("shuffle_shards", "shuffle_within_shard") \
                or (len(path) >= 2 and path[-2] == "reshuffle_on_repeat"):
            out += [Mutation("knob-string", path, s) for s in KNOB_STRINGS]
        if other is not None:
            try:
                ov = get_at(other, path)
            except (KeyError, IndexError, TypeError):
                ov = _DROP
            if ov is not _DROP and ov != v:
                out.append(Mutation("swap-other", path, ov, "another checkpoint's value"))
    out += _lane_swaps(ck)
    out += _semantic(ck)
    return out


LANE_TABLES = ("inflight", "progress", "lane_next_cid", "lane_ws_state", "replay_cursors", "epoch_boundaries",
               "lane_emitted")


def _lane_swaps(ck: dict[str, Any]) -> list[Mutation]:
    out = []
    for t in LANE_TABLES:
        table = ck.get(t)
        if isinstance(table, dict) and len(table) >= 2:
            a, b = sorted(table)[:2]
            if table[a] != table[b]:
                swapped = {**table, a: table[b], b: table[a]}
                out.append(Mutation("swap-lanes", (t,), swapped, f"lanes {a} and {b} swapped"))
    return out


def _semantic(ck: dict[str, Any]) -> list[Mutation]:
    """Mutations of meaning: wrong sample ids, block sizes, seeds, weights, policies, top-level types."""
    out = [
        Mutation("semantic", ("rr_next_idx",), 5),
        Mutation("semantic", ("checkpoint_reload_count",), None),
        Mutation("semantic", ("epoch_boundaries",), 7),
        Mutation("semantic", ("replay_cursors",), {}),
    ]
    for lane, chunks in (ck.get("inflight") or {}).items():
        for cid, chunk in chunks.items():
            comps = chunk["components"]
            if comps and comps[0][1]:
                sid = comps[0][1][0]
                base = ("inflight", lane, cid, "components", 0, 1, 0)
                out += [Mutation("sample-id", base, [sid[0], sid[1], -1]),
                        Mutation("sample-id", base, [sid[0], 99, sid[2]]),
                        Mutation("sample-id", base, [7, sid[1], sid[2]]),
                        Mutation("sample-id", base, [sid[0], sid[1], 10**6])]
            break
    for lane, ws in (ck.get("lane_ws_state") or {}).items():
        base = ("lane_ws_state", lane)
        names = list(ws["component_order"])
        for n in names[:1]:
            out += [Mutation("lane-source", (*base, "cursor_block_sizes", n), x) for x in (-1, 0, 1)]
        out.append(Mutation("lane-source", (*base, "seed"), ws["seed"] + 1))
        w = dict(ws["weights"])
        if len(names) >= 2:
            w[names[0]], w[names[1]] = w[names[1]], w[names[0]]
            out.append(Mutation("lane-source", (*base, "weights"), w))
        out.append(Mutation("lane-source", (*base, "stop_after_passes"),
                            None if ws["stop_after_passes"] is not None else 2))
        out.append(Mutation("lane-source", (*base, "stop_after_passes"), 5))
        out.append(Mutation("lane-source", (*base, "max_repeats"), dict.fromkeys(names, 0)))
        out.append(Mutation("lane-source", (*base, "exhausted_policy"), dict.fromkeys(names, "stop")))
        out.append(Mutation("lane-source", (*base, "lane_assignment"),
                            "modulo" if ws["lane_assignment"] == "permute" else "permute"))
        out.append(Mutation("lane-source", (*base, "allocation_mode"), "legacy_fixed"))
        out.append(Mutation("lane-source", (*base, "knobs", "shuffle_within_shard"),
                            "False" if ws["knobs"]["shuffle_within_shard"] else "True"))
        out.append(Mutation("lane-source", (*base, "global_chunk_index"), ws["global_chunk_index"] + 1))
        break
    return out


RESTORE_REFUSED = "typed refusal"
RESTORE_IDENTICAL = "accepted, identical"


@dataclass(frozen=True)
class RestoreOutcome:
    kind: str  # RESTORE_REFUSED | RESTORE_IDENTICAL | failure kind
    detail: str = ""

    @property
    def failed(self) -> bool:
        return self.kind not in (RESTORE_REFUSED, RESTORE_IDENTICAL)


def restore_outcome(name: str, cut: int, mutated: Any, *, timeout: float = RESTORE_TIMEOUT_S,
                    preload: int | None = None) -> RestoreOutcome:
    """Restore ``mutated`` into a fresh pipeline of config ``name`` and judge it.

    With ``preload``, the pipeline first restores the real checkpoint taken after
    ``preload`` items, so a refusal must leave *that* pending restore in force.
    """
    full, cks = real_run(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        q = RESTORE_CONFIGS[name]()
        before = full
        if preload is not None:
            q.restore(copy.deepcopy(cks[preload]))
            before = full[preload:]
        try:
            with time_limit(timeout):
                q.restore(mutated)
        except (Exception, HangError) as exc:
            o = _judge(exc, "call")
            if o.kind != TYPED_CALL:
                return RestoreOutcome(f"{o.kind} at restore", f"{o.exc}: {o.message[:200]}")
            try:  # rule 6: the refused restore changed nothing
                with time_limit(timeout):
                    got = views(q, len(before) + 5)
            except (Exception, HangError) as exc2:
                return RestoreOutcome("BROKEN after refusal", f"{type(exc2).__name__}: {exc2}")
            if got != before:
                return RestoreOutcome("CHANGED by refused restore",
                                      f"{len(got)} items, not the {len(before)} it gave before the refusal")
            return RestoreOutcome(RESTORE_REFUSED, f"{o.exc}: {o.message[:120]}")
        want = full[cut:]
        try:
            with time_limit(timeout):
                got = views(q, len(want) + 5)
        except (Exception, HangError) as exc:
            o = _judge(exc, "use")
            if o.kind == TYPED_LATER:
                return RestoreOutcome("TYPED-LATER (accepted, then failed)", f"{o.exc}: {o.message[:200]}")
            return RestoreOutcome(f"{o.kind} after accepted restore", f"{o.exc}: {o.message[:200]}")
        if got != want:
            return RestoreOutcome("ACCEPTED, OUTPUT DIFFERS", _diff(want, got))
        return RestoreOutcome(RESTORE_IDENTICAL)


def _diff(want: list[Any], got: list[Any]) -> str:
    i = next((j for j, (a, b) in enumerate(zip(want, got, strict=False)) if a != b), min(len(want), len(got)))
    return f"expected {len(want)} items, received {len(got)}; first difference at item {i}"


# ---------------------------------------------------------------------------------------------
# isolation: deep edits of a checkpoint handed out
# ---------------------------------------------------------------------------------------------
def scramble(obj: Any) -> None:
    """Edit every mutable container inside ``obj`` in place (ints +1, strings extended, keys added)."""
    if isinstance(obj, dict):
        for k in list(obj):
            v = obj[k]
            if isinstance(v, bool):
                obj[k] = not v
            elif isinstance(v, int):
                obj[k] = v + 1
            elif isinstance(v, float):
                obj[k] = v + 0.5
            elif isinstance(v, str):
                obj[k] = v + "~"
            elif isinstance(v, (dict, list)):
                scramble(v)
        obj["__scrambled__"] = True
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            if isinstance(v, bool):
                obj[i] = not v
            elif isinstance(v, int):
                obj[i] = v + 1
            elif isinstance(v, (dict, list)):
                scramble(v)
        obj.reverse()
        obj.append("__scrambled__")


def clear_deep(obj: Any) -> None:
    """Empty every mutable container inside ``obj``, innermost first."""
    if isinstance(obj, dict):
        for v in obj.values():
            clear_deep(v)
        obj.clear()
    elif isinstance(obj, list):
        for v in obj:
            clear_deep(v)
        obj.clear()


EDITS: dict[str, Callable[[Any], None]] = {
    "scramble": scramble,
    "clear_deep": clear_deep,
    "clear replay_cursors": lambda ck: ck["replay_cursors"].clear(),
    "edit block_rng_snapshot": lambda ck: [
        scramble(cs["block_rng_snapshot"])
        for ws in ck["lane_ws_state"].values()
        for cs in ws["cursor_states"].values()
        if "block_rng_snapshot" in cs
    ],
    "clear inflight lists": lambda ck: [
        comp[1].clear()
        for chunks in ck["inflight"].values()
        for ch in chunks.values()
        for comp in ch["components"]
    ],
}


# ---------------------------------------------------------------------------------------------
# the report
# ---------------------------------------------------------------------------------------------
@dataclass
class Tally:
    counts: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    failures: dict[tuple[str, ...], str] = field(default_factory=dict)
    also: dict[tuple[str, ...], Counter[str]] = field(default_factory=lambda: defaultdict(Counter))

    def add(self, row: str, kind: str, key: tuple[str, ...] | None = None, repro: str = "",
            variant: str = "") -> None:
        self.counts[row][kind] += 1
        if key is not None:
            self.failures.setdefault(key, repro)
            self.also[key][variant] += 1

    def lines(self) -> list[str]:
        out = []
        for key, repro in self.failures.items():
            vs = self.also[key]
            more = f"   [{sum(vs.values())} cases; variants: {', '.join(sorted(vs))[:300]}]" if vs else ""
            out.append(repro + more)
        return out


def _corpus(ep: EntryPoint, n: int) -> list[Any]:
    """A deterministic sample of bad values for ``ep`` (the fixed specials first, then draws)."""
    import random

    from hypothesis.errors import NonInteractiveExampleWarning

    specials = [v for v in SPECIAL_VALUES if safe_path_value(v) or not ep.path_like]
    if ep.arg in CALLABLE_ARGS:
        specials += WRONG_CALLABLE_VALUES
    if ep.int_cap is not None:
        specials = [v for v in specials
                    if not (isinstance(v, int) and not isinstance(v, bool) and abs(v) > ep.int_cap)]
    rnd = random.Random(f"{ep.name}/{ep.arg}")
    extra = []
    strat = ep.values()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NonInteractiveExampleWarning)
        state = random.getstate()
        random.seed(rnd.random())
        try:
            for _ in range(max(0, n - len(specials))):
                extra.append(strat.example())
        finally:
            random.setstate(state)
    return specials + extra


def report_bad_values(n_per_arg: int, out: Callable[[str], None] = print) -> Tally:
    tally = Tally()
    accepted: dict[str, Counter[str]] = defaultdict(Counter)
    for ep in ENTRY_POINTS:
        for v in _corpus(ep, n_per_arg):
            o = classify(ep, v)
            row = ep.name
            if o.kind == ACCEPTED:
                accepted[ep.label][type(v).__name__] += 1
            if o.failed:
                key = (ep.name, ep.arg, o.kind, o.where, o.exc)
                tally.add(
                    row, o.kind, key, f"{ep.name}({ep.arg}={_short(v)}) -> {o.line()}", type(v).__name__
                )
            else:
                tally.add(row, o.kind)
    out("\n== bad values: outcomes per entry point ==")
    kinds = [TYPED_CALL, TYPED_LATER, ACCEPTED, USER_RAISED, *FAILURES]
    out(f"{'entry point':32} {'tried':>6} " + " ".join(f"{k[:12]:>12}" for k in kinds))
    for row, c in tally.counts.items():
        out(f"{row:32} {sum(c.values()):>6} " + " ".join(f"{c.get(k, 0):>12}" for k in kinds))
    out(f"\n== bad values: {len(tally.failures)} distinct failures ==")
    for line in tally.lines():
        out("  " + line)
    out("\n== bad values: accepted (first items came out), by argument and value type (not failures) ==")
    for label, c in accepted.items():
        out(f"  {label:52} " + ", ".join(f"{t}:{n}" for t, n in sorted(c.items())))
    return tally


def _short(v: Any) -> str:
    if callable(v) and hasattr(v, "__qualname__"):
        return v.__qualname__ if not isinstance(v, type) else v.__name__
    r = repr(v)
    return r if len(r) <= 60 else r[:57] + "..."


def _msg_shape(msg: str) -> str:
    """A failure message with numbers and quoted values folded (dedupe key)."""
    import re

    s = re.sub(r"'[^']*'|\"[^\"]*\"", "'…'", msg)
    s = re.sub(r"-?\d+(\.\d+)?(e[-+]?\d+)?", "N", s)
    return s[:80]


def report_restore(configs: list[str], cuts_per_config: int, out: Callable[[str], None] = print) -> Tally:
    tally = Tally()
    for name in configs:
        full, cks = real_run(name)
        n = len(cks)
        cuts = sorted({1, n // 2, n - 2} if cuts_per_config >= 3 else {n // 2})
        for cut in cuts:
            if not 0 <= cut < n:
                continue
            other = cks[(cut + 1) % n]
            seen: set[tuple[str, str, str]] = set()
            for m in mutations(cks[cut], other):
                key = (m.kind, norm_path(m.path), m.group())
                if key in seen:
                    continue
                seen.add(key)
                o = restore_outcome(name, cut, m.apply(cks[cut]))
                if o.failed:
                    fkey = (m.kind, norm_path(m.path), o.kind, o.detail.split(":")[0])
                    tally.add(
                        m.kind,
                        o.kind,
                        fkey,
                        f"[{name} cut {cut}] {m.describe()} -> {o.kind}: {o.detail}",
                        m.group(),
                    )
                else:
                    tally.add(m.kind, o.kind)
    out("\n== restore fuzzer: outcomes per mutation kind ==")
    kinds = sorted({k for c in tally.counts.values() for k in c})
    for row, c in tally.counts.items():
        out(f"{row:14} tried {sum(c.values()):>5}: " + ", ".join(f"{k}={c[k]}" for k in kinds if c.get(k)))
    out(f"\n== restore fuzzer: {len(tally.failures)} distinct failures (kind, path, outcome) ==")
    for line in tally.lines():
        out("  " + line)
    return tally


def main(argv: list[str]) -> int:
    """``--report``: bad values (~5 min at 120 values per argument) and the restore sweep
    (~20 min for every config at one cut; ``--cuts 3`` takes three cuts per config)."""
    if "--report" not in argv:
        print("usage: python -m properties.fuzz --report [--per-arg N] [--restore-configs a,b] [--cuts 1|3] "
              "[--no-bad-values] [--no-restore]")
        return 2
    per_arg = int(argv[argv.index("--per-arg") + 1]) if "--per-arg" in argv else 120
    quick = "--quick" in argv or ("--cuts" not in argv) or argv[argv.index("--cuts") + 1] == "1"
    names = (argv[argv.index("--restore-configs") + 1].split(",") if "--restore-configs" in argv
             else list(RESTORE_CONFIGS))
    home = os.getcwd()
    if "--no-bad-values" not in argv:
        report_bad_values(per_arg)
    os.chdir(home)
    if "--no-restore" not in argv:
        report_restore(names, 1 if quick else 3)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

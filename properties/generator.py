"""One generator of operator calls, derived from the API: every builder method, keyword and value class.

Theory of operation
-------------------
:func:`api` walks the public methods of :class:`zephon_ref.pipeline.Pipeline` and, for each,
its signature (:func:`inspect.signature`) and the frozen config that declares its knobs: every
config class in a module of :mod:`zephon_ref.ops` that names its builder method (a ``BUILDER``
class attribute) and declares fields with :func:`zephon_ref.ops.knobs.knob`.  A method's knobs
are its named parameters plus, when it takes ``**kwargs``, every declared field of its config;
``placement`` / ``parallelism`` take their domains from :data:`zephon_ref.ops.knobs.EXECUTION`
(or the config's own ``EXECUTION`` class attribute, where the method takes them otherwise).
So an operator added later is drawn as soon as its config declares its knobs, with nothing to
edit here.

A public method with no config and not in :data:`NOT_DATA` (execution settings, runners,
checkpoints, introspection: each with its reason), and a named parameter with no declared
domain, are listed by :func:`undeclared`; the coverage test fails naming them.

:func:`op_calls` draws ``(method, kwargs)``: per knob, omitted (the default) or a value of one of
its domain's classes (:meth:`Domain.classes`), all classes equally likely.  Ints are drawn small
(:data:`SPAN`); a str, a callable or an opaque value comes from :data:`VALUES` (the values that
mean something to the suite: a field the records hold, a length function, ...), and a class
without a value there is never drawn, which the coverage table shows.  A drawn call the builder
refuses (a rule between knobs) is redrawn a few times, then falls back to :data:`REQUIRED`.  A method
the builder takes only after another (``map_batch`` after ``batch``) is checked after the call
:data:`PRECEDED_BY` names.

:class:`Coverage` counts, per (method, knob, value class), the calls that drew it; the
conformance command prints it (``--coverage``) and writes it in ``--json``.

What may not live here: running pipelines, checking results (the rows and properties do that).
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import pkgutil
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

from properties import hf_tokenizer as _hf
from zephon_ref.ops import knobs as K

__all__ = ["NOT_DATA", "NOT_YET_DRAWN_METHODS", "NOT_YET_DRAWN_ROWS", "PRECEDED_BY", "REQUIRED", "VALUES",
           "Coverage", "Knob", "Method", "api", "config_classes", "drawn_methods",
           "op_calls", "undeclared"]

#: public builder methods that are not data operators (their settings never reach the data path,
#: or they read / save state): drawn elsewhere, or not drawable
NOT_DATA: Mapping[str, str] = {
    "add_op": "a user operator object: its own knobs are its own (drawn through its builder method)",
    "options": "execution and world settings (properties.strategies.execution_settings, topologies)",
    "prefetch": "an execution setting (prefetch depth, parallelism)",
    "fetch": "an execution setting (fetch parallelism)",
    "fetch_parallelism": "an execution setting (fetch parallelism)",
    "materialize": "an execution hint (placement)",
    "enable_observability": "diagnostics only",
    "dropped": "introspection (the run's dropped-data counts)",
    "checkpoint": "reads state", "local_state": "reads state", "restore": "restores state",
    "save_checkpoint": "saves state (the durable row)", "load_checkpoint": "loads state (the durable row)",
    "engine": "a runner's handle", "for_worker": "a topology (the remap rows)",
    "to_torch_dataset": "the torch path", "to_indexable_torch_dataset": "the indexable torch path",
    "indexed_view": "the indexable path's semantics (introspection)", "close": "a runner's lifecycle",
    "fingerprint": "introspection", "explain": "introspection", "validate": "introspection",
    "preflight_tokenizers": "introspection", "inflight_summary": "introspection",
    "metrics_snapshot": "introspection", "fetch_timing_snapshot": "introspection",
    "prefetch_timing_snapshot": "introspection", "mtp_queue_stats": "introspection",
    "runtime_options": "introspection", "world": "introspection", "is_indexable": "introspection",
    "preserves_cursor_order": "introspection",
}

#: data methods the suite does not draw, each with its reason: their configs declare their knobs,
#: but op_units' data shapes cannot feed them here.  Left out of the end-to-end chains and the
#: operators row; tests/properties/test_generator_coverage.py requires each to stay undrawn (a
#: stale entry fails) and every other method drawn.  Issue 32: this table must stay empty where the
#: extras are installed (CI installs them).
NOT_YET_DRAWN_METHODS: Mapping[str, str] = {} if _hf.AVAILABLE else {
    "tokenize_chat": "needs a fast Hugging Face tokenizer: the hf extra (transformers, tokenizers) is not "
                     "installed here (pip install -e '.[hf]')",
}
#: (method, knob, value class) rows no VALUES entry reaches yet, each with its reason (none today)
NOT_YET_DRAWN_ROWS: Mapping[tuple[str, str, str], str] = {}


def drawn_methods() -> list[str]:
    """The data methods the suite draws: :func:`api` less :data:`NOT_YET_DRAWN_METHODS`."""
    return sorted(m for m in api() if m not in NOT_YET_DRAWN_METHODS)


#: the upper end of an int knob's "above minimum" class: minimum + SPAN (small data, many examples)
SPAN: Mapping[str, int] = {"max_length": 40, "buffer_size": 8, "max_buffer_size": 16, "max_batch": 8}
DEFAULT_SPAN = 4


def _identity(payload: Any) -> Any:
    return payload


def _drop_odd(payload: Any) -> Any:
    """Drop a record whose token count is odd (None: a tombstone under drop_none)."""
    ids = payload.get("input_ids") if isinstance(payload, Mapping) else None
    return None if ids is not None and len(ids) % 2 == 1 else payload


def _n_tokens(rec: Any) -> int:
    ids = rec.payload.get("input_ids", ()) if isinstance(rec.payload, Mapping) else ()
    return len(ids)


def _weight(rec: Any) -> float:
    return float(_n_tokens(rec)) + 1.0


def _pack_tuple(entries: list[Any]) -> Any:
    return {"n": len(entries), "entries": list(entries)}


def _hold_init() -> Any:
    return []


def _pass_push(state: list[Any], recs: list[Any]) -> tuple[list[Any], list[Any]]:
    return state, list(recs)


def _fan_out_push(state: list[Any], recs: list[Any]) -> tuple[list[Any], list[Any]]:
    """A one-to-many map: each record with two or more tokens becomes two siblings of its offset, each
    with its half of the tokens and of every list field of their length (a ``mask``, ``labels``)."""
    from zephon_ref.lineage import spawn_child
    from zephon_ref.types import SampleRecord

    out: list[Any] = []
    for r in recs:
        ids = r.payload.get("input_ids") if isinstance(r.payload, Mapping) and not r.meta.tombstone else None
        if not ids or len(ids) < 2:
            out.append(r)
            continue
        h = len(ids) // 2
        aligned = {k: v for k, v in r.payload.items() if isinstance(v, list) and len(v) == len(ids)}
        for i, (lo, hi) in enumerate(((0, h), (h, len(ids)))):
            out.append(SampleRecord(spawn_child(r.meta, i, is_last_child=i == 1),
                                    {"input_ids": list(ids[lo:hi]), "mask": [1] * (hi - lo),
                                     **{k: list(v[lo:hi]) for k, v in aligned.items() if k != "input_ids"}}))
    return state, out


def _hold_flush(state: list[Any]) -> list[Any]:
    return list(state)


def _hold_full(state: list[Any]) -> bool:
    return len(state) >= 3


def _pass_records(recs: list[Any]) -> list[Any]:
    return list(recs)


def _batch_identity(batch: Any) -> Any:
    return batch


def _drop_odd_batch(batch: Any) -> Any:
    """Drop a micro-batch whose first record sits at an odd chunk offset (None: tombstones under
    drop_none, else the batch is kept)."""
    return None if batch.records[0].meta.chunk_offset % 2 == 1 else batch


_drop_odd_batch.drops_batches = True  # type: ignore[attr-defined]  # properties.lineage.discard_reason


def _tag_batch(batch: Any) -> Any:
    """A new SampleBatch: every mapping payload gains the batch's size (metadata kept).  Built with the
    batch's own classes, so zephon 0.2.0 (the oracle row's second opinion) takes it too."""
    n = len(batch.records)
    return type(batch)(tuple(type(r)(r.meta, {**r.payload, "batch_n": n})
                             if isinstance(r.payload, Mapping) else r for r in batch.records))


_tag_batch.builds_new_batch = True  # type: ignore[attr-defined]  # properties.adapters (zephon declines it)


def _crc_like_tokenizer() -> Any:
    from zephon_ref.ops.tokenize import HashTokenizer

    return HashTokenizer(vocab_size=997, offset=10)


def _maskless_tokenizer() -> Any:
    """The built-in tokenizer's words, but a call that returns ``input_ids`` only (an HF-style
    tokenizer may give no ``attention_mask``): tokenize then builds the mask itself."""
    from zephon_ref.ops.tokenize import HashTokenizer

    class MasklessTokenizer(HashTokenizer):
        def __call__(self, texts: Any, **kw: Any) -> dict[str, Any]:
            return {"input_ids": super().__call__(texts, **kw)["input_ids"]}

    return MasklessTokenizer(vocab_size=997, offset=10)


#: values for classes whose members cannot be enumerated: (method, knob) or knob -> class -> values.
#: Values only (which field the records hold, a length function, a map): never which knobs exist.
VALUES: Mapping[Any, Mapping[str, Sequence[Any]]] = {
    "placement": {"text": ("auto", "local")},
    ("tokenize", "field"): {"text": ("text",)},
    # built by _resolve (a fresh tokenizer object each draw)
    ("tokenize", "tokenizer"): {"callable": ("hash997", "hash997_maskless")},
    ("pack_sequences", "tokens_field"): {"text": ("auto", "input_ids")},
    ("pack_flat", "tokens_field"): {"text": ("auto", "input_ids")},
    # a plain mapping (zephon takes one too; the builder makes the DomainGroups) over the drawn source's
    # component names (ctx["components"]): all in one group, the first alone (the rest ungrouped), two groups
    **{(m, "groups"): {"DomainGroups": ("groups:all", "groups:first", "groups:two")}
       for m in ("pack_sequences", "pack_flat")},
    ("pack_sequences", "length_fn"): {"callable": (_n_tokens,)},
    ("pack_sequences", "pack_payloads"): {"callable": (_pack_tuple,)},
    ("ensure_mixture", "weight_by"): {"text": ("input_ids",), "callable": (_weight,)},
    ("ensure_mixture", "mixture"): {"a mapping component -> weight": ("components",)},
    ("map_transform", "transform_fn"): {"callable": (_identity, _drop_odd)},
    ("stateful_transform", "name"): {"text": ("hold",)},
    ("stateful_transform", "init_state"): {"callable": (_hold_init,)},
    ("stateful_transform", "push"): {"callable": (_pass_push, _fan_out_push)},
    ("stateful_transform", "flush"): {"callable": (_hold_flush,)},
    ("stateful_transform", "should_flush"): {"callable": (_hold_full,)},
    ("stateful_transform", "transform"): {"callable": (_pass_records,)},
    ("map_batch", "transform_fn"): {"callable": (_drop_odd_batch, _batch_identity, _tag_batch)},
    # decode_text over op_units' bytes payloads (properties.op_units.bytes_payloads reads these knobs)
    ("decode_text", "fields"): {"a tuple of field names": (("text",), ("text", "raw"), ("title",))},
    ("decode_text", "encoding"): {"text": ("utf-8", "latin-1", "ascii")},
    ("decode_text", "errors"): {"text": ("strict", "replace", "ignore")},
    # the chat operators over op_units' chat payloads (properties.op_units.chat_payloads)
    ("expand_chat", "field"): {"text": ("messages", "chat.messages")},
    ("tokenize_chat", "tokenizer"): {"a fast Hugging Face tokenizer": tuple(f"tiny_hf:{k}"
                                                                             for k in _hf.KINDS)},
    ("tokenize_chat", "field"): {"text": ("messages", "chat.messages")},
    ("tokenize_chat", "chat_template"): {"text": (_hf.TEMPLATE, _hf.TAGGED_TEMPLATE)},
    ("tokenize_chat", "chat_template_kwargs"): {"a mapping of template arguments": ("date_kwargs",)},
    ("tokenize_chat", "tools_field"): {"text": ("tools", "meta.tools")},
    ("tokenize_chat", "enable_thinking_field"): {"text": ("enable_thinking", "meta.thinking")},
    ("tokenize_chat", "mask_field_out"): {"text": ("loss_mask", "labels_mask")},
}

#: the keywords a method cannot go without, used when every drawn call was refused
REQUIRED: Mapping[str, Mapping[str, Any]] = {
    "pack_sequences": {"max_length": 32, "num_bins": 2},
    "pack_flat": {"max_length": 32, "num_bins": 2, "pad_token_id": 0},
    "tokenize": {"field": "text"},
    "batch": {"microbatch_size": 2},
    "map_transform": {"transform_fn": _identity},
    "stateful_transform": {"name": "hold", "init_state": _hold_init, "push": _pass_push},
    "shuffle": {}, "ensure_mixture": {},
    "map_batch": {"transform_fn": _batch_identity},
    "tokenize_chat": {"tokenizer": "tiny_hf:plain"},  # a symbolic value of VALUES (see _resolve)
}


@dataclass(frozen=True, slots=True)
class Knob:
    method: str
    name: str
    domain: K.Domain
    required: bool
    default: Any = None


@dataclass(frozen=True, slots=True)
class Method:
    name: str
    config: type | None
    knobs: tuple[Knob, ...]
    missing: tuple[str, ...] = ()  # named parameters with no declared domain


def config_classes() -> dict[str, type]:
    """``{builder method: config class}`` of every module of :mod:`zephon_ref.ops` (sorted by module)."""
    import zephon_ref.ops as ops_pkg

    out: dict[str, type] = {}
    for info in sorted(pkgutil.iter_modules(ops_pkg.__path__), key=lambda i: i.name):
        mod = importlib.import_module(f"zephon_ref.ops.{info.name}")
        for _name, obj in sorted(vars(mod).items()):
            builder = getattr(obj, "BUILDER", None)
            names = (builder,) if isinstance(builder, str) else builder  # one method, or several
            if (isinstance(obj, type) and dataclasses.is_dataclass(obj) and obj.__module__ == mod.__name__
                    and isinstance(names, tuple) and all(isinstance(n, str) for n in names)
                    and K.domains(obj)):
                for name in names:
                    out.setdefault(name, obj)
    return out


def _public_methods(cls: type) -> list[str]:
    return sorted(n for n, v in inspect.getmembers(cls) if not n.startswith("_") and callable(v))


def api() -> dict[str, Method]:
    """Every data method of the Pipeline builder with its knobs (see the module docstring)."""
    from zephon_ref.pipeline import Pipeline

    configs = config_classes()
    out: dict[str, Method] = {}
    for name in _public_methods(Pipeline):
        config = configs.get(name)
        if config is None:
            continue
        doms = K.domains(config)
        # domains of call parameters the config does not store (normalised away, or loading
        # hints): the config's CALL_KNOBS, and its EXECUTION where it takes those otherwise
        own_exec: Mapping[str, K.Domain] = {**getattr(config, "CALL_KNOBS", {}),
                                            **getattr(config, "EXECUTION", {})}
        sig = inspect.signature(getattr(Pipeline, name))
        knobs: list[Knob] = []
        missing: list[str] = []
        var_kw = False
        for p in list(sig.parameters.values())[1:]:
            if p.kind is inspect.Parameter.VAR_KEYWORD:
                var_kw = True
                continue
            dom = doms.get(p.name) or own_exec.get(p.name) or K.EXECUTION.get(p.name)
            if dom is None:
                missing.append(p.name)
                continue
            knobs.append(Knob(name, p.name, dom, p.default is inspect.Parameter.empty,
                              None if p.default is inspect.Parameter.empty else p.default))
        if var_kw:
            fields = {f.name: f for f in dataclasses.fields(config)}
            for fname, dom in doms.items():
                if fname not in sig.parameters:
                    f = fields[fname]
                    req = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
                    knobs.append(Knob(name, fname, dom, req, None if req else f.default))
        out[name] = Method(name, config, tuple(knobs), tuple(missing))
    return out


def undeclared() -> list[str]:
    """Public builder methods with neither a config nor a reason in :data:`NOT_DATA`, and named
    parameters of data methods with no declared domain: what the suite cannot draw."""
    from zephon_ref.pipeline import Pipeline

    methods = api()
    out = [f"Pipeline.{n}: no config declares its knobs (knob() fields and BUILDER = {n!r}), and it is "
           f"not in properties.generator.NOT_DATA" for n in _public_methods(Pipeline)
           if n not in methods and n not in NOT_DATA]
    out += [f"Pipeline.{m.name}({p}=...): no declared domain" for m in methods.values() for p in m.missing]
    return out


# -- values of a class ------------------------------------------------------------------------------


def _member_of(dom: K.Domain, cls: str) -> K.Domain:
    if isinstance(dom, K.OneOf):
        for m in dom.members:
            if cls in m.classes():
                return _member_of(m, cls)
    return dom


def class_values(knob: Knob, cls: str) -> st.SearchStrategy[Any] | None:
    """A strategy for the values of ``knob`` in value class ``cls`` (None: none known)."""
    dom = _member_of(knob.domain, cls)
    if cls == "None":
        return st.none()
    if isinstance(dom, K.Choice):
        return st.sampled_from([v for v in dom.values if repr(v) == cls])
    if isinstance(dom, K.Bool):
        return st.just(cls == "True")
    if isinstance(dom, K.Int):
        if cls == "minimum":
            return st.just(dom.minimum)
        top = dom.minimum + SPAN.get(knob.name, DEFAULT_SPAN)
        if dom.maximum is not None:
            top = min(top, dom.maximum)
        return st.integers(dom.minimum + 1, top) if top > dom.minimum else None
    if isinstance(dom, K.Float):
        if cls == "minimum":
            return st.just(dom.minimum)
        if cls == "maximum":
            return st.just(dom.maximum)
        lo = dom.minimum
        hi = dom.maximum
        if lo is not None and hi is not None:
            return st.sampled_from([lo + (hi - lo) * f for f in (0.25, 0.5, 0.8)])
        if lo is not None:
            return st.sampled_from([lo + d for d in (0.25, 1.0, 2.0)])
        if hi is not None:
            return st.sampled_from([hi - d for d in (0.25, 1.0, 2.0)])
        return st.sampled_from([0.5, 1.0, 2.0])
    table = VALUES.get((knob.method, knob.name)) or VALUES.get(knob.name) or {}
    vals = table.get(cls)
    return st.sampled_from(list(vals)) if vals else None


def drawable_classes(knob: Knob) -> list[str]:
    return [c for c in knob.domain.classes() if class_values(knob, c) is not None]


# -- coverage ---------------------------------------------------------------------------------------


@dataclass
class Coverage:
    """How many drawn calls passed each (method, knob, value class); every class of every data
    method's knobs is a row, so a class never drawn shows a 0."""

    counts: dict[tuple[str, str, str], int] = field(default_factory=dict)
    calls: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for m in api().values():
            self.calls.setdefault(m.name, 0)
            for k in m.knobs:
                for c in k.domain.classes():
                    self.counts.setdefault((m.name, k.name, c), 0)

    def add(self, method: str, kwargs: Mapping[str, Any], knobs: Iterable[Knob]) -> None:
        self.calls[method] = self.calls.get(method, 0) + 1
        for k in knobs:
            if k.name in kwargs:
                c = k.domain.classify(kwargs[k.name])
                self.counts[(method, k.name, c)] = self.counts.get((method, k.name, c), 0) + 1

    def merge(self, other: Coverage) -> None:
        for key, n in other.counts.items():
            self.counts[key] = self.counts.get(key, 0) + n
        for name, n in other.calls.items():
            self.calls[name] = self.calls.get(name, 0) + n

    def zeros(self) -> list[tuple[str, str, str]]:
        return sorted(k for k, n in self.counts.items() if n == 0)

    def rows(self) -> list[dict[str, Any]]:
        return [{"method": m, "knob": k, "class": c, "examples": n}
                for (m, k, c), n in sorted(self.counts.items())]

    def format(self) -> str:
        lines = [f"{'method':<20} {'knob':<26} {'value class':<34} {'examples':>8}", "-" * 92]
        for (m, k, c), n in sorted(self.counts.items()):
            lines.append(f"{m:<20} {k:<26} {c:<34} {n:>8}")
        z = self.zeros()
        lines.append(f"{len(self.counts)} (method, knob, value class) rows, {len(z)} never drawn; calls: "
                     + ", ".join(f"{m} {n}" for m, n in sorted(self.calls.items())))
        return "\n".join(lines)


_SEEN: list[Coverage] = []


def seen() -> Coverage:
    """The coverage of every call :func:`op_call` drew in this process (the conformance table)."""
    if not _SEEN:
        _SEEN.append(Coverage())
    return _SEEN[0]


def reset_seen() -> None:
    _SEEN.clear()


# -- drawing ----------------------------------------------------------------------------------------

Validate = Callable[[str, dict[str, Any]], bool]


def _resolve(method: str, name: str, value: Any, ctx: Mapping[str, Any]) -> Any:
    """A symbolic value of :data:`VALUES` made concrete for this draw."""
    if value == "hash997" and name == "tokenizer":
        return _crc_like_tokenizer()
    if value == "hash997_maskless" and name == "tokenizer":
        return _maskless_tokenizer()
    if isinstance(value, str) and value.startswith("tiny_hf:") and name == "tokenizer":
        return _hf.tiny_tokenizer(value.split(":", 1)[1])
    if value == "date_kwargs" and name == "chat_template_kwargs":
        return {"date_string": "2026-01-01"}  # a fresh mapping per call (the template ignores it)
    if isinstance(value, str) and value.startswith("groups:") and name == "groups":
        names = list(ctx.get("components", ("web",)))
        if value == "groups:all":
            return {"g0": names}
        if value == "groups:first" or len(names) == 1:
            return {"g0": names[:1]}
        return {"g0": names[:1], "g1": names[1:]}
    if value == "components" and name == "mixture":
        names = list(ctx.get("components", ("web",)))
        return {n: float(i + 1) for i, n in enumerate(names)}
    return value


@st.composite
def op_call(draw: Any, method: Method, *, fixed: Mapping[str, Any] | None = None,
            ctx: Mapping[str, Any] | None = None, validate: Validate | None = None,
            coverage: Coverage | None = None, exclude: Mapping[str, Iterable[str]] | None = None,
            focus: tuple[str, str] | None = None, mode_aware: bool = False) -> tuple[str, dict[str, Any]]:
    """One call of ``method`` (``fixed``: knobs pinned by the caller; ``exclude``: knob -> value
    classes not drawn here).

    One (knob, class) row is in focus, drawn uniformly over all of the method's rows, so a class
    that few combinations allow (``num_bins=None``: wrap only) is still drawn; every other knob is
    omitted (its default) or drawn from one of its classes.  A call ``validate`` refuses (a rule
    between knobs) is tried over the method's :data:`REQUIRED` keywords, then with one drawn knob
    less (the last drawn first); the other knobs are redrawn up to 3 times, then one more knob's
    class is searched for (the focus ``num_bins=None`` finds ``algorithm="wrap"``), then the focus
    goes and :data:`REQUIRED` is the call.

    ``mode_aware`` (the operator row's draws): that search also tries :data:`REQUIRED` less one of
    its keywords (a mode may refuse one: best_fit_wrap refuses num_bins=2), and the accepted call's
    knobs left at a None default are drawn once more (:func:`_complete_mode`), so a knob only some
    modes take is drawn in most calls of its mode.  Off, the draws are those of stop 38 (the
    end-to-end chains keep them: see properties.strategies.END_TO_END_RARELY_DRAWN)."""
    ctx = ctx or {}
    pins = dict(fixed or {})
    ex = {k: tuple(v) for k, v in (exclude or {}).items()}
    rows = {k.name: [c for c in drawable_classes(k) if c not in ex.get(k.name, ())]
            for k in method.knobs if k.name not in pins}
    flat = [(k, c) for k, cs in rows.items() for c in cs]
    if focus is None or focus not in flat:
        focus = draw(st.sampled_from(flat)) if flat else None
    required = {k: _resolve(method.name, k, v, ctx) for k, v in REQUIRED.get(method.name, {}).items()}

    def value(name: str, cls: str) -> Any:
        strat = class_values(next(k for k in method.knobs if k.name == name), cls)
        assert strat is not None
        return _resolve(method.name, name, draw(strat), ctx)

    if focus is not None:
        pins[focus[0]] = value(*focus)
    kwargs: dict[str, Any] | None = None
    for _attempt in range(3):
        drawn: dict[str, Any] = {}
        for k in method.knobs:
            classes = rows.get(k.name, [])
            if k.name in pins or not classes:
                continue
            if not (k.required or _too_big(k)) and not draw(st.booleans()):
                continue  # the default
            drawn[k.name] = value(k.name, draw(st.sampled_from(classes)))
        kwargs = _accepted(method.name, drawn, pins, required, validate)
        if kwargs is not None:
            break
    if kwargs is None and validate is not None:
        # the focus may need another knob's class (num_bins=None needs algorithm="wrap"), and a mode
        # where one of REQUIRED's keywords is refused (candidate_pool_size needs best_fit_wrap, which
        # refuses REQUIRED's num_bins=2): one more knob, over REQUIRED less at most one of its keywords
        bases = [{}, required, *({n: v for n, v in required.items() if n != drop}
                                 for drop in (required if mode_aware else ()))]
        for k in method.knobs:
            for cls in rows.get(k.name, []) if k.name not in pins else []:
                kw = {**pins, k.name: value(k.name, cls)}
                kwargs = next(({**base, **kw} for base in bases if validate(method.name, {**base, **kw})),
                              None)
                if kwargs is not None:
                    break
            if kwargs is not None:
                break
    if kwargs is None:
        kwargs = {**required, **dict(fixed or {})}
    elif validate is not None and mode_aware:
        kwargs = _complete_mode(draw, method, kwargs, rows, value, validate)
    for cov in (coverage, seen()):
        if cov is not None:
            cov.add(method.name, kwargs, method.knobs)
    return method.name, kwargs


def _complete_mode(draw: Any, method: Method, kwargs: dict[str, Any], rows: Mapping[str, list[str]],
                   value: Callable[[str, str], Any], validate: Validate) -> dict[str, Any]:
    """The accepted call with each knob it leaves at a None default drawn once more (half the time,
    kept when ``validate`` takes it): a knob only some modes take (candidate_pool_size under
    best_fit_wrap, groups under homogeneity="group") is then drawn in most calls of its mode, not
    only when the first draw happened to pick the mode too."""
    for k in method.knobs:
        classes = [c for c in rows.get(k.name, []) if c != "None"]
        if k.name in kwargs or k.default is not None or not classes or not draw(st.booleans()):
            continue
        kw = {**kwargs, k.name: value(k.name, draw(st.sampled_from(classes)))}
        if validate(method.name, kw):
            kwargs = kw
    return kwargs


def _too_big(k: Knob) -> bool:
    """An int knob whose default is beyond its drawn span (``buffer_size=1024``): always drawn, so
    the small data of a property reaches what the knob decides (a block, a full buffer)."""
    d = k.default
    if not isinstance(d, int) or isinstance(d, bool) or not isinstance(k.domain, (K.Int, K.OneOf)):
        return False
    lo = k.domain.minimum if isinstance(k.domain, K.Int) else 0
    return d > lo + SPAN.get(k.name, DEFAULT_SPAN)


def _accepted(method: str, drawn: Mapping[str, Any], pins: Mapping[str, Any], required: Mapping[str, Any],
              validate: Validate | None) -> dict[str, Any] | None:
    """The first call ``validate`` takes: ``drawn`` + ``pins``, over ``required``, then with one drawn
    knob less (the last drawn first); None when none is taken."""
    first = {**drawn, **pins}
    if validate is None or validate(method, first):
        return first
    tries = [{**required, **drawn, **pins}]
    for victim in reversed(list(drawn)):
        rest = {k: v for k, v in drawn.items() if k != victim}
        tries += [{**rest, **pins}, {**required, **rest, **pins}]
    for kw in tries:
        if validate(method, kw):
            return kw
    return None


#: the call a method needs in front of it on the builder (it refuses to start a chain): checked after it
PRECEDED_BY: Mapping[str, tuple[str, Mapping[str, Any]]] = {
    "map_batch": ("batch", {"microbatch_size": 2}),
}


def refused_by_builder(make: Callable[[], Any]) -> Validate:
    """A validator: the call is accepted when the builder ``make()`` returns takes it (after the call
    :data:`PRECEDED_BY` names for it)."""
    from zephon_ref.errors import ZephonRefError

    def ok(method: str, kwargs: dict[str, Any]) -> bool:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # a probe's warnings (a deprecated knob) are not the run's
                builder = make()
                if method in PRECEDED_BY:
                    before, before_kw = PRECEDED_BY[method]
                    builder = getattr(builder, before)(**before_kw)
                getattr(builder, method)(**kwargs)
        except (ZephonRefError, TypeError, ValueError):
            return False
        return True

    return ok


def op_calls(*, methods: Sequence[str] | None = None,
             **kw: Any) -> st.SearchStrategy[tuple[str, dict[str, Any]]]:
    """A call of one data method (every one of :func:`api`, or those named)."""
    table = api()
    names = sorted(table) if methods is None else [m for m in methods if m in table]
    return st.sampled_from(names).flatmap(lambda n: op_call(table[n], **kw))

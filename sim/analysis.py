"""Measurements for the eviction-timing and flush-trade-off notebooks, on the real engine.

Theory of operation
-------------------
Every number the notebooks show comes from here.  The module builds one pipeline
shape (synthetic corpus -> ``map_transform`` to token ids -> first-fit
``pack_sequences`` -> streaming ``shuffle`` -> ``ensure_mixture`` -> ``batch``),
gets a steppable engine from :meth:`zephon_ref.pipeline.Pipeline.engine` and drives
it exactly as the inline runner does (deliver; when nothing is ready, admit one
source item and run every stage dry).  After each delivered item it *reads* what
the engine already keeps (each lane's inflight chunks, epoch boundaries, next
chunk id, completion counts and replay cursor); it never decides eviction,
packing, shuffling or replay itself (rule 1 of the house).

What it measures:

* :func:`trace` -- the inflight set per lane over time (chunks entering and
  leaving, epoch boundaries, cursor-pinning moments), sampled checkpoints
  (encoded bytes, inflight chunks and records: the *predicted* replay) and the
  drift between lanes (spread of admitted chunks and of inflight chunks);
* :func:`measure_restore` -- restores a checkpoint into a fresh pipeline, counts
  the records the lanes replay before reaching a new chunk (the *measured*
  replay) and checks the next items equal the uninterrupted run's;
* :func:`flush_arm` / :func:`flush_sweep` -- padding fraction, shuffle quality
  (mean displacement, Spearman rank correlation against source order), mixture
  deviation per window, replay cost, peak inflight and checkpoint bytes for one
  ``(flush_every_k_chunks, chunk_size)`` arm, same seed in every arm;
* :func:`drift_run` -- a long run (repeat policy) that records the per-lane
  inflight spread at doubling step counts, under either feeding policy.

The feeding policy (``AnalysisConfig.feeding``) is the pipeline's execution setting
``options(feeding=...)``: ``"demand"`` (zephon_ref's default) admits only for the lane
the tail multiplexer is waiting on, so a lane that is ahead is not fed;
``"round_robin"`` is zephon 0.2.0's per-sample round robin.  Every operator keeps its
state per lane, so the delivered stream is the same (checked by the tests); only how
much is inflight changes.

Determinism: everything is a function of the config (no clock in any number
except the explicitly timed restore seconds, which are reported, never
asserted).  What may not live here: pipeline logic of any kind.
"""

from __future__ import annotations

import math
import time
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from zephon_ref import codec
from zephon_ref.engine.core import Engine
from zephon_ref.errors import ConfigError, ZephonRefError, expected
from zephon_ref.pipeline import Pipeline
from zephon_ref.synthetic import synthetic_corpus
from zephon_ref.types import SampleBatch, SampleRecord
from zephon_ref.work import StaticMixtureWorkSource

__all__ = [
    "AnalysisConfig", "ArmResult", "CheckpointSample", "DriftPoint", "FlushArmIllegal", "LaneSample",
    "RestoreResult", "Trace", "build_pipeline", "drift_run", "flush_arm", "flush_sweep", "loglog_slope",
    "measure_restore",
    "spearman", "trace",
]

Layout = tuple[tuple[str, tuple[int, ...]], ...]
Mixture = tuple[tuple[str, float], ...]

DEFAULT_LAYOUT: Layout = (("web", (3000, 2000)), ("code", (1500, 1000)), ("books", (900,)))
DEFAULT_MIXTURE: Mixture = (("web", 0.6), ("code", 0.3), ("books", 0.1))


@dataclass(frozen=True, slots=True)
class AnalysisConfig:
    """The pipeline under study; every arm of a sweep differs only in the named knobs."""

    lanes: int = 2
    chunk_size: int = 32
    k: int = 2  # flush_every_k_chunks
    max_length: int = 256
    num_bins: int = 4
    shuffle_buffer: int = 64
    microbatch: int = 4
    seed: int = 0
    layout: Layout = DEFAULT_LAYOUT
    mixture: Mixture = DEFAULT_MIXTURE
    mean_log_words: float = 3.5
    repeat: bool = True
    feeding: str = "demand"  # the pipeline's feeding policy: "demand" or "round_robin"
    plan: str = "epoch"  # "epoch": pack + shuffle + ensure_mixture + batch; "monotone": tokens + batch


    def __post_init__(self) -> None:
        for name in ("lanes", "chunk_size", "max_length", "num_bins", "shuffle_buffer", "microbatch"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ConfigError(expected(f"AnalysisConfig.{name}", "an int >= 1", v))
        if self.feeding not in ("demand", "round_robin"):
            raise ConfigError(expected("AnalysisConfig.feeding", "'demand' or 'round_robin'", self.feeding))
        if self.plan not in ("epoch", "monotone"):
            raise ConfigError(expected("AnalysisConfig.plan", "'epoch' or 'monotone'", self.plan))
        if isinstance(self.k, bool) or not isinstance(self.k, int) or self.k < 0:
            raise ConfigError(expected("AnalysisConfig.k", "an int >= 0", self.k))


def token_ids(row: Mapping[str, Any]) -> dict[str, Any]:
    """The tokenizer of the study: BOS, crc32(word) % 30000 + 10 per word, EOS (cheap, deterministic)."""
    words = str(row["text"]).split()
    return {"input_ids": [1, *(zlib.crc32(w.encode()) % 30000 + 10 for w in words), 2]}


def build_pipeline(cfg: AnalysisConfig) -> Pipeline:
    """The pipeline of the study (packing + shuffle + ensure_mixture + batch, inline)."""
    corpus = synthetic_corpus(seed=cfg.seed, layout=dict(cfg.layout), mean_log_words=cfg.mean_log_words)
    kw: dict[str, Any] = {"exhausted_policy": "repeat"} if cfg.repeat else {}
    source = StaticMixtureWorkSource(list(corpus.datasets), dict(cfg.mixture), chunk_size=cfg.chunk_size,
                                     seed=cfg.seed, **kw)
    if cfg.plan == "monotone":  # every operator preserves cursor order: watermark eviction, K forced to 0
        return (Pipeline(source).map_transform(token_ids).batch(cfg.microbatch)
                .options(runner="inline", canonical_replicas=cfg.lanes, flush_every_k_chunks=0,
                         feeding=cfg.feeding))
    return (Pipeline(source)
            .map_transform(token_ids)
            .pack_sequences(cfg.max_length, num_bins=cfg.num_bins)
            .shuffle(cfg.shuffle_buffer, seed=cfg.seed)
            .ensure_mixture()
            .batch(cfg.microbatch)
            .options(runner="inline", canonical_replicas=cfg.lanes, flush_every_k_chunks=cfg.k,
                     feeding=cfg.feeding))


# -- driving the engine ---------------------------------------------------------------------------


class Driver:
    """Steps one engine the way the inline runner does (the pipeline's feeding policy picks
    the lane each admission feeds)."""

    def __init__(self, pipeline: Pipeline) -> None:
        self.pipeline = pipeline
        self.engine: Engine = pipeline.engine()
        self.delivered = 0
        self.admitted = 0

    def next_item(self) -> Any | None:
        e = self.engine
        while True:
            x = e.deliver()
            if x is not None:
                self.delivered += 1
                return x
            if e.finished:
                return None
            if e.step():
                self.admitted += 1


# -- one trace: inflight, boundaries, pinning, checkpoints, drift ------------------------------------


@dataclass(frozen=True, slots=True)
class LaneSample:
    """One lane after one delivered item."""

    step: int
    lane: int
    inflight: int  # chunks
    inflight_records: int  # samples of the inflight chunks (what a restore replays)
    lo: int  # smallest inflight chunk id (-1: none)
    next_cid: int
    boundaries: tuple[int, ...]
    pinned: bool  # the lowest epoch is complete but holds the replay cursor's chunk


@dataclass(frozen=True, slots=True)
class CheckpointSample:
    step: int
    nbytes: int  # codec.encode(checkpoint())
    inflight: tuple[int, ...]  # chunks per lane
    records: int  # predicted replay: samples of every inflight chunk
    phase: tuple[float, ...]  # per lane: chunks admitted into the open epoch / K (0 <= phase < 1)


@dataclass(frozen=True, slots=True)
class Trace:
    config: AnalysisConfig
    steps: int
    lanes: tuple[int, ...]
    samples: tuple[LaneSample, ...]
    entered: tuple[tuple[int, int, int], ...]  # (step, lane, cid)
    left: tuple[tuple[int, int, int], ...]  # (step, lane, cid)
    checkpoints: tuple[CheckpointSample, ...]
    states: tuple[tuple[int, dict[str, Any]], ...] = field(default=(), compare=False)
    # per kept state: the keys of the next items the uninterrupted run delivered after it
    followups: tuple[tuple[int, tuple[tuple[Any, ...], ...]], ...] = field(default=(), compare=False)

    def lane_series(self, lane: int, what: str) -> list[int]:
        return [int(getattr(s, what)) for s in self.samples if s.lane == lane]

    def spread(self, what: str = "next_cid") -> list[int]:
        """Per step, max - min over lanes of ``what`` (admitted chunks by default)."""
        by_step: dict[int, list[int]] = {}
        for s in self.samples:
            by_step.setdefault(s.step, []).append(int(getattr(s, what)))
        return [max(v) - min(v) for _, v in sorted(by_step.items())]


def _pinned(engine: Engine, lane: int) -> bool:
    """Cursor pinning right now: the lane's lowest epoch is complete (every offset closed) but
    holds the replay cursor's chunk, so eviction stops there.  Reads the tracker; decides nothing."""
    stream, tracker = engine.streams[lane], engine.trackers[lane]
    if not stream.boundaries or not stream.inflight or tracker.cursor is None:
        return False
    first = stream.boundaries[0]
    epoch = [cid for cid in stream.inflight if cid < first]
    if not epoch or tracker.cursor.chunk_id not in epoch:
        return False
    return all(tracker.done.get(cid, 0) >= len(stream.inflight[cid]) for cid in epoch)


def _lane_sample(engine: Engine, lane: int, step: int) -> LaneSample:
    stream = engine.streams[lane]
    inflight = stream.inflight
    return LaneSample(step=step, lane=lane, inflight=len(inflight),
                      inflight_records=sum(len(ch) for ch in inflight.values()),
                      lo=min(inflight) if inflight else -1, next_cid=stream.next_cid,
                      boundaries=tuple(stream.boundaries), pinned=_pinned(engine, lane))


def _phase(engine: Engine, lane: int) -> float:
    """Where the lane's delivery stands inside its flush epoch, in [0, 1): the replay cursor's
    chunk position within the epoch plus the offset's share of that chunk, over K.  Fresh
    pipelines record boundaries at K, 2K, ..., so epoch e holds chunks [eK, (e+1)K)."""
    cur = engine.trackers[lane].cursor
    k = engine.k
    if k <= 0 or cur is None:
        return 0.0
    chunk = engine.streams[lane].inflight.get(cur.chunk_id)
    size = len(chunk) if chunk is not None else 1
    return ((cur.chunk_id % k) + min(cur.chunk_offset + 1, size) / size) / k % 1.0


def checkpoint_sample(
    pipeline: Pipeline, engine: Engine, step: int
) -> tuple[CheckpointSample, dict[str, Any]]:
    state = pipeline.checkpoint()
    nbytes = len(codec.encode(state))
    lanes = sorted(engine.streams)
    inflight = tuple(len(state["inflight"][lane]) for lane in lanes)
    records = sum(int(ch["total_samples"]) for lane in lanes for ch in state["inflight"][lane].values())
    return (CheckpointSample(step=step, nbytes=nbytes, inflight=inflight, records=records,
                             phase=tuple(_phase(engine, lane) for lane in lanes)), state)


def trace(cfg: AnalysisConfig, steps: int, *, checkpoint_every: int = 0, keep_states: Sequence[int] = (),
          sample_every: int = 1, follow: int = 8,
          progress: Callable[[int, int], None] | None = None) -> Trace:
    """Run ``steps`` delivered items; sample every lane every ``sample_every`` items, take a
    checkpoint every ``checkpoint_every`` items (0: none), keep the states at ``keep_states``
    with the keys of the ``follow`` items delivered after each (what a restore must deliver)."""
    if steps < 1 or sample_every < 1 or checkpoint_every < 0:
        raise ConfigError(expected("trace steps / sample_every / checkpoint_every", ">= 1, >= 1, >= 0",
                                   (steps, sample_every, checkpoint_every)))
    p = build_pipeline(cfg)
    d = Driver(p)
    e = d.engine
    lanes = tuple(sorted(e.streams))
    before = {lane: set(e.streams[lane].inflight) for lane in lanes}
    samples: list[LaneSample] = []
    entered: list[tuple[int, int, int]] = []
    left: list[tuple[int, int, int]] = []
    cps: list[CheckpointSample] = []
    kept: list[tuple[int, dict[str, Any]]] = []
    keep = set(keep_states)
    follows: dict[int, list[tuple[Any, ...]]] = {}
    last = max(keep, default=0)
    step = 0
    while step < steps or any(len(v) < follow for v in follows.values()):
        step += 1
        x = d.next_item()
        if x is None:
            break
        for v in follows.values():
            if len(v) < follow:
                v.append(_item_key(x))
        if step > steps:
            continue
        for lane in lanes:
            now = set(e.streams[lane].inflight)
            entered += [(step, lane, c) for c in sorted(now - before[lane])]
            left += [(step, lane, c) for c in sorted(before[lane] - now)]
            before[lane] = now
        if step % sample_every == 0:
            samples += [_lane_sample(e, lane, step) for lane in lanes]
        if (checkpoint_every and step % checkpoint_every == 0) or step in keep:
            cp, state = checkpoint_sample(p, e, step)
            if checkpoint_every and step % checkpoint_every == 0:
                cps.append(cp)
            if step in keep:
                kept.append((step, state))
                follows[step] = []
        if progress is not None:
            progress(step, steps)
    assert last <= steps or not keep, "keep_states beyond the run"
    return Trace(config=cfg, steps=min(d.delivered, steps), lanes=lanes, samples=tuple(samples),
                 entered=tuple(entered), left=tuple(left), checkpoints=tuple(cps), states=tuple(kept),
                 followups=tuple((s, tuple(v)) for s, v in sorted(follows.items())))


# -- restore: predicted vs measured replay --------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RestoreResult:
    step: int
    predicted_chunks: int
    predicted_records: int
    replayed_chunks: int
    replayed_records: int
    next_items_equal: bool
    seconds: float  # restore() + first item; reported, never asserted


def _item_key(x: Any) -> tuple[Any, ...]:
    recs = x.records if isinstance(x, SampleBatch) else (x,)
    return tuple(r.meta.cursor.as_key() for r in recs)


def measure_restore(cfg: AnalysisConfig, state: Mapping[str, Any], step: int, *, compare: int = 8,
                    want: Sequence[tuple[Any, ...]] | None = None) -> RestoreResult:
    """Restore ``state`` (taken after ``step`` items) into a fresh pipeline, count what the lanes
    replay (source items of chunk ids below the checkpoint's next chunk id, per lane) and check
    that the next items equal an uninterrupted run's: ``want`` (from :attr:`Trace.followups`),
    or else the first ``compare`` items after ``step`` of a fresh uninterrupted run."""
    lanes = sorted(int(x) for x in state["lane_next_cid"])
    next_cid = {int(k): int(v) for k, v in state["lane_next_cid"].items()}
    predicted_chunks = sum(len(state["inflight"][lane]) for lane in lanes)
    if want is None:
        ref = Driver(build_pipeline(cfg))
        for _ in range(step):
            ref.next_item()
        want = [_item_key(x) for x in (ref.next_item() for _ in range(compare)) if x is not None]
    else:
        want = list(want)
        compare = len(want)
    p = build_pipeline(cfg)
    t0 = time.perf_counter()  # clock-ok: reported restore time, never asserted
    p.restore(state)
    d = Driver(p)
    predicted_records = sum(len(ch) for lane in lanes for ch in d.engine.streams[lane].inflight.values())
    replayed: dict[tuple[int, int], int] = {}
    for lane in lanes:
        _count_items(d.engine, lane, next_cid[lane], replayed)
    first = d.next_item()
    seconds = time.perf_counter() - t0  # clock-ok
    got = [] if first is None else [_item_key(first)]
    got += [_item_key(x) for x in (d.next_item() for _ in range(compare - 1)) if x is not None]
    # drain the replay phase so every replayed chunk is counted (stop once every lane is past it)
    guard = 0
    while any(d.engine.streams[lane].next_cid <= next_cid[lane] and not d.engine.streams[lane].exhausted
              for lane in lanes) and guard < 1_000_000:
        if d.next_item() is None:
            break
        guard += 1
    return RestoreResult(step=step, predicted_chunks=predicted_chunks, predicted_records=predicted_records,
                         replayed_chunks=len(replayed), replayed_records=sum(replayed.values()),
                         next_items_equal=bool(want) and got == want, seconds=seconds)


def _count_items(engine: Engine, lane: int, below: int, counts: dict[tuple[int, int], int]) -> None:
    """Wrap the lane's item stream (before the engine first pulls it) to count replayed samples."""
    stream = engine.streams[lane]
    original = stream.items

    def counting() -> Iterator[Any]:
        for item in original():
            if isinstance(item, tuple) and item[2] < below:
                key = (item[1], item[2])
                counts[key] = counts.get(key, 0) + 1
            yield item

    stream.items = counting  # type: ignore[method-assign]


# -- flush trade-offs ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ArmResult:
    k: int
    chunk_size: int
    items: int
    records: int
    padding: float  # 1 - tokens / (records * max_length)
    displacement: float  # mean |delivery rank - source rank| per lane, averaged over lanes
    spearman: float  # rank correlation of delivery order vs source order (1 = no shuffling)
    mixture_dev: float  # mean over windows of total-variation distance from the target token mix
    replay_mean: float  # predicted replay records per checkpoint (mean over checkpoints)
    replay_max: int
    peak_inflight: int  # largest inflight chunks of one lane
    peak_inflight_records: int  # largest inflight samples of one lane
    ckpt_bytes_mean: float
    ckpt_bytes_max: int


class FlushArmIllegal(ConfigError):
    """An arm that the pipeline refuses (flush_every_k_chunks=0 on a reordering plan)."""


def spearman(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Spearman rank correlation of two equally long sequences (average ranks for ties)."""
    if len(xs) != len(ys) or len(xs) < 2:
        raise ConfigError(
            expected("spearman inputs", "two sequences of equal length >= 2", (len(xs), len(ys)))
        )
    rx, ry = _ranks(xs), _ranks(ys)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry, strict=True))
    vx = sum((a - mx) ** 2 for a in rx)
    vy = sum((b - my) ** 2 for b in ry)
    return cov / math.sqrt(vx * vy) if vx and vy else 1.0


def _ranks(xs: Sequence[float]) -> list[float]:
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    ranks = [0.0] * len(xs)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        for t in range(i, j + 1):
            ranks[order[t]] = (i + j) / 2
        i = j + 1
    return ranks


def _record_tokens(rec: SampleRecord) -> tuple[int, dict[int, int]]:
    m = rec.meta
    counts = m.component_token_counts if m.component_token_counts is not None else m.component_sample_counts
    return sum(counts.values()), dict(counts)


def flush_arm(cfg: AnalysisConfig, items: int, *, window: int = 64, checkpoint_every: int = 8,
              progress: Callable[[int, int], None] | None = None) -> ArmResult:
    """Run ``items`` delivered items of ``cfg`` and measure every trade-off of the flush knob."""
    try:
        p = build_pipeline(cfg)
        d = Driver(p)
    except ConfigError as exc:
        raise FlushArmIllegal(f"flush_every_k_chunks={cfg.k}: {exc}") from exc
    e = d.engine
    lanes = sorted(e.streams)
    comp_ids = dict(p._source.component_ids())  # name -> component id
    target = {comp_ids[name]: w for name, w in cfg.mixture}
    tw = sum(target.values())
    target = {c: w / tw for c, w in target.items()}
    order: dict[int, list[tuple[int, int]]] = {lane: [] for lane in lanes}
    win: dict[int, list[dict[int, int]]] = {lane: [] for lane in lanes}
    devs: list[float] = []
    tokens = records = 0
    replay: list[int] = []
    nbytes: list[int] = []
    peak = peak_rec = 0
    n = 0
    for step in range(1, items + 1):
        x = d.next_item()
        if x is None:
            break
        n = step
        recs = x.records if isinstance(x, SampleBatch) else (x,)
        for r in recs:
            lane = r.meta.lane_id
            order[lane].append((r.meta.chunk_id, r.meta.chunk_offset))
            t, per = _record_tokens(r)
            tokens += t
            records += 1
            win[lane].append(per)
            if len(win[lane]) == window:
                devs.append(_tv(win[lane], target))
                win[lane] = []
        for lane in lanes:
            inflight = e.streams[lane].inflight
            peak = max(peak, len(inflight))
            peak_rec = max(peak_rec, sum(len(ch) for ch in inflight.values()))
        if checkpoint_every and step % checkpoint_every == 0:
            cp, _ = checkpoint_sample(p, e, step)
            replay.append(cp.records)
            nbytes.append(cp.nbytes)
        if progress is not None:
            progress(step, items)
    disp: list[float] = []
    rho: list[float] = []
    for lane in lanes:
        seq = order[lane]
        if len(seq) < 2:
            continue
        src_rank = {key: i for i, key in enumerate(sorted(seq))}
        disp.append(sum(abs(i - src_rank[key]) for i, key in enumerate(seq)) / len(seq))
        rho.append(spearman(list(range(len(seq))), [src_rank[key] for key in seq]))
    # padding counts tokens of the study's tokenizer against the packed capacity
    padding = 1.0 - tokens / (records * cfg.max_length) if records else 0.0
    return ArmResult(k=cfg.k, chunk_size=cfg.chunk_size, items=n, records=records, padding=padding,
                     displacement=sum(disp) / len(disp) if disp else 0.0,
                     spearman=sum(rho) / len(rho) if rho else 1.0,
                     mixture_dev=sum(devs) / len(devs) if devs else 0.0,
                     replay_mean=sum(replay) / len(replay) if replay else 0.0,
                     replay_max=max(replay) if replay else 0, peak_inflight=peak,
                     peak_inflight_records=peak_rec,
                     ckpt_bytes_mean=sum(nbytes) / len(nbytes) if nbytes else 0.0,
                     ckpt_bytes_max=max(nbytes) if nbytes else 0)


def _tv(window: Sequence[Mapping[int, int]], target: Mapping[int, float]) -> float:
    """Total-variation distance between a window's component token shares and the target."""
    tot: dict[int, int] = {}
    for per in window:
        for c, v in per.items():
            tot[c] = tot.get(c, 0) + v
    s = sum(tot.values())
    if not s:
        return 0.0
    comps = sorted(set(tot) | set(target))
    return 0.5 * sum(abs(tot.get(c, 0) / s - target.get(c, 0.0)) for c in comps)


def flush_sweep(base: AnalysisConfig, ks: Sequence[int], chunk_sizes: Sequence[int], items: int, *,
                window: int = 64, checkpoint_every: int = 8,
                progress: Callable[[str], None] | None = None) -> list[ArmResult | str]:
    """One arm per (k, chunk_size), same seed everywhere; an illegal arm becomes its refusal text."""
    out: list[ArmResult | str] = []
    for cs in chunk_sizes:
        for k in ks:
            cfg = replace(base, k=k, chunk_size=cs)
            if progress is not None:
                progress(f"arm k={k} chunk_size={cs}")
            try:
                out.append(flush_arm(cfg, items, window=window, checkpoint_every=checkpoint_every))
            except FlushArmIllegal as exc:
                out.append(f"k={k} chunk_size={cs}: refused ({exc})")
    return out


def loglog_slope(points: Sequence[tuple[float, float]]) -> float:
    """Least-squares slope of log(y) on log(x) over every point with x, y > 0 (0.0 when fewer than
    two such points or no spread in x): about 0.5 for a square-root growth, 0 for a bounded one."""
    pts = [(math.log(x), math.log(y)) for x, y in points if x > 0 and y > 0]
    if len(pts) < 2:
        return 0.0
    mx = sum(x for x, _ in pts) / len(pts)
    my = sum(y for _, y in pts) / len(pts)
    vx = sum((x - mx) ** 2 for x, _ in pts)
    return sum((x - mx) * (y - my) for x, y in pts) / vx if vx else 0.0


# -- drift over a long run -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DriftPoint:
    step: int
    admitted_spread: int  # max - min over lanes of admitted chunks (next_cid)
    inflight: tuple[int, ...]  # chunks per lane
    max_spread_so_far: int  # largest admitted spread seen up to this step
    max_inflight_so_far: int  # largest inflight chunks of any lane up to this step


def drift_run(cfg: AnalysisConfig, steps: int, *, report_at: Sequence[int] = (), sample_every: int = 0,
              progress: Callable[[int, int], None] | None = None) -> list[DriftPoint]:
    """Run ``steps`` delivered items (repeat policy: unbounded) and report the drift at the
    given steps (default: powers of two and the last step), plus every ``sample_every`` steps
    when that is > 0.  Reads only next_cid and the inflight sets."""
    if not cfg.repeat:
        raise ConfigError(expected("drift_run config", "repeat=True (a long run)", "repeat=False"))
    chosen = set(report_at) if report_at else {2 ** i for i in range(4, 40) if 2 ** i <= steps} | {steps}
    if sample_every > 0:
        chosen |= set(range(sample_every, steps + 1, sample_every))
    at = sorted(chosen)
    d = Driver(build_pipeline(cfg))
    e = d.engine
    lanes = sorted(e.streams)
    streams = [e.streams[lane] for lane in lanes]
    worst_spread = worst_inflight = 0
    out: list[DriftPoint] = []
    j = 0
    for step in range(1, steps + 1):
        if d.next_item() is None:
            raise ZephonRefError(f"drift_run: the stream ended at step {step} (expected an unbounded run)")
        cids = [s.next_cid for s in streams]
        spread = max(cids) - min(cids)
        inflight = [len(s.inflight) for s in streams]
        worst_spread = max(worst_spread, spread)
        worst_inflight = max(worst_inflight, *inflight)
        if j < len(at) and step == at[j]:
            out.append(DriftPoint(step=step, admitted_spread=spread, inflight=tuple(inflight),
                                  max_spread_so_far=worst_spread, max_inflight_so_far=worst_inflight))
            j += 1
        if progress is not None:
            progress(step, steps)
    return out

"""Peer loaders: zephon_ref against Grain and torchdata.nodes on packing + shuffle + batch.

The same documents (``synthetic_corpus``, the layout of ``bench_pipeline --quick`` or its full
layout), the same tokenizer (``bench_pipeline.crc32_tokens``), and as close an equivalent
pipeline as each library offers:

* zephon_ref: ``map_transform -> pack_sequences(512, num_bins=8) -> shuffle(1024) -> batch(8)``,
  one lane, inline runner, flush_every_k_chunks=8, chunk_size=64;
* Grain 0.2.x: ``MapDataset.source -> map -> to_iter_dataset(num_threads=0)
  -> experimental.FirstFitPackIterDataset(512, 8 bins) -> WindowShuffleIterDataset(1024)
  -> batch(8, drop_remainder=True)`` (a *tumbling* shuffle window, not a streaming buffer, and
  Grain's own first-fit rules: not output-equal to ours);
* torchdata.nodes 0.11: it has no packing node and no shuffle-buffer node, so the equivalent is
  ``IterableWrapper`` over a plain generator doing first-fit packing into 8 bins and a streaming
  shuffle buffer, then ``Batcher(8)`` and ``Loader`` (the generator is this file's, 30 lines; not
  resumable, so it measures the loader framework around the same work).

What is checked: every library delivers batches of 8 sequences of <= 512 tokens and at least 98%
of the corpus tokens (nothing lost but the last partial batch and bins).  The streams are *not*
equal across libraries (different packing and shuffle rules); only docs/s is compared.  Each run
is in this process, after a warm-up import; the VM is noisy (read differences under ~20% as noise).

Run: python3 bench/bench_peers.py [--quick]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_pipeline import CORPUS_KW, LAYOUT_FULL, LAYOUT_QUICK, MIXTURE, crc32_tokens  # noqa: E402

MAX_LEN, BINS, BUFFER, MICRO = 512, 8, 1024, 8


def corpus_docs(quick: bool) -> list[dict[str, Any]]:
    from zephon_ref.synthetic import synthetic_corpus

    corpus = synthetic_corpus(layout=LAYOUT_QUICK if quick else LAYOUT_FULL, **CORPUS_KW)
    return [d.get(int(sid), i) for d in corpus.datasets
            for sid, n in zip(d.ids().tolist(), d.counts().tolist(), strict=True) for i in range(int(n))]


def run_ours(docs: list[dict[str, Any]]) -> tuple[float, int, int]:
    from zephon_ref.pipeline import Pipeline
    from zephon_ref.work import Dataset, InMemoryShard, StaticMixtureWorkSource

    ds = Dataset.from_dict("all", {0: InMemoryShard(docs)})
    src = StaticMixtureWorkSource([ds], {"all": 1.0}, chunk_size=64, seed=1)
    p = (Pipeline(src).map_transform(crc32_tokens).pack_sequences(MAX_LEN, num_bins=BINS)
         .shuffle(BUFFER, seed=0).batch(MICRO).options(runner="inline", flush_every_k_chunks=8))
    t0 = time.perf_counter()
    toks = batches = 0
    for b in p:
        batches += 1
        assert len(b.records) == MICRO
        for r in b.records:
            n = sum(len(seg["input_ids"]) for seg in r.payload["packed_samples"])
            assert n <= MAX_LEN
            toks += n
    return time.perf_counter() - t0, toks, batches


def run_grain(docs: list[dict[str, Any]]) -> tuple[float, int, int]:
    import grain
    import numpy as np

    def tok(row: dict[str, Any]) -> dict[str, Any]:
        return {"input_ids": np.asarray(crc32_tokens(row)["input_ids"], dtype=np.int32)}

    t0 = time.perf_counter()
    ds = grain.MapDataset.source(docs).map(tok).to_iter_dataset(
        grain.ReadOptions(num_threads=0, prefetch_buffer_size=0))
    ds = grain.experimental.FirstFitPackIterDataset(ds, length_struct={"input_ids": MAX_LEN},
                                                    num_packing_bins=BINS, shuffle_bins=False)
    ds = grain.experimental.WindowShuffleIterDataset(ds, window_size=BUFFER, seed=0)
    ds = ds.batch(MICRO, drop_remainder=True)
    toks = batches = 0
    for b in ds:
        batches += 1
        seg = b["input_ids_segment_ids"]
        assert seg.shape == (MICRO, MAX_LEN)
        toks += int((seg > 0).sum())
    return time.perf_counter() - t0, toks, batches


def _pack_shuffle(rows: Iterator[list[int]]) -> Iterator[list[list[int]]]:
    """First-fit into BINS open bins (a full bin set emits the fullest) + a streaming shuffle buffer."""
    rng = random.Random(0)
    bins: list[list[list[int]]] = []
    fill: list[int] = []
    buf: list[list[list[int]]] = []

    def out(seq: list[list[int]]) -> Iterator[list[list[int]]]:
        if len(buf) < BUFFER:
            buf.append(seq)
            return
        i = rng.randrange(BUFFER)
        buf[i], seq = seq, buf[i]
        yield seq

    for ids in rows:
        n = len(ids)
        for j, f in enumerate(fill):
            if f + n <= MAX_LEN:
                bins[j].append(ids)
                fill[j] += n
                break
        else:
            if len(bins) == BINS:
                j = max(range(BINS), key=fill.__getitem__)
                yield from out(bins.pop(j))
                fill.pop(j)
            bins.append([ids])
            fill.append(n)
    for b in bins:
        yield from out(b)
    rng.shuffle(buf)
    yield from buf


def run_torchdata(docs: list[dict[str, Any]]) -> tuple[float, int, int]:
    from torchdata import nodes

    t0 = time.perf_counter()
    src = nodes.Mapper(nodes.IterableWrapper(docs), lambda r: crc32_tokens(r)["input_ids"])
    packed = nodes.IterableWrapper(_pack_shuffle(iter(nodes.Loader(src))))
    loader = nodes.Loader(nodes.Batcher(packed, batch_size=MICRO, drop_last=True))
    toks = batches = 0
    for b in loader:
        batches += 1
        assert len(b) == MICRO
        for seq in b:
            n = sum(len(x) for x in seq)
            assert n <= MAX_LEN
            toks += n
    return time.perf_counter() - t0, toks, batches


PEERS = {"grain": ("Grain", run_grain), "torchdata": ("torchdata.nodes", run_torchdata)}


def results(*, quick: bool = True) -> list[dict[str, object]]:
    docs = corpus_docs(quick)
    total = sum(len(crc32_tokens(d)["input_ids"]) for d in docs)
    rounds = 1 if quick else 3
    rows: list[dict[str, object]] = []
    ours: list[float] = []
    for _ in range(rounds):
        wall, toks, _ = run_ours(docs)
        assert toks >= 0.98 * total, (toks, total)
        ours.append(len(docs) / wall)
    mine = statistics.median(ours)
    for key, (label, fn) in PEERS.items():
        try:
            __import__("grain" if key == "grain" else "torchdata.nodes")
        except ImportError as exc:
            rows.append({"name": f"pack+shuffle+batch: zephon_ref vs {label}", "ours": mine, "theirs": None,
                         "unit": "docs/s", "ratio": None,
                         "note": f"{label} not installed ({exc}); pip install "
                                 + ("grain" if key == "grain" else "torchdata --no-deps") + " to measure"})
            continue
        theirs = []
        for _ in range(rounds):
            wall, toks, _ = fn(docs)
            assert toks >= 0.98 * total, (key, toks, total)
            theirs.append(len(docs) / wall)
        t = statistics.median(theirs)
        what = ("Grain's FirstFitPack + WindowShuffle (tumbling window)" if key == "grain"
                else "no pack/shuffle nodes in torchdata.nodes: a plain generator inside IterableWrapper, "
                     "not resumable")
        rows.append({"name": f"pack+shuffle+batch: zephon_ref inline (1 lane) vs {label}", "ours": mine,
                     "theirs": t, "vs": label, "unit": "docs/s", "ratio": mine / t,
                     "note": f"{len(docs):,} docs, in process, {rounds} round(s); {what}; streams not "
                             "comparable (different rules), both delivered >= 98% of the corpus tokens"})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    print(f"mixture of the corpus: {MIXTURE} (one dataset here: the documents concatenated)")
    for r in results(quick=args.quick):
        print(r)


if __name__ == "__main__":
    main()

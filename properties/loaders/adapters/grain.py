"""Grain 0.2.18 as a generic stateful loader: dataset iterators and the DataLoader.

Every variant is one Grain iterator over all epochs (Grain's own ``repeat`` /
``num_epochs``), saved with ``get_state()`` and restored with ``set_state()`` on a
fresh iterator of a freshly built pipeline, as Grain's docs show.  ``set_state`` on an
iterator that already produced an element is documented too (``primed``).

* ``map``: ``MapDataset.source(ids)[.shuffle(seed)].batch(b).repeat(E).to_iter_dataset()``;
* ``iter-batch``: ``...repeat(E).to_iter_dataset().batch(b)`` (batches run across epochs);
* ``window-shuffle``: ``...to_iter_dataset()`` then ``WindowShuffleIterDataset(window=buffer)``,
  one epoch per ``RepeatIterDataset`` pass of the window-shuffled stream;
* ``interleave``: ``InterleaveIterDataset`` over the shards (cycle length 2), repeated;
* ``mix``: ``IterDataset.mix`` of two shards (equal weights; a finite mixture stops when a
  component runs out, so an epoch is the documented subset);
* ``pack``: ``FirstFitPackIterDataset`` of ``{"tokens": [id] * (1 + id % 3)}`` into bins of 4
  tokens (the ids are read back from the segments);
* ``dataloader``: ``grain.DataLoader`` with an ``IndexSampler(num_epochs=E)``, a ``Batch``
  operation and ``worker_count`` processes (``workers``).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from typing import Any

from properties.loaders.core import (
    EpochSpec,
    LoaderConfig,
    dataset_ids,
    default_epoch_spec,
    library_values,
    shard_ids,
    stream_id,
    unavailable,
)

__all__ = ["GRAIN", "GrainAdapter"]

PACK_LEN = 4


def _grain() -> Any:
    import logging

    logging.getLogger("absl").setLevel(logging.ERROR)
    import grain

    return grain


def _pack_element(x: int) -> dict[str, Any]:
    import numpy as np

    return {"tokens": np.full(1 + x % 3, x, dtype=np.int64)}


def _ids_of(el: Any, variant: str) -> list[int]:
    if variant == "pack":
        import numpy as np

        toks = np.asarray(el["tokens"]).reshape(-1, PACK_LEN) if np.asarray(el["tokens"]).ndim > 1 else \
            [np.asarray(el["tokens"])]
        segs = np.asarray(el["tokens_segment_ids"]).reshape(len(toks), PACK_LEN)
        out: list[int] = []
        for t, s in zip(toks, segs, strict=True):
            prev = 0
            for tok, seg in zip(t.tolist(), s.tolist(), strict=True):
                if seg != 0 and seg != prev:
                    out.append(int(tok))
                prev = seg
        return out
    if hasattr(el, "tolist"):
        v = el.tolist()
        return [stream_id(x) for x in (v if isinstance(v, list) else [v])]
    if isinstance(el, (list, tuple)):
        return [stream_id(x) for x in el]
    return [stream_id(el)]


class _Run:
    def __init__(self, a: GrainAdapter, cfg: LoaderConfig, state: Any, primed: bool,
                 prep: str | None = None) -> None:
        self.a, self.cfg = a, cfg
        self.it = iter(a.pipeline(cfg))
        if primed or prep == "used":
            with contextlib.suppress(StopIteration):
                next(self.it)
        elif prep == "state":
            self.it.get_state()
        if state is not None:
            self.it.set_state(state)  # exactly what get_state() returned (a dict, or the DataLoader's bytes)

    def next(self, n: int) -> list[list[int]]:
        out: list[list[int]] = []
        for _ in range(n):
            try:
                out.append(_ids_of(next(self.it), self.cfg.variant))
            except StopIteration:
                break
        return out

    def state(self) -> Any:
        return self.it.get_state()

    def counters(self) -> Mapping[str, int] | None:
        """The positions Grain's states expose: ``next_index`` of a MapDataset's iterator (``map``: in
        batches; ``iter-batch``: in items, the batch comes after it) and the DataLoader's
        ``last_seen_indices`` (one process: the sampler's index of the last record read, across
        epochs).  Other variants keep no position that counts delivered items."""
        v, n = self.cfg.variant, self.cfg.size
        if v == "iter-batch" or (v == "dataloader" and not self.cfg.workers and not self.cfg.drop_last):
            if v == "iter-batch":
                items = int(self.it.get_state()["next_index"])
            else:
                items = int(json.loads(self.it.get_state())["last_seen_indices"]["0"]) + 1
            e, k = divmod(items, n) if n else (0, 0)
            if k == 0 and items:
                e, k = e - 1, n  # an epoch's end: the checker takes (e - 1, L) there
            return {"epoch": e, "items_in_epoch": k}
        if v != "map":
            return None
        nxt = int(self.it.get_state()["next_index"])
        b, n = self.cfg.batch, self.cfg.size
        per = n // b if self.cfg.drop_last else -(-n // b)
        spec = default_epoch_spec(self.cfg)
        e, k = divmod(nxt, per) if per else (0, 0)
        return {"epoch": e, "items_in_epoch": min(k * b, spec.length)}

    def close(self) -> None:
        close = getattr(self.it, "close", None)
        if close is not None:
            close()


class GrainAdapter:
    name = "grain"
    primed_ok = True
    preps = ("state", "used")  # set_state on an iterator that already produced elements is documented
    # dups: every variant (an item's value twice); None items only for the DataLoader: a MapDataset
    # treats None as a filtered-out element (to_iter_dataset skips it, Grain's filter convention), so
    # there a None item is not an item
    _common = {"size": (5, 1, 2, 4, 6, 7), "epochs": (1, 2, 3), "seed": (0, 1), "data_seed": (0, 1),
               "dups": (0, 1)}
    space = {"variant": {
        "map": {**_common, "shuffle": (False, True), "batch": (1, 2, 3), "drop_last": (False, True)},
        "iter-batch": {**_common, "shuffle": (False, True), "batch": (1, 2, 3)},
        "window-shuffle": {**_common, "shuffle": (True,), "buffer": (2, 3)},
        "interleave": {**_common, "shards": (2, 3)},
        "mix": {**_common, "epochs": (1,), "shards": (2,)},
        "pack": {**_common, "epochs": (1,)},
        "dataloader": {**_common, "shuffle": (False, True), "batch": (1, 2, 3), "drop_last": (False, True),
                       "workers": (0, 0, 0, 2), "nones": (0, 1)},
    }}

    def available(self) -> str | None:
        return unavailable("grain", hint="pip install -e '.[peers]' (see README)")

    def version(self) -> str:
        from importlib.metadata import version

        return f"grain {version('grain')}"

    def declared(self) -> Mapping[str, str]:
        return {}

    def unsupported(self, cfg: LoaderConfig) -> str | None:
        v = cfg.variant
        if cfg.workers and v != "dataloader":
            return "workers are the DataLoader's (mp_prefetch is not drawn)"
        if cfg.shards > 1 and v not in ("interleave", "mix"):
            return "shards matter only to interleave and mix"
        if v in ("interleave", "mix") and (cfg.shards < 2 or cfg.shards > cfg.size):
            return "interleave and mix need 2 or more non-empty shards"
        if v == "mix" and cfg.shards != 2:
            return "mix draws from two shards"
        if v in ("mix", "pack") and cfg.epochs > 1:
            return "mix and pack are drawn over one epoch (their groups straddle epoch boundaries)"
        if (
            cfg.drop_last
            and cfg.batch > 1
            and v not in ("map",)
            and not (v == "dataloader" and cfg.epochs == 1)
        ):
            return "drop_remainder on a stream across epochs drops only the stream's end"
        if v in ("window-shuffle",) and not cfg.shuffle:
            return "window-shuffle is a shuffle"
        if v in ("interleave", "mix", "pack") and cfg.shuffle:
            return "shuffle is drawn for map, iter-batch, window-shuffle and dataloader"
        if v in ("interleave", "mix", "pack", "window-shuffle") and cfg.batch > 1:
            return "batching is drawn for map, iter-batch and dataloader"
        if v == "dataloader" and cfg.workers and cfg.epochs > 1 and cfg.size % (cfg.batch * cfg.workers):
            return "DataLoader workers batch across epoch boundaries unless batch x workers divides the size"
        return None

    def epoch_spec(self, cfg: LoaderConfig) -> EpochSpec:
        if cfg.variant == "mix":
            return EpochSpec(-1, True, "a finite mixture stops when a component runs out")
        if cfg.variant == "dataloader" and cfg.drop_last and cfg.batch > 1:
            w = max(cfg.workers, 1)
            ids = dataset_ids(cfg)
            n = sum(len(ids[i::w]) - len(ids[i::w]) % cfg.batch for i in range(w))
            return EpochSpec(n, n < cfg.size, "each worker drops its final partial batch")
        if cfg.variant == "map":
            return default_epoch_spec(cfg)
        return EpochSpec(cfg.size)

    def worker_change(self, cfg: LoaderConfig) -> str:
        return "refuse"  # DataLoader validates worker_count on restore

    def serialise(self, state: Any) -> Any:
        """What Grain's checkpoint handlers write: the DataLoader's state is already JSON bytes; a dataset
        iterator's state dict goes through ``json.dumps`` (grain.checkpoint's JSON handler)."""
        return state if isinstance(state, bytes) else json.dumps(state)

    def deserialise(self, blob: Any) -> Any:
        return blob if isinstance(blob, bytes) else json.loads(blob)

    def pipeline(self, cfg: LoaderConfig) -> Any:
        grain = _grain()
        ids = library_values(dataset_ids(cfg))
        v = cfg.variant
        if v == "dataloader":
            sampler = grain.samplers.IndexSampler(
                num_records=len(ids),
                shard_options=grain.sharding.NoSharding(),
                shuffle=cfg.shuffle,
                num_epochs=cfg.epochs,
                seed=cfg.seed,
            )
            ops = [grain.transforms.Batch(cfg.batch, drop_remainder=cfg.drop_last)] if cfg.batch > 1 else []
            return grain.DataLoader(
                data_source=ids, sampler=sampler, operations=ops, worker_count=cfg.workers
            )
        src = grain.MapDataset.source(ids)
        if v == "map":
            if cfg.shuffle:
                src = src.shuffle(seed=cfg.seed)
            if cfg.batch > 1:
                src = src.batch(cfg.batch, drop_remainder=cfg.drop_last)
            return src.repeat(cfg.epochs).to_iter_dataset()
        if v == "iter-batch":
            if cfg.shuffle:
                src = src.shuffle(seed=cfg.seed)
            ds = src.repeat(cfg.epochs).to_iter_dataset()
            return ds.batch(cfg.batch) if cfg.batch > 1 else ds
        if v == "window-shuffle":
            ws = grain.experimental.WindowShuffleIterDataset(src.to_iter_dataset(), window_size=cfg.buffer,
                                                             seed=cfg.seed)
            return grain.experimental.RepeatIterDataset(ws, num_epochs=cfg.epochs)
        parts = [grain.MapDataset.source(s) for s in shard_ids(cfg)]
        if v == "interleave":
            il = grain.experimental.InterleaveIterDataset(parts, cycle_length=2)
            return grain.experimental.RepeatIterDataset(il, num_epochs=cfg.epochs)
        if v == "mix":
            return grain.IterDataset.mix([p.to_iter_dataset() for p in parts], [0.5, 0.5])
        if v == "pack":
            ds = src.map(_pack_element).to_iter_dataset()
            return grain.experimental.FirstFitPackIterDataset(
                ds, length_struct={"tokens": PACK_LEN}, num_packing_bins=2, seed=cfg.seed, shuffle_bins=False
            )
        raise ValueError(f"grain variant: expected one of {self.space['variant']}, received {v!r}")

    def build(self, cfg: LoaderConfig, state: Any = None, *, primed: bool = False,
              prep: str | None = None) -> _Run:
        return _Run(self, cfg, state, primed, prep)


GRAIN = GrainAdapter()

"""A realistic training-data script written against zephon 0.2.0's public API.

Run it unchanged under either implementation (the only difference is the import):

    python zephon_api_script.py IMPL full  OUT.json          # the uninterrupted stream
    python zephon_api_script.py IMPL first OUT.json CKPT N   # N batches, then pickle checkpoint()
    python zephon_api_script.py IMPL rest  OUT.json CKPT     # a fresh process: restore, iterate the rest

IMPL is ``zephon`` or ``zephon_ref``.  OUT.json receives a normalised view of every
delivered batch: per record its lane, cursor key (chunk id, offset, lineage, sample id)
and token ids (one list per packed segment).  It uses only names zephon documents:
``z.Dataset.from_dict``, ``z.InMemoryShard``, ``z.MixtureSpec``,
``z.StaticMixtureWorkSource``, ``z.Pipeline`` and its builder methods, ``checkpoint()``,
``restore()``, and the records' ``meta`` fields.
"""

from __future__ import annotations

import json
import pickle
import sys
import warnings
import zlib

IMPL = sys.argv[1]
if IMPL == "zephon":
    import zephon as z
elif IMPL == "zephon_ref":
    import zephon_ref as z
else:
    raise SystemExit(f"implementation: expected 'zephon' or 'zephon_ref', received {IMPL!r}")

WORDS = [
    "the",
    "of",
    "and",
    "to",
    "in",
    "is",
    "was",
    "for",
    "on",
    "that",
    "with",
    "as",
    "by",
    "at",
    "from",
    "his",
    "an",
    "were",
    "are",
    "which",
    "this",
    "be",
    "or",
    "has",
    "had",
    "not",
    "first",
    "one",
    "their",
    "its",
    "new",
    "after",
    "who",
    "they",
    "have",
    "her",
    "she",
    "two",
    "been",
    "other",
    "when",
    "there",
]


def row(name: str, shard: int, i: int) -> dict[str, object]:
    """A deterministic text row: 3..40 words picked by crc32 of its address."""
    h = zlib.crc32(f"{name}/{shard}/{i}".encode())
    n = 3 + h % 38
    return {"text": " ".join(WORDS[(h >> (k % 24)) % len(WORDS)] + str(k % 7) for k in range(n)),
            "source": name}


def tokenize(sample: dict[str, object]) -> dict[str, object]:
    """A stand-in tokenizer: one id per whitespace word (crc32), BOS=1 and EOS=2 around it."""
    ids = [zlib.crc32(w.encode()) % 30000 + 10 for w in str(sample["text"]).split()]
    return {"input_ids": [1, *ids, 2], "source": sample["source"]}


def build() -> z.Pipeline:
    layout = {"web": [160, 90, 75], "code": [80, 60], "books": [45]}
    datasets = [
        z.Dataset.from_dict(name, {sid: z.InMemoryShard([row(name, sid, i) for i in range(n)])
                                   for sid, n in enumerate(sizes)})
        for name, sizes in layout.items()
    ]
    mixture = z.MixtureSpec({"web": 0.6, "code": 0.3, "books": 0.1})
    source = z.StaticMixtureWorkSource(datasets, mixture, chunk_size=24, seed=7)
    return (
        z.Pipeline(source)
        .map_transform(tokenize, drop_none=True)
        .pack_sequences(128, num_bins=3, algorithm="best_fit", drop_oversized=True, flush_strategy="fifo")
        .shuffle(16, seed=3, algorithm="streaming")
        .ensure_mixture(max_buffer_size=32, drain_target_ratio=0.8)
        .batch(4, drop_last=True)
        # inline: zephon 0.2.0's threads runner looks a chunk's mixture up for ensure_mixture
        # only until the chunk is evicted, so its stream there depends on timing
        # (docs/divergences.md); zephon_ref gives the same stream under both runners
        .options(runner="inline", canonical_replicas=4, deterministic=True)
    )


def view(batch: object) -> list[object]:
    out = []
    for rec in batch.records:  # type: ignore[attr-defined]
        m = rec.meta
        segments = [list(s["input_ids"]) for s in rec.payload["packed_samples"]]
        out.append([m.lane_id, [m.chunk_id, m.chunk_offset, list(m.lineage), list(m.sample_id)], segments])
    return out


def main() -> None:
    phase, out_path = sys.argv[2], sys.argv[3]
    p = build()
    batches = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zephon warns about runtime details unrelated to the stream
        if phase == "full":
            batches = [view(b) for b in p]
        elif phase == "first":
            ckpt_path, n = sys.argv[4], int(sys.argv[5])
            it = iter(p)
            batches = [view(next(it)) for _ in range(n)]
            state = p.checkpoint()
            with open(ckpt_path, "wb") as fh:
                pickle.dump(state, fh)
            it.close()
        elif phase == "rest":
            with open(sys.argv[4], "rb") as fh:
                state = pickle.load(fh)
            p.restore(state)
            batches = [view(b) for b in p]
        else:
            raise SystemExit(f"phase: expected full, first or rest, received {phase!r}")
    with open(out_path, "w") as fh:
        json.dump({"impl": z.__name__, "batches": batches}, fh)


if __name__ == "__main__":
    main()

"""``zephon-ref demo``: the main job, end to end on the synthetic corpus.

Part 1 (source layer): a two-dataset mixture split over lanes; each lane's work
source is checkpointed at an arbitrary point, restored into a fresh object, and
must continue identically.

Part 2 (engine): tokenize (built-in tokenizer, long documents split) -> first-fit
pack -> shuffle -> ensure_mixture -> batch, over several lanes.  The run is
checkpointed mid-stream into a durable checkpoint directory, a *fresh process*
restores it and delivers the rest, and the demo checks that the resumed stream
equals the uninterrupted one batch for batch.  It prints checkpoint size and
inflight chunks, and exits non-zero if anything differs.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from zephon_ref.pipeline import Pipeline
from zephon_ref.work import StaticMixtureWorkSource, WorkChunk, synthetic_corpus

__all__ = ["build_demo_pipeline", "run_demo"]

LANES = 4


def _describe(chunk: WorkChunk, width: int = 6) -> str:
    sizes = ", ".join(f"{k}:{len(v)}" for k, v in chunk.components.items())
    head = " ".join(f"{c[0]}{sid[1]}.{sid[2]}" for sid, c in chunk.ordered()[:width])
    return f"[{sizes}] {head} ..."


def _source_part(seed: int, lanes: int, chunk_size: int, cut: int, out: Callable[[str], None]) -> bool:
    corpus = synthetic_corpus(seed=seed)
    web, code = corpus.by_name()["web"], corpus.by_name()["code"]
    source = StaticMixtureWorkSource(
        [web, code], {"web": 0.7, "code": 0.3}, chunk_size=chunk_size, seed=seed,
        shuffle_within_shard=True, shuffle_block_size=64, exhausted_policy="repeat", max_repeats=3,
    )
    out(f"[1/2] source layer: web:0.7 code:0.3 over {web.total()}+{code.total()} documents, "
        f"chunk_size={chunk_size}, canonical_replicas={lanes}")
    ok = True
    for lane in range(lanes):
        a = source.clone_for_lane(lane, lanes)
        head = [a.next_chunk() for _ in range(cut)]
        first = head[0]
        state = json.dumps(a.state_dict(), sort_keys=True)
        b = source.clone_for_lane(lane, lanes)
        b.load_state_dict(json.loads(state))
        want = [None if c is None else c.state_dict() for c in (a.next_chunk() for _ in range(20))]
        got = [None if c is None else c.state_dict() for c in (b.next_chunk() for _ in range(20))]
        ok &= want == got
        out(f"  lane {lane}: chunk 0 {_describe(first) if first else 'end'}; state after {cut} chunks "
            f"{len(state)} B; next 20 chunks {'identical' if want == got else 'DIFFER'}")
    return ok


def build_demo_pipeline(seed: int = 0, lanes: int = LANES) -> Pipeline:
    """The demo pipeline (also used by the benchmark and the docs)."""
    corpus = synthetic_corpus(seed=seed)
    source = StaticMixtureWorkSource(list(corpus.datasets), {"web": 0.6, "code": 0.3, "books": 0.1},
                                     chunk_size=32, seed=seed)
    return (Pipeline(source)
            .tokenize(field="text", max_length=96, split_long_samples=True)
            .pack_sequences(256, num_bins=4)
            .shuffle(64, seed=seed)
            .ensure_mixture()
            .batch(4)
            .options(runner="inline", canonical_replicas=lanes))


def _digest(batch: Any) -> str:
    h = hashlib.blake2b(digest_size=8)
    for rec in batch.records:
        h.update(repr(rec.meta.cursor.as_key()).encode())
        for seg in rec.payload["packed_samples"]:
            h.update(repr(list(seg["input_ids"])).encode())
    return h.hexdigest()


def _resume_child(directory: str, seed: int, lanes: int) -> int:
    p = build_demo_pipeline(seed, lanes)
    gen = p.load_checkpoint(directory)
    digests = [_digest(b) for b in p]
    json.dump({"generation": gen, "digests": digests}, sys.stdout)
    return 0


def run_demo(*, seed: int = 0, lanes: int = LANES, chunk_size: int = 32, cut: int = 3,
             out: Callable[[str], None] = print) -> bool:
    """Run both parts; True when every resumed stream matched."""
    ok = _source_part(seed, lanes, chunk_size, cut, out)
    full = [_digest(b) for b in build_demo_pipeline(seed, lanes)]
    at = len(full) * 2 // 5
    out(f"[2/2] engine: tokenize -> pack_sequences(first_fit) -> shuffle -> ensure_mixture -> batch(4), "
        f"{lanes} lanes: {len(full)} batches uninterrupted")
    p = build_demo_pipeline(seed, lanes)
    it = iter(p)
    head = [_digest(next(it)) for _ in range(at)]
    with tempfile.TemporaryDirectory(prefix="zephon-ref-demo-") as d:
        gen = p.save_checkpoint(d)
        state = p.checkpoint()
        size = sum(f.stat().st_size for f in Path(d).iterdir())
        inflight = {lane: len(chunks) for lane, chunks in state["inflight"].items()}
        out(f"  checkpoint after {at} batches: generation {gen}, {size} bytes on disk "
            f"({len(list(Path(d).iterdir()))} files), inflight chunks per lane {inflight}")
        res = subprocess.run([sys.executable, "-m", "zephon_ref.demo", "_resume", d, str(seed), str(lanes)],
                             capture_output=True, text=True, check=False)
        if res.returncode != 0:
            out(f"  FAILED: the resuming process exited {res.returncode}: {res.stderr.strip()[-500:]}")
            return False
        tail: list[str] = list(json.loads(res.stdout)["digests"])
    same = bool(head + tail == full)
    ok &= same
    out(f"  fresh process restored generation {gen} and delivered {len(tail)} batches: resumed stream "
        f"{'IDENTICAL to' if same else 'DIFFERS from'} the uninterrupted one")
    out(f"{'OK' if ok else 'FAILED'}: every resumed stream {'matched' if ok else 'did not match'}")
    return ok


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "_resume":
        raise SystemExit(_resume_child(sys.argv[2], int(sys.argv[3]), int(sys.argv[4])))
    raise SystemExit("usage: zephon-ref demo")

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
from zephon_ref.synthetic import synthetic_corpus
from zephon_ref.work import StaticMixtureWorkSource, WorkChunk

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
    out(f"[1/3] source layer: web:0.7 code:0.3 over {web.total()}+{code.total()} documents, "
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


def _lane_digests(items: list[Any]) -> dict[str, list[str]]:
    lanes: dict[str, list[str]] = {}
    for b in items:
        lanes.setdefault(str(b.lane_ids[0]), []).append(_digest(b))
    return lanes


def _rank_child(mode: str, root: str, rank: int, world: int, steps: int, seed: int, lanes: int) -> int:
    """One rank of the multi-rank demo: 'run' delivers `steps` items, checkpoints through the
    directory backend (rank 0 persists the merged state) and waits to be killed; 'resume'
    loads that state on another number of ranks and delivers the rest."""
    import time

    from zephon_ref.checkpoint import store

    p = build_demo_pipeline(seed, lanes).options(world_size=world, global_rank=rank,
                                                 aggregate_dir=str(Path(root) / "agg"),
                                                 run_id=f"demo-{mode}", aggregate_timeout_s=60.0)
    if mode == "resume":
        p.load_checkpoint(Path(root) / "ckpt")
        items = list(p)
    else:
        it = iter(p)
        items = [next(it) for _ in range(steps)]
    (Path(root) / f"{mode}-r{rank}.json").write_text(json.dumps(_lane_digests(items)))
    if mode == "run":
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            state = p.checkpoint()
        if rank == 0:
            store.save(state, Path(root) / "ckpt")
        (Path(root) / f"done-r{rank}").write_text("ok")
        while True:  # a crashed job: the parent SIGKILLs us
            time.sleep(0.2)  # clock-ok (waiting to be killed, not data)
    return 0


def _multi_rank_part(seed: int, lanes: int, before: int, after: int, out: Callable[[str], None]) -> bool:
    import time

    truth = _lane_digests(list(build_demo_pipeline(seed, lanes)))
    steps = 6 * (lanes // before)  # per rank; a whole number of global steps
    with tempfile.TemporaryDirectory(prefix="zephon-ref-ranks-") as root:
        cmd = [sys.executable, "-m", "zephon_ref.demo", "_rank"]
        procs = [subprocess.Popen([*cmd, "run", root, str(r), str(before), str(steps), str(seed), str(lanes)],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                 for r in range(before)]
        deadline = time.monotonic() + 120  # clock-ok (process supervision)
        while not all((Path(root) / f"done-r{r}").exists() for r in range(before)):
            if time.monotonic() > deadline or any(pr.poll() is not None for pr in procs):  # clock-ok
                for pr in procs:
                    pr.kill()
                errs = " | ".join((pr.stderr.read() or b"").decode()[-300:] for pr in procs if pr.stderr)
                out(f"  FAILED: the {before} rank processes did not checkpoint: {errs}")
                return False
            time.sleep(0.05)  # clock-ok
        for pr in procs:
            pr.kill()
            pr.wait()
        out(f"[3/3] multi-rank: {before} processes delivered {steps} batches each, checkpointed through the "
            f"directory backend, and were killed with SIGKILL")
        resumed = [subprocess.run([*cmd, "resume", root, str(r), str(after), "0", str(seed), str(lanes)],
                                  capture_output=True, text=True, check=False) for r in range(after)]
        if any(pr.returncode for pr in resumed):
            out(
                "  FAILED: a resuming rank exited non-zero: " + " | ".join(pr.stderr[-300:] for pr in resumed)
            )
            return False
        got: dict[str, list[str]] = {}
        for mode, n in (("run", before), ("resume", after)):
            for r in range(n):
                for lane, ds in json.loads((Path(root) / f"{mode}-r{r}.json").read_text()).items():
                    got.setdefault(lane, []).extend(ds)
    same_lanes = got == truth
    depth = min(len(v) for v in truth.values())
    same_steps = all({lane: got.get(lane, [])[k:k + 1] for lane in truth} ==
                     {lane: truth[lane][k:k + 1] for lane in truth} for k in range(depth))
    out(f"  {after} fresh processes resumed the merged checkpoint: every lane "
        f"{'IDENTICAL' if same_lanes else 'DIFFERS'} and every global step "
        f"{'IDENTICAL' if same_steps else 'DIFFERS'} to the uninterrupted single-rank run")
    return same_lanes and same_steps


def run_demo(*, seed: int = 0, lanes: int = LANES, chunk_size: int = 32, cut: int = 3,
             out: Callable[[str], None] = print, ranks: tuple[int, int] = (2, 4)) -> bool:
    """Run all parts; True when every resumed stream matched."""
    ok = _source_part(seed, lanes, chunk_size, cut, out)
    full = [_digest(b) for b in build_demo_pipeline(seed, lanes)]
    at = len(full) * 2 // 5
    out(f"[2/3] engine: tokenize -> pack_sequences(first_fit) -> shuffle -> ensure_mixture -> batch(4), "
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
    if lanes % ranks[0] == 0:
        ok &= _multi_rank_part(seed, lanes, ranks[0], ranks[1], out)
    out(f"{'OK' if ok else 'FAILED'}: every resumed stream {'matched' if ok else 'did not match'}")
    return ok


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "_resume":
        raise SystemExit(_resume_child(sys.argv[2], int(sys.argv[3]), int(sys.argv[4])))
    if len(sys.argv) == 9 and sys.argv[1] == "_rank":
        a = sys.argv
        raise SystemExit(_rank_child(a[2], a[3], int(a[4]), int(a[5]), int(a[6]), int(a[7]), int(a[8])))
    raise SystemExit("usage: zephon-ref demo")

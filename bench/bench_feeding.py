"""Feeding policies over a long run: bounded recovery (seed 000) and what it costs.

The notebooks' pipeline (``map_transform`` to token ids, ``pack_sequences(256, num_bins=4)``,
``shuffle(64)``, ``ensure_mixture()``, ``batch(4)``; ``chunk_size=32``,
``flush_every_k_chunks=2``, ``exhausted_policy="repeat"``: it never ends; inline runner), built
from one :class:`~properties.pipelines.PipelineConfig` for every library, at 2, 8 and 64 lanes:

* zephon_ref ``feeding="demand"`` (the default) and ``feeding="round_robin"`` (zephon's
  behaviour), and zephon 0.2.0 itself, each for N items (100,000; ``--quick``: 2,000);
* **worst inflight**: the most inflight chunks any lane held, sampled from a checkpoint every
  ``N / 1000`` items, reported at 1% / 10% / 100% of N (1k / 10k / 100k);
* **checkpoint bytes** (zephon_ref's codec) at 1% and at 100% of N, and the ratio;
* **restore-to-first-item** in a fresh process (``python3 bench/bench_feeding.py _child ...``:
  decode the saved state, ``restore()``, first item, in process CPU seconds; median of 3; the
  child checks that item equals the uninterrupted run's) at 1% and 100% of N, and the ratio
  (goal <= 1.1 under the default);
* **docs/s**: delivered documents (closing contributors) per CPU second of the iteration alone
  (checkpoint sampling excluded), demand over round robin, the two runs alternated in one process
  (goal >= 0.95); both deliver the same stream (a digest of every item's cursor keys is compared,
  and zephon's too).

Nothing asserts a speed; the goals are printed beside the ratios.  The machine is shared: read
ratios under ~10% as noise, and see the load average printed with the table.

Run: ``python3 bench/bench_feeding.py [--quick] [--json FILE]`` (full: tens of minutes on 2
loaded cores; not in CI), or through ``python3 -m bench --only feeding``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from properties.pipelines import PipelineConfig, build_pipeline  # noqa: E402
from sim.analysis import DEFAULT_LAYOUT, DEFAULT_MIXTURE  # noqa: E402

FULL_ITEMS = 100_000
QUICK_ITEMS = 2_000
LANES = (2, 8, 64)
QUICK_LANES = (2, 8)
POLICIES = ("demand", "round_robin")


def config(lanes: int) -> PipelineConfig:
    """The notebooks' pipeline at ``lanes`` lanes (one definition for both libraries)."""
    return PipelineConfig(
        chain=[
            ("pack_sequences", {"max_length": 256, "num_bins": 4}),
            ("shuffle", {"buffer_size": 64, "seed": 0}),
            ("ensure_mixture", {}),
            ("batch", {"microbatch_size": 4}),
        ],
        layout=dict(DEFAULT_LAYOUT),
        weights=dict(DEFAULT_MIXTURE),
        source_kwargs={"chunk_size": 32, "seed": 0, "exhausted_policy": "repeat"},
        options={"runner": "inline", "canonical_replicas": lanes, "flush_every_k_chunks": 2},
    )


def build(impl: str, lanes: int, feeding: str | None) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        extra = {} if feeding is None else {"feeding": feeding}
        return build_pipeline(impl, config(lanes), **extra)


def item_key(x: Any) -> bytes:
    recs = x.records if hasattr(x, "records") else (x,)
    return repr([tuple(r.meta.cursor.as_key()) for r in recs]).encode()


def docs_of(x: Any) -> int:
    recs = x.records if hasattr(x, "records") else (x,)
    return sum(1 for r in recs for ref in r.meta.contribution_refs() if ref.is_last_child)


def encoded(state: Any) -> bytes | None:
    from zephon_ref import codec

    try:
        return codec.encode(state)
    except Exception:  # noqa: BLE001 - a zephon state our codec cannot write: no byte count
        return None


def growth_by_field(before: dict[str, Any], after: dict[str, Any], *, top: int = 4) -> str:
    """Where a checkpoint's bytes grew: each top-level field encoded alone, the largest
    growths first, and the inflight chunks held (a field that grows with the run's age
    shows here; integers that widen as counters rise are the rest)."""
    sizes = {k: (len(encoded(before.get(k)) or b""), len(encoded(after.get(k)) or b"")) for k in after}
    grown = sorted(sizes.items(), key=lambda kv: kv[1][0] - kv[1][1])[:top]
    chunks = [sum(len(v) for v in s["inflight"].values()) for s in (before, after)]
    return ("growth by field (alone): " + ", ".join(f"{k} {a:,}->{b:,}" for k, (a, b) in grown)
            + f"; inflight chunks held {chunks[0]} -> {chunks[1]}")


@dataclass
class Run:
    """One library and policy over ``items`` items."""

    impl: str
    feeding: str | None
    lanes: int
    items: int
    marks: tuple[int, ...]
    worst_at: dict[int, int] = field(default_factory=dict)  # mark -> worst inflight of any lane so far
    bytes_at: dict[int, int | None] = field(default_factory=dict)
    states: dict[int, Any] = field(default_factory=dict)
    next_key: dict[int, str] = field(default_factory=dict)  # mark -> digest of the item after it
    docs: int = 0
    cpu: float = 0.0
    digest: str = ""
    prefix_digests: dict[int, str] = field(default_factory=dict)  # n -> digest of the first n items
    delivered: int = 0

    @property
    def label(self) -> str:
        return "zephon 0.2.0" if self.impl == "zephon" else f"zephon_ref {self.feeding}"


def run(impl: str, feeding: str | None, lanes: int, items: int, *, keep_states: bool = True,
        prefix: int | None = None) -> Run:
    """Iterate ``items`` items; sample the inflight chunks from a checkpoint every items/1000."""
    marks = (items // 100, items // 10, items)
    r = Run(impl, feeding, lanes, items, marks)
    p = build(impl, lanes, feeding)
    it = iter(p)
    every = max(1, items // 1000)
    worst = 0
    h = hashlib.blake2b(digest_size=16)
    want_next: set[int] = set()
    for i in range(1, items + 2):
        t0 = time.process_time()  # clock-ok: benchmark timing, never asserted
        x = next(it)
        r.cpu += time.process_time() - t0  # clock-ok
        if i > items:  # the item after the last mark: what a restore there must deliver first
            r.next_key[items] = hashlib.sha256(item_key(x)).hexdigest()
            break
        if i - 1 in want_next:
            r.next_key[i - 1] = hashlib.sha256(item_key(x)).hexdigest()
        h.update(item_key(x))
        if i == prefix:  # a shorter run (zephon's, capped) compares with this prefix
            r.prefix_digests[i] = h.copy().hexdigest()
        r.docs += docs_of(x)
        if i % every == 0 or i in marks:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                state = p.checkpoint()
            worst = max(worst, *(len(v) for v in state["inflight"].values()))
            if i in marks:
                r.worst_at[i] = worst
                if i in (marks[0], marks[-1]):
                    r.bytes_at[i] = None if (b := encoded(state)) is None else len(b)
                    if keep_states and impl == "zephon_ref":
                        r.states[i] = state
                        want_next.add(i)
    r.delivered = items
    r.digest = h.hexdigest()
    if hasattr(it, "close"):
        it.close()
    return r


# -- fresh-process restore ---------------------------------------------------------------------------


def child(args: dict[str, Any], out: str) -> None:
    """In a fresh process: decode the state, restore, time to the first item, check it.  The
    row uses the process's CPU seconds (single-threaded work; wall time on the shared 2-core
    machine moved the ratio by 30% with the load), wall time is kept beside it."""
    from zephon_ref import codec

    state = codec.decode(Path(args["path"]).read_bytes())
    p = build("zephon_ref", int(args["lanes"]), str(args["feeding"]))
    t0, c0 = time.perf_counter(), time.process_time()  # clock-ok: reported, never asserted
    p.restore(state)
    first = next(iter(p))
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0  # clock-ok
    ok = hashlib.sha256(item_key(first)).hexdigest() == args["expect"]
    Path(out).write_text(json.dumps({"seconds": cpu, "wall": wall, "ok": ok}))


def restore_seconds(tmp: str, r: Run, mark: int, *, reps: int) -> tuple[float, bool]:
    from zephon_ref import codec

    path = Path(tmp) / f"{r.lanes}-{r.feeding}-{mark}.ckpt"
    path.write_bytes(codec.encode(r.states[mark]))
    times, ok = [], True
    for k in range(reps):
        out = Path(tmp) / f"out-{r.lanes}-{r.feeding}-{mark}-{k}.json"
        a = {"path": str(path), "lanes": r.lanes, "feeding": r.feeding, "expect": r.next_key[mark]}
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        subprocess.run([sys.executable, str(Path(__file__).resolve()), "_child", json.dumps(a), str(out)],
                       check=True, env=env, cwd=ROOT)
        got = json.loads(out.read_text())
        times.append(float(got["seconds"]))
        ok = ok and bool(got["ok"])
    return statistics.median(times), ok


# -- the table ---------------------------------------------------------------------------------------


def _zephon_available() -> bool:
    try:
        import zephon  # noqa: F401
    except ImportError:
        return False
    return True


def measure(*, quick: bool, lanes: tuple[int, ...] | None = None, items: int | None = None, reps: int = 3,
            progress: bool = True, zephon_items: int | None = None) -> list[dict[str, Any]]:
    """Rows for ``python -m bench`` (and the JSON of the script); ``zephon_items`` caps zephon's run
    (it is the slowest: about twice zephon_ref's CPU per item)."""
    items = items or (QUICK_ITEMS if quick else FULL_ITEMS)
    z_items = min(items, zephon_items or items)
    lanes = lanes or (QUICK_LANES if quick else LANES)
    rows: list[dict[str, Any]] = []
    zephon = _zephon_available()
    with tempfile.TemporaryDirectory(prefix="zephon-ref-bench-feeding-") as tmp:
        for n in lanes:
            runs: dict[str, Run] = {}
            for feeding in POLICIES:
                if progress:
                    print(
                        f"  {n} lanes, zephon_ref {feeding}, {items:,} items ...", file=sys.stderr, flush=True
                    )
                runs[feeding] = run("zephon_ref", feeding, n, items, prefix=z_items)
            if zephon:
                if progress:
                    print(f"  {n} lanes, zephon 0.2.0, {z_items:,} items ...", file=sys.stderr, flush=True)
                runs["zephon"] = run("zephon", None, n, z_items, keep_states=False)
            # the throughput ratio: demand and round robin once more, alternated, in this process
            tp = {f: [runs[f].cpu] for f in POLICIES}
            for _ in range(1):
                for f in reversed(POLICIES):
                    again = run("zephon_ref", f, n, min(items, 20_000), keep_states=False)
                    tp[f].append(again.cpu * items / again.items)
            same = runs["demand"].digest == runs["round_robin"].digest
            zsame = "zephon" not in runs or runs["zephon"].digest == runs["demand"].prefix_digests.get(
                z_items, runs["demand"].digest)  # zephon's run may be shorter: the same prefix
            for key, r in runs.items():
                m = r.marks
                worst = " / ".join(f"{r.worst_at[k]}" for k in m)
                identical = key == "demand" or (same if key != "zephon" else zsame)
                rows.append(
                    _row(
                        f"{n} lanes {r.label}: worst inflight chunks at {m[0]:,} / {m[1]:,} / {m[2]:,} items",
                        r.worst_at[m[-1]],
                        None,
                        "chunks",
                        None,
                        None,
                        f"{worst}; stream {'identical to demand' if identical else 'DIFFERS from demand'}",
                    )
                )
                b0, b1 = r.bytes_at.get(m[0]), r.bytes_at.get(m[-1])
                rows.append(_row(f"{n} lanes {r.label}: checkpoint bytes at {m[-1]:,} over at {m[0]:,} items",
                                 b1, b0, "bytes", None if not b0 or b1 is None else b1 / b0,
                                 f"the same run's checkpoint at {m[0]:,} items",
                                 ("goal <= 1.1 (demand)" if key == "demand" else "no bound")
                                 + ("; " + growth_by_field(r.states[m[0]], r.states[m[-1]])
                                    if m[0] in r.states and m[-1] in r.states else "")))
                if key in POLICIES:
                    t0, ok0 = restore_seconds(tmp, r, m[0], reps=reps)
                    t1, ok1 = restore_seconds(tmp, r, m[-1], reps=reps)
                    rows.append(
                        _row(
                            f"{n} lanes {r.label}: fresh-process restore-to-first-item at {m[-1]:,} over "
                            f"at {m[0]:,} items",
                            t1,
                            t0,
                            "s",
                            t1 / t0,
                            f"the same run's restore at {m[0]:,} items",
                            ("goal <= 1.1; " if key == "demand" else "")
                            + f"CPU s, median of {reps}; first item "
                            + ("checked equal" if ok0 and ok1 else "DIFFERS"),
                        )
                    )
            d, rr = statistics.median(tp["demand"]), statistics.median(tp["round_robin"])
            docs = runs["demand"].docs
            rows.append(
                _row(
                    f"{n} lanes: docs/s, demand over round-robin feeding",
                    docs / d,
                    docs / rr,
                    "docs/CPU-s",
                    rr / d,
                    "the same pipeline fed round robin",
                    f"goal >= 0.95; median of {len(tp['demand'])} runs each (the long run, then "
                    f"{min(items, 20_000):,} items, round robin first); "
                    f"streams {'identical' if same else 'DIFFER'}",
                )
            )
    rows.append(_row("load average during the run", os.getloadavg()[0], None, "", None, None,
                     "1-minute load average at the end (2 shared cores)"))
    return rows


def _row(
    name: str, ours: Any, theirs: Any, unit: str, ratio: Any, vs: str | None, note: str
) -> dict[str, Any]:
    """One bench row; ``vs`` says what ``theirs`` is (None when there is no ``theirs``)."""
    return {
        "name": name,
        "ours": ours,
        "theirs": theirs,
        "vs": vs,
        "unit": unit,
        "ratio": ratio,
        "note": note,
    }


def results(*, quick: bool = True) -> list[dict[str, Any]]:
    """``python -m bench`` entry point."""
    return measure(quick=quick)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help=f"{QUICK_ITEMS:,} items at {QUICK_LANES} lanes")
    ap.add_argument("--json", default=None, help="also write the rows to this file")
    ap.add_argument("--lanes", default=None, help="comma-separated lane counts (default: 2,8,64; quick: 2,8)")
    ap.add_argument("--items", type=int, default=None, help="items per run (default: 100,000; quick: 2,000)")
    ap.add_argument(
        "--zephon-items", type=int, default=None, help="cap zephon 0.2.0's run at this many items"
    )
    args = ap.parse_args(argv)
    from bench.__main__ import markdown

    lanes = tuple(int(x) for x in args.lanes.split(",")) if args.lanes else None
    rows = measure(quick=args.quick, lanes=lanes, items=args.items, zephon_items=args.zephon_items)
    print(markdown(rows))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "_child":
        child(json.loads(sys.argv[2]), sys.argv[3])
        raise SystemExit(0)
    raise SystemExit(main())

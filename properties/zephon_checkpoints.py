"""Judge zephon 0.2.0 checkpoints: restore each into zephon_ref (and into zephon) and compare.

For a pipeline configuration (:class:`~properties.pipelines.PipelineConfig`),
:func:`judge_config` runs zephon once, taking a checkpoint after each chosen
number of delivered items (the cut), and runs zephon_ref once uninterrupted.
Each checkpoint is then restored

* into a fresh zephon_ref pipeline of the same configuration, whose
  continuation must equal zephon_ref's uninterrupted remainder (conformance says
  that equals zephon's); and
* into a fresh zephon pipeline, whose continuation is compared with zephon's
  uninterrupted remainder: a difference is a zephon resume bug.

:func:`random_config` draws configurations like the pipeline conformance test
does (packing, shuffle, ensure_mixture, batch on 1..8 lanes), from a seeded
``random.Random``.  ``python -m properties.zephon_checkpoints --cuts N`` prints
the tally.  Requires ``zephon``.
"""

from __future__ import annotations

import argparse
import copy
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from random import Random
from typing import Any

from properties.pipelines import PipelineConfig, build_pipeline, item_view

__all__ = ["CutResult", "Tally", "judge_config", "random_config", "survey"]

LAYOUT = {"web": (40, 25), "code": (20, 12), "books": (10,)}


def random_config(rng: Random) -> PipelineConfig:
    """A pipeline like test_pipeline_conformance's generated ones."""
    chain: list[tuple[str, dict[str, Any]]] = []
    r = rng.random()
    if r < 0.25:
        chain.append(("pack_sequences", {"max_length": rng.choice([96, 160, 256]), "num_bins": rng.randint(1, 6)}))
    elif r < 0.4:
        chain.append(("pack_sequences", {"max_length": rng.choice([96, 160, 256]), "num_bins": rng.randint(1, 6),
                                         "algorithm": "best_fit"}))
    elif r < 0.55:
        chain.append(("pack_sequences", {"max_length": rng.choice([48, 128]), "algorithm": "wrap"}))
    r = rng.random()
    if r < 0.3:
        chain.append(("shuffle", {"buffer_size": rng.randint(1, 40), "seed": rng.randint(0, 99)}))
    elif r < 0.45:
        chain.append(("shuffle", {"buffer_size": rng.randint(1, 20), "seed": rng.randint(0, 99), "algorithm": "block"}))
    r = rng.random()
    if r < 0.2:
        chain.append(("ensure_mixture", {}))
    elif r < 0.35:
        chain.append(("ensure_mixture", {"max_buffer_size": rng.randint(4, 64)}))
    if rng.random() < 0.5:
        chain.append(("batch", {"microbatch_size": rng.randint(1, 5)}))
    k: int | None = rng.choice([None, 1, 2, 3, 4])
    if not any(step[0] in ("pack_sequences", "shuffle", "ensure_mixture") for step in chain):
        k = None  # monotone plan: both reset K to 0
    src: dict[str, Any] = {"chunk_size": rng.randint(4, 24), "seed": rng.randint(0, 999)}
    if rng.random() < 0.3:
        src["shuffle_block_size"] = rng.choice([2, 5, 16])
    if rng.random() < 0.2:
        src["shuffle_within_shard"] = True
    if rng.random() < 0.2:
        src["lane_assignment"] = "modulo"
    r = rng.random()
    if r < 0.2:
        src["exhausted_policy"] = "repeat"
        src["stop_after_passes"] = 2
    elif r < 0.3:
        src["exhausted_policy"] = {"books": "redistribute"}
    elif r < 0.4:
        src["exhausted_policy"] = "stop"
    return PipelineConfig(chain, layout=LAYOUT, source_kwargs=src,
                          options={"runner": "inline", "canonical_replicas": rng.randint(1, 8),
                                   "flush_every_k_chunks": k})


@dataclass
class CutResult:
    cut: int
    total: int
    ref: str  # "exact" | "differs" | "refused: <error>"
    zephon: str  # "exact" | "differs" | "raised: <error>"
    ref_detail: str = ""
    zephon_detail: str = ""


@dataclass
class Tally:
    cuts: int = 0
    ref_exact: int = 0
    ref_refused: int = 0
    ref_differs: int = 0
    zephon_exact: int = 0
    zephon_wrong: int = 0
    skipped_configs: int = 0
    refusals: dict[str, int] = field(default_factory=dict)
    ref_failures: list[str] = field(default_factory=list)
    zephon_failures: list[str] = field(default_factory=list)

    def add(self, cfg: PipelineConfig, r: CutResult) -> None:
        self.cuts += 1
        where = f"cut {r.cut}/{r.total} of {cfg.describe()}"
        if r.ref == "exact":
            self.ref_exact += 1
        elif r.ref.startswith("refused"):
            self.ref_refused += 1
            self.refusals[r.ref] = self.refusals.get(r.ref, 0) + 1
            self.ref_failures.append(f"{r.ref} ({r.ref_detail}): {where}")
        else:
            self.ref_differs += 1
            self.ref_failures.append(f"zephon_ref continuation differs ({r.ref_detail}): {where}")
        if r.zephon == "exact":
            self.zephon_exact += 1
        else:
            self.zephon_wrong += 1
            self.zephon_failures.append(f"{r.zephon} ({r.zephon_detail}): {where}")

    def summary(self) -> str:
        lines = [f"zephon checkpoints at random cuts: {self.cuts} "
                 f"(configs skipped because the uninterrupted runs differ: {self.skipped_configs})",
                 f"  zephon_ref restores and continues exactly: {self.ref_exact}",
                 f"  zephon_ref refuses: {self.ref_refused} {self.refusals or ''}",
                 f"  zephon_ref continues wrongly: {self.ref_differs}",
                 f"  zephon's own resume exact: {self.zephon_exact}, wrong: {self.zephon_wrong}"]
        return "\n".join(lines)


def _views(items: Sequence[Any]) -> list[Any]:
    return [item_view(x) for x in items]


def _first_difference(got: list[Any], want: list[Any]) -> str:
    for i, (g, w) in enumerate(zip(got, want, strict=False)):
        if g != w:
            return f"item {i} of {len(want)}: got {str(g)[:160]} want {str(w)[:160]}"
    return f"length {len(got)} != {len(want)}"


def zephon_run_with_checkpoints(cfg: PipelineConfig, cuts: Sequence[int]) -> tuple[list[Any], dict[int, Any]]:
    """zephon's uninterrupted run (item views) and a deep-copied checkpoint at each cut."""
    p = build_pipeline("zephon", cfg)
    want = set(cuts)
    states: dict[int, Any] = {}
    out: list[Any] = []
    if 0 in want:
        states[0] = copy.deepcopy(p.checkpoint())
    for x in p:
        out.append(item_view(x))
        if len(out) in want:
            states[len(out)] = copy.deepcopy(p.checkpoint())
    return out, states


def judge_config(cfg: PipelineConfig, rng: Random, n_cuts: int) -> tuple[list[CutResult], bool]:
    """Results for ``n_cuts`` random cuts; False if the two uninterrupted runs differ (not judged)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref_full = _views(list(build_pipeline("zephon_ref", cfg)))
        total = len(ref_full)
        cuts = sorted({rng.randint(0, max(0, total - 1)) for _ in range(n_cuts)})
        z_full, states = zephon_run_with_checkpoints(cfg, cuts)
        if z_full != ref_full:
            return [], False
        results = []
        for cut in cuts:
            state = states[cut]
            res = CutResult(cut, total, "", "")
            try:
                p = build_pipeline("zephon_ref", cfg)
                p.restore(copy.deepcopy(state))
                got = _views(list(p))
                res.ref = "exact" if got == ref_full[cut:] else "differs"
                if res.ref == "differs":
                    res.ref_detail = _first_difference(got, ref_full[cut:])
            except (ValueError, TypeError, RuntimeError, KeyError) as exc:
                res.ref = f"refused: {type(exc).__name__}"
                res.ref_detail = str(exc)[:300]
            try:
                zp = build_pipeline("zephon", cfg)
                zp.restore(copy.deepcopy(state))
                zgot = _views(list(zp))
                res.zephon = "exact" if zgot == z_full[cut:] else "differs"
                if res.zephon == "differs":
                    res.zephon_detail = _first_difference(zgot, z_full[cut:])
            except Exception as exc:  # noqa: BLE001 - any zephon failure is a finding, recorded
                res.zephon = f"raised: {type(exc).__name__}"
                res.zephon_detail = str(exc)[:300]
            results.append(res)
        return results, True


def survey(total_cuts: int, *, seed: int = 0, cuts_per_config: int = 4) -> Tally:
    rng = Random(seed)
    tally = Tally()
    while tally.cuts < total_cuts:
        cfg = random_config(rng)
        results, judged = judge_config(cfg, rng, min(cuts_per_config, total_cuts - tally.cuts))
        if not judged:
            tally.skipped_configs += 1
            continue
        for r in results:
            tally.add(cfg, r)
    return tally


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cuts", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--examples", type=int, default=5, help="failures to print per kind")
    a = ap.parse_args(argv)
    t = survey(a.cuts, seed=a.seed)
    print(t.summary())
    for line in t.ref_failures[: a.examples]:
        print("REF  ", line)
    for line in t.zephon_failures[: a.examples]:
        print("ZEPH ", line)
    return 0 if not t.ref_failures else 1


if __name__ == "__main__":
    raise SystemExit(main())

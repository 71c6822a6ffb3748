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
        chain.append(
            ("pack_sequences", {"max_length": rng.choice([96, 160, 256]), "num_bins": rng.randint(1, 6)})
        )
    elif r < 0.4:
        chain.append(
            (
                "pack_sequences",
                {
                    "max_length": rng.choice([96, 160, 256]),
                    "num_bins": rng.randint(1, 6),
                    "algorithm": "best_fit",
                },
            )
        )
    elif r < 0.55:
        chain.append(("pack_sequences", {"max_length": rng.choice([48, 128]), "algorithm": "wrap"}))
    r = rng.random()
    if r < 0.3:
        chain.append(("shuffle", {"buffer_size": rng.randint(1, 40), "seed": rng.randint(0, 99)}))
    elif r < 0.45:
        chain.append(
            ("shuffle", {"buffer_size": rng.randint(1, 20), "seed": rng.randint(0, 99), "algorithm": "block"})
        )
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
    resumed_from: int | None = None  # the cut of the zephon checkpoint this run resumed from


@dataclass
class Tally:
    cuts: int = 0
    ref_exact: int = 0
    ref_refused: int = 0
    ref_differs: int = 0
    zephon_exact: int = 0
    zephon_wrong: int = 0
    skipped_configs: int = 0
    after_resume: int = 0  # cuts taken from a zephon run that was itself resumed
    skipped: list[str] = field(default_factory=list)
    refusals: dict[str, int] = field(default_factory=dict)
    ref_failures: list[str] = field(default_factory=list)
    zephon_failures: list[str] = field(default_factory=list)

    def add(self, cfg: PipelineConfig, r: CutResult) -> None:
        self.cuts += 1
        again = "" if r.resumed_from is None else f" (taken after a zephon resume at {r.resumed_from})"
        where = f"cut {r.cut}/{r.total}{again} of {cfg.describe()}"
        if r.resumed_from is not None:
            self.after_resume += 1
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
        lines = [f"zephon checkpoints at random cuts: {self.cuts}, {self.after_resume} of them written by a "
                 f"resumed zephon run (configs skipped because the uninterrupted runs differ: "
                 f"{self.skipped_configs})",
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


def restore_any(pipeline: Any, state: Any) -> Any:
    """Restore ``state`` into ``pipeline``: a zephon 0.2.0 state into a zephon_ref pipeline through
    the explicit translation (:func:`zephon_ref.compat.restore_zephon_state`), anything else with
    the pipeline's own ``restore``."""
    from zephon_ref.builder import Builder
    from zephon_ref.compat import is_zephon_state, restore_zephon_state

    if isinstance(pipeline, Builder) and is_zephon_state(state):
        return restore_zephon_state(pipeline, state)
    return pipeline.restore(state)


def zephon_run_with_checkpoints(cfg: PipelineConfig, cuts: Sequence[int], *, state: Any = None,
                                runner: str | None = None) -> tuple[list[Any], dict[int, Any]]:
    """zephon's run (item views; resumed from ``state`` if given) and a deep copy of its checkpoint at
    each cut."""
    p = build_pipeline("zephon", cfg, **({} if runner is None else {"runner": runner}))
    if state is not None:
        p.restore(copy.deepcopy(state))
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


def _ref_verdict(cfg: PipelineConfig, state: Any, want: list[Any]) -> tuple[str, str]:
    try:
        p = build_pipeline("zephon_ref", cfg)
        restore_any(p, copy.deepcopy(state))
        got = _views(list(p))
    except (ValueError, TypeError, RuntimeError, KeyError) as exc:
        return f"refused: {type(exc).__name__}", str(exc)[:300]
    return ("exact", "") if got == want else ("differs", _first_difference(got, want))


def judge_config(cfg: PipelineConfig, rng: Random, n_cuts: int) -> tuple[list[CutResult], bool]:
    """Results for up to ``n_cuts`` random cuts; False if the two uninterrupted runs differ (not judged).

    zephon's run uses the threads runner for some configurations (its checkpoint
    then holds however many chunks its pump admitted ahead).  Every other cut is
    taken from a zephon run that was itself resumed from an earlier checkpoint
    (when that resume was exact), so states written after a reload are judged too.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref_full = _views(list(build_pipeline("zephon_ref", cfg)))
        total = len(ref_full)
        runner = "threads" if rng.random() < 0.3 else None
        first = sorted({rng.randint(0, max(0, total - 1)) for _ in range(max(1, (n_cuts + 1) // 2))})
        z_full, states = zephon_run_with_checkpoints(cfg, first, runner=runner)
        if z_full != ref_full:
            return [], False
        results: list[CutResult] = []
        for cut in first:
            if len(results) >= n_cuts:
                break
            state = states[cut]
            res = CutResult(cut, total, "", "")
            res.ref, res.ref_detail = _ref_verdict(cfg, state, ref_full[cut:])
            second = rng.randint(0, max(0, total - cut - 1))
            try:
                zgot, later = zephon_run_with_checkpoints(cfg, [second], state=state, runner=runner)
                res.zephon = "exact" if zgot == z_full[cut:] else "differs"
                if res.zephon == "differs":
                    res.zephon_detail = _first_difference(zgot, z_full[cut:])
            except Exception as exc:  # noqa: BLE001 - any zephon failure is a finding, recorded
                res.zephon, res.zephon_detail, later = f"raised: {type(exc).__name__}", str(exc)[:300], {}
            results.append(res)
            if res.zephon != "exact" or second not in later or len(results) >= n_cuts:
                continue
            # a checkpoint written by a resumed zephon run
            c2 = cut + second
            res2 = CutResult(c2, total, "", "", resumed_from=cut)
            res2.ref, res2.ref_detail = _ref_verdict(cfg, later[second], ref_full[c2:])
            try:
                zgot2, _ = zephon_run_with_checkpoints(cfg, [], state=later[second], runner=runner)
                res2.zephon = "exact" if zgot2 == z_full[c2:] else "differs"
                if res2.zephon == "differs":
                    res2.zephon_detail = _first_difference(zgot2, z_full[c2:])
            except Exception as exc:  # noqa: BLE001 - any zephon failure is a finding, recorded
                res2.zephon, res2.zephon_detail = f"raised: {type(exc).__name__}", str(exc)[:300]
            results.append(res2)
        return results, True


def survey(total_cuts: int, *, seed: int = 0, cuts_per_config: int = 4) -> Tally:
    rng = Random(seed)
    tally = Tally()
    while tally.cuts < total_cuts:
        cfg = random_config(rng)
        results, judged = judge_config(cfg, rng, min(cuts_per_config, total_cuts - tally.cuts))
        if not judged:
            tally.skipped_configs += 1
            tally.skipped.append(cfg.describe())
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
    for line in t.skipped[: a.examples]:
        print("SKIP ", line)
    return 0 if not t.ref_failures else 1


if __name__ == "__main__":
    raise SystemExit(main())

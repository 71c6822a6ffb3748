"""``Pipeline.explain()`` against zephon 0.2.0 on generated plans: the same text, stage by stage.

explain() describes execution (stages, parallelism, queue depths), never the data; a user reading
the plan of a zephon pipeline run on zephon_ref sees the same depths as zephon prints for the same
options.  The generator draws a chain from a few operator shapes (with and without ``batch``, whose
position splits the plan into two stages; an operator name twice; parallelism given to map_transform,
map_batch, pack_sequences, pack_flat, shuffle, ensure_mixture, expand_chat and tokenize, and their
defaults), a runner, the depth options and the worker allocation.
"""

from __future__ import annotations

import importlib
import random
import warnings
from typing import Any

import pytest

pytest.importorskip("zephon")

from properties.pipelines import PipelineConfig, crc_tokens, work_source  # noqa: E402

CONFIGS = 200
CHAINS: list[list[tuple[str, dict[str, Any]]]] = [
    [],
    [("shuffle", {"buffer_size": 4})],
    [("map_transform", {"transform_fn": crc_tokens, "parallelism": 3})],
    [("pack_sequences", {"max_length": 16, "num_bins": 2}), ("batch", {"microbatch_size": 2})],
    [("batch", {"microbatch_size": 2})],
    [("shuffle", {"buffer_size": 4}), ("ensure_mixture", {}), ("batch", {"microbatch_size": 2})],
    [("batch", {"microbatch_size": 2}), ("map_batch", {"transform_fn": lambda b: b})],
    [("batch", {"microbatch_size": 2}), ("map_batch", {"transform_fn": lambda b: b, "parallelism": 7})],
    [("map_transform", {"transform_fn": crc_tokens}), ("shuffle", {"buffer_size": 4}),
     ("batch", {"microbatch_size": 3})],
    [("pack_sequences", {"max_length": 16, "num_bins": 2, "parallelism": 3}),
     ("shuffle", {"buffer_size": 4, "parallelism": 2}), ("ensure_mixture", {"parallelism": 5}),
     ("batch", {"microbatch_size": 2})],
    [("pack_flat", {"max_length": 16, "num_bins": 2, "pad_token_id": 0, "parallelism": 2})],
    [("tokenize", {"field": "text"}), ("decode_text", {}), ("expand_chat", {"parallelism": 3})],
    [("tokenize", {"field": "text", "parallelism": 2}), ("pack_flat", {"max_length": 8, "num_bins": 1,
                                                                        "pad_token_id": 0})],
]


def draw(seed: int) -> tuple[list[tuple[str, dict[str, Any]]], dict[str, Any]]:
    rng = random.Random(seed)
    chain = CHAINS[seed % len(CHAINS)]
    opts: dict[str, Any] = {}
    if rng.random() < 0.8:
        opts["runner"] = rng.choice(["inline", "threads"])
    for k in ("op_queue_capacity", "prefetch_batches", "default_stage_prefetch", "max_workers"):
        if rng.random() < 0.4:
            opts[k] = rng.randint(0, 12)  # 0: no queue / no prefetch, printed as zephon prints it
    if rng.random() < 0.3:
        opts["per_stage_prefetch"] = {rng.randint(0, 1): rng.randint(0, 9)}
    if rng.random() < 0.4:
        opts["worker_allocation"] = rng.choice(["fit_to_ops", "per_stage_fixed", "global"])
    return chain, opts


def explain(impl: str, chain: list[tuple[str, dict[str, Any]]], opts: dict[str, Any]) -> str:
    pipeline = importlib.import_module("zephon" if impl == "zephon" else "zephon_ref.pipeline").Pipeline
    p = pipeline(work_source(PipelineConfig([]), impl)).map_transform(crc_tokens)
    for method, kw in chain:
        p = getattr(p, method)(**kw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return str(p.options(canonical_replicas=1, **opts).explain())


@pytest.mark.parametrize("seed", range(CONFIGS))
def test_explain_prints_zephons_plan_and_depths(seed: int) -> None:
    chain, opts = draw(seed)
    assert explain("zephon_ref", chain, opts) == explain("zephon", chain, opts), (chain, opts)


def test_the_draws_reach_every_depth_option_and_both_stage_shapes() -> None:
    drawn = [draw(s) for s in range(CONFIGS)]
    keys = {k for _, o in drawn for k in o}
    assert keys >= {"runner", "op_queue_capacity", "prefetch_batches", "default_stage_prefetch",
                    "max_workers", "per_stage_prefetch", "worker_allocation"}, keys
    assert {o.get("worker_allocation") for _, o in drawn} >= {"per_stage_fixed", "global"}
    assert {k for _, o in drawn for k, v in o.items() if v == 0} >= {"op_queue_capacity", "prefetch_batches",
                                                                       "default_stage_prefetch"}
    assert any(o.get("max_workers", 0) > 4 and "op_queue_capacity" not in o for _, o in drawn)
    assert {any(m == "batch" for m, _ in c) for c, _ in drawn} == {True, False}


def test_the_comparison_sees_a_depth_taken_from_the_wrong_option(monkeypatch: pytest.MonkeyPatch) -> None:
    """A planted bug: explain() printing the stage depth where the final prefetch belongs."""
    from zephon_ref import explain as module

    chain, opts = [("batch", {"microbatch_size": 2})], {"runner": "threads", "prefetch_batches": 3,
                                                        "default_stage_prefetch": 5}
    assert explain("zephon_ref", chain, opts) == explain("zephon", chain, opts)
    plain = module.explain_plan

    def wrong(ops: Any, **kw: Any) -> str:
        o = dict(kw.pop("options"))
        o["prefetch_batches"] = o.get("default_stage_prefetch")
        return plain(ops, options=o, **kw)

    monkeypatch.setattr("zephon_ref.pipeline.explain_plan", wrong)
    assert explain("zephon_ref", chain, opts) != explain("zephon", chain, opts)


@pytest.mark.parametrize("fit_after_batch", [1, 2, 5, 8, 12])
def test_a_global_worker_budget_is_split_between_the_stages_as_in_zephon(fit_after_batch: int) -> None:
    """``worker_allocation="global"`` over every budget from 1 to 24 workers, with the second stage
    holding from ``batch`` alone (fit cap 1) to a map_batch of parallelism 11 (fit cap 12)."""
    chain: list[tuple[str, dict[str, Any]]] = [("batch", {"microbatch_size": 2})]
    if fit_after_batch > 1:
        chain.append(("map_batch", {"transform_fn": lambda b: b, "parallelism": fit_after_batch - 1}))
    for total in range(1, 25):
        opts = {"runner": "threads", "worker_allocation": "global", "max_workers": total}
        assert explain("zephon_ref", chain, opts) == explain("zephon", chain, opts), opts

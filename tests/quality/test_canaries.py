"""Canary mutants: each plants one realistic bug in the engine and proves the suite's own
checks (resume equivalence, lane partition, conformance of per-lane streams) catch it.
A canary that survives means the checks have gone blind: it fails this test."""

from __future__ import annotations

import warnings
from collections.abc import Callable

import pytest

from properties.pipelines import PipelineConfig, build_pipeline, item_view
from properties.topology import merged_checkpoint, participants, run_lockstep
from zephon_ref.engine import core, lanes, runner
from zephon_ref.ops import replay_filter
from zephon_ref.work import static_mixture

CFG = PipelineConfig([("pack_sequences", {"max_length": 160, "num_bins": 2}), ("shuffle", {"buffer_size": 4, "seed": 2}),
                      ("batch", {"microbatch_size": 2})],
                     layout={"web": (14, 9), "code": (8,), "books": (5,)},
                     source_kwargs={"chunk_size": 4, "seed": 3},
                     options={"runner": "inline", "canonical_replicas": 3, "flush_every_k_chunks": 2})


# wrap packing splits records across packs: fragments whose refs do not close
CFG_WRAP = PipelineConfig([("pack_sequences", {"max_length": 24, "algorithm": "wrap"}),
                           ("shuffle", {"buffer_size": 3, "seed": 1})],
                          layout={"web": (8, 5), "code": (6,)}, weights={"web": 2, "code": 1},
                          source_kwargs={"chunk_size": 3, "seed": 5},
                          options={"runner": "inline", "canonical_replicas": 2, "flush_every_k_chunks": 1})


def resume_everywhere_ok() -> bool:
    """The resume-equivalence check, cut before every item, on two pipelines."""
    try:
        for cfg in (CFG, CFG_WRAP):
            p = build_pipeline("zephon_ref", cfg)
            cks, items = [p.checkpoint()], []
            for x in p:
                items.append(item_view(x))
                cks.append(p.checkpoint())
            for i, ck in enumerate(cks):
                q = build_pipeline("zephon_ref", cfg)
                q.restore(ck)
                if [item_view(x) for x in q] != items[i:]:
                    return False
        return True
    except Exception:  # a crash is a caught bug too
        return False


def elastic_ok() -> bool:
    """3 ranks cut mid-window (2, 2 and 1 items), resumed on 1 rank: the single-rank sequence."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            flat = [item_view(x) for x in build_pipeline("zephon_ref", CFG)]
            first = participants(CFG, 3)
            its = [iter(p) for p in first]
            head = [item_view(next(its[r])) for r in (0, 1, 2, 0, 1)]
            rest = [v for s in run_lockstep(participants(CFG, 1, state=merged_checkpoint(first)))[0] for _, v in s]
        return head + rest == flat
    except Exception:
        return False


def _mut_filter_le(monkeypatch: pytest.MonkeyPatch) -> None:
    """Replay filter matches cursor <= target instead of equality."""
    orig = replay_filter.ReplayFilterAccumulator.push_many

    def push_many(self, elems):  # type: ignore[no-untyped-def]
        for rec in elems:
            t = self._pending.get(rec.meta.lane_id)
            if t is not None and not rec.meta.tombstone and rec.meta.cursor <= t and rec.meta.cursor != t:
                del self._pending[rec.meta.lane_id]
        return orig(self, elems)
    monkeypatch.setattr(replay_filter.ReplayFilterAccumulator, "push_many", push_many)


def bounded_inflight_ok() -> bool:
    """A pipeline that drops a third of its records still evicts: inflight stays bounded."""
    try:
        p = build_pipeline("zephon_ref", PipelineConfig(
            [("map_transform", {"transform_fn": _drop_some}), ("shuffle", {"buffer_size": 3, "seed": 1})],
            layout={"web": (40, 30), "code": (20,), "books": (10,)}, source_kwargs={"chunk_size": 3, "seed": 1},
            options={"runner": "inline", "canonical_replicas": 1, "flush_every_k_chunks": 1}))
        peak = 0
        for _ in p:
            peak = max(peak, len(p.checkpoint()["inflight"][0]))
        return peak <= 4
    except Exception:
        return False


def _drop_some(payload):  # type: ignore[no-untyped-def]
    return None if len(payload["input_ids"]) % 3 == 0 else payload


def _mut_ignore_tombstones(monkeypatch: pytest.MonkeyPatch) -> None:
    """Delivery ignores tombstones: dropped records never close their offsets."""
    monkeypatch.setattr(core.Engine, "_on_tombstone", lambda self, t: None)


def _mut_boundary_off_by_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """A restored lane forgets its trailing boundary sentinel."""
    orig = lanes.LaneStream.load

    def load(self, **kw):  # type: ignore[no-untyped-def]
        orig(self, **kw)
        if self.boundaries and self.inflight and self.boundaries[-1] > max(self.inflight):
            self.boundaries = self.boundaries[:-1]
    monkeypatch.setattr(lanes.LaneStream, "load", load)


def _mut_stale_ws_state(monkeypatch: pytest.MonkeyPatch) -> None:
    """The checkpoint stores the work source one chunk behind the admitted chunks."""
    orig = lanes.LaneStream.state

    def state(self):  # type: ignore[no-untyped-def]
        out = orig(self)
        ws = dict(out["lane_ws_state"])
        ws["global_chunk_index"] = max(0, ws["global_chunk_index"] - 1)
        out["lane_ws_state"] = ws
        return out
    monkeypatch.setattr(lanes.LaneStream, "state", state)


def _mut_rr_pointer(monkeypatch: pytest.MonkeyPatch) -> None:
    """The multiplexer restarts at lane 0 after a topology change."""
    monkeypatch.setattr(core.Engine, "_start_index", lambda self: 0)


def _mut_flush_not_reset(monkeypatch: pytest.MonkeyPatch) -> None:
    """Flush sentinels no longer reset the operators (flush without reset)."""
    orig = runner.OpStage._sentinel

    def _sentinel(self, s, out):  # type: ignore[no-untyped-def]
        if s.meta.is_flush_sentinel:
            out.append((True, [s]))
            return
        orig(self, s, out)
    monkeypatch.setattr(runner.OpStage, "_sentinel", _sentinel)


def _mut_permute_seed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Lane routing ignores the block number (same permutation every block)."""
    import random

    def lane_for_chunk(self, g):  # type: ignore[no-untyped-def]
        _, canon = self._require_lane()
        order = list(range(canon))
        random.Random(self._seed).shuffle(order)
        return order[g % canon]
    monkeypatch.setattr(static_mixture.StaticMixtureWorkSource, "lane_for_chunk", lane_for_chunk)


CANARIES: dict[str, tuple[Callable[[pytest.MonkeyPatch], None], Callable[[], bool]]] = {
    "replay filter matches <= instead of ==": (_mut_filter_le, resume_everywhere_ok),
    "delivery ignores tombstones": (_mut_ignore_tombstones, bounded_inflight_ok),
    "restore drops the trailing boundary": (_mut_boundary_off_by_one, resume_everywhere_ok),
    "work-source state one chunk stale": (_mut_stale_ws_state, resume_everywhere_ok),
    "round robin restarts at lane 0 after remap": (_mut_rr_pointer, elastic_ok),
    "flush sentinel does not reset operators": (_mut_flush_not_reset, resume_everywhere_ok),
}


def test_checks_pass_on_the_real_engine() -> None:
    assert resume_everywhere_ok() and elastic_ok() and bounded_inflight_ok()


@pytest.mark.parametrize("name", sorted(CANARIES))
def test_canary_is_caught(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    mutate, check = CANARIES[name]
    mutate(monkeypatch)
    assert not check(), f"canary survived: {name!r} went unnoticed by {check.__name__}"


def test_lane_routing_canary_is_caught_by_conformance(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("zephon", reason="needs zephon 0.2.0 (conformance extra) as the oracle")
    from properties.sources import SourceConfig, build_source, lane_chunks
    cfg = SourceConfig({"a": (40,), "b": (30,)}, {"a": 1, "b": 1}, 4, {"chunk_size": 3, "seed": 9})
    want = [lane_chunks(build_source("zephon", cfg), lane, 4, 12) for lane in range(4)]
    assert [lane_chunks(build_source("zephon_ref", cfg), lane, 4, 12) for lane in range(4)] == want
    _mut_permute_seed(monkeypatch)
    assert [lane_chunks(build_source("zephon_ref", cfg), lane, 4, 12) for lane in range(4)] != want



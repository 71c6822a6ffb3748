"""Property campaigns on the executor (properties.campaigns): a conformance budget split into
independently seeded shards that each rerun exactly, a planted resume bug reported with its
shard's reproduce line, the checkpoint survey's tallies added up, and the mutation runner's
wiring (with a stand-in for scripts/mutation.sh: mutmut itself is a periodic job, not CI)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from properties import adapters, campaigns
from sim.executor import InlineBackend, ProcessBackend
from zephon_ref.errors import ConfigError

INLINE = adapters.load_adapter("inline")


class _Recording:
    """The inline adapter, remembering every configuration it was asked about; ``drop`` plants a bug:
    a restored run loses its first item."""

    def __init__(self, seen: list[str], *, drop: bool = False) -> None:
        self._inner = INLINE
        self.seen, self.drop = seen, drop
        self.name, self.features = "recording", self._inner.features

    def unsupported(self, cfg: Any) -> str | None:
        self.seen.append(cfg.describe())
        return self._inner.unsupported(cfg)

    def build(self, cfg: Any, *, state: Any = None, **execution: Any) -> Any:
        run = self._inner.build(cfg, state=state, **execution)
        if self.drop and state is not None:
            run.deliver(1)  # planted: the first item after a restore is lost
        return run

    def save(self, run: Any, directory: Path) -> None:
        self._inner.save(run, directory)

    def load(self, cfg: Any, directory: Path) -> Any:
        return self._inner.load(cfg, directory)


def _shard(
    monkeypatch: pytest.MonkeyPatch, seed: int, *, drop: bool = False
) -> tuple[list[str], dict[str, Any]]:
    seen: list[str] = []
    monkeypatch.setattr(adapters, "load_adapter", lambda name: _Recording(seen, drop=drop))
    out = campaigns.conformance_shard("recording", 4, seed, ["resume at cuts"])
    return seen, out


def test_shards_are_independent_and_each_reruns_exactly(monkeypatch: pytest.MonkeyPatch) -> None:
    a1, r1 = _shard(monkeypatch, 11)
    a2, _ = _shard(monkeypatch, 11)
    b, _ = _shard(monkeypatch, 12)
    assert r1["ok"] and r1["rows"][0]["examples"] >= 4
    assert a1 == a2, "the same shard seed drew other examples"
    assert a1 != b, "two shard seeds drew the same examples"
    tasks = campaigns.conformance_tasks("inline", 10, 4, seed=0)
    assert [t.args[1] for t in tasks] == [3] * 4 and len({t.meta["shard_seed"] for t in tasks}) == 4
    assert (
        tasks[0]
        .meta["reproduce"]
        .startswith("python -m properties.campaigns shard --impl inline --examples 3")
    )


def test_a_planted_resume_bug_is_reported_with_its_shard(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []
    monkeypatch.setattr(adapters, "load_adapter", lambda name: _Recording(seen, drop=True))
    tasks = campaigns.conformance_tasks("recording", 4, 2, seed=0, only=["resume at cuts"])
    summary, _ = campaigns.run_campaign("conformance", tasks, {}, backend=InlineBackend())
    prop = summary["properties"]["resume at cuts"]
    assert not summary["ok"] and prop["failures"], "the planted lost item went unnoticed"
    assert prop["failures"][0]["reproduce"].startswith(
        "python -m properties.campaigns shard --impl recording"
    )


def test_a_shard_that_raises_is_a_failing_shard(tmp_path: Path) -> None:
    tasks = campaigns.conformance_tasks("no_such_module:Adapter", 2, 2, seed=0)
    be = ProcessBackend(2)
    try:
        summary, records = campaigns.run_campaign("conformance", tasks, {"impl": "x"}, backend=be,
                                                  jsonl=tmp_path / "c.jsonl")
    finally:
        be.close()
    assert not summary["ok"] and len(summary["failed_shards"]) == 2
    assert all(r["status"] == "error" and "ImportError" in r["error"] and r["traceback"] for r in records)


def test_the_checkpoint_survey_adds_its_shards_up() -> None:
    pytest.importorskip(
        "zephon", reason="the survey judges zephon 0.2.0's checkpoints (the conformance extra)"
    )
    summary, records = campaigns.run_campaign("checkpoints", campaigns.checkpoint_tasks(4, 2, seed=0), {},
                                              backend=InlineBackend())
    assert summary["tally"]["cuts"] == sum(r["tally"]["cuts"] for r in records) >= 4
    assert summary["ok"] == (not summary["tally"]["ref_failures"])


def test_the_mutation_campaign_runs_the_score_tasks_and_counts_verdicts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The campaign runs properties.mutation_score's tasks on the executor (one task per mutant and
    checker, in a mutated copy) and counts verdicts per checker; a task that raises is a failed shard."""
    from properties import mutation_score as ms
    from properties.mutation import ROOT, Mutant

    probe = ["python", "-c", "import pathlib, sys, zephon_ref; "
             "sys.exit(1 if 'MUTATED' in pathlib.Path(zephon_ref.__file__).read_text() else 0)"]
    monkeypatch.setitem(ms.CHECKERS, "probe", probe)
    first = (ROOT / "zephon_ref/__init__.py").read_text().splitlines(keepends=True)[0]
    seen = Mutant("seen", "zephon_ref/__init__.py", first, first + "# MUTATED\n", line=1, col=0)
    unseen = Mutant("unseen", "zephon_ref/__init__.py", first, first + "# harmless\n", line=1, col=0)
    tasks = ms.executor_tasks(ms.tasks_for([seen, unseen], ["probe"], timeout=120))
    summary, _ = campaigns.run_campaign("mutation", tasks, {}, backend=InlineBackend())
    assert summary["checkers"] == {"probe": {"killed": 1, "survived": 1}} and summary["score"] == {
        "probe": 0.5
    }
    assert summary["ok"]
    broken = ms.executor_tasks(
        [{"id": "broken|probe", "mutant": {"bad": 1}, "checker": "probe", "timeout": 1}]
    )
    summary, _ = campaigns.run_campaign("mutation", broken, {}, backend=InlineBackend())
    assert not summary["ok"] and "TypeError" in summary["failed_shards"][0]["error"]
    with pytest.raises(ConfigError):
        campaigns.mutation_tasks(checkers=["nosuch"])



"""The field's loaders under the generic suite (a small derandomized profile; the full run is
``python -m properties.loaders --loader NAME``, docs/loaders.md).  Each test skips, saying why, when
its library is not importable (the ``peers`` extra: bash scripts/install_peers.sh).

Per known failure: the suite still finds it from its published minimal configuration (so a fixed
upstream bug shows here first), and its standalone reproduction script still exits 1.  Per peer:
a quick pass of two properties (workers 0) runs without an adapter error.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from properties.loaders.core import Narrowed
from properties.loaders.machine import check_property
from properties.loaders.registry import resolve

REPRO = Path(__file__).resolve().parents[2] / "properties" / "loaders" / "repro"


def _need(*modules: str) -> None:
    for m in modules:
        if importlib.util.find_spec(m.split(".")[0]) is None:
            pytest.skip(f"{m} is not installed (the peers extra: bash scripts/install_peers.sh)")


#: Streaming names its shared memory machine-wide and the adapter unlinks stale blocks before each
#: build, so two xdist workers running Streaming at once unlink each other's live blocks (the
#: descriptor test failed so under -n 2 in CI): every test that runs Streaming is in this one group
#: (pyproject's --dist loadgroup keeps a group on one worker)
ONE_WORKER = pytest.mark.xdist_group("streaming")


def _params(rows: list, ids: list[str]) -> list:
    return [pytest.param(*row, id=i, marks=[ONE_WORKER] if row[0] == "streaming" else [])
            for row, i in zip(rows, ids, strict=True)]


def _known_ids(rows: list) -> list[str]:
    """loader-property, with the reproduction script's name where a pair names two known failures."""
    pairs = [f"{r[0]}-{r[1]}" for r in rows]
    return [p if pairs.count(p) == 1 else f"{p}-{Path(r[4]).stem}" for p, r in zip(pairs, rows, strict=True)]


#: (loader, property, the minimal configuration the suite shrank to, libraries, reproduction script)
KNOWN = [
    (
        "torchdata",
        "initial_state",
        {"variant": "map-gen", "size": 5, "shuffle": True, "epochs": 2, "workers": 0},
        ("torchdata",),
        "torchdata_generator_next_epoch.py",
    ),
    (
        "torchdata",
        "state_after_restore",  # restore an end-of-epoch state, save at once, restore that
        {"variant": "iterable", "size": 5, "epochs": 1, "workers": 0, "batch": 1},
        ("torchdata",),
        "torchdata_iterable_end_of_epoch.py",
    ),
    (
        "grain",
        "resume",
        {"variant": "interleave", "size": 5, "shards": 2, "epochs": 2},
        ("grain",),
        "grain_interleave_repeat.py",
    ),
    (
        "datasets",
        "state_after_restore",
        {"variant": "direct", "size": 4, "shards": 1, "epochs": 1},
        ("datasets",),
        "datasets_state_after_restore.py",
    ),
    (
        "litdata",
        "counters",
        {"size": 5, "batch": 2, "shards": 1, "workers": 0, "drop_last": False},
        ("litdata",),
        "litdata_counter_partial_batch.py",
    ),
    (
        "litdata",
        "restore_twice",
        {"size": 5, "batch": 1, "shards": 1, "workers": 0, "epochs": 1, "shuffle": False},
        ("litdata",),
        "litdata_state_dict_aliases_checkpoint.py",
    ),
    (
        "torchdata-nodes",
        "resume",
        {"size": 5, "shuffle": True, "workers": 1, "epochs": 2, "batch": 1, "buffer": 0},
        ("torchdata",),
        "torchdata_nodes_shuffle_epoch.py",
    ),
    (
        "torchdata-nodes",
        "initial_state",
        {"size": 5, "shuffle": False, "workers": 1, "epochs": 2, "batch": 1, "buffer": 0},
        ("torchdata",),
        "torchdata_nodes_state_before_load.py",
    ),
    (
        "torchdata-nodes",
        "counters",
        {"size": 5, "shuffle": False, "workers": 1, "epochs": 1, "batch": 1, "buffer": 0},
        ("torchdata",),
        "torchdata_nodes_num_yielded_after_restore.py",
    ),
    (
        "datasets",
        "serialised",
        {"variant": "direct", "size": 4, "shards": 1, "epochs": 2, "set_epoch": False, "dups": 0},
        ("datasets",),
        "datasets_resume_without_set_epoch.py",
    ),
    (
        "torchdata",
        "resume",  # 2 worker processes: a state after the epoch's last batch restarts a finished worker
        {"variant": "iterable-stateful", "size": 5, "batch": 2, "workers": 2, "epochs": 1,
         "persistent": False, "drop_last": False, "dups": 0, "nones": 0},
        ("torchdata",),
        "torchdata_workers_end_of_epoch_repeats.py",
    ),
    (
        "streaming",
        "initial_state",  # a state loaded into a loader that already iterated is dropped as stale
        {"size": 5, "shuffle": True, "workers": 0, "epochs": 1, "batch": 1},
        ("streaming",),
        "streaming_load_into_used_loader.py",
    ),
    (
        "litdata",
        "state_after_restore",  # restore, save at once, restore that: the previous epoch's order
        {"size": 5, "shuffle": True, "batch": 1, "shards": 1, "workers": 0, "epochs": 3, "drop_last": False},
        ("litdata",),
        "litdata_resave_after_restore_reorders.py",
    ),
    (
        "datasets",
        "resume",  # shuffle(buffer_size=3): a resume past the buffer repeats an item of the same epoch
        {"variant": "buffer", "size": 6, "shards": 1, "shuffle": True, "buffer": 3, "epochs": 1,
         "set_epoch": True},
        ("datasets",),
        "datasets_shuffle_buffer_repeats.py",
    ),
    (
        "datasets",
        "counters",  # the state's epoch right after load_state_dict is the initial state's (item 4's root)
        {"variant": "direct", "size": 4, "shards": 1, "epochs": 2, "set_epoch": True, "dups": 0, "nones": 0},
        ("datasets",),
        "datasets_state_after_restore.py",
    ),
    (
        "grain",
        "no_skip_dup",  # no restore at all: the third epoch of a 3-source interleave repeats an item
        {"variant": "interleave", "size": 5, "shards": 3, "epochs": 3},
        ("grain",),
        "grain_interleave_third_epoch.py",
    ),
    (
        "grain",
        "initial_state",  # a state one item into the second of 3 epochs replays that epoch, then ends
        {"variant": "interleave", "size": 5, "shards": 2, "epochs": 3},
        ("grain",),
        "grain_interleave_restore_repeats.py",
    ),
    (
        "torchdata",
        "counters",  # the state read right after a restore counts the batches twice
        {"variant": "iterable", "size": 5, "batch": 1, "workers": 0, "epochs": 1, "dups": 0, "nones": 0,
         "drop_last": False},
        ("torchdata",),
        "torchdata_iterable_resave_after_restore.py",
    ),
    (
        "torchdata",
        # 2 workers: the re-saved end-of-epoch state makes iter(loader) raise StopIteration (the table's
        # serialised FAIL; state_after_restore draws that move directly: 10 s here, serialised 80 s)
        "state_after_restore",
        {"variant": "iterable", "size": 5, "batch": 1, "workers": 2, "epochs": 1, "dups": 0, "nones": 0,
         "drop_last": False, "persistent": False},
        ("torchdata",),
        "torchdata_workers_resave_end_of_epoch.py",
    ),
    (
        "litdata",
        "workers",  # restore, state_dict(), read on: an item lost, another repeated
        {"size": 5, "shuffle": True, "batch": 2, "shards": 1, "workers": 0, "epochs": 2, "drop_last": False},
        ("litdata",),
        "litdata_state_dict_after_restore_changes_stream.py",
    ),
]


@pytest.mark.parametrize(("loader", "prop", "knobs", "libs", "script"),
                         _params(KNOWN, _known_ids(KNOWN)))
def test_the_suite_finds_the_known_failure(
    loader: str, prop: str, knobs: dict, libs: tuple, script: str
) -> None:
    _need(*libs)
    # 200 examples: the torchdata iterable failure needs ~60-250 machine runs to be drawn (the count moves
    # with what else the process imported first), and a found failure stops the search early anyway
    # shrink_runs=1: finding the failure is what this checks (the table's runs shrink to the minimal
    # configurations above); unbounded shrinking was most of these tests' CI time
    r = check_property(Narrowed(resolve(loader), **knobs), prop, examples=200, steps=10, shrink_runs=1)
    assert r.status == "FAIL", (
        f"{loader} {prop}: no longer fails at {knobs} (fixed upstream? update docs/loaders.md)"
    )


#: each script once (two properties may find one bug: datasets' state_after_restore and counters)
ONE_PER_SCRIPT = [k for i, k in enumerate(KNOWN) if k[4] not in [j[4] for j in KNOWN[:i]]]


@pytest.mark.parametrize(("loader", "prop", "knobs", "libs", "script"),
                         _params(ONE_PER_SCRIPT, [f"{k[4]}" for k in ONE_PER_SCRIPT]))
def test_the_reproduction_script_still_fails(
    loader: str, prop: str, knobs: dict, libs: tuple, script: str
) -> None:
    _need(*libs)
    env = {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}
    p = subprocess.run(
        [sys.executable, str(REPRO / script)], capture_output=True, text=True, timeout=300, env=env
    )
    assert p.returncode == 1 and "FAIL" in p.stdout, (p.returncode, p.stdout[-2000:], p.stderr[-2000:])


@pytest.mark.parametrize("variant", ["dataloader", "iter-batch"])
def test_grain_counters_are_checked_and_catch_an_off_by_one(
    variant: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Grain's positions (the DataLoader's ``last_seen_indices``, an iterator's ``next_index``) are counters
    the library exposes: the clean adapter passes counters, one counting an item too many fails."""
    _need("grain")
    from properties.loaders.adapters import grain as g

    a = Narrowed(g.GRAIN, variant=variant, workers=0, drop_last=False)
    clean = check_property(a, "counters", examples=20, shrink_runs=1)
    assert clean.status == "pass", clean.failure or clean.reason
    orig = g._Run.counters

    def one_ahead(self: object) -> object:
        c = orig(self)  # type: ignore[arg-type]
        return None if not c else {**c, "items_in_epoch": c["items_in_epoch"] + 1}

    monkeypatch.setattr(g._Run, "counters", one_ahead)
    assert check_property(a, "counters", examples=20, shrink_runs=1).status == "FAIL"


@pytest.mark.parametrize(
    "loader", ["torchdata", "torchdata-nodes", "grain", "datasets", "litdata",
               pytest.param("streaming", marks=ONE_WORKER)]
)
def test_the_adapter_runs_against_the_peer(loader: str) -> None:
    libs = {
        "torchdata": ("torchdata",),
        "torchdata-nodes": ("torchdata",),
        "grain": ("grain",),
        "datasets": ("datasets", "torchdata"),
        "litdata": ("litdata",),
        "streaming": ("streaming",),
    }[loader]
    _need(*libs)
    a = Narrowed(resolve(loader), workers=0, epochs=2, size=4)
    for prop in ("uninterrupted", "resume"):  # every property: python -m properties.loaders (docs/loaders.md)
        r = check_property(a, prop, examples=2, steps=5)
        assert r.status in ("pass", "FAIL", "declared"), r
        if r.status == "FAIL":  # a finding, not an adapter error: it names a configuration and moves
            assert r.failure is not None or "not reproducible" in r.reason, r


@pytest.mark.parametrize(("loader", "knobs"), [
    ("torchdata", {"variant": "map", "batch": 2}),
    ("torchdata", {"variant": "iterable", "batch": 2}),
    ("torchdata-nodes", {"batch": 2, "workers": 1}),
    ("datasets", {"variant": "direct"}),
    ("grain", {"variant": "dataloader", "batch": 2}),
    ("grain", {"variant": "dataloader", "batch": 1}),
])
def test_none_items_reach_the_library_and_come_back(loader: str, knobs: dict) -> None:
    from properties.loaders.core import NONE_ID, LoaderConfig, dataset_ids
    from properties.loaders.machine import reference_stream

    _need(*{"datasets": ("datasets", "torchdata"), "grain": ("grain",)}.get(loader, ("torchdata",)))
    a = resolve(loader)
    cfg = LoaderConfig(size=4, nones=1, epochs=2, **knobs)
    assert "nones" in str(a.space), f"{loader} does not draw None items"
    got = reference_stream(a, cfg)
    ids = dataset_ids(cfg)
    assert ids.count(NONE_ID) == 1 and sorted(got) == sorted(2 * ids), got


@ONE_WORKER
def test_streaming_runs_leave_no_lock_files_and_no_descriptors() -> None:
    _need("streaming")
    from properties.loaders.core import LoaderConfig

    a = resolve("streaming")
    cfg = LoaderConfig(size=4, shuffle=True, epochs=2)
    run = a.build(cfg)
    run.next(1)
    ds = run.loader.dataset
    locks = [ds._shared_barrier.filelock_path, ds._cache_filelock_path]
    # Streaming made them (so the check below can fail); its background threads create them, which
    # took longer than one read under a loaded CI machine (seen once, 2 shared cores and 3 processes):
    # wait up to 20 s for them, a precondition about a library thread, not a timed assertion
    for _ in range(200):
        if all(os.path.exists(p) for p in locks):
            break
        time.sleep(0.1)  # clock-ok: waiting for a library's thread, outside the data path
    assert all(os.path.exists(p) for p in locks), [(p, os.path.exists(p)) for p in locks]
    state = run.state()
    run.close()
    assert not any(os.path.exists(p) for p in locks), locks
    fds = len(os.listdir("/proc/self/fd"))
    for _ in range(40):  # build / read / save / close, then restore / drain / close
        run = a.build(cfg)
        run.next(2)
        run.close()
        run = a.build(cfg, state)
        run.next(20)
        run.close()
    # the adapter's sweep runs every 16 closes when no run is alive: at most 16 restores' blocks remain
    assert len(os.listdir("/proc/self/fd")) - fds <= 4 * 16, "Streaming's shared-memory descriptors leak"

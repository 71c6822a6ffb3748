"""Store: round trip, layout, durable publish, refusals that change nothing."""

from __future__ import annotations

import errno
import json
import os
import random
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from properties.pipelines import real_state
from sim.storage import Fault, FaultyStorage
from zephon_ref.checkpoint import store
from zephon_ref.checkpoint.cli import main as ckpt_main
from zephon_ref.checkpoint.schema import (
    LANE_FIELDS,
    LANE_FIELDS_PRESENT,
    MANIFEST_MAGIC,
    decode_manifest,
    manifest_file_name,
    sha256_hex,
)
from zephon_ref.checkpoint.storage import AFTER_LINK_OPS, PUBLISH_OPS
from zephon_ref.errors import StateFormatError, ZephonRefError
from zephon_ref.storage.errors import (
    CheckpointCorrupt,
    CheckpointNotFound,
    CheckpointRefused,
    PublishConflict,
    StorageError,
)

_KEEP = object()


def _state(
    seed: int = 0,
    *,
    canonical_replicas: int = 4,
    items: int | None = None,
    fingerprint: Any = _KEEP,
    lanes: list[int] | None = None,
) -> dict[str, Any]:
    """A real engine state: a ``canonical_replicas``-lane pipeline (source seed ``seed``)
    iterated ``items`` items (default 1 + seed % 5), then ``checkpoint()``.

    ``fingerprint`` relabels it (None: a state that carries none, as a caller that
    passes ``save(fingerprint=...)`` would have); ``lanes`` keeps only those lanes'
    lane-keyed fields, as one rank's local capture holds only its own lanes.
    """
    s = real_state(
        seed,
        canonical_replicas=canonical_replicas,
        items=1 + seed % 5 if items is None else items,
        chunk_size=4,
        corpus_seed=seed % 5,
    )
    if fingerprint is not _KEEP:
        s["fingerprint"] = fingerprint
    if lanes is not None:
        for f in LANE_FIELDS:
            s[f] = {lane: v for lane, v in s[f].items() if lane in lanes}
    return s


def _snapshot(d: Path) -> dict[str, tuple[bytes, int]]:
    return {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(d.iterdir())}


def _writable(p: Path) -> None:
    os.chmod(p, 0o644)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    rnd=st.randoms(use_true_random=False),
    c=st.integers(1, 6),
    items=st.integers(0, 12),
    fp=st.none() | st.text(max_size=10),
)
def test_round_trip_realistic_states(
    tmp_path: Path, rnd: random.Random, c: int, items: int, fp: str | None
) -> None:
    lanes = sorted(rnd.sample(range(c), rnd.randrange(0, c + 1)))
    s = _state(rnd.randrange(1000), canonical_replicas=c, items=items, fingerprint=fp, lanes=lanes)
    d = Path(tempfile.mkdtemp(dir=tmp_path))
    gen = store.save(s, d)
    assert gen == 1
    assert store.load(d) == s
    loaded = store.load_checkpoint(d, expected_fingerprint=fp, expected_canonical_replicas=c)
    assert loaded.manifest.fingerprint == fp
    assert [e.lane for e in loaded.manifest.lanes] == lanes
    assert loaded.manifest.capture.delivered == tuple(sorted(s["lane_emitted"].items()))


def test_tuples_and_big_ints_come_back_exactly(tmp_path: Path) -> None:
    s = _state(3, canonical_replicas=2)
    # A work_config may carry a numpy PCG64 state: 128-bit ints (the engine's own source has none).
    s["work_config"] = {"bit_generator": "PCG64", "state": 2**127 + 12345, "inc": 2**128 - 1}
    out = store.load(tmp_path / "d") if store.save(s, tmp_path / "d") else None
    assert out is not None
    assert s["replay_cursors"] and all(type(c) is tuple for c in s["replay_cursors"].values())
    for lane, cur in s["replay_cursors"].items():
        assert out["replay_cursors"][lane] == cur and type(out["replay_cursors"][lane]) is type(cur)
    assert out["work_config"] == s["work_config"] and out["work_config"]["inc"] == 2**128 - 1
    for lane in s["lane_ws_state"]:
        assert out["lane_ws_state"][lane]["cursor_states"] == s["lane_ws_state"][lane]["cursor_states"]


def test_layout_one_shard_per_lane_plus_universal_and_manifest(tmp_path: Path) -> None:
    s = _state(1, canonical_replicas=5, fingerprint="fp-A")
    gen = store.save(s, tmp_path)
    names = sorted(os.listdir(tmp_path))
    assert len(names) == 5 + 1 + 1
    assert names[-1] == manifest_file_name(gen)
    m = store.read_manifest(tmp_path, gen)
    for e in m.shards:
        assert f"g{gen:012d}" in e.file_name(gen) and e.digest in e.file_name(gen)
        assert sha256_hex((tmp_path / e.file_name(gen)).read_bytes()) == e.digest
    text = (tmp_path / names[-1]).read_bytes().decode()
    assert str(tmp_path) not in text and "global_rank" not in text
    assert m.capture.reload_count == s["checkpoint_reload_count"] and m.fingerprint == "fp-A"


def test_same_state_same_bytes_and_generations_increase(tmp_path: Path) -> None:
    s = _state(2)
    a, b = tmp_path / "a", tmp_path / "b"
    store.save(s, a)
    store.save(dict(reversed(list(s.items()))), b)
    assert _snapshot(a).keys() == _snapshot(b).keys()
    assert all(x[0] == y[0] for x, y in zip(_snapshot(a).values(), _snapshot(b).values(), strict=True))
    assert store.save(s, a) == 2 and store.list_generations(a) == [1, 2]


def test_fingerprint_keyword_and_conflict(tmp_path: Path) -> None:
    s = _state(4, fingerprint=None)
    store.save(s, tmp_path, fingerprint="k")
    assert store.load(tmp_path, expected_fingerprint="k") == s
    with pytest.raises(StateFormatError, match="fingerprint"):
        store.save({**s, "fingerprint": "x"}, tmp_path / "n", fingerprint="y")
    assert not (tmp_path / "n").exists()


def test_moved_directory_still_loads(tmp_path: Path) -> None:
    s = _state(5)
    store.save(s, tmp_path / "here")
    shutil.move(str(tmp_path / "here"), str(tmp_path / "there"))
    assert store.load(tmp_path / "there") == s


def _broken(change: str) -> Any:
    """A real 2-lane state with one thing wrong (the store's check is state.validate, the one validator)."""
    s = _state(1, canonical_replicas=2)
    if change == "not a dict":
        return list(s)
    if change == "version":
        s["version"] = 9
    elif change == "canonical_replicas":
        s["world"] = {**s["world"], "canonical_replicas": 0}
    elif change == "lane out of range":
        s["progress"] = {**s["progress"], 2: s["progress"][0]}
    elif change == "duplicate lane":
        s["progress"] = {**s["progress"], "0": s["progress"][0]}
    elif change == "negative count":
        s["lane_emitted"] = {**s["lane_emitted"], 0: -1}
    elif change == "reserved key":
        s[LANE_FIELDS_PRESENT] = []
    elif change == "not finite":
        s["work_source"] = {1.5: float("nan")}
    return s


@pytest.mark.parametrize(
    "change, match",
    [
        ("not a dict", "a mapping"),
        ("version", "schema/version"),
        ("canonical_replicas", "canonical_replicas"),
        ("lane out of range", r"\[0, 2\)"),
        ("duplicate lane", "unique"),
        ("negative count", ">= 0"),
        ("reserved key", "__lane_fields_present__"),
        ("not finite", "finite"),
    ],
)
def test_bad_state_refused_before_any_file(tmp_path: Path, change: str, match: str) -> None:
    bad = _broken(change)
    before = repr(bad)
    with pytest.raises(StateFormatError, match=match):
        store.save(bad, tmp_path / "x")
    assert not (tmp_path / "x").exists()
    assert repr(bad) == before  # the refusal changed nothing


def test_digit_string_lane_keys_are_normalised(tmp_path: Path) -> None:
    s = _state(2, canonical_replicas=3)
    as_json = {**s, "progress": {str(k): v for k, v in s["progress"].items()}}
    store.save(as_json, tmp_path)
    assert store.load(tmp_path)["progress"] == s["progress"]


# ---------------------------------------------------------------- refusals


@pytest.fixture()
def two_gens(tmp_path: Path) -> tuple[Path, dict[str, Any], dict[str, Any]]:
    s1, s2 = _state(10, fingerprint="fp"), _state(11, fingerprint="fp")
    store.save(s1, tmp_path)
    store.save(s2, tmp_path)
    return tmp_path, s1, s2


def _lane_file(d: Path, gen: int, lane: int) -> Path:
    m = store.read_manifest(d, gen)
    return d / m.lanes[lane].file_name(gen)


def _refused(d: Path, exc: type[BaseException], reason: str, **kw: Any) -> None:
    before = _snapshot(d)
    with pytest.raises(exc) as info:
        store.load(d, **kw)
    assert getattr(info.value, "reason", None) == reason, info.value
    assert "expected" in str(info.value)
    assert _snapshot(d) == before  # a refused load changes no file


def test_missing_shard(two_gens: Any) -> None:
    d, _, _ = two_gens
    _lane_file(d, 2, 1).unlink()
    _refused(d, CheckpointCorrupt, "missing-shard")


def test_truncated_and_flipped_shard(two_gens: Any) -> None:
    d, _, _ = two_gens
    f = _lane_file(d, 2, 0)
    data = f.read_bytes()
    _writable(f)
    f.write_bytes(data[:-1])
    _refused(d, CheckpointCorrupt, "truncated")
    f.write_bytes(data[:5] + bytes([data[5] ^ 1]) + data[6:])
    _refused(d, CheckpointCorrupt, "digest-mismatch")


def test_newest_corrupt_is_refused_not_skipped(two_gens: Any) -> None:
    d, s1, _ = two_gens
    mf = d / manifest_file_name(2)
    _writable(mf)
    mf.write_bytes(mf.read_bytes()[:-2])
    _refused(d, CheckpointCorrupt, "manifest-truncated")
    assert store.latest_complete_generation(d) == 2
    assert store.load(d, 1) == s1  # an older generation only when asked for explicitly


def _rewrite_manifest(d: Path, gen: int, edit: Any) -> None:
    """Tamper with a manifest and *repair* its self-digest (a forger, or a bug)."""
    mf = d / manifest_file_name(gen)
    raw = mf.read_bytes()[len(MANIFEST_MAGIC):]
    body = json.loads(raw[:-66])
    edit(body)
    nb = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    _writable(mf)
    mf.write_bytes(MANIFEST_MAGIC + nb + b"\n" + sha256_hex(nb).encode() + b"\n")


def test_shard_of_another_capture_refused_even_with_repaired_digest(two_gens: Any) -> None:
    d, _, _ = two_gens
    old = store.read_manifest(d, 1).lanes[0]
    # Point generation 2's lane 0 at generation 1's lane 0 shard content.
    src = d / old.file_name(1)
    dst_entry_name = f"g{2:012d}.lane-000000.{old.digest}.shard"
    shutil.copy(src, d / dst_entry_name)

    def edit(b: dict[str, Any]) -> None:
        b["lanes"][0]["digest"], b["lanes"][0]["size"] = old.digest, old.size

    _rewrite_manifest(d, 2, edit)
    _refused(d, CheckpointRefused, "capture-mismatch")


def test_manifest_of_another_pipeline_or_replicas(two_gens: Any) -> None:
    d, _, s2 = two_gens
    _refused(d, CheckpointRefused, "fingerprint", expected_fingerprint="other")
    _refused(d, CheckpointRefused, "canonical-replicas", expected_canonical_replicas=8)
    assert store.load(d, expected_fingerprint="fp", expected_canonical_replicas=4) == s2


def test_unknown_format_and_schema_version(two_gens: Any) -> None:
    d, _, _ = two_gens
    _rewrite_manifest(d, 2, lambda b: b.update(format_version=2))
    _refused(d, CheckpointCorrupt, "unknown-version")
    _rewrite_manifest(d, 2, lambda b: b.update(format_version=1, schema_digest="0" * 64))
    _refused(d, CheckpointCorrupt, "unknown-schema")


def test_capture_fields_edited_in_manifest_refused(two_gens: Any) -> None:
    d, _, _ = two_gens
    _rewrite_manifest(d, 2, lambda b: b["capture"].update(reload_count=99))
    _refused(d, CheckpointCorrupt, "capture-mismatch")


def test_renamed_manifest_refused(two_gens: Any) -> None:
    d, _, _ = two_gens
    (d / manifest_file_name(3)).write_bytes((d / manifest_file_name(2)).read_bytes())
    _refused(d, CheckpointCorrupt, "manifest-generation")


def test_reset_cursor_refused_by_min_generation_and_reader(two_gens: Any) -> None:
    d, s1, s2 = two_gens
    with pytest.raises(CheckpointRefused, match="reset cursor") as info:
        store.load(d, 1, min_generation=2)
    assert info.value.reason == "stale-generation"
    r = store.CheckpointReader(d, expected_fingerprint="fp")
    assert r.load() == s2 and r.highest_restored == 2
    with pytest.raises(CheckpointRefused, match="reset cursor"):
        r.load(1)
    assert r.highest_restored == 2
    assert r.load(2) == s2  # the same generation again is fine
    r2 = store.CheckpointReader(d, expected_fingerprint="nope")
    with pytest.raises(CheckpointRefused):
        r2.load()
    assert r2.highest_restored is None  # a refused load moves nothing


def test_not_found(tmp_path: Path) -> None:
    with pytest.raises(CheckpointNotFound):
        store.load(tmp_path)
    with pytest.raises(FileNotFoundError):
        store.load(tmp_path / "nope", 3)


# ---------------------------------------------------------------- publication


def test_publish_never_replaces(tmp_path: Path) -> None:
    p = tmp_path / "f"
    store.publish_bytes(p, b"one")
    with pytest.raises(PublishConflict):
        store.publish_bytes(p, b"two")
    assert p.read_bytes() == b"one"
    assert sorted(os.listdir(tmp_path)) == ["f"]  # no temp left behind


@pytest.mark.parametrize("file_index", [0, 2, 4])
@pytest.mark.parametrize("step", PUBLISH_OPS)
def test_failed_publish_at_every_step_keeps_previous_generation(
    tmp_path: Path, step: str, file_index: int
) -> None:
    s1, s2 = _state(20, canonical_replicas=3), _state(21, canonical_replicas=3)
    store.save(s1, tmp_path)
    gen1_files = sorted(os.listdir(tmp_path))
    faulty = FaultyStorage(faults=[Fault(step, errno.EIO, nth=file_index + 1)])
    with pytest.raises(StorageError) as info:
        store.save(s2, tmp_path, storage=faulty)
    assert info.value.reason == "io-error" and info.value.op == step and faulty.injected == 1
    assert isinstance(info.value, OSError) and "expected success" in str(info.value)
    is_manifest_done = file_index == 4 and step in AFTER_LINK_OPS
    if is_manifest_done:
        # The manifest was linked before the failure: generation 2 exists and is whole,
        # but save() still raised, so the caller never saw success.
        assert store.load(tmp_path) == s2
    else:
        assert store.list_generations(tmp_path) == [1]
        assert store.load(tmp_path) == s1
        # Nothing left behind: no temp file, no orphan shard.
        assert sorted(os.listdir(tmp_path)) == gen1_files
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".tmp")]


def test_torn_generation_is_invisible_and_skipped_by_numbering(tmp_path: Path) -> None:
    s1 = _state(30)
    store.save(s1, tmp_path)
    (tmp_path / ".tmp.manifest-g000000000002.json.1.0").write_bytes(b"partial")
    (tmp_path / f"g{2:012d}.universal.{'a' * 64}.shard").write_bytes(b"orphan")
    assert store.latest_complete_generation(tmp_path) == 1
    assert store.load(tmp_path) == s1
    assert store.save(_state(31), tmp_path) == 3


def test_published_files_are_read_only(tmp_path: Path) -> None:
    store.save(_state(40), tmp_path)
    assert all((p.stat().st_mode & 0o222) == 0 for p in tmp_path.iterdir())


# ---------------------------------------------------------------- CLI


def test_cli_inspect_and_verify(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store.save(_state(50, fingerprint="fp-cli"), tmp_path)
    assert ckpt_main(["inspect", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "generation 1" in out and "fp-cli" in out and "lane    3" in out
    assert ckpt_main(["ckpt", "verify", str(tmp_path)]) == 0
    f = _lane_file(tmp_path, 1, 2)
    _writable(f)
    f.write_bytes(f.read_bytes()[:-1])
    assert ckpt_main(["verify", str(tmp_path)]) == 1
    assert "FAIL generation 1 (truncated)" in capsys.readouterr().out
    assert ckpt_main(["verify", str(tmp_path / "empty")]) == 5  # missing (zephon_ref.exits; docs/cli.md)


def test_cli_subcommand_wiring() -> None:
    import argparse

    from zephon_ref.checkpoint.cli import add_ckpt_subcommands

    p = argparse.ArgumentParser(prog="zephon-ref")
    add_ckpt_subcommands(p.add_subparsers(dest="command"))
    args = p.parse_args(["ckpt", "verify", "/x"])
    assert args.func.__name__ == "cmd_verify" and args.directory == "/x"


def test_every_error_is_typed() -> None:
    for cls in (CheckpointCorrupt, CheckpointRefused, CheckpointNotFound, PublishConflict):
        assert issubclass(cls, ZephonRefError)
    assert issubclass(CheckpointRefused, RuntimeError) and issubclass(CheckpointCorrupt, ValueError)
    assert decode_manifest  # imported API stays public

"""The fast codec (zephon_ref.fast.codec) gives the plain codec's bytes, values and refusals
(properties.fast_codec), on drawn values and on real 64-lane states; the seams it enters at
(the round's machines, the checkpoint store) publish the plain bytes with it; planted
differences are caught, by the property and by the conformance CLI's ``fast codec`` row."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, find, given, settings

from properties.fast_codec import codec_values, fast_codec_problems, real_states
from properties.profiles import examples
from zephon_ref import codec
from zephon_ref.errors import ConfigError, StateFormatError
from zephon_ref.fast import codec as fast_codec
from zephon_ref.fast.codec import FastCodec

_HEALTH = [HealthCheck.too_slow, HealthCheck.data_too_large]


@settings(max_examples=examples(200), suppress_health_check=_HEALTH, deadline=None)
@given(codec_values())
def test_the_fast_codec_equals_the_plain_codec(value: Any) -> None:
    assert fast_codec_problems(value) == []


def test_on_real_64_lane_states_the_bytes_are_the_plain_bytes() -> None:
    f = FastCodec()
    for state in real_states(3):
        assert fast_codec_problems(state) == []
        assert f.encode(state) == codec.encode(state) and len(codec.pack(state)) > 5000
    bad = {**real_states(3)[0], "work_config": {"k": [1, float("nan")]}}
    for fn in ("pack", "encode"):
        with pytest.raises(StateFormatError) as plain:
            getattr(codec, fn)(bad)
        with pytest.raises(StateFormatError) as fast:
            getattr(f, fn)(bad)
        assert str(fast.value) == str(plain.value) and "$['work_config']['k'][1]" in str(plain.value)


def test_pack_map_with_refuses_what_it_cannot_splice() -> None:
    f = FastCodec()
    with pytest.raises(StateFormatError, match="str"):
        f.pack_map_with({1: "x"}, {"s": f.pack(1)})  # type: ignore[dict-item]
    with pytest.raises(StateFormatError, match="not both"):
        f.pack_map_with({"s": 1}, {"s": f.pack(1)})
    with pytest.raises(StateFormatError, match="pre-packed"):
        f.pack_map_with({}, {"s": ""})  # type: ignore[dict-item]
    with pytest.raises(StateFormatError, match=r"\$\['a'\]\[0\].*set"):
        f.pack_map_with({"a": [{1}]}, {})
    assert f.encode_map_with({"b": 1}, {"a": f.pack([2, (3,)])}) == codec.encode({"b": 1, "a": [2, (3,)]})


# -- planted differences: the property finds each ---------------------------------------------------


def _plant_unsorted_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fast dict path keeps insertion order (no key sort)."""
    monkeypatch.setattr(fast_codec, "_key", lambda kv: 0)


def _plant_bigint_as_leaf(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fast path keeps every int as a leaf (big ints then overflow msgpack: another refusal)."""
    monkeypatch.setattr(fast_codec, "_HI", 1 << 200)


@pytest.mark.parametrize("plant", [_plant_unsorted_keys, _plant_bigint_as_leaf])
def test_a_planted_difference_in_the_fast_codec_is_found(plant: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    plant(monkeypatch)
    found = find(codec_values(), lambda v: bool(fast_codec_problems(v)),
                 settings=settings(max_examples=2000, database=None, suppress_health_check=_HEALTH))
    assert fast_codec_problems(found), found


def test_a_fast_decode_that_skips_the_finite_check_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    class NoCheck(FastCodec):
        def decode(self, data: bytes) -> Any:
            return codec.unpack(codec.decompress(data))

    found = find(codec_values(), lambda v: bool(fast_codec_problems(v, NoCheck())),
                 settings=settings(max_examples=2000, database=None, suppress_health_check=_HEALTH))
    assert any("decode of a loose encoding" in p for p in fast_codec_problems(found, NoCheck())), found


def test_a_sharing_decode_that_changes_a_value_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    """SharingLeaderCodec planted to share a mapping one lane short from its second decode on: the
    property's envelope check finds it on a real state (and finds nothing without the plant)."""
    state = real_states(3)[0]
    assert fast_codec_problems(state) == []

    class LaneShort(fast_codec.SharingLeaderCodec):
        __slots__ = ("_calls",)

        def decode(self, data: bytes) -> Any:
            out = super().decode(data)
            self._calls = getattr(self, "_calls", 0) + 1
            if self._calls > 1:
                world = out["state"]["world"]
                world["mapping"] = {k: v[:-1] for k, v in world["mapping"].items()}
            return out

    monkeypatch.setattr(fast_codec, "SharingLeaderCodec", LaneShort)
    assert any("SharingLeaderCodec decode 2" in p for p in fast_codec_problems(state))


def test_the_conformance_fast_codec_row_fails_on_a_planted_difference(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from properties.conformance import rows_around_a_plant

    clean, planted = rows_around_a_plant("fast codec", 60, lambda: _plant_unsorted_keys(monkeypatch))
    assert clean.failure is None and clean.passed == 60
    assert planted.failure is not None and "plain" in planted.failure, planted


# -- the seams: the same published bytes with the fast codec plugged in --------------------------------


def test_the_round_publishes_the_plain_bytes_with_the_fast_codec() -> None:
    from sim.cluster import Cluster, topology_states
    from zephon_ref.coordination.protocol import Follower, Leader, RoundConfig

    def run(c: Any) -> tuple[bytes, list[bytes]]:
        sts = topology_states(5, canonical_replicas=8, world_size=3)
        cl = Cluster()
        cfg = {"namespace": "run-0", "world_size": 3, "timeout": 1000, "poll": 10, "stale_grace": 100}
        lead = cl.add("leader", Leader(sts[(0, 0)], RoundConfig(rank=0, token="t0", round_id="rid1", **cfg),
                                       warn_mid_window=False, codec=c), start=True)
        fols = [Follower(sts[(r, 0)], RoundConfig(rank=r, token=f"t{r}", **cfg), codec=c) for r in (1, 2)]
        for r, fol in zip((1, 2), fols, strict=True):
            cl.add(f"f{r}", fol, start=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cl.run()
        machine = lead.machine
        assert isinstance(machine, Leader) and machine.merged is not None
        assert all(f.done and f.round_id == "rid1" for f in fols)
        # the merged result and the three shard envelopes as published
        return codec.encode(machine.merged), [machine.own_bytes, *(f._envelope() for f in fols)]

    plain, fast = run(codec), run(FastCodec())
    assert plain == fast and len(plain[1]) == 3
    with pytest.raises(ConfigError, match="codec"):
        Follower(topology_states(5, canonical_replicas=8, world_size=3)[(1, 0)],
                 RoundConfig(namespace="run-0", rank=1, world_size=3, token="t", timeout=10, poll=1,
                             stale_grace=1), codec=object())  # type: ignore[arg-type]


def test_the_checkpoint_store_writes_the_plain_files_with_the_fast_codec(tmp_path: Path) -> None:
    from zephon_ref.checkpoint import store

    state = real_states(3)[-1]
    store.save(state, tmp_path / "plain")
    store.save(state, tmp_path / "fast", codec=FastCodec())
    files = {p.name: p.read_bytes() for p in (tmp_path / "plain").iterdir()}
    assert len(files) > 3 and files == {p.name: p.read_bytes() for p in (tmp_path / "fast").iterdir()}
    with pytest.raises(ConfigError, match="codec"):
        store.save(state, tmp_path / "bad", codec=object())  # type: ignore[arg-type]

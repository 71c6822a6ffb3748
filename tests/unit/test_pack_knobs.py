"""pack_sequences / pack_flat knobs: declared domains, cross-knob rules and errors for bad values.

Every refusal is a typed error (ConfigError is a ValueError, ConfigTypeError a TypeError) naming
the knob, raised at the builder call and changing nothing; the errors only a record can show
(a second component under homogeneity, misaligned flat fields) are raised at iteration, typed.
Where zephon 0.2.0 is installed, ``test_zephon_raises_the_same_builtin`` checks it refuses the
same configurations with the same builtin.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

import numpy as np
import pytest

from properties.opkit import rec, run
from properties.pipelines import PipelineConfig, build_pipeline
from properties.sources import zephon_available
from zephon_ref.errors import ConfigError, ConfigTypeError
from zephon_ref.ops.grouping import DomainGroups
from zephon_ref.ops.knobs import domains, knob_values
from zephon_ref.ops.pack import MAX_FLAT_LENGTH, PackConfig, PackSequences
from zephon_ref.types import SampleMeta, SampleRecord

# (keywords after max_length=8, the error) for configurations refused at construction
REFUSED: list[tuple[dict[str, Any], type[Exception]]] = [
    ({"num_bins": 0}, ConfigError),
    ({"num_bins": "2"}, ConfigTypeError),
    ({}, ConfigError),  # first_fit without num_bins
    ({"algorithm": "wrap", "num_bins": 2}, ConfigError),
    ({"algorithm": "best_fit_wrap", "num_bins": 2}, ConfigError),
    ({"algorithm": "bfw"}, ConfigError),
    ({"num_bins": 1, "max_sequences_per_bin": 0}, ConfigError),
    ({"num_bins": 1, "min_sequence_length": -1}, ConfigError),
    ({"num_bins": 1, "homogeneity": "domain"}, ConfigError),
    ({"num_bins": 1, "homogeneity": "group"}, ConfigError),  # groups missing
    ({"num_bins": 1, "homogeneity": "full", "groups": {"g": ["a"]}}, ConfigError),
    ({"num_bins": 1, "groups": {"g": ["a"]}}, ConfigError),
    ({"algorithm": "wrap", "length_fn": len}, ConfigError),
    ({"algorithm": "best_fit_wrap", "length_fn": len}, ConfigError),
    ({"algorithm": "best_fit_wrap", "drop_oversized": True}, ConfigError),
    ({"num_bins": 1, "candidate_pool_size": 4}, ConfigError),
    ({"algorithm": "wrap", "candidate_pool_size": 4}, ConfigError),
    ({"algorithm": "wrap", "max_candidate_age": 4}, ConfigError),
    ({"algorithm": "best_fit_wrap", "candidate_pool_size": 0}, ConfigError),
    ({"algorithm": "best_fit_wrap", "max_candidate_age": 0}, ConfigError),
    ({"algorithm": "best_fit_wrap", "candidate_pool_size": 2.0}, ConfigTypeError),
    ({"num_bins": 1, "pad_token_id": 0}, ConfigError),  # envelope does not pad
    ({"num_bins": 1, "output": "flat"}, ConfigError),  # flat first_fit pads: pad_token_id required
    ({"algorithm": "best_fit_wrap", "output": "flat"}, ConfigError),
    ({"algorithm": "wrap", "output": "flat", "max_sequences_per_bin": 2}, ConfigError),
    ({"num_bins": 1, "output": "flat", "pad_token_id": 0, "length_fn": len}, ConfigError),
    ({"num_bins": 1, "output": "flat", "pad_token_id": 0, "pack_payloads": lambda x: x}, ConfigError),
    ({"num_bins": 1, "output": "flat", "pad_token_id": "0"}, ConfigTypeError),
    ({"num_bins": 1, "output": "flat", "pad_token_id": 0, "emit_positions": 1}, ConfigTypeError),
    ({"num_bins": 1, "output": "rows"}, ConfigError),
]


@pytest.mark.parametrize(("kw", "err"), REFUSED, ids=lambda v: repr(v)[:60])
def test_a_bad_configuration_is_refused_typed(kw: dict[str, Any], err: type[Exception]) -> None:
    with pytest.raises(err):
        PackSequences(8, **kw)


def test_errors_name_the_knob_and_what_was_expected() -> None:
    with pytest.raises(ConfigError, match="pad_token_id.*pads partial bins"):
        PackSequences(8, algorithm="best_fit_wrap", output="flat")
    with pytest.raises(ConfigError, match="candidate_pool_size.*best_fit_wrap only"):
        PackSequences(8, num_bins=1, candidate_pool_size=3)
    with pytest.raises(ConfigError, match=f"max_length.*<= {MAX_FLAT_LENGTH}"):
        PackSequences(MAX_FLAT_LENGTH + 1, algorithm="wrap", output="flat")


def test_the_accepted_modes_construct() -> None:
    PackSequences(8, algorithm="wrap", output="flat")  # uncapped wrap never pads
    PackSequences(8, algorithm="best_fit_wrap")  # pool 1024, age 8192
    op = PackSequences(8, algorithm="best_fit_wrap", candidate_pool_size=3, homogeneity="group",
                       groups={"g": ["a", "b"]})
    assert op.config.pool_size == 3 and op.config.max_age == 24
    assert isinstance(op.config.groups, DomainGroups)
    assert PackSequences(8, algorithm="best_fit_wrap").config.max_age == 8 * 1024


def test_every_knob_has_a_declared_domain() -> None:
    """The suite generator reads these (zephon_ref/ops/knobs.py): every config field is a knob."""
    names = [f.name for f in dataclasses.fields(PackConfig)]
    assert list(domains(PackConfig)) == names
    for new in ("output", "emit_positions", "pad_token_id", "candidate_pool_size", "max_candidate_age",
                "homogeneity", "groups"):
        assert new in names
    classes = knob_values(PackSequences(8, algorithm="best_fit_wrap", candidate_pool_size=1).config)
    assert classes["candidate_pool_size"] == "minimum" and classes["max_candidate_age"] == "None"
    assert domains(PackConfig)["homogeneity"].classes() == ("'none'", "'group'", "'full'")


# -- at iteration -------------------------------------------------------------------------------------
def _two_components() -> SampleRecord:
    meta = SampleMeta((0, 0, 0), 0, 0, 0, {0: 1, 1: 1})
    return SampleRecord(meta, {"input_ids": [1, 2, 3]})


@pytest.mark.parametrize("homogeneity", ["full", "group"])
def test_homogeneous_packing_refuses_a_merged_record(homogeneity: str) -> None:
    kw: dict[str, Any] = {"groups": {"g": ["a"]}} if homogeneity == "group" else {}
    op = PackSequences(8, num_bins=1, homogeneity=homogeneity, **kw)
    ctx = {"get_component_id": {"a": 0}.__getitem__}
    with pytest.raises(ConfigError, match="exactly one"):
        run(op, [[_two_components()]], ctx=ctx)


def test_group_packing_needs_the_engines_component_names() -> None:
    op = PackSequences(8, num_bins=1, homogeneity="group", groups={"g": ["a"]})
    with pytest.raises(ConfigError, match="get_component_id"):
        op.accumulator(deterministic=True, ctx={})


def _flat(**kw: Any) -> PackSequences:
    return PackSequences(8, num_bins=1, output="flat", pad_token_id=0, **kw)


def test_flat_rows_refuse_misaligned_or_inconsistent_fields() -> None:
    a = rec(0, 0, 0, payload={"input_ids": [1, 2], "mask": [1, 1]})
    b = rec(0, 0, 1, payload={"input_ids": [3], "other": [9]})
    with pytest.raises(ConfigError, match="same aligned fields"):
        run(_flat(), [[a, b]])
    with pytest.raises(ConfigError, match="aligned"):
        run(_flat(), [[rec(0, 0, 0, payload={"input_ids": [1, 2], "mask": [1]})]])
    with pytest.raises(ConfigError, match="positions"):
        run(_flat(), [[rec(0, 0, 0, payload={"input_ids": [1, 2], "positions": 0})]])
    run(_flat(emit_positions=False), [[rec(0, 0, 0, payload={"input_ids": [1, 2], "positions": 0})]])
    with pytest.raises(ConfigError, match="representable"):
        run(_flat(), [[rec(0, 0, 0, payload={"input_ids": np.array([1, 2], dtype=np.uint8)})]],
            acc=PackSequences(8, num_bins=1, output="flat", pad_token_id=300).accumulator(
                deterministic=True, ctx={}))


def test_flat_rows_are_padded_with_positions() -> None:
    payload = {"input_ids": np.array([5, 6, 7]), "mask": (1, 1, 1), "k": 3}
    (row,) = run(_flat(), [[rec(0, 0, 0, payload=payload)]])
    assert row.payload["input_ids"].tolist() == [5, 6, 7, 0, 0, 0, 0, 0]
    assert row.payload["mask"] == (1, 1, 1, 0, 0, 0, 0, 0)
    assert row.payload["positions"].dtype == np.int32
    assert row.payload["positions"].tolist() == [0, 1, 2, 0, 1, 2, 3, 4]
    assert "k" not in row.payload and row.meta.tags["_packing_metadata"]["padding_length"] == 5


# -- at the builder -----------------------------------------------------------------------------------
CFG = PipelineConfig([], layout={"web": (6,), "code": (4,)}, weights={"web": 0.5, "code": 0.5},
                     source_kwargs={"chunk_size": 4, "seed": 0})


def test_groups_are_checked_against_the_sources_components_and_a_refusal_changes_nothing() -> None:
    p = build_pipeline("zephon_ref", CFG)
    before = p.fingerprint()
    with pytest.raises(ConfigError, match="not in the mixture"):
        p.pack_flat(32, num_bins=2, pad_token_id=0, homogeneity="group", groups={"g": ["web", "nope"]})
    with pytest.raises(ConfigError):
        p.pack_sequences(32, num_bins=2, groups={"g": ["web"]})
    assert p.fingerprint() == before
    with pytest.warns(UserWarning, match=r"\['code'\] are in no group"):
        p.pack_sequences(32, num_bins=2, homogeneity="group", groups={"g": ["web"]})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert list(p)


def test_pack_flat_is_its_own_operator_name() -> None:
    p = build_pipeline("zephon_ref", CFG).pack_flat(32, algorithm="wrap")
    assert [n for n, _ in p._ops][-1] == "pack_flat"  # noqa: SLF001 - the graph a fingerprint names


@pytest.mark.skipif(not zephon_available(), reason="zephon 0.2.0 not installed (pip install .[conformance])")
@pytest.mark.parametrize(("kw", "err"), REFUSED, ids=lambda v: repr(v)[:60])
def test_zephon_raises_the_same_builtin(kw: dict[str, Any], err: type[Exception]) -> None:
    from zephon._internal.ops.pack_sequences import PackSequences as ZPack
    from zephon.ops.grouping import DomainGroups as ZGroups

    builtin = ValueError if issubclass(err, ValueError) else TypeError
    z = {**kw, "groups": ZGroups(kw["groups"])} if "groups" in kw else kw
    if kw.get("emit_positions") == 1 or kw.get("pad_token_id") == "0"\
            or kw.get("candidate_pool_size") == 2.0:
        pytest.skip("zephon does not check this type (docs/divergences.md)")
    with pytest.raises(builtin):
        ZPack(8, **z)


def test_the_groups_are_part_of_the_fingerprint() -> None:
    """Another grouping packs other records together: a checkpoint must not restore across it."""
    def fp(groups: dict[str, list[str]]) -> str:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            p = build_pipeline("zephon_ref", CFG)
            return str(p.pack_sequences(32, num_bins=2, homogeneity="group", groups=groups).fingerprint())

    assert fp({"g": ["web"]}) != fp({"g": ["code"]})
    assert fp({"g": ["web"]}) == fp({"g": ["web"]})


def test_numpy_array_merging_refuses_what_does_not_stack() -> None:
    from zephon_ref.ops.pack import join_numpy

    a, b = np.arange(2), np.arange(3)
    assert join_numpy([a, b]).tolist() == [0, 1, 0, 1, 2]
    assert join_numpy([{"x": a}, {"x": b, "y": b}])["x"].tolist() == [0, 1, 0, 1, 2]
    with pytest.raises(ConfigTypeError, match="numpy arrays"):
        join_numpy([a, [1]])
    with pytest.raises(ConfigTypeError, match="dicts like the first"):
        join_numpy([{"x": a}, b])
    with pytest.raises(ConfigError, match="every key of the first"):
        join_numpy([{"x": a, "y": a}, {"x": b}])
    with pytest.raises(ConfigError, match="agree beyond their first axis"):
        join_numpy([np.ones((2, 2)), np.ones((3, 3))])
    with pytest.raises(ConfigError, match="torch_tensor"):
        PackSequences(8, num_bins=1, pack_payloads="torch_tensors")  # a misspelt mode names the real ones


def _children(sizes: list[int]) -> list[SampleRecord]:
    from zephon_ref.lineage import spawn_child

    base = rec(0, 0, 0, n_tokens=1)
    return [SampleRecord(spawn_child(base.meta, i, is_last_child=i == len(sizes) - 1),
                         {"input_ids": list(range(n))}) for i, n in enumerate(sizes)]


def _closers(out: list[SampleRecord]) -> list[tuple[int, bool]]:
    return [(i, ref.is_last_child) for i, r in enumerate(out) for ref in r.meta.contribution_refs()]


@pytest.mark.parametrize("algorithm", ["first_fit", "best_fit_wrap"])
def test_a_shuffle_moving_the_closing_child_first_still_closes_on_the_last_fragment(algorithm: str) -> None:
    """shuffle_strategy="length" puts the 5-token closer before its 3-token sibling; it fills a bin
    at once, but the offset closes only with the sibling (zephon closes it with the first bin)."""
    kw: dict[str, Any] = {"num_bins": 1} if algorithm == "first_fit" else {"candidate_pool_size": 1}
    out = run(PackSequences(5, algorithm=algorithm, shuffle_strategy="length", **kw), [_children([3, 5])])
    assert [len(r.payload["packed_samples"]) for r in out] == [1, 1]
    assert _closers(out) == [(0, False), (1, True)]


def test_a_dropped_closing_child_hands_its_closer_to_a_sibling_shuffled_after_it() -> None:
    out = run(PackSequences(5, num_bins=1, shuffle_strategy="length"), [_children([3, 20])])
    assert _closers(out) == [(0, True)] and not any(r.meta.tombstone for r in out)


@pytest.mark.parametrize("output", ["envelope", "flat"])
def test_wrap_closes_an_offset_after_a_buffered_sibling_when_its_closing_child_is_empty(output: str) -> None:
    """Divergence D-2: a 3-token child buffered in wrap's 10-token window, then its empty closing sibling.
    zephon 0.2.0 tombstones the empty closer at once (the offset closes while the 3 tokens are still
    buffered: a checkpoint then evicts the chunk, and a crash loses them); the closer travels with the
    buffered sibling instead and leaves with its last fragment."""
    kw: dict[str, Any] = {"pad_token_id": 0} if output == "flat" else {}
    op = PackSequences(10, algorithm="wrap", output=output, **kw)
    acc = op.accumulator(deterministic=True, ctx={})
    kids = _children([3, 0])
    assert acc.push_many([kids[0]]) == []
    assert acc.push_many([kids[1]]) == []  # no tombstone ahead of the buffered 3 tokens
    full = rec(0, 0, 1, n_tokens=10)  # fills the window: the 3 tokens leave with 7 of it
    other = SampleRecord(full.meta, {"input_ids": full.payload["input_ids"]})
    out = [r for batch, _ in acc.push_many([other]) for r in batch]
    assert [len(r.payload["packed_samples"]) if output == "envelope" else None for r in out] == [
        2 if output == "envelope" else None]
    closing = [(ref.cursor.base_offset, ref.is_last_child) for ref in out[0].meta.contribution_refs()]
    assert closing[0] == ((0, 0), True) and not out[0].meta.tombstone
    # when no sibling is buffered the empty closer still closes its offset at once, by tombstone
    acc = op.accumulator(deterministic=True, ctx={})
    (tomb,) = [r for batch, _ in acc.push_many(_children([0])) for r in batch]
    assert tomb.meta.tombstone and _closers([tomb]) == [(0, True)]

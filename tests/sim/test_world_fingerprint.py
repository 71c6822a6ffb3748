"""A packed decision record (SeededChoices(compact=True)) and a kernel without a kept trace (what
run_seed uses) give the same record, the same JSON and the same world fingerprint as the plain ones."""

from __future__ import annotations

import json

import pytest

from sim import choices as choices_mod
from sim.choices import SeededChoices
from sim.workloads import Workload, item_view
from sim.world import World, WorldConfig


def _draw(c: SeededChoices, k: int) -> None:
    for i in range(k):
        c.integer(f"latency/{i % 7}", 1, 5)
        c.chance("nemesis/crash", 1, 3)
        c.choose("step/\u00e9\"q", ("admit", "deliver", "stage:0"))  # a label JSON must escape


@pytest.mark.parametrize("block", [3, 1 << 16])
def test_packed_record_equals_the_plain_one(monkeypatch: pytest.MonkeyPatch, block: int) -> None:
    monkeypatch.setattr(choices_mod._PackedRecord, "BLOCK", block)  # 3: many compressed blocks
    for k in (0, 1, 2, 50):
        plain, packed = SeededChoices(11), SeededChoices(11, compact=True)
        _draw(plain, k)
        _draw(packed, k)
        assert packed.record == plain.record
        text = b"".join(packed.record_json())
        assert text == b"".join(plain.record_json())
        assert (
            text
            == json.dumps([[d.label, d.n, d.index] for d in plain.record], separators=(",", ":")).encode()
        )
        assert packed.encoded() == plain.encoded()
    assert len(plain.record) > 100


def test_the_world_fingerprint_does_not_depend_on_how_the_record_is_kept() -> None:
    wl = Workload(canonical_replicas=4)
    cfg = WorldConfig(canonical_replicas=4, ranks=2, steps=30, checkpoint_every=2, crash=(1, 300),
                      restart_ranks=(1, 2, 4))
    worlds = []
    for compact in (False, True):  # run_seed's way: the record packed and no kernel trace kept
        w = World(cfg, wl.build, SeededChoices(5, compact=compact), view=item_view, keep_trace=not compact)
        w.run()
        worlds.append(w)
    plain, packed = worlds
    assert packed.fingerprint() == plain.fingerprint()
    assert packed.choices.record == plain.choices.record and len(plain.choices.record) > 100
    assert packed.kernel.trace == () and len(plain.kernel.trace) == plain.kernel.events_run > 100


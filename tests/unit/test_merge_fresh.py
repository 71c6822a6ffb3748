"""merge(fresh=True): the same merged state as merge() for shards this process just sealed;
the integrity of the shards is then taken as given (the caller's promise), nothing else is."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from sim.cluster import topology_states
from zephon_ref.coordination.merge import merge
from zephon_ref.errors import ContractError
from zephon_ref.state import verify_integrity

pytestmark = pytest.mark.filterwarnings("ignore:checkpoint taken mid-window")


def _states(seed: int = 0) -> list[dict[str, Any]]:
    return [s for _, s in sorted(topology_states(seed, canonical_replicas=8, world_size=4).items())]


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_fresh_merge_equals_the_checked_merge(seed: int) -> None:
    st = _states(seed)
    a, b = merge(copy.deepcopy(st), warn_mid_window=False), merge(copy.deepcopy(st), warn_mid_window=False, fresh=True)
    assert a == b
    verify_integrity(b)


def test_fresh_skips_only_the_integrity_recheck() -> None:
    st = _states(1)
    altered = copy.deepcopy(st)
    altered[0]["lane_emitted"] = dict(altered[0]["lane_emitted"])
    lane = next(iter(altered[0]["lane_emitted"]))
    altered[0]["lane_emitted"][lane] = int(altered[0]["lane_emitted"][lane]) + 1  # after sealing
    assert merge(copy.deepcopy(altered), warn_mid_window=False)["integrity"] is None  # checked: left unsealed
    assert merge(copy.deepcopy(altered), warn_mid_window=False, fresh=True)["integrity"] is not None  # promised
    with pytest.raises(ContractError):  # every other check still runs: a lane missing
        merge(copy.deepcopy(st[1:]), warn_mid_window=False, fresh=True)

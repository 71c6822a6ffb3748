"""Child process for the kill campaign (run as a script, never imported by pytest).

usage: _crash_child.py DIR step K SEED   -- save state(SEED), SIGKILL itself at publish step K
       _crash_child.py DIR loop N SEED0  -- save state(SEED0), state(SEED0+1), ... N times
The fabricated state carries its own seed in ``work_config`` so the parent can
rebuild exactly what was saved for any generation it finds.
"""

from __future__ import annotations

import os
import random
import signal
import sys
from pathlib import Path
from typing import Any

from zephon_ref.checkpoint import store
from zephon_ref.checkpoint.fabricate import fabricate_engine_state

C = 3


def state_for(seed: int) -> dict[str, Any]:
    s = fabricate_engine_state(random.Random(seed), canonical_replicas=C, fingerprint="crash")
    s["work_config"] = {"fab_seed": seed}
    return s


def main() -> None:
    directory, mode, n, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    if mode == "step":
        count = 0

        def hook(step: str, path: Path) -> None:
            nonlocal count
            count += 1
            if count == n:
                os.kill(os.getpid(), signal.SIGKILL)

        store.set_publish_hook(hook)
        store.save(state_for(seed), directory)
        print("completed", flush=True)
    else:
        print("ready", flush=True)
        for i in range(n):
            store.save(state_for(seed + i), directory)


if __name__ == "__main__":
    main()

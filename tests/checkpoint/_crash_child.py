"""Child process for the kill campaign (run as a script, never imported by pytest).

usage: _crash_child.py DIR step K SEED   -- save state(SEED), SIGKILL itself right after storage op K
       _crash_child.py DIR loop N SEED0  -- save state(SEED0), state(SEED0+1), ... N times
       _crash_child.py DIR race N SEED0  -- wait for "go" on stdin, save N states, print
                                           one JSON line [[generation, seed] or [error, seed], ...]
With ZR_FAKE_PID set, os.getpid() returns it (two writers sharing a PID, as in
two containers).
The state is a real engine state (a 3-lane pipeline iterated a few items) that is
a pure function of SEED, so the parent can rebuild exactly what was saved for any
generation it finds.  Op K counts every operation the save performs through its
storage (sim.storage.FaultyStorage observes them; the parent counts the same ops
with a dry run).
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from properties.ckpt_campaigns import CRASH_LANES as C
from properties.ckpt_campaigns import child_loop, child_race
from properties.ckpt_campaigns import crash_state as state_for
from sim.storage import FaultyStorage
from zephon_ref.checkpoint import store

__all__ = ["C", "state_for"]


def main() -> None:
    directory, mode, n, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    fake = os.environ.get("ZR_FAKE_PID")
    if fake:
        os.getpid = lambda: int(fake)
    if mode == "race":
        child_race(directory, n, seed)
        return
    if mode == "step":
        count = 0

        def after(op: str, path: Path) -> None:
            nonlocal count
            count += 1
            if count == n:
                os.kill(os.getpid(), signal.SIGKILL)

        state = state_for(seed)
        store.save(state, directory, storage=FaultyStorage(after=after))
        print("completed", flush=True)
    else:
        child_loop(directory, n, seed)

if __name__ == "__main__":
    main()

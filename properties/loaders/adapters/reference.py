"""A plain-Python stateful loader that holds every property, and bugs to plant in it.

``ListLoader`` reads the dataset's ids epoch by epoch (a permutation drawn from
``Random(seed * 1000 + epoch)`` when ``shuffle``), in batches (``drop_last`` drops the final
partial batch); its state is ``{"epoch", "pos"}`` and its counters are exact.  It exists so
the suite's own tests run in milliseconds and can prove that every property can fail:
``ListLoader(bug=...)`` plants one of BUGS, each the shape of a bug the field's loaders have had.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

from properties.loaders.core import EpochSpec, LoaderConfig, dataset_ids, default_epoch_spec

__all__ = ["BUGS", "LIST_LOADER", "ListLoader"]

#: plantable bugs: name -> what it does (and the property expected to catch it)
BUGS = {
    "skip_on_restore": "restore skips one item (resume, no_skip_dup)",
    "end_of_epoch": "a state taken at an epoch's end restores into an empty next epoch (resume)",
    "restore_resets_count": "a state taken right after a restore forgets the restored position "
    "(state_after_restore)",
    "mutate_state": "restore writes into the state object it was given (restore_twice)",
    "initial_state": "a state read before anything was consumed restores with another seed (initial_state)",
    "workers": "restoring under another worker count silently repeats an item (workers)",
    "counter": "the item counter runs one ahead after a restore (counters)",
    "nondeterministic": "two uninterrupted runs differ (uninterrupted)",
}


class _Run:
    _runs = 0  # the nondeterministic bug's source of difference

    def __init__(self, a: ListLoader, cfg: LoaderConfig, state: Any) -> None:
        self.a, self.cfg = a, cfg
        self.epoch, self.pos, self.fresh = 0, 0, True
        self.seed = cfg.seed
        if a.bug == "nondeterministic":
            _Run._runs += 1
            self.seed += _Run._runs
        self.restored = False
        if state is not None:
            self.epoch, self.pos = int(state["epoch"]), int(state["pos"])
            self.restored = True
            if a.bug == "skip_on_restore" and self.pos:
                self.pos += 1
            if a.bug == "end_of_epoch" and self.pos >= self._epoch_len() and self.pos:
                self.epoch += 1  # then the loop below also moves on: one epoch lost
            if a.bug == "mutate_state" and isinstance(state, dict):
                state["pos"] = -1
            if a.bug == "initial_state" and self.pos == 0 and self.epoch == 0:
                self.seed += 1
            if a.bug == "workers" and state.get("workers") not in (None, cfg.workers) and self.pos:
                self.pos -= 1

    def _order(self) -> list[int]:
        ids = dataset_ids(self.cfg)
        if self.cfg.shuffle:
            random.Random(self.seed * 1000 + self.epoch).shuffle(ids)
        return ids

    def _epoch_len(self) -> int:
        return default_epoch_spec(self.cfg).length

    def next(self, n: int) -> list[list[int]]:
        out: list[list[int]] = []
        while len(out) < n and self.epoch < self.cfg.epochs:
            order = self._order()[:self._epoch_len()]
            if self.pos >= len(order):
                self.epoch, self.pos = self.epoch + 1, 0
                continue
            b = order[self.pos:self.pos + self.cfg.batch]
            self.pos += len(b)
            out.append(b)
        return out

    def state(self) -> Any:
        pos = self.pos
        if self.a.bug == "restore_resets_count" and self.restored:
            pos = 0
        return {"epoch": self.epoch, "pos": pos, "workers": self.cfg.workers}

    def counters(self) -> Mapping[str, int] | None:
        k = self.pos + (1 if self.a.bug == "counter" and self.restored else 0)
        return {"epoch": self.epoch, "items_in_epoch": k}

    def close(self) -> None:
        pass


class ListLoader:
    primed_ok = False
    space = {"size": (5, 1, 2, 6), "shuffle": (False, True), "batch": (1, 2, 3), "drop_last": (False, True),
             "workers": (0, 2), "epochs": (1, 2, 3), "seed": (0, 1), "data_seed": (0, 1)}

    def __init__(self, bug: str | None = None) -> None:
        if bug is not None and bug not in BUGS:
            raise ValueError(f"bug: expected one of {sorted(BUGS)} or None, received {bug!r}")
        self.bug = bug
        self.name = "list" if bug is None else f"list[{bug}]"

    def available(self) -> str | None:
        return None

    def version(self) -> str:
        return "properties.loaders.adapters.reference (plain Python)"

    def declared(self) -> Mapping[str, str]:
        return {}

    def unsupported(self, cfg: LoaderConfig) -> str | None:
        return None

    def epoch_spec(self, cfg: LoaderConfig) -> EpochSpec:
        return default_epoch_spec(cfg)

    def worker_change(self, cfg: LoaderConfig) -> str:
        return "exact"  # the workers knob does not touch the data

    def build(self, cfg: LoaderConfig, state: Any = None, *, primed: bool = False) -> _Run:
        return _Run(self, cfg, state)


LIST_LOADER = ListLoader()

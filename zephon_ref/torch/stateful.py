"""The stateful dataset: ``state_dict()`` / ``load_state_dict()`` under a plain torch DataLoader.

Theory of operation
-------------------
A DataLoader runs ``num_workers`` worker processes, each iterating its own copy of
the dataset, and it prefetches: when the trainer holds batch ``i``, the workers
may already have produced batches ``i+1 .. i+k``.  A state read inside a worker
therefore describes what the worker *produced*, not what the trainer *consumed*.
This module keeps the two apart without patching torch:

1. **The state travels with the batch.**  In worker ``w`` of ``n`` the dataset
   iterates ``pipeline.for_worker(role, n)`` (the lanes
   :func:`~zephon_ref.engine.world.worker_lanes` gives ``role``) and, after each
   delivered item, reads that worker engine's *local* state (its own lanes only).
   It yields a :class:`StampedItem` ``(item, role, num_workers, state)``.
2. **The trainer's side records what it consumed.**  :meth:`track` wraps a plain
   ``DataLoader(dataset, batch_size=None, ...)``: it iterates it, records the
   stamped state of each item as that role's latest consumed state, and hands
   the bare item to the trainer (:meth:`observe` is the same for one item).
3. **state_dict() merges the per-role states** of the last item each role
   delivered (a role that delivered nothing yet contributes its starting state)
   with :func:`zephon_ref.coordination.merge.merge`, the same merge the
   aggregation round runs for ``Pipeline.checkpoint()``.  With several ranks each
   role's shard joins the pipeline's aggregation round as participant
   ``(rank, worker=role)``, one thread each, and the round's leader merges them all.  The result is
   ``{"format": ..., "engine": <engine state>, "num_workers": n, "next_role": r}``;
   ``engine`` is an ordinary engine state that ``Pipeline.restore`` accepts too.
4. **Role rotation makes same-count resumes exact.**  A DataLoader asks its
   workers for items round-robin in worker order, skipping exhausted ones, and a
   fresh iterator starts at worker 0.  ``next_role`` is the role after the one
   that delivered the last consumed item; on resume with the same ``n`` physical
   worker ``p`` plays role ``(p + next_role) mod n``, so the resumed loader
   continues the uninterrupted interleaving item for item.  With another worker
   count every lane continues exactly (a lane's stream depends only on the
   lane) and only the interleaving of lanes is the new loader's.

Feeding and prefetch.  Each worker's engine feeds its lanes under the pipeline's
feeding policy (``options(feeding=...)``; the default ``"demand"`` feeds a lane only
when the worker's delivery waits on it), and the stamped state is read right after
the worker delivered the item.  Items the DataLoader prefetched past the consumed
one are not in the state the trainer records (they come after its cut and are
produced again after a restore), so prefetch adds nothing to a checkpoint's inflight
chunks: each role's shard is a state its engine had between two deliveries
(:func:`sim.invariants.inflight_bound`).

Each :meth:`track` pass starts where the consumed state stands (the loaded
state, or the end of the previous pass), so consecutive passes continue the
stream rather than replaying it.  With several ranks that needs the ranks'
round, so a new pass after consumed items requires a ``state_dict()`` on every
rank first (a ContractError says so); a pass never starts a round by itself.

Refused, with typed errors (a configuration that cannot be checkpointed):
``persistent_workers=True`` (the workers would keep the state they were forked
with), a DataLoader ``batch_size`` other than None (the pipeline batches; a
DataLoader batch would mix stamps), a loader over another dataset, and, with
``world_size > 1`` and several workers per rank, a custom ``aggregate`` (each
worker shard joins the round as its own participant, through the pipeline's
configured backend).

What may not live here: pipeline logic (lanes, order, replay belong to the
engine), merge rules (:mod:`zephon_ref.coordination.merge`), torch patches.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from zephon_ref.builder import Builder
from zephon_ref.coordination.merge import merge
from zephon_ref.engine.world import active_workers
from zephon_ref.errors import (
    ConfigError,
    ConfigTypeError,
    ContractError,
    StateFormatError,
    expected,
)
from zephon_ref.torch.dataset import check_pipeline, dataset_class, device_collate, publish_class
from zephon_ref.torch.device import require_torch, worker_slot

__all__ = ["STATE_FORMAT", "StampedItem", "stateful_dataset_class", "to_stateful_dataset"]

#: The ``format`` tag of :meth:`state_dict`'s result.
STATE_FORMAT = "zephon_ref.torch.stateful/1"

_STATE_CLASS: type[Any] | None = None


def pin_tree(value: Any) -> Any:
    """``value`` with every CPU tensor inside dicts, lists and tuples in pinned memory."""
    torch = require_torch()
    if isinstance(value, torch.Tensor):
        return value.pin_memory()
    if isinstance(value, Mapping):
        return {k: pin_tree(v) for k, v in value.items()}
    if isinstance(value, list):
        return [pin_tree(v) for v in value]
    if isinstance(value, tuple):
        return tuple(pin_tree(v) for v in value)
    return value


@dataclass(frozen=True, slots=True)
class StampedItem:
    """An item as a stateful worker yields it: the item, who made it, and that worker's state after it.

    ``state`` is the worker engine's local state (its own lanes) right after it
    delivered ``item``.  The DataLoader's pin-memory thread calls
    :meth:`pin_memory`, which pins the tensors of ``item`` only.
    """

    item: Any
    role: int
    num_workers: int
    state: dict[str, Any]

    def pin_memory(self) -> StampedItem:
        return StampedItem(pin_tree(self.item), self.role, self.num_workers, self.state)


def _quiet_local_state(pipeline: Builder) -> dict[str, Any]:
    # A DataLoader is mid-window between almost any two batches; the warning would fire every batch.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="checkpoint taken mid-window", category=RuntimeWarning)
        return pipeline.local_state()


def _check_state(state: Any) -> tuple[dict[str, Any], int, int]:
    """(engine state, num_workers, next_role) of a :meth:`state_dict` result, or a typed refusal."""
    if not isinstance(state, Mapping):
        raise StateFormatError(expected("stateful dataset state", "a dict from state_dict()",
                                        type(state).__name__))
    if state.get("format") != STATE_FORMAT:
        raise StateFormatError(expected("stateful dataset state 'format'", repr(STATE_FORMAT),
                                        state.get("format")))
    engine, n, role = state.get("engine"), state.get("num_workers"), state.get("next_role")
    if not isinstance(engine, Mapping):
        raise StateFormatError(expected("stateful dataset state 'engine'", "an engine-state dict",
                                        type(engine).__name__))
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise StateFormatError(expected("stateful dataset state 'num_workers'", "an int >= 1", n))
    if isinstance(role, bool) or not isinstance(role, int) or not 0 <= role < n:
        raise StateFormatError(expected("stateful dataset state 'next_role'", f"an int in [0, {n})", role))
    return dict(engine), n, role


def stateful_dataset_class() -> type[Any]:
    """Build (once) the stateful IterableDataset subclass (it needs torch, so not at import)."""
    global _STATE_CLASS
    if _STATE_CLASS is not None:
        return _STATE_CLASS
    torch = require_torch()

    class StatefulPipelineDataset(dataset_class()):  # type: ignore[misc]
        """An IterableDataset over a pipeline with ``state_dict()`` / ``load_state_dict()``.

        See :mod:`zephon_ref.torch.stateful`.  Iterate a DataLoader over it through
        :meth:`track`; iterated bare, it yields :class:`StampedItem` objects.  It shares the
        plain dataset's construction and pickling (``resume`` travels too).
        """

        def __init__(self, pipeline: Builder, collate: Callable[[Any], Any] | None) -> None:
            super().__init__(pipeline, collate)
            self._resume: tuple[dict[str, Any], int, int] | None = None  # (engine, n, next_role)
            self._n = (
                1  # worker count of the current pass (0 counts as 1: one stream, the pipeline's own order)
            )
            self._seen: dict[int, dict[str, Any]] = {}  # role -> local state after its last consumed item
            self._last_role: int | None = None
            self._starts: dict[int, dict[str, Any]] = {}  # role -> its state at the start of the pass
            self._last_state: dict[str, Any] | None = None  # state_dict() since the last observed item

        # -- worker side --------------------------------------------------------------------
        def _role_pipeline(self, role: int, n: int) -> Builder:
            work: Builder = self.pipeline.for_worker(role, n)
            if self._resume is not None:
                work.restore(self._resume[0])
            return work

        def _offset(self, n: int) -> int:
            if self._resume is None or self._resume[1] != n:
                return 0
            return self._resume[2]

        def __iter__(self) -> Iterator[StampedItem]:
            slot = worker_slot()
            n = slot.num_workers if slot.in_loader else 1
            role = (slot.worker_id + self._offset(n)) % n
            work = self._role_pipeline(role, n)
            collate = self.collate
            for item in work:
                state = _quiet_local_state(work)
                yield StampedItem(item if collate is None else collate(item), role, n, state)

        def __getstate__(self) -> dict[str, Any]:
            return {**super().__getstate__(), "resume": self._resume}

        def __setstate__(self, state: dict[str, Any]) -> None:
            super().__setstate__(state)
            self._resume = state["resume"]

        # -- trainer side -------------------------------------------------------------------
        def _begin(self, n: int) -> None:
            """Start a pass with ``n`` workers from the consumed state (so passes continue).

            With several ranks that state needs an aggregation round, which every rank must
            join; a pass does not start one on its own: call state_dict() on every rank first.
            """
            if self._seen:
                if self._last_state is None:
                    if self._rank_world().world_size > 1:
                        raise ContractError(
                            expected(
                                "a new pass at world_size > 1 after items were consumed",
                                "state_dict() called on every rank first (the state of a consumed pass needs "
                                "the ranks' aggregation round)",
                                "a pass with no state_dict() since the last item",
                            )
                        )
                    self._last_state = self.state_dict()
                self._resume = _check_state(self._last_state)
            self._n = max(1, n)
            self._seen = {}
            self._last_role = None
            self._starts = {}
            self._last_state = None

        def track(self, loader: Any) -> Iterator[Any]:
            """Iterate ``loader`` (a DataLoader over this dataset), yielding bare items and
            recording, per worker role, the state that came with the last item handed out."""
            dl = torch.utils.data.DataLoader
            if not isinstance(loader, dl):
                raise ConfigTypeError(expected("track() loader", "a torch DataLoader", type(loader).__name__))
            if loader.dataset is not self:
                raise ConfigError(
                    expected("track() loader.dataset", "this dataset", type(loader.dataset).__name__)
                )
            if loader.batch_size is not None:
                raise ConfigError(expected("DataLoader batch_size for a stateful pipeline dataset",
                                           "None (the pipeline batches)", loader.batch_size))
            n = int(loader.num_workers)
            if n > 0 and loader.persistent_workers:
                raise ConfigError(expected("DataLoader persistent_workers for a stateful pipeline dataset",
                                           "False (persistent workers keep the state they were started "
                                           "with, so load_state_dict() could not reach them)", True))
            self._begin(n)
            tracked: Iterator[Any] = self._tracked(loader)
            return tracked

        def _tracked(self, loader: Any) -> Iterator[Any]:
            for stamped in loader:
                yield self.observe(stamped)

        def observe(self, stamped: Any) -> Any:
            """Record one :class:`StampedItem` as consumed; return its bare item."""
            if not isinstance(stamped, StampedItem):
                raise ConfigTypeError(expected("observe() item", "a StampedItem from this dataset",
                                               type(stamped).__name__))
            if stamped.num_workers != self._n:
                raise ContractError(expected("observed item's worker count", f"{self._n} (this pass's)",
                                             stamped.num_workers))
            self._seen[stamped.role] = stamped.state
            self._last_role = stamped.role
            self._last_state = None
            return stamped.item

        def _rank_world(self) -> Any:
            """This rank's World (one worker): its group's lanes and its place in the round."""
            return self.pipeline.world()

        def _start_state(self, role: int) -> dict[str, Any]:
            """Role ``role``'s local state at the start of the pass (its lanes, nothing consumed)."""
            if role not in self._starts:
                work = self._role_pipeline(role, self._n)
                run = iter(work)  # builds the role's engine from the resume state; delivers nothing
                run.close()
                self._starts[role] = _quiet_local_state(work)
            return self._starts[role]

        def state_dict(self, *, aggregate: Any = None) -> dict[str, Any]:
            """The state after the items handed out so far (see the module docstring).

            With ``world_size > 1`` every rank calls this at the same step: the
            rank's shard joins one aggregation round (``aggregate`` as in
            ``Pipeline.checkpoint``, else the pipeline's configured backend).
            """
            n = self._n
            rank_world = self._rank_world()
            active = active_workers(len(rank_world.group_lanes), n)
            shards = [self._seen[r] if r in self._seen else self._start_state(r) for r in range(active)]
            if rank_world.world_size > 1:
                engine = self._aggregate(shards, rank_world, aggregate)
            else:
                engine = merge(shards, warn_mid_window=False)
            next_role = self._offset(n) if self._last_role is None else (self._last_role + 1) % n
            state = {"format": STATE_FORMAT, "engine": engine, "num_workers": n, "next_role": next_role}
            self._last_state = copy.deepcopy(state)
            return state

        def _aggregate(self, shards: list[dict[str, Any]], world: Any, aggregate: Any) -> dict[str, Any]:
            """The merged state of every rank: each role's shard joins the round as one participant.

            One shard (0 or 1 workers) joins from this thread.  Several join at once,
            one thread each, as ``(rank, worker=role)`` participants of the same round, so
            the leader (rank 0, worker 0) sees every lane exactly once; all get the same
            merged state back.
            """
            if aggregate is None:
                from zephon_ref.coordination.driver import pipeline_aggregate

                aggregate = pipeline_aggregate(self.pipeline.runtime_options())
            elif len(shards) > 1:
                raise ContractError(
                    expected(
                        "aggregate= with several DataLoader workers per rank",
                        "None (the pipeline's configured backend)",
                        "a custom aggregate",
                    )
                )
            if len(shards) == 1:
                merged, _round = aggregate(shards[0], world)
                return copy.deepcopy(dict(merged))
            import dataclasses
            import threading

            results: dict[int, Any] = {}
            errors: dict[int, BaseException] = {}

            def join(role: int) -> None:
                try:
                    w = dataclasses.replace(world, worker_id=role, num_workers=self._n)
                    results[role] = aggregate(shards[role], w)[0]
                except BaseException as exc:  # re-raised below, in the caller's thread
                    errors[role] = exc

            threads = [threading.Thread(target=join, args=(r,), name=f"zephon-ref-round-w{r}")
                       for r in range(len(shards))]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            if errors:
                raise errors[min(errors)]
            return copy.deepcopy(dict(results[0]))

        def load_state_dict(self, state: Mapping[str, Any]) -> None:
            """Resume from a :meth:`state_dict` result at the next pass (under any worker count).

            The engine state is validated against the pipeline first; a refusal
            (typed, as ``Pipeline.restore`` raises) changes nothing.
            """
            engine, n, role = _check_state(state)
            self.pipeline.for_worker(0, 1).restore(engine)  # dry run: raises, changing nothing
            self._resume = (copy.deepcopy(engine), n, role)
            self._seen = {}
            self._last_role = None
            self._starts = {}
            self._last_state = None

    _STATE_CLASS = publish_class(StatefulPipelineDataset, "StatefulPipelineDataset")
    return _STATE_CLASS


def to_stateful_dataset(
    pipeline: Builder,
    *,
    collate: Callable[[Any], Any] | None = None,
    device: Any = None,
) -> Any:
    """A checkpointable IterableDataset over ``pipeline`` (see the module docstring).

    ``collate`` / ``device`` as in :func:`zephon_ref.torch.to_torch_dataset`
    (collation runs in the worker).  Use it as
    ``for batch in ds.track(DataLoader(ds, batch_size=None, num_workers=n))``.
    """
    check_pipeline(pipeline)
    return stateful_dataset_class()(pipeline, device_collate(collate, device))

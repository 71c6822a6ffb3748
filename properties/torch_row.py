"""The ``torch`` row: the stateful torch dataset's state at every position of a pass, resumed
passes included, under 0, 1 and 2 DataLoader workers, against the oracle.

Theory of operation
-------------------
An adapter with the ``torch`` feature builds torch datasets of a configuration:
``adapter.torch_dataset(cfg, kind)`` for each ``kind`` in ``adapter.torch_kinds``:

* ``"loader"``: the dataset ``pipeline.to_torch_dataset()`` returns (stateful by default, as
  zephon 0.2.0's), driven by torchdata's ``StatefulDataLoader`` (its ``state_dict()`` /
  ``load_state_dict()``); skipped, saying why, when torchdata is not installed;
* ``"tracked"``: zephon_ref's trainer-side stateful dataset
  (:func:`zephon_ref.torch.to_stateful_dataset`), iterated through ``ds.track(DataLoader(...))``,
  whose state carries the role rotation (``next_role``) that makes a same-count resume exact.

One example draws a small configuration (the oracle's stream at most :data:`MAX_ITEMS` items), a
worker count (0, 1 or 2) and a kind, and then:

1. a pass delivers the oracle's stream: item for item with 0 or 1 workers (one stream), lane for
   lane with 2 (the DataLoader interleaves its workers);
2. the state at *every* position of that pass names what was consumed: for ``tracked``, its engine
   state restored into a plain pipeline delivers, per lane, exactly the oracle's records the pass
   had not delivered yet;
3. a resume from the state at a drawn position (same worker count) delivers the rest of the pass,
   item for item;
4. in that resumed pass, the state taken at its start, before its first item, resumes to the
   same rest (the case of a non-zero worker-role offset), and so does the state at a drawn position
   of the resumed pass.

zephon 0.2.0, once imported, patches torchdata's ``StatefulDataLoader.state_dict()`` for the whole
process to copy worker 0's snapshot to every worker (its workers' states are the same merged
state); zephon_ref's worker states are per worker, so a process that imports zephon hands worker 1
worker 0's state (refused: StateMismatchError).  The row drives a zephon_ref dataset's loader with
that patch lifted (:func:`zephon_worker0_patch_lifted`), as in a process of a zephon_ref user, and a
zephon dataset's with it (docs/divergences.md D-50).

Worker processes are forked per pass (about 0.15 s each with workers), so an example runs at most
four passes; the row's examples are capped at :data:`EXAMPLES_CAP` (the CLI's ``--examples`` above
it runs the cap).

What may not live here: the dataset (zephon_ref/torch/), the merge of worker states.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from hypothesis import assume
from hypothesis import strategies as st

from properties.cross_lane import lane_records
from properties.pipelines import PipelineConfig, build_pipeline, item_view

__all__ = ["EXAMPLES_CAP", "MAX_ITEMS", "loader_state", "torch_problems", "torch_unavailable",
           "zephon_worker0_patch_lifted"]

#: the oracle's stream of a drawn configuration is at most this long (small data: fast enough for CI)
MAX_ITEMS = 24
#: the row runs at most this many examples
EXAMPLES_CAP = 25


def torch_unavailable() -> str | None:
    """Why the row cannot run here (torch missing), or None."""
    try:
        import torch  # noqa: F401
    except ImportError:
        return "torch is not installed (pip install 'zephon_ref[torch]')"
    return None


def _stateful_loader() -> Any:
    try:
        from torchdata.stateful_dataloader import StatefulDataLoader
    except ImportError:
        return None
    return StatefulDataLoader


@contextmanager
def zephon_worker0_patch_lifted() -> Iterator[None]:  # divergence D-50
    """Within: torchdata's ``StatefulDataLoader.state_dict`` as torchdata defines it, where ``import
    zephon`` replaced it by one that copies worker 0's snapshot to every worker (see the module
    docstring); a no-op where zephon's patch is not installed.  Its original is the one the patch
    wraps (read from the patch's closure; an unknown patch shape is an error, not a silent no-op)."""
    from zephon_ref.torch.dataset import ZEPHON_WORKER0_PATCH

    loader = _stateful_loader()
    patched = None if loader is None else loader.__dict__.get("state_dict")
    if patched is None or not getattr(loader, ZEPHON_WORKER0_PATCH, False):
        yield
        return
    cells = dict(zip(patched.__code__.co_freevars, patched.__closure__ or (), strict=True))
    if "_orig_state_dict" not in cells:
        raise RuntimeError("zephon's StatefulDataLoader patch changed shape: no _orig_state_dict to lift it")
    loader.state_dict = cells["_orig_state_dict"].cell_contents
    try:
        yield
    finally:
        loader.state_dict = patched


def loader_state(loader: Any, impl: str) -> Any:
    """``loader.state_dict()`` of a StatefulDataLoader over an ``impl`` dataset: zephon's with its
    patch (part of zephon's behaviour), any other with the patch lifted."""
    if impl == "zephon":
        return loader.state_dict()
    with zephon_worker0_patch_lifted():
        return loader.state_dict()


class _Pass:
    """One pass over a dataset of ``kind`` with ``n`` workers, optionally resumed from ``state``:
    ``state()`` at any point (before the first item too), ``next()`` items in the normal form."""

    def __init__(self, dataset: Any, kind: str, n: int, state: Any = None, impl: str = "zephon_ref") -> None:
        from torch.utils.data import DataLoader

        self.kind, self.impl = kind, impl
        if kind == "tracked":
            if state is not None:
                dataset.load_state_dict(state)
            self._ds = dataset
            self._it: Iterator[Any] = iter(dataset.track(DataLoader(dataset, batch_size=None, num_workers=n)))
        else:
            loader = _stateful_loader()(dataset, batch_size=None, num_workers=n)
            if state is not None:
                loader.load_state_dict(state)
            self._loader = loader
            self._it = iter(loader)

    def state(self) -> Any:
        import copy

        return copy.deepcopy(self._ds.state_dict() if self.kind == "tracked"
                             else loader_state(self._loader, self.impl))

    def next(self) -> Any | None:
        x = next(self._it, None)
        return None if x is None else item_view(x)

    def rest(self) -> list[Any]:
        out = []
        while (x := self.next()) is not None:
            out.append(x)
        self.close()
        return out

    def close(self) -> None:
        close = getattr(self._it, "close", None)
        if close is not None:
            close()
        shutdown = getattr(self._it, "_shutdown_workers", None)
        if shutdown is not None:
            shutdown()


def _first_difference(got: list[Any], want: list[Any]) -> str:
    at = next((i for i in range(min(len(got), len(want))) if got[i] != want[i]), min(len(got), len(want)))
    a = got[at] if at < len(got) else "<the pass ended>"
    b = want[at] if at < len(want) else "<the pass ended>"
    return (f"item {at} differs (delivered {len(got)}, expected {len(want)}): lane "
            f"{a[0][0] if isinstance(a, list) and a else '-'} {str(a)[:140]} | expected lane "
            f"{b[0][0] if isinstance(b, list) and b else '-'} {str(b)[:140]}")


def torch_problems(adapter: Any, cfg: PipelineConfig, data: st.DataObject,
                   oracle_stream: Callable[[PipelineConfig], list[Any]]) -> list[str]:
    """One example of the row (see the module docstring); the problems found."""
    want = oracle_stream(cfg)
    assume(len(want) <= MAX_ITEMS)
    kinds = [k for k in getattr(adapter, "torch_kinds", ("loader",))
             if k != "loader" or _stateful_loader() is not None]
    assume(kinds)
    kind = data.draw(st.sampled_from(kinds), label="dataset")
    n = data.draw(st.sampled_from([0, 1, 2]), label="DataLoader workers")
    where = f"{kind} dataset, {n} DataLoader workers"
    impl = str(getattr(adapter, "impl", "zephon_ref"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        first = _Pass(adapter.torch_dataset(cfg, kind), kind, n, impl=impl)
        states = [first.state()]
        items: list[Any] = []
        while (x := first.next()) is not None:
            items.append(x)
            states.append(first.state())
        first.close()
        # 1. the pass is the oracle's stream (one stream with 0 or 1 workers; per lane with 2)
        if n <= 1 and items != want:
            return [f"{where}: the pass differs from zephon_ref's stream: {_first_difference(items, want)}"]
        if lane_records(items) != lane_records(want):
            return [f"{where}: the pass's lanes differ from zephon_ref's"]
        # 2. the state at every position names what was consumed (tracked: its engine state)
        if kind == "tracked":
            for i, state in enumerate(states):
                p = build_pipeline("zephon_ref", cfg)
                p.restore(state["engine"])
                rest = [item_view(v) for v in p]
                if lane_records(items[:i] + rest) != lane_records(want):
                    return [f"{where}: the state after {i} items, restored into a plain pipeline, does not "
                            "deliver the oracle's remaining records of every lane"]
        # 3. a resume from a drawn position delivers the rest of the pass
        # with workers, half the resumes start where the role rotation is not at worker 0 (the state
        # a resumed pass must carry forward before its first item, step 4): drawn uniformly, most
        # small examples never reach one
        offset = [k for k, s in enumerate(states) if kind == "tracked" and s.get("next_role")]
        if offset and data.draw(st.booleans(), label="resume where the role offset is not 0"):
            i = data.draw(st.sampled_from(offset), label="resume at")
        else:
            i = data.draw(st.integers(0, len(items)), label="resume at")
        resumed = _Pass(adapter.torch_dataset(cfg, kind), kind, n, states[i], impl)
        at_start = resumed.state()  # 4. the resumed pass's state before its first item
        inner = [at_start]
        rest: list[Any] = []
        while (x := resumed.next()) is not None:
            rest.append(x)
            inner.append(resumed.state())
        resumed.close()
        if rest != items[i:]:
            return [f"{where}: resumed from the state after {i} items: {_first_difference(rest, items[i:])}"]
        if kind == "tracked" and at_start.get("next_role") != states[i].get("next_role"):
            # the rotation must carry forward: a pass can end here and resume (seen only where the
            # rest holds items of two roles, which small data rarely has)
            return [f"{where}: the state taken at the start of a pass resumed after {i} items (before its "
                    f"first item) names worker role {at_start.get('next_role')} next; the state it resumed "
                    f"from named {states[i].get('next_role')}"]
        again = _Pass(adapter.torch_dataset(cfg, kind), kind, n, at_start, impl).rest()
        if again != items[i:]:
            return [f"{where}: resumed from the state taken at the start of a pass resumed after {i} items "
                    f"(before its first item): {_first_difference(again, items[i:])}"]
        j = data.draw(st.integers(0, len(rest)), label="resume the resumed pass at")
        third = _Pass(adapter.torch_dataset(cfg, kind), kind, n, inner[j], impl).rest()
        if third != items[i + j:]:
            return [f"{where}: resumed from the state after {j} items of a pass resumed after {i}: "
                    f"{_first_difference(third, items[i + j:])}"]
    return []

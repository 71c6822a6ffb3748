"""``tokenize(padding="longest")`` (or ``True``) across a resume: zephon_ref resumes as zephon 0.2.0 does.

Padding to the longest row pads each ``process_many`` group of a lane to that group's longest, and a
resume replays from the first inflight chunk, so the first replayed group may start elsewhere than
the uninterrupted run's group did and the pad lengths after a cut may differ from the uninterrupted
run's (docs/divergences.md D-10).  zephon's own resume regroups the same way: for
``ZEPHON_REF_LONGEST_CASES`` generated cases (default 6; 1-3 lanes, chunk sizes 1-6, sometimes a
batch) at every cut, zephon_ref's resumed stream equals zephon's resumed stream item for item (whole
payloads, pads included), and a zephon checkpoint restored into zephon_ref continues as zephon does.
"""

from __future__ import annotations

import copy
import logging
import os
import random
import warnings
from pathlib import Path
from typing import Any

import pytest

from properties.sources import zephon_available

pytestmark = [
    pytest.mark.conformance,
    pytest.mark.skipif(not zephon_available(),
                       reason="zephon 0.2.0 not installed (pip install .[conformance])"),
]
pytest.importorskip("transformers", reason="the hf extra (transformers, tokenizers) is not installed")

from properties.chat_conformance import TOK_ID, build, items_of  # noqa: E402
from properties.hf_tokenizer import TEMPLATE, build_tokenizer, texts  # noqa: E402

CASES = int(os.environ.get("ZEPHON_REF_LONGEST_CASES", "6"))


@pytest.fixture(scope="module")
def tokdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tokenizer(tmp_path_factory.mktemp("tok") / "plain", template=TEMPLATE)


def draw(case: int) -> tuple[list[Any], list[Any], dict[str, Any]]:
    r = random.Random(case)
    rows = texts(case, r.randint(8, 30))
    chain: list[Any] = [("tokenize", {"field": "text", "tokenizer_id": TOK_ID,
                                      "padding": r.choice([True, "longest"])})]
    if r.random() < 0.4:
        chain.append(("batch", {"microbatch_size": r.randint(1, 3)}))
    return rows, chain, {"chunk_size": r.randint(1, 6), "lanes": r.randint(1, 3), "seed": r.randint(0, 99)}


def resumed(impl: str, state_from: str, cut: int, rows: list[Any], chain: list[Any],
            kw: dict[str, Any]) -> Any:
    from zephon_ref.compat import restore_zephon_state

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p = build(state_from, rows, chain, **kw)
        it = iter(p)
        for _ in range(cut):
            next(it)
        state = copy.deepcopy(p.checkpoint())
        it.close()
        q = build(impl, rows, chain, **kw)
        if impl == "zephon_ref" and state_from == "zephon":
            restore_zephon_state(q, state)
        else:
            q.restore(state)
        return items_of(q)


@pytest.mark.parametrize("case", range(CASES))
def test_resumed_pads_are_zephons_resumed_pads(case: int, tokdir: Path) -> None:
    rows, chain, kw = draw(case)
    kw = {**kw, "tokdir": tokdir}
    logging.disable(logging.WARNING)
    try:
        whole = items_of(build("zephon_ref", rows, chain, **kw))
        assert whole == items_of(build("zephon", rows, chain, **kw))
        regrouped = 0
        for cut in range(len(whole) + 1):
            theirs = resumed("zephon", "zephon", cut, rows, chain, kw)
            where = f"cut {cut} {chain} {kw}"
            assert resumed("zephon_ref", "zephon_ref", cut, rows, chain, kw) == theirs, where
            assert resumed("zephon_ref", "zephon", cut, rows, chain, kw) == theirs, where
            regrouped += theirs != whole[cut:]
    finally:
        logging.disable(logging.NOTSET)
    RESULTS[case] = regrouped


RESULTS: dict[int, int] = {}


def test_some_cut_regroups_so_the_comparison_is_not_vacuous(tokdir: Path) -> None:
    """At least one drawn cut pads differently from the uninterrupted run (in both libraries): the
    cases reach the regrouping that D-10 describes."""
    for case in range(CASES):
        if case not in RESULTS:
            test_resumed_pads_are_zephons_resumed_pads(case, tokdir)
    assert sum(RESULTS.values()) > 0, RESULTS

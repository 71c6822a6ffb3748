"""Skip tests marked ``slow`` unless selected with ``-m slow`` or ZEPHON_REF_SLOW=1."""

from __future__ import annotations

import os

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if "slow" in (config.option.markexpr or "") or os.environ.get("ZEPHON_REF_SLOW") == "1":
        return
    skip = pytest.mark.skip(reason="slow: run with -m slow or ZEPHON_REF_SLOW=1")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)

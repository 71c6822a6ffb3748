"""Shared helpers for the torch-path tests (skipped as a whole when torch is not importable)."""

from __future__ import annotations

import pytest

pytest.importorskip("torch", reason="the torch path needs torch (pip install 'zephon_ref[torch]')")

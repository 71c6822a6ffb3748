"""Loads the Hypothesis profile named by HYPOTHESIS_PROFILE (ci, dev or nightly; ci when unset,
so the README's test command runs CI's derandomized suite)
before any test module builds its settings; see properties/profiles.py."""

from __future__ import annotations

from properties import profiles

PROFILE = profiles.load()


def pytest_report_header() -> str:
    return f"hypothesis profile: {PROFILE} (HYPOTHESIS_PROFILE; see properties/profiles.py)"

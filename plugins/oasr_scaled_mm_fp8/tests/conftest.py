"""Test configuration of the scaled_mm_fp8 plugin: markers, isolated tiers, a fresh runtime."""

from __future__ import annotations

import pytest
from oasr_core.testing import plugin_runtime_fixture, register_family_markers


def pytest_configure(config: pytest.Config) -> None:
    register_family_markers(config)


_isolated = plugin_runtime_fixture("oasr_scaled_mm_fp8", "scaled_mm_fp8")
"""No developer tuning file leaks in; each test gets the plugin on a fresh runtime."""

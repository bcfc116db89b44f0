"""Test configuration of the recurrent plugin: markers, isolated tiers, a fresh runtime per
test."""

from __future__ import annotations

import pytest
from oasr_core.testing import plugin_runtime_fixture, register_family_markers


def pytest_configure(config: pytest.Config) -> None:
    register_family_markers(config)


_isolated = plugin_runtime_fixture("oasr_recurrent", "recurrent")

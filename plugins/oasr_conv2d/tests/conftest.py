"""Test configuration of the conv2d plugin: markers, isolated tiers, a fresh runtime per test."""

from __future__ import annotations

import pytest
from oasr_core.testing import isolated_plugin_runtime, register_family_markers


def pytest_configure(config: pytest.Config) -> None:
    register_family_markers(config)


@pytest.fixture(autouse=True)
def _isolated(monkeypatch, tmp_path_factory):
    """No developer tuning file leaks in; each test gets the conv2d plugin on a fresh runtime."""
    from oasr_conv2d import hooks, launch

    yield from isolated_plugin_runtime(monkeypatch, tmp_path_factory, hooks, "conv2d",
                                       serving=(launch.SERVING,))

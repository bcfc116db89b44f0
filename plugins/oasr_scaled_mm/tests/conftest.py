"""Test configuration of the scaled_mm plugin: markers, isolated tiers, a fresh runtime per test."""

from __future__ import annotations

import pytest
from oasr_core.testing import isolated_plugin_runtime, register_family_markers


def pytest_configure(config: pytest.Config) -> None:
    register_family_markers(config)
    config.addinivalue_line("markers", "fp8: a W8A8 test's fp8 e4m3 row (-m 'gpu and fp8')")


@pytest.fixture(autouse=True)
def _isolated(monkeypatch, tmp_path_factory):
    """No developer tuning file leaks in; each test gets the plugin on a fresh runtime and
    the unfitted ladders (tests pin their picks; the shipped fitted file is tested apart)."""
    monkeypatch.setattr("oasr_scaled_mm.heuristic.ARCH_LADDERS", {})
    from oasr_scaled_mm import hooks, launch

    yield from isolated_plugin_runtime(monkeypatch, tmp_path_factory, hooks, "scaled_mm",
                                       serving=(launch.SERVING,))

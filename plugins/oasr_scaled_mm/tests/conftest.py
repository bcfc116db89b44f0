"""Test configuration of the scaled_mm plugin: markers, isolated tiers, a fresh runtime per test."""

from __future__ import annotations

import pytest
from oasr_core import runtime
from oasr_core.plugins import make_plugin_manager


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU; run on the H200 with -m gpu")
    config.addinivalue_line(
        "markers", "compile: runs nvcc on real CUTLASS units (a minute or two on 2 cores)")


@pytest.fixture(autouse=True)
def _isolated(monkeypatch, tmp_path_factory):
    """No developer tuning file leaks in; each test gets the plugin on a fresh runtime and
    the unfitted ladders (tests pin their picks; the shipped fitted file is tested apart)."""
    monkeypatch.setattr("oasr_scaled_mm.heuristic.ARCH_LADDERS", {})
    monkeypatch.setenv("OASR_TUNE_USER_DB", "off")
    monkeypatch.setenv("OASR_TUNE_SYSTEM_DB", str(tmp_path_factory.mktemp("empty-system")))
    from oasr_scaled_mm import hooks, launch, ops

    pm = make_plugin_manager(load_entrypoints=False)
    pm.register(hooks, name="scaled_mm")
    runtime.install_runtime(runtime.Runtime(pm=pm))
    ops.clear_memo()
    ops.reset_stats()
    yield
    runtime.install_runtime(None)
    ops.clear_memo()
    launch.forget_libraries()

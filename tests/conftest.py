"""Core test configuration: no developer tuning ever changes what a test sees."""

from __future__ import annotations

import pytest
from oasr_test_plugins import ConvLike, GemmLike, QuantLike

from oasr_core import runtime
from oasr_core.plugins import make_plugin_manager


@pytest.fixture(autouse=True)
def _isolated_tiers(monkeypatch, tmp_path_factory):
    """Disable the user tier and point the system tier at an empty directory by default."""
    monkeypatch.setenv("OASR_TUNE_USER_DB", "off")
    monkeypatch.setenv("OASR_TUNE_SYSTEM_DB", str(tmp_path_factory.mktemp("empty-system")))
    yield
    runtime.install_runtime(None)


@pytest.fixture
def tiers(tmp_path, monkeypatch):
    """A runtime with the three test families and empty user/system tiers under tmp_path."""
    user, system = tmp_path / "user", tmp_path / "system"
    user.mkdir()
    system.mkdir()
    monkeypatch.setenv("OASR_TUNE_USER_DB", str(user))
    monkeypatch.setenv("OASR_TUNE_SYSTEM_DB", str(system))
    pm = make_plugin_manager(load_entrypoints=False)
    for plugin in (GemmLike(), QuantLike(), ConvLike()):
        pm.register(plugin)
    rt = runtime.Runtime(pm=pm)
    runtime.install_runtime(rt)
    return {"user": user, "system": system, "rt": rt}

"""The plugin manager: isolated entry-point loading, operator switches, import-time hygiene.

Entry points here are real: ``fake_distribution`` writes a ``*.dist-info`` directory onto
``sys.path`` and ``importlib.metadata`` finds it like an installed package.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pluggy
import pytest

from oasr_core import hookimpl, plugins
from oasr_core.errors import ConfigurationError, PluginError, PluginLoadError
from oasr_core.plugins import OasrPluginManager, make_plugin_manager
from oasr_core.registry import Provider, Registry
from oasr_core.types import PluginLoadFailure

# Installed oasr-core loads the kit through its pytest11 entry point; a bare checkout does not.
KIT_AUTOLOADED = any(ep.value == "oasr_core.testing" for ep in entry_points(group="pytest11"))
pytest_plugins = ["pytester"] if KIT_AUTOLOADED else ["pytester", "oasr_core.testing"]

REPO = Path(__file__).resolve().parents[1]
OASR_SWITCHES = ("OASR_PLUGINS", "OASR_DISABLE_PLUGIN_AUTOLOAD", "OASR_STRICT_PLUGINS",
                 "OASR_TRACE_PLUGINS")


def family_module(family: str) -> str:
    """Source of a hooks module registering one family."""
    return f"""
        from oasr_core import hookimpl
        from oasr_core.types import Family

        @hookimpl
        def oasr_register_families():
            return [Family(name={family!r}, ops=("op",), dims=("N",), dtypes=("fp16",))]
    """


BROKEN = "raise RuntimeError('boom: this plugin cannot be imported')\n"


@pytest.fixture(autouse=True)
def _no_operator_switches(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in OASR_SWITCHES:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def good_and_broken(fake_distribution, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two installed plugins, ``good`` (family ``good``) and ``broken`` (raises on import)."""
    fake_distribution("oasr-good", version="1.2", entry_points={"good": "good_hooks"},
                      modules={"good_hooks": family_module("good")})
    fake_distribution("oasr-broken", entry_points={"broken": "broken_hooks"},
                      modules={"broken_hooks": BROKEN})
    monkeypatch.setenv("OASR_PLUGINS", "good,broken")


def _messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "oasr_core.plugins"]


def test_manager_has_the_specs_and_no_module_level_instance() -> None:
    pm = make_plugin_manager(load_entrypoints=False)
    assert isinstance(pm, OasrPluginManager) and isinstance(pm, pluggy.PluginManager)
    assert pm.hook.oasr_register_families.has_spec()
    assert not [v for v in vars(plugins).values() if isinstance(v, pluggy.PluginManager)]
    assert make_plugin_manager(load_entrypoints=False) is not pm


def test_in_test_class_plugin(register_plugin, plugin_manager) -> None:
    class Tiny:
        @hookimpl
        def oasr_register_families(self):
            from oasr_core.types import Family

            return [Family(name="tiny", ops=("op",), dims=("N",), dtypes=("fp16",))]

    register_plugin(Tiny(), name="tiny")
    registry = Registry.from_plugin_manager(plugin_manager)
    assert list(registry.families) == ["tiny"]
    assert registry.provider("family", "tiny") == Provider("tiny", None, None)


def test_entry_point_plugin_is_attributed_to_its_distribution(
        fake_distribution, caplog) -> None:
    fake_distribution("oasr-good", version="1.2", entry_points={"good": "good_hooks"},
                      modules={"good_hooks": family_module("good")})
    pm = make_plugin_manager()
    assert pm.distribution("good") == "oasr-good 1.2"
    assert [d.metadata["Name"] for name, d in pm.plugin_distributions() if name == "good"] == [
        "oasr-good"]
    assert Registry.from_plugin_manager(pm).provider("family", "good") == Provider(
        "good", "oasr-good", "1.2")
    assert not [m for m in _messages(caplog) if "good" in m]


def test_broken_entry_point_leaves_the_others_working(good_and_broken, caplog) -> None:
    pm = make_plugin_manager()
    assert pm.failures == [PluginLoadFailure(
        "broken", "oasr-broken 1.0", "RuntimeError: boom: this plugin cannot be imported", "load")]
    assert pm.get_plugin("broken") is None
    assert "good" in Registry.from_plugin_manager(pm).families
    [message] = [m for m in _messages(caplog) if "broken" in m]
    assert "plugin 'broken' (oasr-broken 1.0) failed to load" in message
    assert "\n" not in message
    assert all(r.exc_info is None for r in caplog.records if r.levelno >= logging.WARNING)


def test_verbose_adds_the_traceback(good_and_broken, caplog) -> None:
    make_plugin_manager(verbose=True)
    [record] = [r for r in caplog.records if "broken" in r.getMessage()]
    assert record.exc_info is not None and record.exc_info[0] is RuntimeError


def test_strict_env_turns_the_warning_into_an_error(good_and_broken, monkeypatch) -> None:
    monkeypatch.setenv("OASR_STRICT_PLUGINS", "1")
    with pytest.raises(PluginLoadError, match=r"'broken' \(oasr-broken 1.0\).*boom"):
        make_plugin_manager()
    assert make_plugin_manager(strict=False).failures, "an explicit strict=False wins"


@pytest.mark.parametrize("value", ["maybe", "2", "strict"])
def test_malformed_switch_names_the_variable(monkeypatch, value: str) -> None:
    monkeypatch.setenv("OASR_STRICT_PLUGINS", value)
    with pytest.raises(ConfigurationError, match=f"OASR_STRICT_PLUGINS={value!r}"):
        make_plugin_manager(load_entrypoints=False)


def test_oasr_plugins_loads_only_the_named(good_and_broken, monkeypatch, caplog) -> None:
    monkeypatch.setenv("OASR_PLUGINS", " good , nope ")
    pm = make_plugin_manager()
    assert pm.get_plugin("good") is not None and not pm.failures
    assert "broken_hooks" not in sys.modules
    [message] = _messages(caplog)
    assert "'nope'" in message and "broken" in message and "good" in message
    monkeypatch.setenv("OASR_PLUGINS", "")
    assert make_plugin_manager().get_plugin("good") is None


def test_disable_autoload(good_and_broken, monkeypatch) -> None:
    monkeypatch.setenv("OASR_DISABLE_PLUGIN_AUTOLOAD", "1")
    monkeypatch.delenv("OASR_PLUGINS")
    pm = make_plugin_manager()
    assert pm.get_plugin("good") is None and not pm.failures
    monkeypatch.setenv("OASR_PLUGINS", "good")
    assert make_plugin_manager().get_plugin("good") is not None


def test_block_skips_the_import(good_and_broken) -> None:
    pm = make_plugin_manager(block=["broken"])
    assert pm.is_blocked("broken") and not pm.failures
    assert "broken_hooks" not in sys.modules
    rows = {row["name"]: row for row in Registry.from_plugin_manager(pm).describe()}
    assert rows["broken"]["status"] == "blocked" and rows["good"]["status"] == "loaded"


def test_trace_logs_hook_calls(monkeypatch, caplog) -> None:
    monkeypatch.setenv("OASR_TRACE_PLUGINS", "1")
    caplog.set_level(logging.DEBUG, logger="oasr_core.plugins")
    pm = make_plugin_manager(load_entrypoints=False)
    pm.hook.oasr_select_lane(family=None, arch="sm90", lanes=())
    assert any("oasr_select_lane" in m for m in _messages(caplog))


def test_unknown_hook_in_an_entry_point(fake_distribution, monkeypatch) -> None:
    fake_distribution("oasr-typo", entry_points={"typo": "typo_hooks"}, modules={
        "typo_hooks": "from oasr_core import hookimpl\n\n@hookimpl\n"
                      "def oasr_register_family():\n    return []\n"})
    monkeypatch.setenv("OASR_PLUGINS", "typo")
    pm = make_plugin_manager()
    [failure] = pm.failures
    assert "unknown hook 'oasr_register_family'" in failure.error
    assert "did you mean 'oasr_register_families'" in failure.error
    assert pm.get_plugin("typo") is None
    pm.check_pending()


def test_check_pending_names_plugin_and_hook(plugin_manager) -> None:
    class Typo:
        @hookimpl
        def oasr_select_lanes(self, family):
            return None

    plugin_manager.register(Typo(), name="typo")
    with pytest.raises(PluginError, match=r"plugin 'typo'.*'oasr_select_lanes'.*oasr_select_lane"):
        plugin_manager.check_pending()


def test_bad_signature_is_a_load_failure_and_leaves_no_trace(fake_distribution, monkeypatch):
    fake_distribution("oasr-sig", entry_points={"sig": "sig_hooks"}, modules={
        "sig_hooks": "from oasr_core import hookimpl\n\n@hookimpl\ndef oasr_register_lanes():"
                     "\n    return []\n\n@hookimpl\ndef oasr_select_lane(family, gpu):\n"
                     "    return None\n"})
    monkeypatch.setenv("OASR_PLUGINS", "sig")
    pm = make_plugin_manager()
    [failure] = pm.failures
    assert failure.plugin == "sig" and "gpu" in failure.error and "\n" not in failure.error
    assert pm.get_plugin("sig") is None
    assert not pm.hook.oasr_register_lanes.get_hookimpls()


def test_same_plugin_name_from_two_distributions(fake_distribution, monkeypatch, caplog):
    fake_distribution("oasr-one", entry_points={"same": "one_hooks"},
                      modules={"one_hooks": family_module("one")})
    fake_distribution("oasr-two", version="2.0", entry_points={"same": "two_hooks"},
                      modules={"two_hooks": family_module("two")})
    monkeypatch.setenv("OASR_PLUGINS", "same")
    pm = make_plugin_manager()
    # Neither is the 'same' namespace owner (oasr-same): the first by distribution name loads.
    assert pm.get_plugin("same").__name__ == "one_hooks"
    assert {(f.distribution, f.kind) for f in pm.failures} == {("oasr-two 2.0", "duplicate")}
    assert any(r.levelno == logging.ERROR and "oasr-two 2.0" in r.getMessage()
               for r in caplog.records)
    with pytest.raises(PluginLoadError, match="oasr-one 1.0 and oasr-two 2.0"):
        make_plugin_manager(strict=True)


def test_cli_keeps_working_with_a_broken_entry_point(good_and_broken, cli_runner) -> None:
    result = cli_runner("plugins", "--json", plugin_manager=make_plugin_manager())
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert {row["name"]: row["status"] for row in data["plugins"]} == {
        "good": "loaded", "broken": "failed", "oasr_core.model_tier": "loaded"}
    assert [f["plugin"] for f in data["failures"]] == ["broken"]


def test_cli_lists_the_fake_family(fake_family, cli_runner) -> None:
    result = cli_runner("plugins", "--json")
    assert result.exit_code == 0, result.output
    rows = {row["name"]: row for row in json.loads(result.stdout)["plugins"]}
    assert set(rows) == {"fake", "oasr_core.model_tier"}
    row = rows["fake"]
    assert (row["name"], row["families"], row["lanes"]) == ("fake", ["fake"], ["fake_lane"])


def test_kit_fixtures_are_fresh_per_test(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        from oasr_core.registry import Registry
        from oasr_core.testing import FakeFamilyPlugin

        SEEN = []

        def test_register(register_plugin, plugin_manager):
            plugin = register_plugin(FakeFamilyPlugin(), name="mine")
            SEEN.append((plugin_manager, plugin))
            assert "fake" in Registry.from_plugin_manager(plugin_manager).families

        def test_unregistered_after(plugin_manager):
            old_pm, plugin = SEEN[0]
            assert not old_pm.is_registered(plugin) and plugin_manager is not old_pm
            assert plugin_manager.list_name_plugin() == []

        def test_fake_family(fake_family, plugin_manager):
            assert plugin_manager.get_plugin("fake") is fake_family
    """)
    result = pytester.runpytest(*([] if KIT_AUTOLOADED else ["-p", "oasr_core.testing"]))
    result.assert_outcomes(passed=3)


def _python(code: str, *paths: Path) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": ":".join(map(str, (*paths, REPO)))}
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=120, check=False)


def test_importing_oasr_core_loads_no_plugin_and_no_torch(tmp_path: Path) -> None:
    """A plugin that fails loudly on import is not touched by importing the core modules."""
    marker = tmp_path / "loaded"
    info = tmp_path / "oasr_loud-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: oasr-loud\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[oasr]\nloud = loud_hooks\n")
    (tmp_path / "loud_hooks.py").write_text(
        f"open({str(marker)!r}, 'w').close()\nraise SystemExit('loud plugin imported')\n")
    imports = ("import json, sys; import oasr_core, oasr_core.plugins, oasr_core.registry, "
               "oasr_core.hookspecs, oasr_core.testing; ")
    quiet = _python(imports + "print(json.dumps(sorted(m for m in ('torch', 'loud_hooks') "
                    "if m in sys.modules)))", tmp_path)
    assert quiet.returncode == 0, quiet.stderr
    assert (json.loads(quiet.stdout), quiet.stderr, marker.exists()) == ([], "", False)
    control = _python(imports + "oasr_core.plugins.make_plugin_manager()", tmp_path)
    assert marker.exists() and "loud" in control.stderr, "the probe plugin must be loadable"


def test_the_host_uses_no_private_pluggy_name() -> None:
    """Only pluggy's public API: no ``pluggy._*`` module and no private manager attribute.

    The private names are read from the installed pluggy, so the check follows its releases
    (this module passes under pluggy 1.5.0, the lowest allowed, and the newest release).
    """
    import ast
    import pathlib

    import pluggy

    import oasr_core

    private = {name for name in dir(pluggy.PluginManager("x"))
               if name.startswith("_") and not name.startswith("__")}
    root = pathlib.Path(oasr_core.__file__).parent
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("pluggy._"):
                found.append(f"{path.name}:{node.lineno} imports {node.module}")
            elif isinstance(node, ast.Attribute) and node.attr in private:
                found.append(f"{path.name}:{node.lineno} uses {node.attr}")
    assert private, "pluggy's manager has no private attribute to check against"
    assert found == []

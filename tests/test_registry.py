"""The registry: per-plugin attribution, bad records, conflicts, lookups and the active lane."""

from __future__ import annotations

import json
import logging
from importlib.metadata import entry_points

import attrs
import pytest

from oasr_core import hookimpl
from oasr_core.errors import PluginError, UnknownFamilyError
from oasr_core.plugins import make_plugin_manager
from oasr_core.registry import Provider, Registry
from oasr_core.testing import (
    FAKE_DEFAULT,
    FakeFamilyPlugin,
    FamilyContract,
    check_family_contract,
    fake_lane_record,
)
from oasr_core.types import Config, Family, Lane

pytest_plugins = [] if any(
    ep.value == "oasr_core.testing" for ep in entry_points(group="pytest11")) else [
    "oasr_core.testing"]


def lane(name: str, *, arches=("sm80", "sm90"), default_on=(), family="fake") -> Lane:
    return Lane(name=name, family=family, arch_families=arches, default_on=default_on,
                config_space=[Config(id="c0", lane=name, params={"tile": 64})],
                default_config="c0")


class Lanes:
    """A plugin registering the given lanes."""

    def __init__(self, *lanes: Lane) -> None:
        self.lanes = lanes

    @hookimpl
    def oasr_register_lanes(self):
        return list(self.lanes)


class Returns:
    """A plugin whose registration hooks return ``value`` verbatim."""

    def __init__(self, families=None, lanes=None) -> None:
        self.families, self.lanes = families, lanes

    @hookimpl
    def oasr_register_families(self):
        return self.families

    @hookimpl
    def oasr_register_lanes(self):
        if isinstance(self.lanes, Exception):
            raise self.lanes
        return self.lanes


def build(pm, **kwargs) -> Registry:
    return Registry.from_plugin_manager(pm, **kwargs)


def errors_of(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_records_are_attributed(fake_family, plugin_manager) -> None:
    registry = build(plugin_manager)
    assert registry.family("fake").dims == ("N", "K")
    assert registry.lane("fake_lane").default_config == FAKE_DEFAULT
    assert registry.provider("lane", "fake_lane") == Provider("fake", None, None)
    assert registry.pm is plugin_manager and registry.failures == ()


@pytest.mark.parametrize(("value", "expected"), [
    (5, "returned 5 of type int, not a Family; expects an iterable"),
    (Family, "returned the class Family: oasr_register_families expects instances. Have you "
             "forgotten the `()`?"),
    ([Family], "item 0 is the class Family: oasr_register_families expects instances"),
    (["gemm"], "item 0 is 'gemm' of type str, not a Family"),
    ({"name": "x"}, "returned {'name': 'x'} of type dict"),
    ([fake_lane_record()], "item 0 is a Lane, which belongs in oasr_register_lanes"),
])
def test_bad_return_values_warn_and_the_others_keep_working(
        fake_family, register_plugin, plugin_manager, caplog, value, expected) -> None:
    register_plugin(Returns(families=value), name="bad")
    registry = build(plugin_manager)
    assert list(registry.families) == ["fake"] and list(registry.lanes) == ["fake_lane"]
    [failure] = registry.failures
    assert (failure.plugin, failure.distribution, failure.kind) == ("bad", "?", "record")
    assert "plugin 'bad'" in failure.error and "hook oasr_register_families" in failure.error
    assert expected in failure.error
    assert errors_of(caplog) == [f"oasr warning: {failure.error}"]
    with pytest.raises(PluginError, match="plugin 'bad'"):
        build(plugin_manager, strict=True)


def test_a_single_family_is_not_a_list(register_plugin, plugin_manager) -> None:
    register_plugin(Returns(families=Family(name="one", ops="op", dims="N", dtypes="fp16")))
    [failure] = build(plugin_manager).failures
    assert "a single Family; return a list of them" in failure.error


def test_valid_records_of_a_partly_bad_plugin_are_kept(register_plugin, plugin_manager) -> None:
    good = Family(name="good", ops="op", dims="N", dtypes="fp16")
    register_plugin(Returns(families=[good, None]), name="half")
    registry = build(plugin_manager)
    assert list(registry.families) == ["good"]
    assert "item 1 is None" in registry.failures[0].error


def test_a_raising_hook_costs_only_its_own_records(fake_family, register_plugin,
                                                   plugin_manager, caplog) -> None:
    register_plugin(Returns(lanes=ValueError("lane x: config_space is empty")), name="raiser")
    registry = build(plugin_manager)
    assert list(registry.lanes) == ["fake_lane"]
    [failure] = registry.failures
    assert "plugin 'raiser'" in failure.error and "oasr_register_lanes raised ValueError: " \
        "lane x: config_space is empty" in failure.error
    build(plugin_manager)
    assert len(errors_of(caplog)) == 1, "a failure is reported once per manager"


def test_none_registers_nothing_silently(register_plugin, plugin_manager, caplog) -> None:
    register_plugin(Returns())
    assert build(plugin_manager).failures == () and not errors_of(caplog)


@pytest.fixture
def two_distributions_with_fake(fake_distribution, monkeypatch):
    source = """
        from oasr_core import hookimpl
        from oasr_core.testing import fake_family_record

        @hookimpl
        def oasr_register_families():
            return [fake_family_record()]
    """
    fake_distribution("oasr-fake", version="1.0", entry_points={"fake": "fake_a"},
                      modules={"fake_a": source})
    fake_distribution("oasr-fake-fork", version="2.1", entry_points={"fork": "fake_b"},
                      modules={"fake_b": source})
    monkeypatch.setenv("OASR_PLUGINS", "fake,fork")


def test_duplicate_family_is_kept_by_its_owner_and_reported_once(two_distributions_with_fake,
                                                                 caplog):
    pm = make_plugin_manager(strict=False)
    pm.register(Lanes(fake_lane_record()), name="lanes")
    registry = build(pm)
    assert list(registry.families) == ["fake"] and list(registry.lanes) == ["fake_lane"]
    assert registry.provider("family", "fake").plugin == "fake"  # entry point named for it
    [refused] = [f for f in registry.failures if f.kind == "duplicate"]
    assert (refused.plugin, refused.distribution) == ("fork", "oasr-fake-fork 2.1")
    assert "family 'fake' is registered by plugin 'fake' (oasr-fake 1.0) and plugin 'fork' " \
           "(oasr-fake-fork 2.1); plugin 'fake' (oasr-fake 1.0) owns it" in refused.error
    assert "report this conflict to the plugin author" in refused.error
    assert [r.levelname for r in caplog.records if "owns it" in r.getMessage()] == ["ERROR"]


def test_duplicate_family_is_an_error_in_strict_mode(two_distributions_with_fake, monkeypatch):
    monkeypatch.setenv("OASR_STRICT_PLUGINS", "1")
    with pytest.raises(PluginError, match=r"'fake' \(oasr-fake 1.0\) and plugin 'fork' "
                                          r"\(oasr-fake-fork 2.1\).*plugin author"):
        build(make_plugin_manager())


def test_duplicate_lane_is_kept_by_the_familys_owner(fake_family, register_plugin,
                                                     plugin_manager) -> None:
    register_plugin(Lanes(lane("fake_lane")), name="copycat")
    registry = build(plugin_manager)
    assert registry.provider("lane", "fake_lane").plugin == "fake"
    assert {f.plugin for f in registry.failures} == {"copycat"}
    assert "lane 'fake_lane' is registered by plugin 'fake' (registered in-process) and " \
        "plugin 'copycat'" in registry.failures[0].error


def test_one_plugin_registering_a_name_twice(register_plugin, plugin_manager) -> None:
    register_plugin(Lanes(lane("twice"), lane("twice")), name="stutter")
    register_plugin(FakeFamilyPlugin(), name="fake")
    registry = build(plugin_manager)
    [failure] = registry.failures
    assert "lane 'twice' is registered more than once by plugin 'stutter'" in failure.error
    assert "twice" in registry.lanes


def test_lane_of_an_unknown_family_is_dropped(register_plugin, plugin_manager) -> None:
    register_plugin(Lanes(lane("lost", family="nowhere")), name="lost")
    registry = build(plugin_manager)
    assert not registry.lanes
    assert "family 'nowhere', which no loaded plugin registers" in registry.failures[0].error


def test_unknown_names_list_what_is_available(fake_family, register_plugin,
                                              plugin_manager) -> None:
    register_plugin(Returns(families=7), name="seven")
    registry = build(plugin_manager)
    with pytest.raises(UnknownFamilyError) as info:
        registry.family("fak")
    text = str(info.value)
    assert isinstance(info.value, KeyError)
    assert "family 'fak' (did you mean 'fake'?); available families: fake" in text
    assert "plugins that failed: plugin 'seven' (registered in-process) [record]" in text
    with pytest.raises(UnknownFamilyError, match="available lanes: fake_lane"):
        registry.lane("simt")
    with pytest.raises(UnknownFamilyError):
        registry.lanes_of("nope")
    with pytest.raises(UnknownFamilyError):
        registry.provider("family", "nope")
    with pytest.raises(ValueError, match="kind must be"):
        registry.provider("config", "fake")


def test_lanes_of_filters_by_arch(fake_family, register_plugin, plugin_manager) -> None:
    register_plugin(Lanes(lane("old", arches=("sm80",))), name="old")
    registry = build(plugin_manager)
    assert [x.name for x in registry.lanes_of("fake")] == ["fake_lane", "old"]
    assert [x.name for x in registry.lanes_of("fake", "sm90")] == ["fake_lane"]
    assert registry.lanes_of("fake", "sm120") == ()


def test_active_lane_rules(fake_family, register_plugin, plugin_manager) -> None:
    register_plugin(Lanes(lane("second", arches=("sm86", "sm90", "sm100"))), name="second")
    registry = build(plugin_manager)
    assert registry.active_lane("fake", "sm90").name == "fake_lane", "default_on wins"
    assert registry.active_lane("fake", "sm80").name == "fake_lane", "the only lane on sm80"
    assert registry.active_lane("fake", "sm100").name == "second", "the only lane on sm100"
    assert registry.active_lane("fake", "sm86") is None, "two lanes, neither the default"
    assert registry.active_lane("fake", "sm70") is None


def test_two_default_lanes_name_both(register_plugin, plugin_manager) -> None:
    from oasr_core.testing import fake_family_record

    register_plugin(Returns(families=[fake_family_record()]), name="fake")
    register_plugin(Lanes(lane("one", default_on=("sm90",))), name="one")
    register_plugin(Lanes(lane("rival", default_on=("sm90",))), name="rival")
    with pytest.raises(PluginError, match=r"lane 'one' of plugin 'one'.*and lane 'rival' "
                                          r"of plugin 'rival'.*report"):
        build(plugin_manager).active_lane("fake", "sm90")


def test_the_family_owners_default_lane_wins(fake_family, register_plugin, plugin_manager,
                                             caplog) -> None:
    register_plugin(Lanes(lane("rival", default_on=("sm90",))), name="rival")
    assert build(plugin_manager).active_lane("fake", "sm90").name == "fake_lane"
    assert any("lane 'rival'" in r.getMessage() and "owner's lane is the default"
               in r.getMessage() for r in caplog.records)


class Picker:
    def __init__(self, answer) -> None:
        self.answer = answer
        self.calls: list[tuple[str, str, tuple[str, ...]]] = []

    @hookimpl
    def oasr_select_lane(self, family, arch, lanes):
        self.calls.append((family.name, arch, tuple(x.name for x in lanes)))
        return self.answer


def test_select_lane_hook_overrides_the_default(fake_family, register_plugin,
                                                plugin_manager) -> None:
    register_plugin(Lanes(lane("second")), name="second")
    picker = register_plugin(Picker("second"))
    registry = build(plugin_manager)
    assert registry.active_lane("fake", "sm90").name == "second"
    assert picker.calls == [("fake", "sm90", ("fake_lane", "second"))]
    picker.answer = None
    assert registry.active_lane("fake", "sm90").name == "fake_lane"


@pytest.mark.parametrize("answer", ["missing", fake_lane_record()])
def test_a_bad_select_lane_answer_is_ignored_or_raised(fake_family, register_plugin,
                                                       plugin_manager, caplog, answer) -> None:
    register_plugin(Picker(answer), name="picker")
    assert build(plugin_manager).active_lane("fake", "sm90").name == "fake_lane"
    [message] = errors_of(caplog)
    assert "oasr_select_lane answered" in message and "plugin 'picker'" in message
    with pytest.raises(PluginError, match="not one of its lanes there"):
        build(plugin_manager, strict=True).active_lane("fake", "sm90")


def test_describe_rows(fake_family, register_plugin, plugin_manager) -> None:
    register_plugin(Returns(families=[3]), name="odd")
    plugin_manager.failures.append(
        make_plugin_manager(load_entrypoints=False).failures or _load_failure())
    rows = {row["name"]: row for row in build(plugin_manager).describe()}
    assert rows["fake"] == {
        "name": "fake", "distribution": None, "version": None, "status": "loaded",
        "hooks": ["oasr_register_families", "oasr_register_lanes"], "families": ["fake"],
        "lanes": ["fake_lane"], "failures": []}
    assert rows["odd"]["failures"][0]["kind"] == "record"
    assert rows["gone"]["status"] == "failed" and rows["gone"]["distribution"] == "oasr-gone"
    assert rows["gone"]["version"] == "3.0"
    json.dumps(list(rows.values()))


def _load_failure():
    from oasr_core.types import PluginLoadFailure

    return PluginLoadFailure("gone", "oasr-gone 3.0", "ImportError: no module", "load")


def test_registry_is_immutable(fake_family, plugin_manager) -> None:
    registry = build(plugin_manager)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        registry.families = {}
    with pytest.raises(TypeError):
        registry.families["other"] = registry.family("fake")


class TestFakeFamilyContract(FamilyContract):
    """The kit's own fake family passes the contract suite it ships."""

    plugin = FakeFamilyPlugin()


def _impure_lane() -> Lane:
    seen: list[str] = []

    def flaky(config: Config) -> bool:
        seen.append(config.id)
        return len(seen) % 2 == 1

    return attrs.evolve(fake_lane_record(), is_feasible=flaky)


@pytest.mark.parametrize(("lane_record", "message"), [
    (_impure_lane, "is_feasible\\(n64_k32_s1\\) changed"),
    (lambda: attrs.evolve(fake_lane_record(), supports=lambda c, p: 1), "is not a bool"),
    (lambda: attrs.evolve(fake_lane_record(), jit_module=object()), "must be a class"),
    (lambda: attrs.evolve(fake_lane_record(), is_feasible=lambda c: c.params["stages"] < 3),
     "default config is infeasible"),
    (lambda: Lane(name="fake_lane", family="fake", arch_families="sm90", default_config="c",
                  config_space=[Config(id="c", lane="fake_lane", params={"tiles": {1, 2}})]),
     "c params are not JSON"),
])
def test_contract_catches_violations(lane_record, message) -> None:
    class Plugin(FakeFamilyPlugin):
        @hookimpl
        def oasr_register_lanes(self):
            return [lane_record()]

    with pytest.raises(AssertionError, match=message):
        check_family_contract(Plugin())


def test_contract_needs_records() -> None:
    with pytest.raises(AssertionError, match="registers nothing"):
        check_family_contract(Returns())


def test_contract_catches_a_compile_at_import(fake_distribution) -> None:
    fake_distribution("oasr-eager", modules={"eager_hooks": """
        import subprocess
        import sys

        from oasr_core import hookimpl
        from oasr_core.testing import fake_family_record

        subprocess.run([sys.executable, "-c", "pass"], check=True)  # "nvcc" at import

        @hookimpl
        def oasr_register_families():
            return [fake_family_record()]
    """})
    import eager_hooks

    with pytest.raises(AssertionError, match=r"importing \('eager_hooks',\) started"):
        check_family_contract(eager_hooks)

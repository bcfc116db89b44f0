"""oasr_core.jit.libraries.Libraries: load once, install, refresh after a reload."""

from __future__ import annotations

from oasr_core.jit.libraries import Libraries


def make(wanted):
    loads = []

    def load(lane, arch):
        loads.append((lane, arch))
        return {"a": 1, "b": 2} if arch == "sm90" else None

    return Libraries(load=load, ids=lambda k: k.keys(), wanted=lambda lane, arch: wanted), loads


def test_a_module_loads_once_and_a_failed_one_stays_none():
    libs, loads = make(())
    assert libs.get("l", "sm90") == {"a": 1, "b": 2}
    assert libs.get("l", "sm90") is libs.get("l", "sm90")
    assert libs.get("l", "sm80") is None and libs.get("l", "sm80") is None
    assert loads == [("l", "sm90"), ("l", "sm80")]


def test_refresh_drops_a_production_module_missing_a_wanted_config():
    wanted = {"a"}
    libs, loads = make(wanted)
    libs.get("l", "sm90")
    assert libs.refresh() == []  # holds everything wanted
    wanted.add("c")  # a reload referenced a config the module lacks
    assert libs.refresh() == [("l", "sm90")]
    libs.get("l", "sm90")
    assert loads == [("l", "sm90"), ("l", "sm90")]  # reloaded on the next call


def test_installed_kernels_are_never_refreshed_away_and_forget_clears():
    libs, loads = make({"zzz"})
    libs.install("l", "sm90", {"x": 0})
    assert libs.refresh() == [] and libs.get("l", "sm90") == {"x": 0} and loads == []
    assert dict(libs.items()) == {("l", "sm90"): {"x": 0}}
    libs.forget()
    assert list(libs.items()) == []

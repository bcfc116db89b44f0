"""The op-serving kit on a CPU: plans per epoch, counted fallbacks, warn-once, reload."""

from __future__ import annotations

import warnings

import pytest

import oasr_core
from oasr_core import database, runtime
from oasr_core.errors import ConfigurationError, OasrWarning
from oasr_core.kit import TORCH, Epoch, EpochMemo, LaunchError, Serving
from oasr_core.plugins import make_plugin_manager
from oasr_core.testing import FAKE_DEFAULT, FAKE_FAMILY, FAKE_LANE, FakeFamilyPlugin


@pytest.fixture
def rt():
    pm = make_plugin_manager(load_entrypoints=False)
    pm.register(FakeFamilyPlugin())
    installed = runtime.Runtime(pm=pm)
    runtime.install_runtime(installed)
    return installed


class FakeKernel:
    """A bound launcher: ``prepare`` gives a plan, or refuses the shapes it is told to."""

    def __init__(self, config, refuse=()):
        self.config, self.refuse = config, set(refuse)

    def prepare(self, m):
        if m in self.refuse:
            raise LaunchError(f"{self.config.id}: workspace query refused m={m}")
        return ("plan", self.config.id, m)


def _serving(rt, kernels=None, load_error=None):
    lane = rt.registry.lane(FAKE_LANE)
    if kernels is None:
        kernels = {c.id: FakeKernel(c, refuse={7}) for c in lane.config_space}

    def load(lane_name, arch):
        if load_error is not None:
            raise load_error
        return kernels

    return Serving(FAKE_FAMILY, load=load, ids=lambda k: k.keys())


def _plan(serving, m, select=None):
    def default_select():
        return oasr_core.select(FAKE_FAMILY, "fake", "fp16", (512, 256), m, "sm90").config

    return serving.plan(("fake", m), "sm90", select=select or default_select,
                        kernel_key=lambda config: config.id,
                        prepare=lambda kernel: kernel.prepare(m), what=f"fake M={m}")


def test_a_plan_is_resolved_once_per_epoch_and_reload_forgets_it(rt):
    serving = _serving(rt)
    assert _plan(serving, 64) == ("plan", FAKE_DEFAULT, 64)
    assert serving.plans.table[("fake", 64)] == ("plan", FAKE_DEFAULT, 64)
    assert rt.counts[(FAKE_FAMILY, "fake", "default")] == 1
    epoch = oasr_core.reload()
    assert serving.plans.table == {}, "a reload must empty the plans"
    _plan(serving, 64)
    assert serving.plans.epoch is rt.state and rt.state.number == epoch
    assert serving.plans.table == {("fake", 64): ("plan", FAKE_DEFAULT, 64)}


def test_installing_a_runtime_forgets_the_plans_and_selections(rt):
    serving = _serving(rt)
    _plan(serving, 64)
    selection_memo = dict(oasr_core.selection._MEMO.table)
    assert selection_memo
    runtime.install_runtime(None)
    assert serving.plans.table == {} and oasr_core.selection._MEMO.table == {}


def test_unusable_answers_turn_to_torch_with_one_warning_per_epoch(rt):
    lane = rt.registry.lane(FAKE_LANE)
    serving = _serving(rt, kernels={c.id: FakeKernel(c) for c in lane.config_space
                                    if c.id != FAKE_DEFAULT})
    with pytest.warns(OasrWarning, match=f"config {FAKE_DEFAULT} .*not in this process"):
        assert _plan(serving, 64) is TORCH
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _plan(serving, 128) is TORCH  # same config missing: warned already
    oasr_core.reload()
    with pytest.warns(OasrWarning, match="not in this process"):
        assert _plan(serving, 64) is TORCH  # a new epoch warns again


def test_a_refused_preparation_and_a_failed_selection_serve_torch(rt):
    serving = _serving(rt)
    with pytest.warns(OasrWarning, match="workspace query refused m=7; torch serves"):
        assert _plan(serving, 7) is TORCH

    def broken():
        raise ConfigurationError("bad tuning setup (test)")

    with pytest.warns(OasrWarning, match="selection failed for fake M=9 .*bad tuning setup"):
        assert _plan(serving, 9, select=broken) is TORCH
    assert serving.plans.table[("fake", 9)] is TORCH


def test_an_unloadable_module_is_warned_once_and_serves_torch(rt):
    serving = Serving(FAKE_FAMILY, load=lambda lane, arch: serving.load(
        lane, arch, spec_of=_no_toolchain, bind=dict), ids=lambda k: k.keys())
    with pytest.warns(OasrWarning, match="fake_lane module for sm90 is unavailable .*no nvcc"):
        assert _plan(serving, 64) is TORCH
    assert serving.libraries.get(FAKE_LANE, "sm90") is None


def _no_toolchain(lane, arch):
    from oasr_core.errors import ToolchainError

    raise ToolchainError("no nvcc (test)")


def test_a_refused_launch_turns_the_shape_to_torch_for_the_epoch(rt):
    serving = _serving(rt)
    plan = _plan(serving, 64)
    config = rt.registry.lane(FAKE_LANE).default
    with pytest.warns(OasrWarning, match="fake_lane/n128_k64_s1 refused fake M=64 .*busy"):
        serving.refused(("fake", 64), config, "busy", "fake M=64")
    assert plan != TORCH and serving.plans.table[("fake", 64)] is TORCH


def test_fallbacks_are_counted_by_reason_across_reloads(rt):
    serving = _serving(rt)
    serving.fallback("cpu")
    serving.fallback("cpu")
    serving.fallback("unaligned")
    oasr_core.reload()
    assert serving.stats() == {"torch:cpu": 2, "torch:unaligned": 1}
    serving.reset_stats()
    assert serving.stats() == {}


def test_is_available_answers_from_loaded_modules_only(rt):
    lane = rt.registry.lane(FAKE_LANE)
    serving = _serving(rt, kernels={FAKE_DEFAULT: FakeKernel(lane.default)})
    other = next(c for c in lane.config_space if c.id != FAKE_DEFAULT)

    def fits(config, arch):
        return arch in lane.arch_families

    assert serving.holds(other, other.id, fits), "nothing loaded yet: everything available"
    serving.libraries.get(FAKE_LANE, "sm90")
    assert serving.holds(lane.default, FAKE_DEFAULT, fits)
    assert not serving.holds(other, other.id, fits)


def test_a_closed_epoch_keeps_nothing_stored_late():
    epoch = Epoch(number=3)
    memo = EpochMemo("t")
    memo.store("a", 1, epoch)
    assert memo.table == {"a": 1}
    epoch.close()
    assert memo.table == {}
    memo.store("b", 2, epoch)  # computed while a reload closed the epoch: dropped
    assert memo.table == {} and epoch.table("t") == {}


def test_epoch_warn_once_is_per_key():
    epoch = Epoch()
    with pytest.warns(OasrWarning, match="first"):
        assert epoch.warn_once("k", "first", OasrWarning)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not epoch.warn_once("k", "again", OasrWarning)
    with pytest.warns(OasrWarning, match="other"):
        epoch.warn_once("k2", "other", OasrWarning)


def test_the_session_lives_on_the_runtime(rt):
    from oasr_core import selection

    marker = object()
    assert selection.set_session(marker) is None
    assert rt.session is marker and selection.active_session() is marker
    runtime.install_runtime(None)
    assert selection.active_session() is None


def test_a_tier_file_reaches_a_plan_after_a_reload(rt, tmp_path, monkeypatch):
    serving = _serving(rt)
    assert _plan(serving, 64) == ("plan", FAKE_DEFAULT, 64)
    monkeypatch.setenv("OASR_TUNE_USER_DB", str(tmp_path))
    fam, lane = rt.registry.family(FAKE_FAMILY), rt.registry.lane(FAKE_LANE)
    tuned = next(c for c in lane.config_space if c.id != FAKE_DEFAULT)
    key = database.signature_key(fam, "fake", "half", (512, 256))
    entry = database.Entry(regions=((None, tuned.id),))
    database.write_entries(database.tier_path(tmp_path, "sm90", fam), family=fam, arch="sm90",
                           lane=lane.name, entries={key: entry}, configs={tuned.id: tuned},
                           soft={})
    assert serving.plans.table[("fake", 64)] == ("plan", FAKE_DEFAULT, 64), "same epoch"
    oasr_core.reload()
    assert _plan(serving, 64) == ("plan", tuned.id, 64)

"""The record-kernel kit's serving pieces on a CPU: a family's scratch pool warns through its
Serving once per epoch, and its ``is_available`` answers from the loaded modules."""

from __future__ import annotations

import warnings

import pytest
import torch

import oasr_core
from oasr_core import runtime
from oasr_core.kit import Serving
from oasr_core.kit.records import availability, scratch_pool
from oasr_core.plugins import make_plugin_manager
from oasr_core.testing import FAKE_FAMILY, FAKE_LANE, FakeFamilyPlugin


@pytest.fixture
def rt():
    pm = make_plugin_manager(load_entrypoints=False)
    pm.register(FakeFamilyPlugin())
    installed = runtime.Runtime(pm=pm)
    runtime.install_runtime(installed)
    return installed


def _serving(kernels):
    return Serving(FAKE_FAMILY, load=lambda lane, arch: kernels, ids=lambda k: k.keys(),
                   category=RuntimeWarning)


def test_the_scratch_pool_grows_from_a_mebibyte_and_warns_once_per_epoch_in_capture(rt):
    serving = _serving({})
    pool = scratch_pool(serving, "oasr_fake", hint="oasr_fake.launch.reserve_workspace()",
                        allocate=lambda kind, n, dev: torch.empty(n, dtype=torch.uint8),
                        capturing=lambda: True)
    assert [(k.name, k.minimum, k.zeroed) for k in pool.kinds] == [("scratch", 1 << 20, False)]
    with pytest.warns(RuntimeWarning) as caught:
        pool.get(0, 1, (10,))
        pool.get(0, 2, (10,))  # the same warning, once per epoch
    assert len(caught) == 1
    message = str(caught[0].message)
    assert message.startswith("oasr_fake: ")
    assert message.endswith(" (oasr_fake.launch.reserve_workspace())")
    assert pool.sizes(0, 1) == (1 << 20,)
    oasr_core.reload()
    with pytest.warns(RuntimeWarning):
        pool.get(0, 3, (10,))
    plain = scratch_pool(serving, "oasr_fake", allocate=lambda kind, n, dev: torch.empty(n),
                         capturing=lambda: False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        plain.get(0, 1, (10,))  # outside a capture nothing is said


def test_is_available_answers_from_the_loaded_module_of_the_configs_lane(rt):
    lane = rt.registry.lane(FAKE_LANE)
    configs = list(lane.config_space)
    loaded = {configs[0].id: object()}
    serving = _serving(loaded)
    is_available = availability(serving, lambda config, arch: arch == "sm90")
    assert all(is_available(c) for c in configs), "nothing loaded yet: every config counts"
    serving.libraries.get(FAKE_LANE, "sm90")
    assert is_available(configs[0])
    assert not any(is_available(c) for c in configs[1:])

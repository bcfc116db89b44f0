"""The kit's ops skeleton on a CPU: the counted torch path and refused calls, out checks, a
custom op with its fake, ctypes binding from declared types, the prepared-weight cache and a
package's lazy attributes."""

from __future__ import annotations

import ctypes
import sys
import types

import pytest
import torch

from oasr_core import runtime
from oasr_core.kit import TORCH, Serving
from oasr_core.kit.binding import bind_launcher, status_text
from oasr_core.kit.lazy import lazy_attributes
from oasr_core.kit.ops import SELECTED, check_like, custom_op, resolve, torch_path
from oasr_core.kit.weights import held, prepared, stamp
from oasr_core.plugins import make_plugin_manager
from oasr_core.testing import FAKE_FAMILY, FAKE_LANE, FakeFamilyPlugin


@pytest.fixture
def serving():
    pm = make_plugin_manager(load_entrypoints=False)
    pm.register(FakeFamilyPlugin())
    runtime.install_runtime(runtime.Runtime(pm=pm))
    return Serving(FAKE_FAMILY, load=lambda lane, arch: None, ids=lambda k: k.keys())


def test_the_torch_path_counts_its_reason_and_serves_torch(serving):
    path = torch_path(serving, lambda a, b: a + b)
    assert path("cpu", 2, 3) == 5
    assert path("cpu", 1, 1) == 2 and path("dtype", 0, 1) == 1
    serving.fallbacks[SELECTED] += 1
    assert serving.stats() == {"torch:cpu": 2, "torch:dtype": 1, "torch:selected": 1}


def test_a_refused_call_turns_its_shape_to_torch_warns_once_and_is_served(serving):
    rt = runtime.get_runtime()
    config = rt.registry.lane(FAKE_LANE).config_space[0]
    path = torch_path(serving, lambda x: x * 2)
    with pytest.warns(Warning, match="refused op=fake M=3 \\(bad tile\\)"):
        assert path.refused(("fake", 3), config, "bad tile", "op=fake M=3", 21) == 42
    assert serving.plans.table.get(("fake", 3)) is TORCH
    assert serving.stats() == {"torch:refused": 1}


def test_the_miss_path_runs_the_plan_once_on_the_device(serving):
    calls = []
    assert resolve(0, lambda key: calls.append(key) or "plan", ("k", 1)) == "plan"
    assert calls == [("k", 1)]


def test_check_like_names_what_was_expected_and_what_came():
    t = torch.empty(2, 3, dtype=torch.float16)
    check_like(t, (2, 3), torch.float16, t.device)
    with pytest.raises(ValueError, match=r"^out must be a torch.float32 tensor of shape \(2, 3\) "
                                         r"on cpu; got torch.float16 \(2, 3\) on cpu$"):
        check_like(t, (2, 3), torch.float32, t.device)
    with pytest.raises(ValueError, match=r"^op: residual must be a torch.float16 tensor of shape "
                                         r"\(4,\); got torch.float16 \(2, 3\)$"):
        check_like(t, (4,), torch.float16, name="residual", prefix="op: ")


def test_a_custom_op_runs_eagerly_and_traces_through_its_fake():
    op = custom_op("kit_test_scale", "(Tensor x, float s) -> Tensor",
                   lambda x, s: x * s, lambda x, s: x.new_empty(x.shape))
    x = torch.arange(4.0)
    assert torch.equal(torch.ops.oasr.kit_test_scale(x, 2.0), x * 2)
    assert op is not None
    meta = torch.ops.oasr.kit_test_scale(torch.empty(5, 2, device="meta"), 3.0)
    assert meta.shape == (5, 2) and meta.device.type == "meta"


def test_a_launcher_is_bound_from_its_declared_types():
    libc = ctypes.CDLL(None)

    class Module:
        def function(self, name):
            return getattr(libc, {"abs": "abs", "abs_workspace": "labs"}[name])

    fn, ws = bind_launcher(Module(), "abs", (ctypes.c_int,), (ctypes.c_long,))
    assert fn(-7) == 7 and ws(-9) == 9
    assert fn.restype is ctypes.c_int32 and ws.restype is ctypes.c_int64
    assert fn.argtypes == [ctypes.c_int] or tuple(fn.argtypes) == (ctypes.c_int,)
    assert status_text(0) != status_text(12345) == "unknown status 12345"


def test_a_prepared_weight_is_made_once_and_remade_when_the_weight_changes():
    w = torch.ones(4, 2)
    made = []

    def make():
        made.append(1)
        return w.t().contiguous()

    first = prepared(w, "_kit_test_form", stamp(w), make)
    assert prepared(w, "_kit_test_form", stamp(w), make) is first and len(made) == 1
    assert held(w, "_kit_test_form") is first
    w.mul_(2)  # in place: a new version
    again = prepared(w, "_kit_test_form", stamp(w), make)
    assert len(made) == 2 and torch.equal(again, w.t())
    assert stamp(None) == (None,)
    with torch.inference_mode():
        frozen = torch.ones(2)
    assert stamp(frozen)[1] == -1


def test_a_package_loads_its_lazy_attributes_from_its_module(monkeypatch):
    pkg, mod = types.ModuleType("kit_lazy_pkg"), types.ModuleType("kit_lazy_pkg.ops")
    mod.op = "the op"
    monkeypatch.setitem(sys.modules, "kit_lazy_pkg", pkg)
    monkeypatch.setitem(sys.modules, "kit_lazy_pkg.ops", mod)
    getter = lazy_attributes("kit_lazy_pkg", "ops", {"op"})
    assert getter("op") == "the op"
    with pytest.raises(AttributeError, match="module 'kit_lazy_pkg' has no attribute 'other'"):
        getter("other")

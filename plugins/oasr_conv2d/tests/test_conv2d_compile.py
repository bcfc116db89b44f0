"""Real nvcc compiles of the lane's units on a machine without a GPU (opt-in: ``-m compile``;
about 25 s per unit and dtype on one core): one config per iterator kind links into a module
exporting only its launchers, and the C ABI refuses what it must without a device."""

from __future__ import annotations

import ctypes

import pytest
from oasr_core import jit as core_jit
from oasr_core.kernel_testing import compiled_module

from oasr_conv2d import jit, space
from oasr_conv2d.geometry import LANE, call_args, geometry
from oasr_conv2d.launch import Kernel

pytestmark = pytest.mark.compile

EVERY_KIND = (space.DEFAULT, space.FEW_CHANNELS_DEFAULT, space.ANY_WIDTH, "dc_c8_p8_t256")
"""The optimized, few-channels and analytic iterators (the heuristic's production set) and a
direct kernel."""


built, test_every_iterator_kind_exports_only_its_launchers = compiled_module(
    jit.MODULES, LANE, EVERY_KIND, name="conv2d_compile_test")


def test_the_c_abi_refuses_without_a_gpu(built):
    import torch

    configs, spec, _report = built
    module = core_jit.load(spec, build_missing=False)
    geo = geometry(2, 100, 80, 8, 16, 3, 3, 2, 2)
    for config in configs:
        kernel = Kernel.bind(module, config)
        call = call_args(geo, "fp16", "relu")
        if not torch.cuda.is_available():
            status = kernel.fn(ctypes.addressof(call), ctypes.addressof(geo), 0, 0, 0, 0, 0)
            assert core_jit.kit.STATUS[status] == "no CUDA device", config.id
        call.n = 15  # disagrees with the geometry's c_out
        assert kernel.fn(ctypes.addressof(call), ctypes.addressof(geo), 0, 0, 0, 0, 0) == 2
        assert kernel.fn(0, 0, 0, 0, 0, 0, 0) == 2
        call = call_args(geo, "fp16")
        call.dtype = 1  # bf16 is not compiled into this module
        assert kernel.fn(ctypes.addressof(call), ctypes.addressof(geo), 0, 0, 0, 0, 0) == 1
        assert kernel.workspace_fn(ctypes.addressof(geo), 1) == -1
        assert kernel.workspace_fn(ctypes.addressof(geo), 0) in (0, -1)
        depthwise = geometry(2, 100, 80, 8, 8, 3, 3, groups=2)
        assert kernel.workspace_fn(ctypes.addressof(depthwise), 0) == -1

"""A real depthwise unit through the core JIT: compile, link, exports, the C ABI's answers
without a GPU. The suite-wide background prebuild compiles it (``SMOKE_UNITS``)."""

from __future__ import annotations

import ctypes

import pytest
from oasr_core import jit as core_jit
from oasr_core.kernel_testing import smoke_module

from oasr_conv1d import lanes, launch
from oasr_conv1d.depthwise import space as dw_space
from oasr_conv1d.geometry import LANE_SM80, call_args, geometry
from oasr_conv1d.jit import Conv1dKernelModule

pytestmark = pytest.mark.nvcc


def _config():
    return lanes.config(LANE_SM80, dw_space.GENERAL_DEFAULT)


def SMOKE_UNITS():
    """The specs the root conftest's background prebuild compiles for this module."""
    return [Conv1dKernelModule(_config()).spec(("fp16",))]


built, test_the_unit_exports_only_its_abi = smoke_module()


def test_the_abi_answers_without_a_gpu(built):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this checks the no-device answers; the GPU tests run the kernels")
    ((spec, _),) = built
    kernel = launch.Kernel.bind(core_jit.load(spec, build_missing=False), _config())
    geo = geometry(2, 100, 256, 256, 31, 1, 15, 1, 256)
    plan = kernel.prepare(geo, "fp16", "silu")
    assert plan.prepared.workspace == ()
    assert plan.prepared.args.act == 3 and plan.prepared.args.k == 31
    args = call_args(geo, "fp16", None)
    assert kernel.fn(ctypes.addressof(args), ctypes.addressof(geo), 16, 16, 0, 16, 0) == 7
    args.k += 1
    assert kernel.fn(ctypes.addressof(args), ctypes.addressof(geo), 16, 16, 0, 16, 0) == 2
    args = call_args(geo, "bf16", None)
    assert kernel.fn(ctypes.addressof(args), ctypes.addressof(geo), 16, 16, 0, 16, 0) == 1
    dense = geometry(2, 100, 256, 512, 3, 1, 1, 1, 1)
    assert kernel.workspace_fn(ctypes.addressof(dense), 0) == -1

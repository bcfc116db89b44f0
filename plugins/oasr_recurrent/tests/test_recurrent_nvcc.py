"""The lane default's unit through the core JIT in the default suite: compile, link, exports,
a prepared call's record. The suite-wide background prebuild compiles it (``SMOKE_UNITS``);
``test_recurrent_compile.py`` (``-m compile``) compiles more kinds and checks every refusal."""

from __future__ import annotations

import ctypes

import pytest
from oasr_core import jit as core_jit
from oasr_core.kernel_testing import smoke_module
from oasr_core.kit import LaunchError

from oasr_recurrent import jit, lanes, space
from oasr_recurrent.launch import Kernel, call_args
from oasr_recurrent.ops_names import LANE

pytestmark = pytest.mark.nvcc


def _config():
    return lanes.config(LANE, space.DEFAULT)


def SMOKE_UNITS():
    """The specs the root conftest's background prebuild compiles for this module: the
    default's LSTM step unit alone (its other cells' units are the compile test's)."""
    return [jit.cell_spec([_config()], ("lstm_step",), "sm90",
                          name=f"{jit.MODULE_PREFIX[LANE]}_{space.DEFAULT}", dtypes=("fp16",))]


built, test_the_unit_exports_only_its_abi = smoke_module()


def test_a_prepared_call_holds_the_step_and_the_abi_answers_without_a_gpu(built):
    import torch

    ((spec, _),) = built
    kernel = Kernel.bind(core_jit.load(spec, build_missing=False), _config())
    prepared = kernel.prepare(64, 640, 1024, "fp16")
    args = prepared.args
    assert (args.m, args.n, args.k, args.dtype) == (64, 1024, 640, 0) and prepared.plain
    with pytest.raises(LaunchError, match="cannot run B=4 I=644 H=640 fp16"):
        kernel.prepare(4, 644, 640, "fp16")
    with pytest.raises(LaunchError, match="bf16"):
        kernel.prepare(4, 640, 640, "bf16")  # not compiled into this module
    if not torch.cuda.is_available():
        call = call_args(4, 640, 640, "fp16")
        ptrs = (16, 16, 16, 16, 16, 0, 0, 16, 16)
        assert kernel.fn(ctypes.addressof(call), *ptrs, 0) == 7, "no CUDA device"

"""Real nvcc compiles of the lane's units on a machine without a GPU (opt-in: ``-m compile``;
a few seconds per unit): configs of every kind (one row per CTA, a K split, many rows) link
their units of every cell (LSTM, RNN tanh / relu, GRU) into a module exporting only their
launchers, and the C ABI refuses what it must without a device."""

from __future__ import annotations

import ctypes

import pytest
from oasr_core import jit as core_jit
from oasr_core.kernel_testing import compiled_module

from oasr_recurrent import jit
from oasr_recurrent.launch import Kernel, call_args
from oasr_recurrent.ops_names import LANE

pytestmark = pytest.mark.compile

KINDS = ("u4_r4_t128_s1", "u1_r1_t128_s4", "u8_r16_t256_s1")
"""The lane default, a K split over all four warps, the widest batch tile (each builds for
every cell)."""


built, test_the_units_export_only_their_launchers = compiled_module(
    jit.MODULES, LANE, KINDS, name="recurrent_compile_test")


def test_the_c_abi_refuses_without_a_gpu(built):
    import torch

    configs, spec, _report = built
    module = core_jit.load(spec, build_missing=False)
    nulls = (0,) * 10
    for config in configs:
        kernel = Kernel.bind(module, config)
        call = call_args(16, 640, 640, "fp16")
        pointers = (16, 16, 16, 16, 16, 0, 0, 16, 16)  # aligned, never dereferenced
        if not torch.cuda.is_available():
            status = kernel.fn(ctypes.addressof(call), *pointers, 0)
            assert core_jit.kit.STATUS[status] == "no CUDA device", config.id
        assert kernel.fn(ctypes.addressof(call), *nulls) == 2, "null operands"
        assert kernel.fn(0, *nulls) == 2, "no call record"
        misaligned = (18, 16, 16, 16, 16, 0, 0, 16, 16)
        assert kernel.fn(ctypes.addressof(call), *misaligned, 0) == 2
        call.k = 644  # I not a multiple of 8
        assert kernel.fn(ctypes.addressof(call), *pointers, 0) == 2
        call = call_args(16, 640, 640, "bf16")  # not compiled into this module
        assert kernel.fn(ctypes.addressof(call), *pointers, 0) == 1
        assert kernel.workspace_fn(16, 640, 640, 0) == 0
        assert kernel.workspace_fn(16, 640, 640, 1) == -1
        assert kernel.workspace_fn(16, 644, 640, 0) == -1
        assert kernel.workspace_fn(0, 640, 640, 0) == -1
        rows = config.params["rows"]
        wide = kernel.workspace_fn(64, 4096, 4096, 0)
        assert wide == (0 if rows * 8192 * 2 <= 96 * 1024 else -1), config.id


@pytest.mark.parametrize("cell", ["rnn_tanh_step", "rnn_relu_step", "gru_step"])
def test_the_stateless_cells_units_take_no_cell_state(built, cell):
    """The module links each kind's units of every cell it builds for; an RNN or GRU unit
    takes null c0 / c1 and refuses a null h1."""
    import torch

    from oasr_recurrent import space

    configs, spec, _report = built
    module = core_jit.load(spec, build_missing=False)
    for config in configs:
        assert space.cell_feasible(config, cell), config.id
        kernel = Kernel.bind(module, config, cell)
        call = call_args(16, 640, 640, "fp16")
        no_state = (16, 16, 0, 16, 16, 0, 0, 16, 0)  # c0, c1 null: the cell's call
        if not torch.cuda.is_available():
            status = kernel.fn(ctypes.addressof(call), *no_state, 0)
            assert core_jit.kit.STATUS[status] == "no CUDA device", (config.id, cell)
        no_h1 = (16, 16, 0, 16, 16, 0, 0, 0, 0)
        assert kernel.fn(ctypes.addressof(call), *no_h1, 0) == 2, "null h1"
        assert kernel.workspace_fn(16, 640, 640, 0) == 0
        assert kernel.workspace_fn(16, 644, 640, 0) == -1

"""GPU tests of the Elman RNN step kernels (run on the H200 with ``pytest -m gpu``; the run's
``gpu-tests-recurrent`` phase collects them with the family's other GPU tests).

The RNN units of a few configs of every kind (one row per CTA, a K split, many rows) are
built into one module (:func:`oasr_recurrent.jit.cell_spec`); each runs a tanh and a relu
step at (I, H) in {(320, 320), (640, 640)} and B in {1, 16}, both dtypes, with and without
biases, against the fp32 torch cell of the same operands and through the family's numerics
gate against torch's own half-precision cell.
"""

from __future__ import annotations

import functools

import pytest
import torch
from oasr_core.kernel_testing import device_arch, gpu_marks

from oasr_recurrent import jit, lanes, numerics
from oasr_recurrent.launch import pointers
from oasr_recurrent.ops_names import LANE

pytestmark = gpu_marks()
KINDS = ("u4_r1_t128_s1", "u1_r1_t128_s4", "u4_r4_t128_s1", "u8_r16_t256_s1")
CELLS = {"rnn_tanh_step": torch.rnn_tanh_cell, "rnn_relu_step": torch.rnn_relu_cell}
WIDTHS = ((320, 320), (640, 640))
BATCHES = (1, 16)
TOLERANCE = {"fp16": (2e-3, 2e-3), "bf16": (1.6e-2, 1e-2)}
"""(atol, rtol): the fp32 step rounded once to the dtype."""
TDTYPE = {"fp16": torch.float16, "bf16": torch.bfloat16}


@functools.cache
def _kernels():
    from oasr_core import jit as core_jit

    from oasr_recurrent.launch import Kernel

    configs = [lanes.config(LANE, cid) for cid in KINDS]
    module = core_jit.load(jit.cell_spec(configs, tuple(CELLS), device_arch(),
                                         name="recurrent_rnn_gpu_test"))
    return {(c.id, cell): Kernel.bind_symbol(module, c, lanes.symbol(c, cell))
            for c in configs for cell in CELLS}


def _operands(batch, input_size, hidden, dtype, bias, seed):
    gen = torch.Generator().manual_seed(seed)
    bound = hidden ** -0.5

    def uniform(*shape, scale=1.0):
        t = (torch.rand(*shape, generator=gen) * 2 - 1) * scale
        return t.to(device="cuda", dtype=TDTYPE[dtype])

    return (uniform(batch, input_size), uniform(batch, hidden),
            uniform(hidden, input_size, scale=bound), uniform(hidden, hidden, scale=bound),
            uniform(hidden, scale=bound) if bias else None,
            uniform(hidden, scale=bound) if bias else None)


def _f32(t):
    return None if t is None else t.float()


@pytest.mark.parametrize("cell", list(CELLS))
@pytest.mark.parametrize("cid", KINDS)
def test_every_kind_matches_the_fp32_torch_cell(cid, cell):
    kernel = _kernels()[(cid, cell)]
    ran = 0
    for input_size, hidden in WIDTHS:
        for batch in BATCHES:
            for dtype in ("fp16", "bf16"):
                bias = (batch + len(dtype)) % 2 == 0
                x, h, w_ih, w_hh, b_ih, b_hh = operands = _operands(
                    batch, input_size, hidden, dtype, bias, seed=batch * 31 + hidden)
                h1 = torch.empty_like(h)
                plan = kernel.prepare(batch, input_size, hidden, dtype)
                status = plan(x.get_device(),
                              *pointers(x, h, None, w_ih, w_hh, b_ih, b_hh, h1, None))
                assert status == 0, f"{cid} {cell}: status {status}"
                torch.cuda.synchronize()
                ref = CELLS[cell](*(_f32(t) for t in operands))
                where = f"{cid} {cell} B={batch} I={input_size} H={hidden} {dtype} bias={bias}"
                atol, rtol = TOLERANCE[dtype]
                torch.testing.assert_close(h1.float(), ref, atol=atol, rtol=rtol,
                                           msg=lambda m, w=where: f"{w}: {m}")
                verdict = numerics.numerics_gate(h1, CELLS[cell](*operands), ref, dtype=dtype)
                assert verdict, f"{where}: {verdict.reason}"
                ran += 1
    assert ran == len(WIDTHS) * len(BATCHES) * 2


@pytest.mark.parametrize("cell", list(CELLS))
def test_a_nan_input_row_stays_nan_as_in_torch(cell):
    """A NaN in one batch row's input reaches every unit of that row's new state through both
    activations (relu included: torch.relu keeps a NaN), and no other row."""
    kernel = _kernels()[(KINDS[0], cell)]
    x, h, w_ih, w_hh, b_ih, b_hh = operands = _operands(4, 320, 320, "fp16", True, seed=5)
    x[1, 7] = float("nan")
    h1 = torch.empty_like(h)
    status = kernel.prepare(4, 320, 320, "fp16")(
        x.get_device(), *pointers(x, h, None, w_ih, w_hh, b_ih, b_hh, h1, None))
    assert status == 0
    torch.cuda.synchronize()
    ref = CELLS[cell](*(_f32(t) for t in operands))
    assert torch.equal(h1.isnan(), ref.isnan())
    assert bool(h1[1].isnan().all()) and not bool(h1[[0, 2, 3]].isnan().any())

"""The GRU step on CPU: torch.gru_cell exactly and the GRU equations, counted by reason; bad
arguments are one clear line; the custom op's fake and torch.compile."""

from __future__ import annotations

import pytest
import torch

import oasr_recurrent
from oasr_recurrent import gru, ops


def operands(batch, input_size, hidden, *, bias=True, seed=0):
    gen = torch.Generator().manual_seed(seed)
    bound = hidden ** -0.5

    def uniform(*shape, scale=1.0):
        return (torch.rand(*shape, generator=gen) * 2 - 1) * scale

    return (uniform(batch, input_size), uniform(batch, hidden),
            uniform(3 * hidden, input_size, scale=bound),
            uniform(3 * hidden, hidden, scale=bound),
            uniform(3 * hidden, scale=bound) if bias else None,
            uniform(3 * hidden, scale=bound) if bias else None)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize(("batch", "input_size", "hidden"), [(1, 16, 24), (5, 13, 7)])
def test_cpu_calls_take_the_torch_path_and_equal_gru_cell(bias, batch, input_size, hidden):
    args = operands(batch, input_size, hidden, bias=bias)
    ops.reset_stats()
    assert torch.equal(oasr_recurrent.gru_step(*args), torch.gru_cell(*args))
    assert ops.stats() == {"torch:cpu": 1}


def test_the_step_is_the_gru_equations():
    x, h, w_ih, w_hh, b_ih, b_hh = operands(4, 16, 8, seed=3)
    xr, xz, xn = (x @ w_ih.T + b_ih).chunk(3, dim=1)
    hr, hz, hn = (h @ w_hh.T + b_hh).chunk(3, dim=1)
    r, z = torch.sigmoid(xr + hr), torch.sigmoid(xz + hz)
    n = torch.tanh(xn + r * hn)
    torch.testing.assert_close(gru.gru_step(x, h, w_ih, w_hh, b_ih, b_hh), (1 - z) * n + z * h)


@pytest.mark.parametrize(("change", "message"), [
    (lambda a: {**a, "w_ih": a["w_ih"][:8]},
     r"w_ih must be of shape \(24, 16\) for I=16 H=8; got \(8, 16\)$"),
    (lambda a: {**a, "b_hh": a["b_hh"][:8]}, r"b_hh must be of shape \(24,\)"),
    (lambda a: {**a, "h": a["h"][:2]}, r"x \(3, 16\) and h \(2, 8\) disagree on the batch$"),
])
def test_bad_arguments_are_one_clear_line(change, message):
    names = ("x", "h", "w_ih", "w_hh", "b_ih", "b_hh")
    args = change(dict(zip(names, operands(3, 16, 8), strict=True)))
    with pytest.raises(ValueError, match=r"^oasr_recurrent\.gru_step: " + message):
        gru.gru_step(**args)


def test_the_custom_op_has_a_fake_and_one_node_under_torch_compile():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        h1 = torch.ops.oasr.gru_step(torch.empty(16, 320, dtype=torch.bfloat16),
                                     torch.empty(16, 640, dtype=torch.bfloat16),
                                     torch.empty(1920, 320, dtype=torch.bfloat16),
                                     torch.empty(1920, 640, dtype=torch.bfloat16), None, None)
    assert h1.shape == (16, 640) and h1.dtype == torch.bfloat16
    graphs = []

    def backend(gm, example):
        graphs.append(gm)
        return gm.forward

    args = operands(3, 16, 8)
    compiled = torch.compile(oasr_recurrent.gru_step, backend=backend, fullgraph=True)
    assert torch.equal(compiled(*args), torch.gru_cell(*args))
    (gm,) = graphs
    op = torch.ops.oasr.gru_step
    calls = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    assert sum(t in (op, op.default) for t in calls) == 1, calls

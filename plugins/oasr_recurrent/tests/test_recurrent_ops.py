"""The op on CPU: the torch path computes torch.lstm_cell exactly, counted by reason; bad
arguments are one clear line; the custom op's fake shapes, FX tracing and torch.compile; the
numerics gate."""

from __future__ import annotations

import pytest
import torch

import oasr_recurrent
from oasr_recurrent import ops
from oasr_recurrent.numerics import make_operands, numerics_gate, reference, stacked, torch_step


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize(("batch", "input_size", "hidden"), [(1, 16, 24), (5, 40, 8),
                                                             (3, 13, 7)])
def test_cpu_calls_take_the_torch_path_and_equal_lstm_cell(batch, input_size, hidden, bias):
    x, h, c, w_ih, w_hh, b_ih, b_hh = make_operands(batch, input_size, hidden, "fp32",
                                                    bias=bias)
    ops.reset_stats()
    h1, c1 = oasr_recurrent.lstm_step(x, h, c, w_ih, w_hh, b_ih, b_hh)
    want_h, want_c = torch.lstm_cell(x, (h, c), w_ih, w_hh, b_ih, b_hh)
    assert torch.equal(h1, want_h) and torch.equal(c1, want_c)
    assert ops.stats() == {"torch:cpu": 1}


def test_the_step_is_the_lstm_equations():
    x, h, c, w_ih, w_hh, b_ih, b_hh = make_operands(4, 16, 8, "fp32", seed=3)
    gates = x @ w_ih.T + b_ih + h @ w_hh.T + b_hh
    i, f, g, o = gates.chunk(4, dim=1)
    c_want = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
    h_want = torch.sigmoid(o) * torch.tanh(c_want)
    h1, c1 = ops.lstm_step(x, h, c, w_ih, w_hh, b_ih, b_hh)
    torch.testing.assert_close(c1, c_want)
    torch.testing.assert_close(h1, h_want)


@pytest.mark.parametrize(("change", "message"), [
    (lambda a: {**a, "w_ih": a["w_ih"][:, :-1]},
     r"w_ih must be of shape \(32, 16\) for I=16 H=8; got \(32, 15\)$"),
    (lambda a: {**a, "w_hh": a["w_hh"].T},
     r"w_hh must be of shape \(32, 8\) for I=16 H=8; got \(8, 32\)$"),
    (lambda a: {**a, "c": a["c"][:2]}, r"c must be of shape \(3, 8\)"),
    (lambda a: {**a, "b_hh": a["b_hh"][:8]}, r"b_hh must be of shape \(32,\)"),
    (lambda a: {**a, "b_ih": [0.0] * 32}, r"b_ih must be of shape \(32,\) .*; got list$"),
    (lambda a: {**a, "h": a["h"][:2]}, r"x \(3, 16\) and h \(2, 8\) disagree on the batch$"),
    (lambda a: {**a, "x": a["x"][0]}, r"x and h must be \(B, I\) and \(B, H\); got x \(16,\)"),
    (lambda a: {**a, "w_ih": None}, r"w_ih must be a tensor; got NoneType$"),
])
def test_bad_arguments_are_one_clear_line(change, message):
    names = ("x", "h", "c", "w_ih", "w_hh", "b_ih", "b_hh")
    args = change(dict(zip(names, make_operands(3, 16, 8, "fp32"), strict=True)))
    with pytest.raises(ValueError, match=r"^oasr_recurrent\.lstm_step: " + message) as info:
        ops.lstm_step(**args)
    assert "\n" not in str(info.value)


def test_the_custom_op_has_fake_shapes_and_traces_into_fx():
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx

    with FakeTensorMode():
        x = torch.empty(64, 640, dtype=torch.float16)
        h = c = torch.empty(64, 1024, dtype=torch.float16)
        w_ih = torch.empty(4096, 640, dtype=torch.float16)
        w_hh = torch.empty(4096, 1024, dtype=torch.float16)
        h1, c1 = torch.ops.oasr.lstm_step(x, h, c, w_ih, w_hh, None, None)
    assert h1.shape == c1.shape == (64, 1024) and h1.dtype == torch.float16

    def two_layers(x, h, c, w1, u1, w2, u2):
        y, c_a = torch.ops.oasr.lstm_step(x, h, c, w1, u1, None, None)
        return torch.ops.oasr.lstm_step(y, h, c_a, w2, u2, None, None)

    x, h, c, w1, u1, _b, _b2 = make_operands(2, 16, 8, "fp32")
    _x, _h, _c, w2, u2, _b3, _b4 = make_operands(2, 8, 8, "fp32", seed=1)
    graph = make_fx(two_layers, tracing_mode="fake")(x, h, c, w1, u1, w2, u2)
    targets = [n.target for n in graph.graph.nodes if n.op == "call_function"
               and n.target is torch.ops.oasr.lstm_step.default]
    assert len(targets) == 2
    torch.testing.assert_close(graph(x, h, c, w1, u1, w2, u2), two_layers(x, h, c, w1, u1, w2,
                                                                          u2))


def test_torch_compile_keeps_one_op_node_per_step():
    graphs = []

    def backend(gm, example):
        graphs.append(gm)
        return gm.forward

    x, h, c, w_ih, w_hh, b_ih, b_hh = make_operands(3, 16, 8, "fp32")
    compiled = torch.compile(oasr_recurrent.lstm_step, backend=backend, fullgraph=True)
    h1, c1 = compiled(x, h, c, w_ih, w_hh, b_ih, b_hh)
    want = torch.lstm_cell(x, (h, c), w_ih, w_hh, b_ih, b_hh)
    assert torch.equal(h1, want[0]) and torch.equal(c1, want[1])
    (gm,) = graphs
    op = torch.ops.oasr.lstm_step
    calls = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    assert sum(t in (op, op.default) for t in calls) == 1, calls
    aot = torch.compile(oasr_recurrent.lstm_step, backend="aot_eager", fullgraph=True)
    torch.testing.assert_close(aot(x, h, c, w_ih, w_hh, b_ih, b_hh)[1], want[1])


def test_autograd_through_the_eager_op_is_torchs():
    x, h, c, w_ih, w_hh, b_ih, b_hh = make_operands(2, 16, 8, "fp32")
    w_ih.requires_grad_(True)
    h1, _c1 = ops.lstm_step(x, h, c, w_ih, w_hh, b_ih, b_hh)
    h1.sum().backward()
    assert w_ih.grad is not None and w_ih.grad.shape == w_ih.shape


def test_the_gate_judges_both_outputs_against_the_fp32_step():
    operands = make_operands(4, 64, 32, "bf16", seed=2)
    ref = reference(*operands)
    assert ref.shape == (2, 4, 32) and ref.dtype == torch.float32
    half = stacked(*torch_step(*(t.float() for t in operands))).bfloat16()
    assert numerics_gate(half, half, ref)
    bad = half.clone()
    bad[1, 0, 0] += 0.5  # one wrong cell state
    verdict = numerics_gate(bad, half, ref)
    assert not verdict and "error" in verdict.reason

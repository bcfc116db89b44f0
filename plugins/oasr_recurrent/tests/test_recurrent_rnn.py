"""The Elman RNN steps on CPU: torch.rnn_tanh_cell / torch.rnn_relu_cell exactly, counted by
reason; bad arguments are one clear line; the custom ops' fakes, FX tracing and
torch.compile."""

from __future__ import annotations

import pytest
import torch

import oasr_recurrent
from oasr_recurrent import ops, rnn

CELLS = {"tanh": torch.rnn_tanh_cell, "relu": torch.rnn_relu_cell}


def operands(batch, input_size, hidden, *, bias=True, seed=0):
    gen = torch.Generator().manual_seed(seed)
    bound = hidden ** -0.5

    def uniform(*shape, scale=1.0):
        return (torch.rand(*shape, generator=gen) * 2 - 1) * scale

    return (uniform(batch, input_size), uniform(batch, hidden),
            uniform(hidden, input_size, scale=bound), uniform(hidden, hidden, scale=bound),
            uniform(hidden, scale=bound) if bias else None,
            uniform(hidden, scale=bound) if bias else None)


@pytest.mark.parametrize("nonlinearity", ["tanh", "relu"])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize(("batch", "input_size", "hidden"), [(1, 16, 24), (5, 13, 7)])
def test_cpu_calls_take_the_torch_path_and_equal_the_torch_cell(nonlinearity, bias, batch,
                                                                 input_size, hidden):
    args = operands(batch, input_size, hidden, bias=bias)
    ops.reset_stats()
    h1 = oasr_recurrent.rnn_step(*args, nonlinearity=nonlinearity)
    assert torch.equal(h1, CELLS[nonlinearity](*args))
    assert ops.stats() == {"torch:cpu": 1}


@pytest.mark.parametrize(("nonlinearity", "act"), [("tanh", torch.tanh), ("relu", torch.relu)])
def test_the_step_is_the_elman_equation(nonlinearity, act):
    x, h, w_ih, w_hh, b_ih, b_hh = operands(4, 16, 8, seed=3)
    want = act(x @ w_ih.T + b_ih + h @ w_hh.T + b_hh)
    torch.testing.assert_close(rnn.rnn_step(x, h, w_ih, w_hh, b_ih, b_hh, nonlinearity), want)


def test_each_nonlinearity_has_its_op():
    assert [rnn.op_of(n) for n in rnn.NONLINEARITIES] == ["rnn_tanh_step", "rnn_relu_step"]


@pytest.mark.parametrize(("change", "message"), [
    (lambda a: {**a, "w_ih": a["w_ih"][:, :-1]},
     r"w_ih must be of shape \(8, 16\) for I=16 H=8; got \(8, 15\)$"),
    (lambda a: {**a, "w_hh": a["w_hh"][:4]}, r"w_hh must be of shape \(8, 8\) .*; got \(4, 8\)$"),
    (lambda a: {**a, "b_hh": a["b_hh"][:4]}, r"b_hh must be of shape \(8,\)"),
    (lambda a: {**a, "b_ih": [0.0] * 8}, r"b_ih must be of shape \(8,\) .*; got list$"),
    (lambda a: {**a, "h": a["h"][:2]}, r"x \(3, 16\) and h \(2, 8\) disagree on the batch$"),
    (lambda a: {**a, "x": a["x"][0]}, r"x and h must be \(B, I\) and \(B, H\); got x \(16,\)"),
    (lambda a: {**a, "w_hh": None}, r"w_hh must be a tensor; got NoneType$"),
    (lambda a: {**a, "nonlinearity": "gelu"},
     r"nonlinearity must be one of \('tanh', 'relu'\); got 'gelu'$"),
])
def test_bad_arguments_are_one_clear_line(change, message):
    names = ("x", "h", "w_ih", "w_hh", "b_ih", "b_hh")
    args = change(dict(zip(names, operands(3, 16, 8), strict=True)))
    with pytest.raises(ValueError, match=r"^oasr_recurrent\.rnn_step: " + message) as info:
        rnn.rnn_step(**args)
    assert "\n" not in str(info.value)


def test_the_custom_ops_have_fake_shapes_and_trace_into_fx():
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx

    with FakeTensorMode():
        x = torch.empty(16, 320, dtype=torch.float16)
        h = torch.empty(16, 640, dtype=torch.float16)
        w_ih = torch.empty(640, 320, dtype=torch.float16)
        w_hh = torch.empty(640, 640, dtype=torch.float16)
        h1 = torch.ops.oasr.rnn_relu_step(x, h, w_ih, w_hh, None, None)
    assert h1.shape == (16, 640) and h1.dtype == torch.float16

    def two_layers(x, h, w1, u1, w2, u2):
        y = torch.ops.oasr.rnn_tanh_step(x, h, w1, u1, None, None)
        return torch.ops.oasr.rnn_relu_step(y, h, w2, u2, None, None)

    x, h, w1, u1, _b, _b2 = operands(2, 16, 8)
    _x, _h, w2, u2, _b3, _b4 = operands(2, 8, 8, seed=1)
    graph = make_fx(two_layers, tracing_mode="fake")(x, h, w1, u1, w2, u2)
    targets = [n.target for n in graph.graph.nodes if n.op == "call_function"]
    assert targets.count(torch.ops.oasr.rnn_tanh_step.default) == 1
    assert targets.count(torch.ops.oasr.rnn_relu_step.default) == 1
    torch.testing.assert_close(graph(x, h, w1, u1, w2, u2), two_layers(x, h, w1, u1, w2, u2))


@pytest.mark.parametrize("nonlinearity", ["tanh", "relu"])
def test_torch_compile_keeps_one_op_node_per_step(nonlinearity):
    graphs = []

    def backend(gm, example):
        graphs.append(gm)
        return gm.forward

    def step(x, h, w_ih, w_hh, b_ih, b_hh):
        return oasr_recurrent.rnn_step(x, h, w_ih, w_hh, b_ih, b_hh, nonlinearity)

    args = operands(3, 16, 8)
    compiled = torch.compile(step, backend=backend, fullgraph=True)
    assert torch.equal(compiled(*args), CELLS[nonlinearity](*args))
    (gm,) = graphs
    op = getattr(torch.ops.oasr, rnn.op_of(nonlinearity))
    calls = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    assert sum(t in (op, op.default) for t in calls) == 1, calls


def test_autograd_through_the_eager_step_is_torchs():
    x, h, w_ih, w_hh, b_ih, b_hh = operands(2, 16, 8)
    w_hh.requires_grad_(True)
    rnn.rnn_step(x, h, w_ih, w_hh, b_ih, b_hh, "relu").sum().backward()
    assert w_hh.grad is not None and w_hh.grad.shape == w_hh.shape


def test_the_rnn_units_are_the_lstm_units_with_the_rnn_kernel_types():
    from oasr_recurrent import codegen, lanes, space
    from oasr_recurrent.ops_names import LANE

    config = lanes.config(LANE, space.DEFAULT)
    lstm = codegen.unit_source(config)
    assert codegen.unit_source(config, cell="lstm_step") == lstm
    assert "oasr_recurrent::LstmStep<0, 4, 4, 128, 1>" in lstm
    (unit,) = codegen.cell_units(config, "rnn_relu_step", ("bf16",))
    assert unit.name == "rnn_relu_step_u4_r4_t128_s1"
    assert unit.exports == ("oasr_recurrent_sm80_rnn_relu_step_u4_r4_t128_s1",
                            "oasr_recurrent_sm80_rnn_relu_step_u4_r4_t128_s1_workspace")
    assert "using K1 = oasr_recurrent::RnnStep<1, 1, 4, 4, 128, 1>;" in unit.source
    assert "LstmStep" not in unit.source and "K0" not in unit.source
    tanh = codegen.unit_source(config, cell="rnn_tanh_step")
    assert "oasr_recurrent::RnnStep<0, 0, 4, 4, 128, 1>" in tanh
    assert codegen.cell_units(config, "lstm_step") == codegen.jit_units(config)


def test_an_rnn_cell_builds_where_every_warp_group_owns_one_of_its_gate_rows():
    from oasr_recurrent import codegen, lanes, space
    from oasr_recurrent.ops_names import LANE

    ids = [c.id for c in lanes.space(LANE) if space.cell_feasible(c, "rnn_tanh_step")]
    assert "u4_r4_t128_s1" in ids and "u1_r1_t128_s4" in ids
    assert "u1_r1_t128_s1" not in ids and "u2_r1_t256_s2" not in ids
    assert all(space.cell_feasible(c, "lstm_step") for c in lanes.space(LANE))
    assert all(space.cell_feasible(c, "gru_step") for c in lanes.space(LANE)), \
        "four accumulated rows per unit, as the LSTM's"
    narrow = lanes.config(LANE, "u1_r1_t128_s1")
    with pytest.raises(ValueError, match=r"config u1_r1_t128_s1 does not build for "
                                         r"rnn_relu_step \(too few gate rows"):
        codegen.cell_units(narrow, "rnn_relu_step")
    with pytest.raises(KeyError, match="cell 'gru' is not one of"):
        lanes.symbol(narrow, "gru")

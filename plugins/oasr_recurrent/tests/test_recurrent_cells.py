"""The RNN and GRU steps served as ops of the family, on CPU: per-op feasibility and units,
tiers naming their configs (selection, the production module's units per op, the op's plan),
a routed nn.RNN / nn.GRU stepping through the op and the census's points of the layers, their
cells and the ops."""

from __future__ import annotations

import pytest
import torch
from oasr_core.census.recorder import ShapeRecorder
from oasr_core.routing import own_forwards, route, through_ops, unroute
from oasr_core.testing import write_system_table

import oasr_recurrent
from oasr_recurrent import codegen, hooks, jit, lanes, launch, numerics, ops, recorder, space
from oasr_recurrent.layer import layer_step, op_of, steps, torch_only
from oasr_recurrent.ops_names import LANE

TANH_KEY = "recurrent|op=rnn_tanh_step|dt=half|I=640|H=640"
GRU_KEY = "recurrent|op=gru_step|dt=half|I=640|H=640"


def _table(root, entries, ids):
    (family,) = hooks.oasr_register_families()
    return write_system_table(root, family, LANE, "sm90",
                              {cid: lanes.config(LANE, cid) for cid in ids}, entries)


@pytest.mark.parametrize("op", ["rnn_tanh_step", "rnn_relu_step"])
def test_a_config_supports_an_rnn_step_where_its_warp_groups_each_own_a_unit(op):
    narrow, wide = lanes.config(LANE, "u2_r1_t256_s2"), lanes.config(LANE, "u4_r1_t128_s1")
    assert space.supports(narrow, space.make_problem(640, 640, 1, op="lstm_step"))
    assert not space.supports(narrow, space.make_problem(640, 640, 1, op=op)), \
        "4 warp groups, 2 gate rows"
    assert space.supports(wide, space.make_problem(640, 640, 1, op=op))
    assert not space.supports(wide, space.make_problem(644, 640, 1, op=op))
    assert space.smem(wide, 640, 640, op) == 640 * 2 * 2 + 4 * 4, "one partial per unit"
    assert space.smem(wide, 640, 640) == 640 * 2 * 2 + 4 * 4 * 4
    assert not space.supports(wide, space.make_problem(640, 640, 1, op="gemm"))


def test_the_gru_unit_and_its_shared_memory():
    narrow = lanes.config(LANE, "u2_r1_t256_s2")
    (unit,) = codegen.cell_units(narrow, "gru_step", ["fp16"])
    assert unit.name == "gru_step_u2_r1_t256_s2"
    assert "using K0 = oasr_recurrent::GruStep<0, 2, 1, 256, 2>;" in unit.source
    assert "OASR_EXPORT int32_t oasr_recurrent_sm80_gru_step_u2_r1_t256_s2(" in unit.source
    assert unit.exports == ("oasr_recurrent_sm80_gru_step_u2_r1_t256_s2",
                            "oasr_recurrent_sm80_gru_step_u2_r1_t256_s2_workspace")
    assert space.supports(narrow, space.make_problem(640, 640, 1, op="gru_step")), \
        "8 accumulated rows (r, z, n_x, n_h of 2 units) for 4 warp groups"
    assert space.smem(narrow, 640, 640, "gru_step") == space.smem(narrow, 640, 640), \
        "four partial rows per unit, as the LSTM's"
    assert codegen.unit_source(narrow) == codegen.jit_units(narrow)[0].source


def test_a_tier_naming_rnn_and_gru_configs_serves_them_and_links_their_units(tmp_path,
                                                                             monkeypatch):
    import oasr_core

    _table(tmp_path, {TANH_KEY: {"regions": [[4, "u4_r1_t128_s1"], [None, "u8_r16_t256_s1"]]},
                      GRU_KEY: {"regions": [[None, "u2_r1_t256_s2"]]}},
           ("u4_r1_t128_s1", "u8_r16_t256_s1", "u2_r1_t256_s2"))
    monkeypatch.setenv("OASR_TUNE_SYSTEM_DB", str(tmp_path / "system"))
    oasr_core.reload()
    picked = oasr_core.select("recurrent", "rnn_tanh_step", "fp16", (640, 640), 2, "sm90")
    assert picked.config.id == "u4_r1_t128_s1" and picked.tier.value == "system"
    assert oasr_core.select("recurrent", "rnn_relu_step", "fp16", (640, 640), 2,
                            "sm90").config is None, "an untuned step is torch's"
    assert oasr_core.select("recurrent", "lstm_step", "fp16", (640, 640), 2,
                            "sm90").config is None
    assert oasr_core.select("recurrent", "gru_step", "bf16", (640, 640), 64,
                            "sm90").config.id == "u2_r1_t256_s2"
    referenced = jit.referenced(LANE, "sm90")
    assert referenced["rnn_tanh_step"] == {"u4_r1_t128_s1", "u8_r16_t256_s1"}
    assert referenced["gru_step"] == {"u2_r1_t256_s2"}
    assert not referenced["lstm_step"] and not referenced["rnn_relu_step"]
    spec = jit.MODULES.production_spec(LANE, "sm90")
    assert [u.name for u in spec.units] == [space.DEFAULT, "rnn_tanh_step_u4_r1_t128_s1",
                                            "rnn_tanh_step_u8_r16_t256_s1",
                                            "gru_step_u2_r1_t256_s2"]
    assert set(jit.wanted(LANE, "sm90")) == {("lstm_step", space.DEFAULT),
                                             ("rnn_tanh_step", "u4_r1_t128_s1"),
                                             ("rnn_tanh_step", "u8_r16_t256_s1"),
                                             ("gru_step", "u2_r1_t256_s2")}


def test_the_plan_serves_torch_where_the_module_lacks_the_ops_unit(tmp_path, monkeypatch):
    """The miss path of an RNN step: the tier's config is in the loaded module for the LSTM
    step only, so the op warns once and serves torch for the rest of the epoch."""
    import oasr_core

    _table(tmp_path, {TANH_KEY: {"regions": [[None, "u4_r4_t128_s1"]]}}, ("u4_r4_t128_s1",))
    monkeypatch.setenv("OASR_TUNE_SYSTEM_DB", str(tmp_path / "system"))
    oasr_core.reload()
    lstm_only = {space.DEFAULT: {"lstm_step": object()}}
    monkeypatch.setattr(launch.LIBRARIES, "get", lambda lane, arch: lstm_only)
    monkeypatch.setattr(ops, "device_arch_of", lambda dev: "sm90")
    key = ("rnn_tanh_step", torch.float16, 3, 640, 640, 0)
    with pytest.warns(RuntimeWarning, match="no rnn_tanh_step unit of this config; torch"):
        assert ops._plan(key) == "torch"
    assert ops._PLANS.table[key] == "torch"


def test_the_bench_operands_and_reference_of_the_cells():
    x, h, c, w_ih, w_hh, b_ih, b_hh = numerics.make_operands(3, 16, 8, "fp32",
                                                             op="rnn_relu_step")
    assert c is None and w_ih.shape == (8, 16) and w_hh.shape == (8, 8) and b_hh.shape == (8,)
    ref = numerics.reference(x, h, c, w_ih, w_hh, b_ih, b_hh, op="rnn_relu_step")
    assert torch.equal(ref, torch.rnn_relu_cell(x, h, w_ih, w_hh, b_ih, b_hh))
    lstm = numerics.make_operands(3, 16, 8, "fp32")
    assert lstm[3].shape == (32, 16)
    assert numerics.reference(*lstm).shape == (2, 3, 8)
    x, h, c, w_ih, w_hh, b_ih, b_hh = numerics.make_operands(3, 16, 8, "fp32", op="gru_step")
    assert c is None and w_ih.shape == (24, 16) and b_ih.shape == (24,)
    assert torch.equal(numerics.reference(x, h, c, w_ih, w_hh, b_ih, b_hh, op="gru_step"),
                       torch.gru_cell(x, h, w_ih, w_hh, b_ih, b_hh))


def _rnn(nonlinearity="tanh", layers=2, **kwargs):
    torch.manual_seed(0)
    if nonlinearity == "gru":
        return torch.nn.GRU(16, 24, layers, **kwargs).eval()
    return torch.nn.RNN(16, 24, layers, nonlinearity=nonlinearity, **kwargs).eval()


OP_OF = {"tanh": "rnn_tanh_step", "relu": "rnn_relu_step", "gru": "gru_step"}


@pytest.mark.parametrize("nonlinearity", ["tanh", "relu", "gru"])
@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("with_state", [True, False])
def test_one_rnn_or_gru_step_equals_the_modules_forward(nonlinearity, batch_first, with_state):
    rnn = _rnn(nonlinearity, batch_first=batch_first)
    assert steps(rnn) and op_of(rnn) == OP_OF[nonlinearity]
    x = torch.randn(5, 1, 16) if batch_first else torch.randn(1, 5, 16)
    state = torch.randn(2, 5, 24) if with_state else None
    ops.reset_stats()
    with torch.no_grad():
        (y, h_n), (y2, h2) = layer_step(rnn, x, state), rnn(x, state)
    assert y.shape == y2.shape and h_n.shape == h2.shape
    torch.testing.assert_close(y, y2, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(h_n, h2, rtol=1e-5, atol=1e-6)
    assert ops.stats() == {"torch:cpu": 2}, "one step of the op per layer"
    with torch.no_grad():
        (y, h_n), (y2, h2) = layer_step(rnn, x[0, :1] if batch_first else x[:, 0],
                                        None), rnn(x[0, :1] if batch_first else x[:, 0])
    torch.testing.assert_close(h_n, h2, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("nonlinearity", "kind"), [("relu", "RNN"), ("gru", "GRU")])
def test_route_routes_an_rnn_or_gru_and_through_ops_steps_it(nonlinearity, kind):
    model = torch.nn.Sequential(_rnn(nonlinearity, layers=2, batch_first=True))
    plain = _rnn(nonlinearity, layers=2, batch_first=True)
    assert route(model, linear=False, conv1d=False) == {"Linear": 0, "Conv1d": 0, kind: 1}
    rnn = model[0]
    assert torch_only(rnn, "fp16"), "no device, no tier: every call is torch's"
    assert own_forwards(model) == 1
    x = torch.randn(2, 1, 16)
    ops.reset_stats()
    with torch.no_grad(), through_ops():
        torch.testing.assert_close(rnn(x)[1], plain(x)[1], rtol=1e-5, atol=1e-6)
        assert ops.stats() == {"torch:cpu": 2}
        ops.reset_stats()
        seq = torch.randn(2, 6, 16)
        assert torch.equal(rnn(seq)[0], plain(seq)[0])
        assert ops.stats() == {}, "a sequence is the module's own forward"
    assert route(model, linear=False, conv1d=False, lstm=False) == {"Linear": 0, "Conv1d": 0}
    assert unroute(model) == 1
    assert torch_only(torch.nn.RNN(16, 24, bidirectional=True), "fp16")
    assert torch_only(torch.nn.GRU(16, 24, bidirectional=True), "fp16")


def _record(fn):
    rec = ShapeRecorder(recorder.recorder_patches(), strict=True)
    with rec, torch.no_grad():
        fn()
    return {(c.op, dict(c.dims)["I"], dict(c.dims)["H"], c.m, c.dtype): n
            for c, n in rec.counts.items()}, rec


def test_the_census_sees_rnn_steps_cells_and_the_op():
    relu = torch.nn.RNN(320, 640, 2, nonlinearity="relu", batch_first=True).to("meta").half()
    x = torch.empty((16, 1, 320), device="meta", dtype=torch.float16)
    calls, _ = _record(lambda: relu(x))
    assert calls == {("rnn_relu_step", 320, 640, 16, "fp16"): 1,
                     ("rnn_relu_step", 640, 640, 16, "fp16"): 1}
    call = recorder.step_call(torch.float16, 16, 320, 640, "rnn_relu_step")
    assert call.label == "recurrent|op=rnn_relu_step|dt=fp16|I=320|H=640"
    assert call.flops == 2 * 16 * 640 * (320 + 640)
    assert call.weight_elements == 640 * 960 + 2 * 640
    cell = torch.nn.RNNCell(16, 24)
    operands = numerics.make_operands(3, 16, 24, "fp32", op="rnn_tanh_step")
    x3, h, _c, w_ih, w_hh, b_ih, b_hh = operands

    def run():
        cell(x3)
        oasr_recurrent.rnn_step(x3, h, w_ih, w_hh, b_ih, b_hh)  # its torch path: a cell
        _rnn()(torch.randn(1, 3, 16))

    calls, _ = _record(run)
    assert calls == {("rnn_tanh_step", 16, 24, 3, "fp32"): 3,
                     ("rnn_tanh_step", 24, 24, 3, "fp32"): 1}


def test_the_census_sees_gru_steps_cells_and_the_op():
    layer = torch.nn.GRU(320, 640, 2).to("meta").half()
    x = torch.empty((1, 4, 320), device="meta", dtype=torch.float16)
    calls, _ = _record(lambda: layer(x))
    assert calls == {("gru_step", 320, 640, 4, "fp16"): 1, ("gru_step", 640, 640, 4, "fp16"): 1}
    call = recorder.step_call(torch.float16, 4, 320, 640, "gru_step")
    assert call.label == "recurrent|op=gru_step|dt=fp16|I=320|H=640"
    assert call.flops == 2 * 4 * 3 * 640 * (320 + 640)
    x3, h, _c, w_ih, w_hh, b_ih, b_hh = numerics.make_operands(3, 16, 24, "fp32", op="gru_step")
    cell = torch.nn.GRUCell(16, 24)

    def run():
        cell(x3)
        oasr_recurrent.gru_step(x3, h, w_ih, w_hh, b_ih, b_hh)  # its torch path: a cell
        _rnn("gru")(torch.randn(1, 3, 16))
        _rnn("gru")(torch.randn(5, 3, 16))  # a sequence: a skip

    calls, rec = _record(run)
    assert calls == {("gru_step", 16, 24, 3, "fp32"): 3, ("gru_step", 24, 24, 3, "fp32"): 1}
    assert "a GRU over more than one time step" in " | ".join(rec.skipped)


def test_what_the_rnn_step_does_not_serve_is_a_counted_skip():
    seq, bi = _rnn(), _rnn(bidirectional=True)

    def run():
        seq(torch.randn(5, 2, 16))
        bi(torch.randn(1, 2, 16))
        seq(torch.nn.utils.rnn.pack_padded_sequence(torch.randn(3, 2, 16), [3, 1]))

    calls, rec = _record(run)
    assert calls == {}
    reasons = " | ".join(rec.skipped)
    for why in ("an RNN over more than one time step", "a bidirectional RNN",
                "an RNN over a packed sequence"):
        assert why in reasons, reasons


@pytest.mark.parametrize("nonlinearity", ["relu", "gru"])
def test_the_routed_step_of_an_rnn_or_gru_is_recorded_as_the_module_is(nonlinearity):
    rnn = _rnn(nonlinearity, batch_first=True)
    x = torch.randn(4, 1, 16)
    direct, _ = _record(lambda: rnn(x))
    stepped, _ = _record(lambda: layer_step(rnn, x))
    op = OP_OF[nonlinearity]
    assert direct == stepped == {(op, 16, 24, 4, "fp32"): 1, (op, 24, 24, 4, "fp32"): 1}

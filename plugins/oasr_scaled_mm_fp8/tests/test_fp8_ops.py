"""The fp8 ops off the GPU: the reference arithmetic, saturation and NaN, argument checks,
meta tensors, the custom ops under tracing, the quantizers and the recorder."""

from __future__ import annotations

import math

import pytest
import torch
from oasr_core.kit.weights import held

from oasr_scaled_mm_fp8 import config_space as cs
from oasr_scaled_mm_fp8 import numerics, ops, recorder, reference

E4M3 = torch.float8_e4m3fn


def operands(m=40, n=64, k=96, bias=True, seed=0):
    return numerics.make_operands(m, n, k, bias=bias, seed=seed)


def test_the_op_computes_the_scaled_product_of_the_fp8_values():
    a, a_scale, w, w_scale, bias = operands()
    y = ops.scaled_mm_fp8(a, w, a_scale, w_scale, bias)
    want = (a.double() * a_scale.double()[:, None]) @ (w.double() * w_scale.double()[:, None]).t()
    want = want + bias.double()
    assert y.dtype == torch.bfloat16 and y.shape == (40, 64)
    assert torch.allclose(y.double(), want, rtol=2 ** -7, atol=1e-3)
    assert ops.stats() == {"torch:cpu": 1}
    assert ops.scaled_mm_fp8(a, w, a_scale, w_scale, out_dtype=torch.float16).dtype == \
        torch.float16


def test_leading_dims_flatten_into_m_and_out_is_filled():
    a, a_scale, w, w_scale, bias = operands(m=12)
    out = torch.empty(3, 4, 64, dtype=torch.bfloat16)
    got = ops.scaled_mm_fp8(a.reshape(3, 4, 96), w, a_scale, w_scale, bias, out=out)
    assert got is out
    assert torch.equal(out.reshape(12, 64), ops.scaled_mm_fp8(a, w, a_scale, w_scale, bias))


def test_quant_divides_then_saturates_to_448_and_keeps_nan():
    a, a_scale, w, w_scale, bias = operands()
    v = reference.scaled_mm_value(a, w, a_scale, w_scale, bias)
    tiny = float(v.abs().amax()) / 2000.0   # most values land far beyond 448
    q = ops.scaled_mm_fp8_quant(a, w, a_scale, w_scale, tiny, bias)
    assert q.dtype == E4M3 and not q.float().isnan().any()
    assert float(q.float().abs().amax()) == 448.0
    expect = (v / torch.tensor(tiny)).clamp(-448, 448).to(E4M3)
    assert torch.equal(q.view(torch.uint8), expect.view(torch.uint8))
    nan_scale = torch.tensor([math.nan])
    assert q.float().sign().eq(v.sign()).logical_or(v.eq(0)).all()
    assert ops.scaled_mm_fp8_quant(a, w, a_scale, w_scale, nan_scale, bias).float().isnan().all()
    inf_bias = bias.clone()
    inf_bias[3] = math.inf
    col = ops.scaled_mm_fp8_quant(a, w, a_scale, w_scale, 1.0, inf_bias).float()[:, 3]
    assert torch.equal(col, torch.full_like(col, 448.0))   # +inf saturates, as cvt.satfinite


def test_the_gate_holds_the_stated_bound_and_rejects_nan_and_far_values():
    a, a_scale, w, w_scale, bias = operands()
    ref = reference.scaled_mm_value(a, w, a_scale, w_scale, bias)
    assert numerics.numerics_gate(ref.to(torch.bfloat16), ref)
    off = ref.clone()
    off[0, 0] += 0.05 * float(ref.abs().amax())
    verdict = numerics.numerics_gate(off.to(torch.bfloat16), ref)
    assert not verdict and "1 of 2560 elements outside the bound (first at (0, 0)" in \
        verdict.reason
    nan = ref.to(torch.bfloat16)
    nan[1, 2] = math.nan
    assert not numerics.numerics_gate(nan, ref)
    assert not numerics.numerics_gate(ref[:, :8].to(torch.bfloat16), ref)
    fp8_units = (ref / 0.01).clamp(-448, 448)
    assert numerics.numerics_gate(fp8_units.to(E4M3), fp8_units)


def test_meta_tensors_give_empty_outputs_of_the_right_shape():
    a, a_scale, w, w_scale = (t.to("meta") for t in operands()[:4])
    y = ops.scaled_mm_fp8(a, w, a_scale, w_scale)
    q = ops.scaled_mm_fp8_quant(a, w, a_scale, w_scale, 0.5)
    assert (y.device.type, y.shape, y.dtype) == ("meta", (40, 64), torch.bfloat16)
    assert (q.shape, q.dtype) == ((40, 64), E4M3)
    assert ops.stats() == {}


def test_custom_ops_trace_with_fake_kernels_and_compile():
    a, a_scale, w, w_scale, bias = operands()
    for op, args in ((torch.ops.oasr.scaled_mm_fp8.default,
                      (a, w, a_scale, w_scale, bias, torch.bfloat16)),
                     (torch.ops.oasr.scaled_mm_fp8_quant.default,
                      (a, w, a_scale, w_scale, None, 0.25, bias))):
        torch.library.opcheck(op, args, test_utils=("test_faketensor",))

    def layer(a, w, a_scale, w_scale, bias):
        return ops.scaled_mm_fp8(a, w, a_scale, w_scale, bias) * 2

    compiled = torch.compile(layer, backend="aot_eager", fullgraph=True)
    assert torch.equal(compiled(a, w, a_scale, w_scale, bias), layer(a, w, a_scale, w_scale,
                                                                     bias))


def test_quantize_rows_is_absmax_over_448_with_zero_and_nan_rows_stated():
    x = torch.tensor([[1.0, -2.0, 0.5, 448.0 / 3], [0.0, 0.0, 0.0, 0.0],
                      [1.0, math.nan, 2.0, 3.0]], dtype=torch.bfloat16)
    q, scale = numerics.quantize_rows(x)
    assert q.dtype == E4M3 and scale.dtype == torch.float32
    amax = float(x[0].float().abs().amax())
    assert float(scale[0]) == pytest.approx(amax / 448.0) and float(scale[1]) == 1.0
    assert float(q[0].float().abs().amax()) == 448.0
    assert not q[1].float().any()
    assert math.isnan(float(scale[2])) and q[2].float().isnan().all()


def test_the_recorder_sees_fp8_calls_only():
    a, a_scale, w, w_scale, bias = operands(m=6)
    call = recorder.record_scaled_mm_fp8(a.reshape(2, 3, 96), w)
    assert (call.family, call.op, call.dtype, call.dims, call.m) == (
        cs.FAMILY, cs.OP_MM, "float8_e4m3fn", (("N", 64), ("K", 96)), 6)
    assert recorder.record_scaled_mm_fp8_quant(a, w).op == cs.OP_QUANT
    assert recorder.record_scaled_mm_fp8(a.to(torch.bfloat16), w) is None
    assert {p.target for p in recorder.recorder_patches()} == {
        "oasr_scaled_mm_fp8.ops:scaled_mm_fp8", "oasr_scaled_mm_fp8.ops:scaled_mm_fp8_quant"}


def test_the_layers_fp8_weight_is_cached_until_the_weight_changes():
    from oasr_scaled_mm_fp8 import quantize

    layer = torch.nn.Linear(96, 64).to(torch.bfloat16)
    x = torch.randn(5, 96, dtype=torch.bfloat16)
    quantize.quantized_linear(x, layer)
    state = held(layer, quantize.CACHE_ATTR)
    assert state.weight.dtype == E4M3 and state.bias.dtype == torch.float32
    quantize.quantized_linear(x, layer)
    assert held(layer, quantize.CACHE_ATTR) is state
    with torch.no_grad():
        layer.weight.mul_(2)
    quantize.quantized_linear(x, layer)
    assert held(layer, quantize.CACHE_ATTR) is not state
    assert quantize.CACHE_ATTR not in layer.state_dict()

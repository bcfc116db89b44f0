"""The W8A8 quantized linear and the oasr_linear hook serving it."""

from __future__ import annotations

import torch
from oasr_core.kit.weights import held
from oasr_core.plugins import make_plugin_manager
from torch import nn

import oasr_scaled_mm.hooks
from oasr_scaled_mm import ops, quantize


def _layer(k=64, n=96, bias=True, seed=0):
    torch.manual_seed(seed)
    return nn.Linear(k, n, bias=bias)


def test_close_to_the_float_linear_on_the_cpu():
    layer = _layer()
    x = torch.randn(4, 9, 64)
    with torch.no_grad():
        y = quantize.quantized_linear(x, layer)
        ref = layer(x)
    assert y.shape == ref.shape and y.dtype == torch.float32
    assert float((y - ref).norm() / ref.norm()) < 0.02
    half = quantize.quantized_linear(x.half(), layer)
    assert half.dtype == torch.float16 and float((half.float() - ref).norm() / ref.norm()) < 0.02
    assert ops.stats() == {"torch:cpu": 2}


def test_the_int8_weight_is_computed_once_and_follows_changes():
    layer = _layer(bias=False)
    x = torch.randn(3, 64)
    quantize.quantized_linear(x, layer)
    state = held(layer, quantize.CACHE_ATTR)
    assert state.weight.dtype == torch.int8 and state.weight.shape == (96, 64)
    assert state.scale.dtype == torch.float32 and state.scale.shape == (96,)
    assert state.bias is None
    quantize.quantized_linear(x, layer)
    assert held(layer, quantize.CACHE_ATTR) is state
    with torch.no_grad():
        layer.weight.mul_(2)
    quantize.quantized_linear(x, layer)
    fresh = held(layer, quantize.CACHE_ATTR)
    assert fresh is not state and torch.equal(fresh.weight, state.weight)
    assert torch.allclose(fresh.scale, 2 * state.scale)
    assert quantize.CACHE_ATTR not in dict(layer.named_parameters())
    assert quantize.CACHE_ATTR not in layer.state_dict()


def test_per_row_quantization_is_symmetric_and_handles_zero_rows():
    x = torch.tensor([[0.0, 0.0, 0.0], [1.0, -2.0, 0.5], [127.0, -254.0, 3.0]])
    q, scale = quantize.quantize_rows(x)
    assert torch.equal(scale, torch.tensor([1.0, 2.0 / 127.0, 2.0]))
    assert q.tolist() == [[0, 0, 0], [64, -127, 32], [64, -127, 2]]


def test_meta_tensors_stay_on_meta():
    layer = _layer().to(device="meta", dtype=torch.bfloat16)
    x = torch.empty(2, 5, 64, device="meta", dtype=torch.bfloat16)
    y = quantize.quantized_linear(x, layer)
    assert y.shape == (2, 5, 96) and y.dtype == torch.bfloat16 and y.device.type == "meta"
    state = held(layer, quantize.CACHE_ATTR)
    assert state.weight.dtype == torch.int8 and state.weight.device.type == "meta"
    assert quantize.quantized_linear(x, layer).shape == y.shape
    assert held(layer, quantize.CACHE_ATTR) is state


def test_the_hook_answers_int8_w8a8_at_half_dtypes_only():
    from oasr_scaled_mm import linear

    hooks = oasr_scaled_mm.hooks
    assert hooks.oasr_linear(dtype="fp16", quantization="int8_w8a8") is linear.linear
    assert hooks.oasr_linear(dtype="bf16", quantization="int8_w8a8") is linear.linear
    assert hooks.oasr_linear(dtype="fp16", quantization="fp8_w8a8") is None
    assert hooks.oasr_linear(dtype="fp16", quantization="none") is None
    pm = make_plugin_manager(load_entrypoints=False, strict=True)
    pm.register(oasr_scaled_mm.hooks, name="scaled_mm")
    pm.check_pending()
    assert pm.hook.oasr_linear(dtype="bf16", quantization="int8_w8a8") is linear.linear
    family = hooks.oasr_register_families()[0]
    assert dict(family.quantizations) == {"int8_w8a8": ("fp16", "bf16")}


def test_the_served_linear_applies_the_activation_after_the_int8_gemm():
    from oasr_scaled_mm import linear

    torch.manual_seed(0)
    layer = nn.Linear(64, 32)
    x = torch.randn(4, 64)
    plain = quantize.quantized_linear(x, layer)
    assert torch.equal(linear.linear(x, layer), plain)
    assert torch.equal(linear.linear(x, layer, "gelu"), torch.nn.functional.gelu(plain))
    assert torch.allclose(linear.linear(x, layer, "relu"), torch.relu(layer(x)), atol=0.05)


def test_the_reference_divides_as_ieee_float32():
    """The scale and the quotients are IEEE float32 divisions (what the CUDA kernel does), not
    multiplications by a reciprocal; rounding is half to even."""
    import numpy as np

    g = torch.Generator().manual_seed(7)
    x = (torch.randn(64, 96, generator=g) * 5).to(torch.float16)
    q, scale = quantize.quantize_rows(x)
    x32 = x.float().numpy()
    want_scale = np.abs(x32).max(axis=-1).astype(np.float32) / np.float32(127.0)
    assert np.array_equal(scale.numpy(), want_scale)
    want_q = np.clip(np.rint(x32 / want_scale[:, None]), -127, 127).astype(np.int8)
    assert np.array_equal(q.numpy(), want_q)


def test_the_quantizer_module_is_small_and_outside_the_gemm_hash():
    from oasr_scaled_mm import codegen, quantize_kernel
    from oasr_scaled_mm.w8a8.row_quantizer import norm_symbol

    spec = quantize_kernel.spec("sm90")
    assert spec.arch == "90a" and not spec.cutlass and spec.include_dirs == ()
    assert "--fmad=false" in spec.extra_flags
    assert [u.exports for u in spec.units] == [(quantize_kernel.SYMBOL,),
                                               (norm_symbol(quantize_kernel.SYMBOL),)]
    norm_source = spec.units[1].source
    assert "norm_group_rows" in norm_source and "rsqrtf(var + eps)" in norm_source
    assert "__fdiv_rn(amax, 127.f)" in norm_source
    assert f"OASR_EXPORT int32_t {norm_symbol(quantize_kernel.SYMBOL)}(" in norm_source
    source = spec.units[0].source
    assert "norm_group_rows" not in source
    assert "Generated by oasr_scaled_mm.w8a8.row_quantizer" in source
    assert "__fdiv_rn(amax, 127.f)" in source and "rintf(__fdiv_rn(v, s))" in source
    assert "constexpr bool kPropagateNan = false;" in source
    assert f"OASR_EXPORT int32_t {quantize_kernel.SYMBOL}(" in source
    assert '#include "oasr_quantize/' not in source  # generated, nothing under csrc/
    assert not list((codegen.csrc_dir() / "oasr_scaled_mm").glob("rows*"))

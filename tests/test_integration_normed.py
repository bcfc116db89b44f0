"""The deferred layer norm (``oasr_scaled_mm.w8a8.normed``) off the GPU: each form computed once,
the torch fallback bit for bit the norm then the family's quantizer, the families' answers to
``oasr_layer("LayerNorm", ...)``, the fused unit's text, and the reference models run with the
deferred norm against the same models without it (real torch models on the CPU, real
plugins)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from oasr_scaled_mm.w8a8 import normed, row_quantizer

SCHEMES = (("oasr_scaled_mm", "int8_w8a8"), ("oasr_scaled_mm_fp8", "fp8_w8a8"))


def _quantize(family: str):
    import importlib

    return importlib.import_module(f"{family}.quantize")


def _norm(k: int) -> torch.nn.LayerNorm:
    norm = torch.nn.LayerNorm(k)
    with torch.no_grad():
        norm.weight.copy_(1.0 + 0.2 * torch.randn(k))
        norm.bias.copy_(0.2 * torch.randn(k))
    return norm.eval()


def test_each_form_is_computed_once_and_only_when_asked():
    x, norm = torch.randn(6, 64), _norm(64)
    seen = []

    def quantize(rows):
        seen.append(rows)
        return ("q", "s")

    rows = normed.NormedRows(x, norm, "scheme", quantize)
    assert rows.computed() == () and rows.shape == x.shape and rows.dtype == x.dtype
    assert rows.numel() == x.numel() and not rows.is_cuda and rows.device == x.device
    assert rows.quantized() == ("q", "s") and rows.quantized() == ("q", "s")
    assert seen == [rows] and rows.computed() == ("quantized",)
    h = rows.dense()
    assert rows.dense() is h and rows.computed() == ("dense", "quantized")
    assert torch.equal(h, F.layer_norm(x, (64,), norm.weight, norm.bias, norm.eps))
    assert normed.dense(rows) is h and normed.dense(x) is x
    assert "NormedRows(scheme" in repr(rows) and "dense, quantized" in repr(rows)


@pytest.mark.parametrize("family, scheme", SCHEMES)
def test_off_the_gpu_the_norm_then_the_quantizer_run_apart(family, scheme):
    quant = _quantize(family)
    x, norm = torch.randn(5, 3, 96), _norm(96)
    rows = quant.layer_norm(x, norm)
    assert isinstance(rows, normed.NormedRows) and rows.scheme == scheme
    q, s = normed.quantized_rows(rows, scheme, quant.quantize_rows)
    want_q, want_s = quant.quantize_rows(F.layer_norm(x, (96,), norm.weight, norm.bias,
                                                      norm.eps))
    assert torch.equal(q.view(torch.uint8), want_q.view(torch.uint8))
    assert torch.equal(s, want_s) and s.shape == (5, 3)
    # Another scheme's linear gets the dense rows, quantized its own way.
    other_q, _ = normed.quantized_rows(rows, "other", quant.quantize_rows)
    assert torch.equal(other_q.view(torch.uint8), want_q.view(torch.uint8))


def test_an_activation_after_the_norm_is_not_deferred():
    from oasr_scaled_mm_fp8 import quantize

    x, norm = torch.randn(4, 32), _norm(32)
    got = quantize.layer_norm(x, norm, "relu")
    assert torch.equal(got, F.relu(norm(x)))


def test_only_a_cuda_norm_over_the_last_dimension_in_the_rows_dtype_is_fusable():
    x = torch.randn(4, 32)
    assert not normed.fusable(x, _norm(32))   # a CPU tensor
    if torch.cuda.is_available():
        xc = x.cuda().half()
        assert normed.fusable(xc, _norm(32).cuda().half())
        assert not normed.fusable(xc, _norm(32).cuda())              # fp32 weight
        assert not normed.fusable(xc.t(), _norm(4).cuda().half())    # not contiguous


@pytest.mark.parametrize("family, scheme", SCHEMES)
def test_the_families_answer_layer_norm_for_their_scheme_only(family, scheme):
    import importlib

    linear = importlib.import_module(f"{family}.linear")
    assert linear.layer_for("LayerNorm", "bf16", scheme) is _quantize(family).layer_norm
    assert linear.layer_for("LayerNorm", "bf16", "none") is None
    assert linear.layer_for("Conv1d", "bf16", scheme) is None
    assert linear.layer_for("LayerNorm", "fp32", scheme) is None


def test_the_census_asks_for_layer_norm_under_a_scheme_and_not_without():
    from oasr_core.census.workloads import LAYER_KINDS, served_layers
    from oasr_core.runtime import get_runtime

    pm = get_runtime().pm
    assert "LayerNorm" in LAYER_KINDS
    for family, scheme in SCHEMES:
        got = served_layers(pm, dtype="fp16" if scheme == "int8_w8a8" else "bf16",
                            quantization=scheme)
        assert got["LayerNorm"] is _quantize(family).layer_norm
    assert "LayerNorm" not in served_layers(pm, dtype="fp16")


@pytest.mark.parametrize("family, scheme", SCHEMES)
@pytest.mark.parametrize("model", ["ConformerEncoder", "WhisperEncoder"])
def test_the_reference_models_give_the_same_bits_with_the_deferred_norm(family, scheme,
                                                                        model, monkeypatch):
    """On the CPU the deferred norm computes what the model computed without it, with one
    quantization per norm where there was one per linear (Q, K and V share theirs)."""
    from oasr_core.census import models
    from oasr_core.census.workloads import served_layers, served_linear
    from oasr_core.runtime import get_runtime

    pm = get_runtime().pm
    dtype = "fp16" if scheme == "int8_w8a8" else "bf16"
    linear = served_linear(pm, dtype=dtype, quantization=scheme)
    layers = served_layers(pm, dtype=dtype, quantization=scheme)
    quant = _quantize(family)
    calls = []
    real = quant.quantize_rows
    monkeypatch.setattr(quant, "quantize_rows", lambda x: calls.append(x.shape) or real(x))
    small = ({"d_model": 64, "heads": 2, "ffn_dim": 128, "layers": 2, "kernel_size": 7}
             if model == "ConformerEncoder" else
             {"d_model": 64, "heads": 2, "layers": 2, "ffn_dim": 128, "window": 128})
    cls = getattr(models, model)
    torch.manual_seed(0)
    deferred = cls(linear=linear, served=layers, **small).eval()
    plain = cls(linear=linear, served={k: v for k, v in layers.items() if k != "LayerNorm"},
                **small).eval()
    plain.load_state_dict(deferred.state_dict())
    feats = (torch.randn(2, 64, 80) if model == "ConformerEncoder" else torch.randn(2, 80, 128))
    outs = []
    counts = []
    for m in (deferred, plain):
        calls.clear()
        with torch.inference_mode():
            outs.append(m(feats))
        counts.append(len(calls))
    assert torch.equal(outs[0], outs[1])
    # Q, K and V take one quantization of their norm's rows instead of three: two fewer
    # quantizations a layer (the other norms feed one linear each).
    assert counts[0] > 0 and counts[1] - counts[0] == 2 * small["layers"], counts


def test_the_fused_unit_refuses_what_it_does_not_hold_in_registers():
    from oasr_scaled_mm_fp8 import quantize_kernel

    spec = quantize_kernel.spec("sm90")
    unit = {u.name: u for u in spec.units}["norm_quantize_rows"]
    assert unit.exports == (row_quantizer.norm_symbol(quantize_kernel.SYMBOL),)
    src = unit.source
    assert f"vectors > {row_quantizer.BLOCK_MAX_VECTORS}" in src and "kErrShape" in src
    assert "namespace oasr_fp8_quantize_norm" in src
    assert "const void* gamma, const void* beta, float eps" in src
    assert "__nv_cvt_float2_to_fp8x2" in src      # the family's own numerics


def test_a_workload_can_leave_the_norm_to_torch():
    from oasr_core.census.workloads import ReferenceFactory
    from oasr_core.errors import ConfigurationError
    from oasr_core.runtime import get_runtime

    factory = ReferenceFactory("ConformerEncoder", get_runtime().pm)
    small = {"d_model": 64, "heads": 2, "ffn_dim": 128, "layers": 1, "kernel_size": 7}
    fused = factory(quantization="fp8_w8a8", dtype="bf16", **small)
    apart = factory(quantization="fp8_w8a8", dtype="bf16", torch_layers=["LayerNorm"], **small)
    assert "LayerNorm" in fused.layers[0].ff1.ops.layers
    assert "LayerNorm" not in apart.layers[0].ff1.ops.layers
    for bad in ("LayerNorm", ["BatchNorm1d"]):
        with pytest.raises(ConfigurationError, match="torch_layers"):
            factory(quantization="fp8_w8a8", dtype="bf16", torch_layers=bad, **small)

"""The fused layer norm + row quantizer of both W8A8 families on a GPU, against torch's
``F.layer_norm`` then the family's quantizer (:func:`quantize_rows`).

The contract (``oasr_scaled_mm.w8a8.row_quantizer``'s norm unit): every row the quantizer holds in
registers (K a multiple of 8 up to 16384, aligned) is quantized in one pass; anything else is
refused and :func:`oasr_scaled_mm.w8a8.normed.quantize_after_norm` runs the two apart. The kernel's
mean and variance are summed in another order than torch's, so a normalized value may differ
by an ulp of its dtype: scales agree to a few ulps of the norm's dtype, and a quantized value
differs from torch's by at most one step (int8: 1; e4m3: the next code) at under 1 % of the
elements. Also: a NaN row stays NaN in fp8, graph capture, the handle's sharing and fallback,
and the reference Conformer run with the deferred norm against the one without.
Run with ``pytest -m gpu`` on a CUDA machine with fp8 (sm89+)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from oasr_scaled_mm.w8a8 import row_quantizer

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
FAMILIES = ("oasr_scaled_mm", "oasr_scaled_mm_fp8")
FUSED_KS = [k for k in row_quantizer.PATH_KS if k % 8 == 0 and k <= 16384]
REFUSED_KS = [k for k in row_quantizer.PATH_KS if k not in FUSED_KS]


def _quantize(family: str):
    import importlib

    return importlib.import_module(f"{family}.quantize")


def _norm(k: int, dtype, *, affine: bool = True, seed: int = 0) -> torch.nn.LayerNorm:
    norm = torch.nn.LayerNorm(k, elementwise_affine=affine, device="cuda", dtype=dtype)
    if affine:
        g = torch.Generator(device="cuda").manual_seed(seed + 1)
        with torch.no_grad():
            norm.weight.copy_(1.0 + 0.2 * torch.randn(k, device="cuda", generator=g))
            norm.bias.copy_(0.2 * torch.randn(k, device="cuda", generator=g))
    return norm.eval()


def _rows(shape, dtype, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return (torch.randn(shape, device="cuda", generator=g) * 3.0 + 0.5).to(dtype)


def _ordinal(q: torch.Tensor) -> torch.Tensor:
    """Quantized values as integers one step apart (e4m3 codes are sign and magnitude)."""
    if q.dtype == torch.int8:
        return q.to(torch.int32)
    bits = q.view(torch.uint8).to(torch.int32)
    return torch.where(bits >= 0x80, -(bits & 0x7F), bits & 0x7F)


def _assert_close(family, x, norm, got, what):
    assert got is not None, f"{what}: the fused kernel refused or did not load"
    q, s = got
    want_q, want_s = _quantize(family).quantize_rows(
        F.layer_norm(x, (x.shape[-1],), norm.weight, norm.bias, norm.eps))
    assert q.dtype == want_q.dtype and q.shape == x.shape and s.shape == x.shape[:-1], what
    ulp = 2.0 ** -7 if x.dtype == torch.bfloat16 else 2.0 ** -10
    rel = ((s - want_s).abs() / want_s.abs()).max().item()
    assert rel <= 4 * ulp, f"{what}: scales differ by {rel:.3g} relative"
    step = (_ordinal(q) - _ordinal(want_q)).abs()
    assert step.max().item() <= 1, f"{what}: a value is {step.max().item()} steps off"
    assert step.float().mean().item() < 0.01, f"{what}: {step.float().mean().item():.2%} differ"


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("k", FUSED_KS)
def test_every_fused_path_matches_the_norm_then_the_quantizer(family, dtype, k):
    for m, affine in ((1, True), (37, True), (300, False)):
        x, norm = _rows((m, k), dtype, seed=k + m), _norm(k, dtype, affine=affine, seed=k)
        got = _quantize(family).norm_quantize_rows(x, norm)
        _assert_close(family, x, norm, got, f"{family} M={m} K={k} {dtype} affine={affine} "
                                            f"({row_quantizer.kernel_of(k)})")


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("m, k", [s for s in row_quantizer.STRIDE_SHAPES if s[1] in FUSED_KS])
def test_grids_stride_over_more_rows_than_they_hold(family, m, k):
    x, norm = _rows((m, k), torch.bfloat16, seed=m), _norm(k, torch.bfloat16)
    _assert_close(family, x, norm, _quantize(family).norm_quantize_rows(x, norm),
                  f"{family} M={m} K={k}")


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("k", REFUSED_KS)
def test_rows_outside_the_registers_are_refused_and_run_apart(family, k):
    x, norm = _rows((9, k), torch.bfloat16), _norm(k, torch.bfloat16)
    quant = _quantize(family)
    assert quant.norm_quantize_rows(x, norm) is None
    handle = quant.layer_norm(x, norm)
    q, s = handle.quantized()
    want_q, want_s = quant.quantize_rows(handle.dense())
    assert torch.equal(q, want_q) and torch.equal(s, want_s)


@pytest.mark.parametrize("family", FAMILIES)
def test_a_misaligned_input_is_refused(family):
    k = 1024
    base = _rows((17 * k + 1,), torch.bfloat16)
    x = base[1:].view(17, k)                       # 2-byte aligned, not 16
    norm = _norm(k, torch.bfloat16)
    assert _quantize(family).norm_quantize_rows(x, norm) is None
    q, _ = _quantize(family).layer_norm(x, norm).quantized()
    assert q.shape == x.shape


def test_a_nan_row_stays_nan_in_fp8():
    from oasr_scaled_mm_fp8 import quantize

    k = 512
    x, norm = _rows((4, k), torch.bfloat16), _norm(k, torch.bfloat16)
    x[2, 7] = math.nan
    q, s = quantize.norm_quantize_rows(x, norm)
    assert s[2].isnan() and not s[[0, 1, 3]].isnan().any()
    assert ((q[2].view(torch.uint8) & 0x7F) == 0x7F).all()


@pytest.mark.parametrize("family", FAMILIES)
def test_the_fused_kernel_replays_in_a_cuda_graph(family):
    k, quant = 2048, _quantize(family)
    x, norm = _rows((4096, k), torch.bfloat16), _norm(k, torch.bfloat16)
    want = quant.norm_quantize_rows(x, norm)
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        quant.norm_quantize_rows(x, norm)
        with torch.cuda.graph(graph, stream=stream):
            got = quant.norm_quantize_rows(x, norm)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


@pytest.mark.parametrize("family", FAMILIES)
def test_the_linears_after_one_norm_share_one_fused_pass(family, monkeypatch):
    import importlib

    quant = _quantize(family)
    kernel = importlib.import_module(f"{family}.quantize_kernel")
    calls = []
    real = kernel.norm_quantize_rows_cuda
    monkeypatch.setattr(kernel, "norm_quantize_rows_cuda",
                        lambda *a: calls.append(a) or real(*a))
    k, dtype = 1024, torch.bfloat16
    x, norm = _rows((8192, k), dtype), _norm(k, dtype)
    layers = [torch.nn.Linear(k, k, device="cuda", dtype=dtype) for _ in range(3)]
    handle = quant.layer_norm(x, norm)
    outs = [quant.quantized_linear(handle, layer) for layer in layers]
    h = F.layer_norm(x, (k,), norm.weight, norm.bias, norm.eps)
    for layer, out in zip(layers, outs, strict=True):
        want = F.linear(h, layer.weight, layer.bias).float()
        err = (out.float() - want).abs().max() / want.abs().max()
        assert err < 0.1, f"{family}: {err:.3g} off the bf16 layer"
    assert len(calls) == ("quantized" in handle.computed())


@pytest.mark.parametrize("family, scheme", [("oasr_scaled_mm", "int8_w8a8"),
                                            ("oasr_scaled_mm_fp8", "fp8_w8a8")])
def test_the_conformer_with_the_deferred_norm_matches_the_one_without(family, scheme):
    from oasr_core.census.models import ConformerEncoder
    from oasr_core.census.workloads import served_layers, served_linear
    from oasr_core.runtime import get_runtime

    pm = get_runtime().pm
    dtype = "bf16" if scheme == "fp8_w8a8" else "fp16"
    torch_dtype = torch.bfloat16 if dtype == "bf16" else torch.float16
    linear = served_linear(pm, dtype=dtype, quantization=scheme)
    layers = served_layers(pm, dtype=dtype, quantization=scheme)
    assert "LayerNorm" in layers
    kwargs = dict(input_dim=80, d_model=256, heads=4, ffn_dim=1024, layers=2, kernel_size=31)
    torch.manual_seed(0)
    with_norm = ConformerEncoder(linear=linear, served=layers, **kwargs)
    without = ConformerEncoder(linear=linear, served={k: v for k, v in layers.items()
                                                      if k != "LayerNorm"}, **kwargs)
    without.load_state_dict(with_norm.state_dict())
    reference = ConformerEncoder(**kwargs)
    reference.load_state_dict(with_norm.state_dict())
    feats = torch.randn(2, 256, 80, device="cuda", dtype=torch_dtype)
    outs = []
    for model in (with_norm, without, reference):
        model.to("cuda", torch_dtype).eval()
        with torch.inference_mode():
            outs.append(model(feats).float())
    scale = outs[2].abs().max()
    assert ((outs[0] - outs[1]).abs().max() / scale) < 0.05
    assert ((outs[0] - outs[2]).abs().max() / scale) < 0.15

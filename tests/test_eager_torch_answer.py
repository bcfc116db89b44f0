"""Where the answer is torch, an eager layer call is torch's own call: for each routed layer
type (Linear; the W8A8 families' quantized Linear where their route says unquantized; the
deferred LayerNorm feeding those linears), from its second call in an epoch the layer
dispatches exactly the aten ops torch's module or function does (no view, copy or
allocation of its own), and no oasr op, quantizer or quantized GEMM runs. (Conv1d:
``plugins/oasr_conv1d/tests/test_conv1d_layer_plans.py``.)

Real modules and tensors on the CPU; a CUDA call is stood for by tensors reporting CUDA
device 0 (``oasr_core.testing``'s ``cuda_like``), the tiers' torch answer by the plan they
memoise (the gemm op's torch plan, the W8A8 route's unquantized verdict)."""

from __future__ import annotations

import importlib

import pytest
import torch
import torch.nn.functional as F
from oasr_gemm import linear as gemm_linear
from oasr_gemm import ops as gemm_ops
from oasr_scaled_mm.w8a8.normed import DENSE
from oasr_scaled_mm.w8a8.scaled_ops import ROUTE
from torch import nn

from oasr_core.census.workloads import served_linear
from oasr_core.layers import NormedRows
from oasr_core.routing import route
from oasr_core.runtime import get_runtime
from oasr_core.testing import aten_calls

M, K, N = 6, 32, 48
SCHEMES = (("oasr_scaled_mm", "int8_w8a8"), ("oasr_scaled_mm_fp8", "fp8_w8a8"))


def _linear(k=K, n=N):
    gen = torch.Generator().manual_seed(0)
    layer = nn.Linear(k, n)
    with torch.no_grad():
        layer.weight.copy_(torch.randn(layer.weight.shape, generator=gen))
        layer.bias.copy_(torch.randn(layer.bias.shape, generator=gen))
    return layer.half().requires_grad_(False).eval()


def _x(k=K):
    return torch.randn(M, k, generator=torch.Generator().manual_seed(1)).half()


def _gemm_torch_plan(x, n=N, k=K, op="gemm", activation=None):
    gemm_ops._PLANS.store((op, activation, x.dtype, n, k, x.numel() // k, 0), gemm_ops.TORCH,
                          gemm_ops.SERVING.bind())


def _unquantized_route(family, n=N, k=K, m=M):
    """The family's route says unquantized at this shape, with or without a deferred norm
    (keyed by ``x.device.index``: None for the CPU tensors standing for CUDA ones)."""
    serving = importlib.import_module(f"{family}.ops").SERVING
    for normed in (False, True):
        serving.plans.store((ROUTE, n, k, m, None, normed), True, serving.bind())


@pytest.fixture
def no_oasr_kernel(monkeypatch):
    """Count the gemm op's runs from its linear, and every quantizer and quantized GEMM call
    of the W8A8 families; the test reads the counts."""
    runs = []
    real = gemm_linear._load_ops()._run

    def gemm_run(*args):
        runs.append(args[0])
        return real(*args)

    monkeypatch.setattr(gemm_linear, "_run", gemm_run)
    for family, _scheme in SCHEMES:
        ops = importlib.import_module(f"{family}.ops")
        quantize = importlib.import_module(f"{family}.quantize")
        for module, name in ((ops, "scaled_mm"), (ops, "scaled_mm_fp8"),
                             (quantize, "quantize_rows")):
            if hasattr(module, name):
                monkeypatch.setattr(module, name,
                                    lambda *a, _n=name, **kw: runs.append(_n) or 1 / 0)
    return runs


def test_a_routed_linear_the_tiers_gave_to_torch_is_the_modules_own_call(cuda_like,
                                                                         no_oasr_kernel,
                                                                         monkeypatch):
    # A width some tier may serve a kernel at, at another M: the per-M plan serves it
    # (a width torch serves at every M keeps its module's own forward:
    # tests/test_route_torch_only.py).
    monkeypatch.setattr(gemm_linear.linear, "torch_only", lambda layer, dtype: False)
    with torch.no_grad():
        layer, own, x = _linear(), _linear(), _x()
        route(layer, dtype="fp16", conv1d=False)
        assert layer.forward.func is gemm_linear.forward  # no extra frame per routed call
        _gemm_torch_plan(x)
        layer(x)
        torch_calls = aten_calls(lambda: own(x))
        for _ in range(3):
            assert aten_calls(lambda: layer(x)) == torch_calls
        assert torch.equal(layer(x), own(x))
    assert no_oasr_kernel == ["gemm"]  # the first call's op


@pytest.mark.parametrize("family, scheme", SCHEMES)
def test_a_quantized_linear_the_route_runs_unquantized_is_the_modules_own_call(
        cuda_like, no_oasr_kernel, family, scheme):
    with torch.no_grad():
        routed, answer, own, x = _linear(), _linear(), _linear(), _x()
        route(routed, dtype="fp16", quantization=scheme, conv1d=False)
        linear = served_linear(get_runtime().pm, dtype="fp16", quantization=scheme)
        _unquantized_route(family)
        _gemm_torch_plan(x)
        _gemm_torch_plan(x, op="gemm_activation", activation="gelu")
        routed(x)
        linear(x, answer, "gelu")
        torch_calls = aten_calls(lambda: own(x))
        torch_gelu = aten_calls(lambda: F.gelu(own(x)))
        for _ in range(3):
            assert aten_calls(lambda: routed(x)) == torch_calls
            assert aten_calls(lambda: linear(x, answer, "gelu")) == torch_gelu
        assert torch.equal(routed(x), own(x))
        assert torch.equal(linear(x, answer, "gelu"), F.gelu(own(x)))
    assert no_oasr_kernel == ["gemm", "gemm_activation"]  # each layer's first call's op
    # Both layers' plans are the unquantized linear itself: no route key or weight checks.
    layers = importlib.import_module(f"{family}.ops").SERVING.layers.table
    assert set(layers.values()) == {gemm_linear.linear}


@pytest.mark.parametrize("family, scheme", SCHEMES)
def test_a_layer_norm_whose_linears_run_unquantized_is_torchs_norm(
        cuda_like, no_oasr_kernel, family, scheme):
    quantize = importlib.import_module(f"{family}.quantize")
    linear = served_linear(get_runtime().pm, dtype="fp16", quantization=scheme)
    with torch.no_grad():
        norm = nn.LayerNorm(K).half().eval()
        q, v, x = _linear(), _linear(), _x()
        _unquantized_route(family)
        _gemm_torch_plan(x)

        def block():
            h = quantize.layer_norm(x, norm)
            return linear(h, q), linear(h, v)

        def torch_block():
            h = F.layer_norm(x, (K,), norm.weight, norm.bias, norm.eps)
            return F.linear(h, q.weight, q.bias), F.linear(h, v.weight, v.bias)

        assert isinstance(quantize.layer_norm(x, norm), NormedRows)  # first: a handle
        block()  # the linears take its dense rows: the norm's next call reads that
        block()  # the norm is torch's from here; its tensor is new to the linears' plans
        torch_calls = aten_calls(torch_block)
        for _ in range(3):
            assert aten_calls(block) == torch_calls
        for got, want in zip(block(), torch_block(), strict=True):
            assert torch.equal(got, want)
        assert DENSE in set(_norm_plans(scheme))
    assert no_oasr_kernel == ["gemm"] * 2  # each linear's first call, on the dense rows


def _norm_plans(scheme):
    return get_runtime().state.table(f"{scheme}:norms").values()


@pytest.mark.parametrize("family, scheme", SCHEMES)
def test_a_layer_norm_whose_linear_quantizes_keeps_its_handle(family, scheme):
    quantize = importlib.import_module(f"{family}.quantize")
    with torch.no_grad():
        norm, x = nn.LayerNorm(K).half().eval(), _x()
        for _ in range(3):
            h = quantize.layer_norm(x, norm)
            assert isinstance(h, NormedRows)
            h.quantized()
    assert set(_norm_plans(scheme)) == {"rows"}

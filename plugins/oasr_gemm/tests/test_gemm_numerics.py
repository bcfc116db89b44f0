"""The numerics gate on fake outputs: torch-like rounding passes, real errors do not."""

from __future__ import annotations

import pytest
import torch

from oasr_gemm import numerics


@pytest.fixture(params=["fp16", "bf16"])
def case(request):
    a, w, b = numerics.make_operands(64, 128, 256, request.param, seed=3)
    ref = numerics.reference(a, w, b)
    baseline = numerics.torch_output(a, w, b)
    return request.param, ref, baseline


def test_torch_itself_and_the_exact_reference_pass(case):
    dtype, ref, baseline = case
    assert numerics.numerics_gate(baseline, baseline, ref)
    assert numerics.numerics_gate(ref.to(baseline.dtype), baseline, ref)


def test_a_slightly_worse_kernel_passes_and_a_wrong_one_fails(case):
    dtype, ref, baseline = case
    torch_err = numerics.relative_error(baseline, ref)
    gen = torch.Generator().manual_seed(0)
    noise = torch.randn(ref.shape, generator=gen)
    noise *= ref.norm() / noise.norm()
    ok = (ref + 2 * torch_err * noise).to(baseline.dtype)
    result = numerics.numerics_gate(ok, baseline, ref)
    assert result.passed, result
    bad = (ref + 20 * torch_err * noise).to(baseline.dtype)
    result = numerics.numerics_gate(bad, baseline, ref)
    assert not result and "x torch's" in result.reason
    assert result.error > result.bound >= 4 * result.torch_error


def test_dropped_columns_fail(case):
    _, ref, baseline = case
    broken = baseline.clone()
    broken[:, 64:] = 0
    assert not numerics.numerics_gate(broken, baseline, ref)


@pytest.mark.parametrize("poison", [float("nan"), float("inf")])
def test_nan_or_inf_fail(case, poison):
    _, ref, baseline = case
    broken = baseline.clone()
    broken[3, 5] = poison
    result = numerics.numerics_gate(broken, baseline, ref)
    assert not result and "NaN" in result.reason


def test_shape_mismatch_fails(case):
    _, ref, baseline = case
    result = numerics.numerics_gate(baseline[:, :-8], baseline, ref)
    assert not result and "shape" in result.reason


def test_floor_when_torch_is_exact():
    ref = torch.ones(8, 8)
    exact = ref.half()
    result = numerics.numerics_gate(exact * (1 + 2 ** -12), exact, ref, dtype="fp16")
    assert result.torch_error == 0 and result.bound == 2 ** -11 and result.passed


@pytest.mark.parametrize("activation", ["relu", "gelu", "silu"])
def test_reference_applies_torch_activations(activation):
    a, w, b = numerics.make_operands(16, 32, 64, seed=1)
    got = numerics.reference(a, w, b, activation)
    lin = torch.nn.functional.linear(a.float(), w.float(), b.float())
    want = {"relu": torch.relu, "gelu": torch.nn.functional.gelu,
            "silu": torch.nn.functional.silu}[activation](lin)
    assert torch.equal(got, want)
    with pytest.raises(ValueError):
        numerics.apply_activation(lin, "tanh")


def test_operands_are_random_and_scaled():
    a, w, b = numerics.make_operands(32, 48, 64, "bf16", seed=7)
    assert a.dtype == w.dtype == b.dtype == torch.bfloat16
    assert a.shape == (32, 64) and w.shape == (48, 64) and b.shape == (48,)
    assert a.float().std() > 0.5 and 0.05 < w.float().std() < 0.25
    again, _, _ = numerics.make_operands(32, 48, 64, "bf16", seed=7)
    assert torch.equal(a, again)

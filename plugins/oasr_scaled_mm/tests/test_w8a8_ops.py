"""Bad arguments to each W8A8 format's ops (int8 ``scaled_mm``, fp8 e4m3 ``scaled_mm_fp8``; the
fp8 rows skipped where its package is not installed): each raises one clear error naming what
is wrong -- the operand dtype, mismatched K, a scale or bias of the wrong length or dtype, an
output dtype or ``out`` the op does not write, an ``out_scale`` that is not a float or one
float32 value, a tensor on another device."""

from __future__ import annotations

import importlib

import pytest
import torch

PACKAGES = {"int8": "oasr_scaled_mm", "fp8": "oasr_scaled_mm_fp8"}
M, N, K = 6, 32, 48


class Ops:
    """A format's ops and a valid call (``M x K`` by ``N x K``) to break one argument of."""

    def __init__(self, name: str):
        package = PACKAGES[name]
        self.ops = importlib.import_module(f"{package}.ops")
        ops = importlib.import_module(f"{package}.config_space").OPS
        self.mm, self.quant = (getattr(self.ops, op) for op in ops)
        numerics = importlib.import_module(f"{package}.numerics")
        self.a, self.a_scale, self.w, self.w_scale, self.bias = numerics.make_operands(M, N, K)
        self.dtype_name = self.ops.DTYPE

    def call(self, **change):
        kwargs = {"a": self.a, "w": self.w, "a_scale": self.a_scale, "w_scale": self.w_scale,
                  "bias": self.bias, **change}
        return self.mm(**kwargs)


@pytest.fixture(params=sorted(PACKAGES))
def fmt(request):
    if request.param == "fp8":
        pytest.importorskip("oasr_scaled_mm_fp8")
    return Ops(request.param)


BAD = {
    "a": lambda f: f.a.float(),
    "w": lambda f: f.w[:, :32].contiguous(),
    "a_scale": lambda f: f.a_scale[:5],
    "w_scale": lambda f: f.w_scale.half(),
    "bias": lambda f: torch.zeros(N + 1),
    "int bias": lambda f: f.bias.int(),
    "out_dtype": lambda f: torch.float32,
    "out": lambda f: torch.empty(M, N, dtype=torch.float32),
}
"""Each argument broken: the call's keyword (before a space) and how."""


@pytest.mark.parametrize(("what", "error", "match"), [
    ("a", TypeError, None),
    ("w", ValueError, "do not match"),
    ("a_scale", ValueError, f"a_scale must hold {M}"),
    ("w_scale", TypeError, "w_scale must be a float32"),
    ("bias", ValueError, rf"bias must be \[{N}\]"),
    ("int bias", TypeError, "bias must be"),
    ("out_dtype", ValueError, "out_dtype"),
    ("out", ValueError, "out must be"),
])
def test_bad_arguments_name_what_is_wrong(fmt, what, error, match):
    with pytest.raises(error, match=match or fmt.dtype_name):
        fmt.call(**{what.split()[-1]: BAD[what](fmt)})


def test_bad_out_scale_and_mixed_devices(fmt):
    with pytest.raises(TypeError, match="out_scale must be a float"):
        fmt.quant(fmt.a, fmt.w, fmt.a_scale, fmt.w_scale, "1.0")
    with pytest.raises(TypeError, match="one float32"):
        fmt.quant(fmt.a, fmt.w, fmt.a_scale, fmt.w_scale, torch.ones(2))
    with pytest.raises(ValueError, match="w_scale is on meta"):
        fmt.call(w_scale=fmt.w_scale.to("meta"))

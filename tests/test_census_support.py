"""Shared pieces of the census tests (no tests here): families with recorder patches.

``gemm_patches()`` are an in-test gemm family's patches: ``torch.nn.functional.linear`` on
floating-point operands as op ``gemm``, dims ``(N, K)``, ``M = numel(input) / K`` (what the
census needs of a family; the real gemm recorder's rules are tested with the plugin in
``test_integration_census_gemm.py``). ``Conv1dFamily`` is an in-test family whose patch records
``torch.nn.functional.conv1d`` at exact points ``"BxT"`` with ``M = B * T_out``.
"""

from __future__ import annotations

from oasr_core import hookimpl
from oasr_core.census.recorder import Call, RecorderPatch, dtype_name
from oasr_core.types import Family

SMALL_CONFORMER = {"layers": 2, "family_ops": False}
"""The reference Conformer's widths with two layers: the mechanism, at a fraction of the cost."""


def record_linear(input, weight, bias=None):
    """An ``F.linear`` call as family ``gemm``; None for non-float operands (a quantized
    family's) or a weight that is not 2-D."""
    dtype = dtype_name(input.dtype)
    if dtype not in ("fp16", "bf16", "fp32") or weight.dim() != 2:
        return None
    n, k = int(weight.shape[0]), int(weight.shape[1])
    m = input.numel() // k
    return Call(family="gemm", op="gemm", dtype=dtype, dims=(("N", n), ("K", k)), m=m,
                elements=m * k + n * k + m * n, flops=2 * m * n * k, weight_elements=n * k)


def gemm_patches() -> list[RecorderPatch]:
    """The in-test gemm family's recorder patch: ``F.linear``."""
    return [RecorderPatch(family="gemm", target="torch.nn.functional:linear",
                          record=record_linear)]


def record_conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """A conv1d call as family ``conv1d``: dims Cin, Cout, kernel, stride, groups."""
    stride = stride[0] if isinstance(stride, (tuple, list)) else stride
    padding = padding[0] if isinstance(padding, (tuple, list)) else padding
    dilation = dilation[0] if isinstance(dilation, (tuple, list)) else dilation
    b, cin, t = input.shape
    cout, _, k = weight.shape
    t_out = (t + 2 * padding - dilation * (k - 1) - 1) // stride + 1
    return Call(family="conv1d", op="conv1d", dtype=dtype_name(input.dtype),
                dims={"Cin": cin, "Cout": cout, "kernel": k, "stride": stride,
                      "groups": groups},
                m=b * t_out, point=f"{b}x{t}", elements=b * cin * t + weight.numel(),
                flops=2 * b * t_out * cout * cin // groups * k,
                weight_elements=weight.numel())


def conv1d_patches() -> list[RecorderPatch]:
    return [RecorderPatch(family="conv1d", target="torch.nn.functional:conv1d",
                          record=record_conv1d)]


class GemmFamily:
    """A gemm family record with the in-test recorder patch."""

    @hookimpl
    def oasr_register_families(self):
        return [Family(name="gemm", ops=("gemm", "gemm_activation"), dims=("N", "K"),
                       dtypes=("fp16", "bf16"), recorder_patches=gemm_patches)]


class Conv1dFamily:
    """An exact-point conv1d family whose patch records F.conv1d."""

    @hookimpl
    def oasr_register_families(self):
        return [Family(name="conv1d", ops=("conv1d",),
                       dims=("Cin", "Cout", "kernel", "stride", "groups"),
                       dtypes=("fp16", "bf16"), exact_points=True,
                       recorder_patches=conv1d_patches)]

"""The conv1d family's pattern for ``torch.compile(backend="oasr")`` (``oasr_compile_patterns``).

A 1-D convolution site (torch's channels-first ``aten.convolution``; the pass hands the op
the channels-last input and gives its consumers the transposed view of the output) becomes
``oasr::conv1d`` or, with its activation fused, ``oasr::conv1d_activation``, where the tiers
choose a conv1d config at that op, shape and exact point (what the op itself would run, the
family's untuned gate included); a grouped conv that is neither dense nor depthwise, or one
the tiers leave to torch, stays Inductor's.
"""

from __future__ import annotations

from typing import Any

from oasr_conv1d.layer import DTYPES


def serve_conv(site: Any) -> Any:
    """The conv1d op for a convolution ``site``, or None."""
    from oasr_core.compile import Served, Slot

    if site.dtype not in DTYPES:
        return None
    import torch

    from oasr_conv1d import weights
    from oasr_conv1d.ops import op_name
    from oasr_conv1d.recorder import DIMS

    cin, cout, k, stride, pad, dil, groups = (site.dim(d) for d in DIMS)
    if weights.kind_of(cin, cout, groups) is None:
        return None
    op = op_name(site.activation)
    if not site.serves("conv1d", op, (cin, cout, k, stride, pad, dil, groups)):
        return None
    if site.activation is None:
        return Served(torch.ops.oasr.conv1d.default,
                      (Slot.X, Slot.WEIGHT, Slot.BIAS, stride, pad, dil, groups),
                      family="conv1d", op=op, channels_last=True)
    return Served(torch.ops.oasr.conv1d_activation.default,
                  (Slot.X, Slot.WEIGHT, Slot.BIAS, Slot.ACTIVATION, stride, pad, dil, groups),
                  family="conv1d", op=op, channels_last=True)


def patterns_for(quantization: str) -> list[Any]:
    """``oasr_compile_patterns``'s answer: the conv1d pattern, full precision only."""
    if quantization != "none":
        return []
    from oasr_core.compile import CONV1D, Pattern

    return [Pattern(name="conv1d.conv", family="conv1d", kind=CONV1D, serve=serve_conv,
                    description="dense or depthwise 1-D convolution (+bias, +activation)")]

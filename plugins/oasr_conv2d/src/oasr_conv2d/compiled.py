"""The conv2d family's pattern for ``torch.compile(backend="oasr")`` (``oasr_compile_patterns``).

A 2-D convolution site (torch's channels-first ``aten.convolution`` with a 4-D weight; the
pass hands the op the NHWC input and gives its consumers the NCHW view of the output) becomes
``oasr::conv2d`` or, with its activation fused, ``oasr::conv2d_activation``, where the tiers
choose a conv2d config at that op, shape and exact point. A depthwise or grouped conv, or one
the tiers leave to torch (every shape no tuning entry covers), stays Inductor's.
"""

from __future__ import annotations

from typing import Any

from oasr_conv2d.layer import DTYPES


def serve_conv(site: Any) -> Any:
    """The conv2d op for a 2-D convolution ``site``, or None."""
    from oasr_core.compile import Served, Slot

    if site.dtype not in DTYPES:
        return None
    import torch

    from oasr_conv2d.ops import op_name
    from oasr_conv2d.ops_names import DIMS

    dims = tuple(site.dim(d) for d in DIMS)
    cin, cout, width, kh, kw, sh, sw, ph, pw, dh, dw, groups = dims
    if groups != 1:
        return None
    op = op_name(site.activation)
    if not site.serves("conv2d", op, dims):
        return None
    stride, padding, dilation = [sh, sw], [ph, pw], [dh, dw]
    if site.activation is None:
        return Served(torch.ops.oasr.conv2d.default,
                      (Slot.X, Slot.WEIGHT, Slot.BIAS, stride, padding, dilation, groups),
                      family="conv2d", op=op, channels_last=True)
    return Served(torch.ops.oasr.conv2d_activation.default,
                  (Slot.X, Slot.WEIGHT, Slot.BIAS, Slot.ACTIVATION, stride, padding, dilation,
                   groups), family="conv2d", op=op, channels_last=True)


def patterns_for(quantization: str) -> list[Any]:
    """``oasr_compile_patterns``'s answer: the conv2d pattern, full precision only."""
    if quantization != "none":
        return []
    from oasr_core.compile import CONV2D, Pattern

    # The custom ops a compiled graph calls are registered now: a graph Inductor loads from
    # its cache calls them in a process where the pass never ran.
    from oasr_conv2d import ops  # noqa: F401

    return [Pattern(name="conv2d.conv", family="conv2d", kind=CONV2D, serve=serve_conv,
                    description="dense 2-D convolution, NHWC (+bias, +activation)")]

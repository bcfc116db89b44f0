"""The conv1d family's pattern for ``torch.compile(backend="oasr")`` (``oasr_compile_patterns``).

A 1-D convolution site (torch's channels-first ``aten.convolution``; the pass hands the op
the channels-last input and gives its consumers the transposed view of the output) becomes
``oasr::conv1d`` or, with its activation fused, ``oasr::conv1d_activation``, where the tiers
choose a conv1d config at that op, shape and exact point (what the op itself would run, the
family's untuned gate included); a grouped conv that is neither dense nor depthwise, or one
the tiers leave to torch, stays Inductor's.

A convolution followed by an eval BatchNorm (the Conformer's depthwise convolution, then its
norm and SiLU) becomes ``oasr::conv1d_batch_norm``: the norm folded into the weight and bias
(in fp32, stored in the convolution's dtype, as the eager reference model folds it), made
once per weight and kept by the kit's prepared-weight cache until a parameter or statistic
changes, and the activation after the norm fused. It is keyed as that fused op
(``conv1d_silu``), the key the eager model's folded convolution has, so the shipped tables
and an eager census serve the compiled model too.
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
    if site.batch_norm:
        return Served(batch_norm_op(),
                      (Slot.X, Slot.WEIGHT, Slot.BIAS, Slot.BN_MEAN, Slot.BN_VAR,
                       Slot.BN_WEIGHT, Slot.BN_BIAS, Slot.BN_EPS, Slot.ACTIVATION, stride, pad,
                       dil, groups), family="conv1d", op=op, channels_last=True)
    if site.activation is None:
        return Served(torch.ops.oasr.conv1d.default,
                      (Slot.X, Slot.WEIGHT, Slot.BIAS, stride, pad, dil, groups),
                      family="conv1d", op=op, channels_last=True)
    return Served(torch.ops.oasr.conv1d_activation.default,
                  (Slot.X, Slot.WEIGHT, Slot.BIAS, Slot.ACTIVATION, stride, pad, dil, groups),
                  family="conv1d", op=op, channels_last=True)


BATCH_NORM_SCHEMA = ("(Tensor x, Tensor weight, Tensor? bias, Tensor mean, Tensor var, "
                     "Tensor? bn_weight, Tensor? bn_bias, float eps, str? activation, "
                     "int stride, int padding, int dilation, int groups) -> Tensor")
_OWNERS: dict[tuple, Any] = {}
"""Where a folded weight is kept (the kit's prepared-weight owner), by the convolution
weight's (device, storage pointer): a compiled graph hands the op the parameters' storage,
not necessarily the same tensor objects on every call."""


def folded(weight: Any, bias: Any, mean: Any, var: Any, bn_weight: Any, bn_bias: Any,
           eps: float) -> tuple[Any, Any]:
    """``(weight, bias)`` with the eval BatchNorm after the convolution folded in: ``scale =
    bn_weight / sqrt(var + eps)``, ``weight * scale``, ``(bias - mean) * scale + bn_bias``,
    computed in fp32 and stored in the weight's dtype; made once per parameter state."""
    import types

    import torch
    from oasr_core.kit.weights import prepared, stamp

    slot = (weight.device, weight.data_ptr() if weight.device.type != "meta" else id(weight))
    owner = _OWNERS.setdefault(slot, types.SimpleNamespace())

    def make() -> tuple[Any, Any]:
        scale = torch.rsqrt(var.float() + eps)
        if bn_weight is not None:
            scale = scale * bn_weight.float()
        b = bias.float() if bias is not None else torch.zeros_like(scale)
        shift = bn_bias.float() if bn_bias is not None else torch.zeros_like(scale)
        w = (weight.float() * scale.view(-1, 1, 1)).to(weight.dtype).contiguous()
        return w, ((b - mean.float()) * scale + shift).to(weight.dtype).contiguous()

    key = tuple(x for t in (weight, bias, mean, var, bn_weight, bn_bias) for x in stamp(t))
    return prepared(owner, "_oasr_conv1d_batch_norm", (*key, eps), make, in_capture=True)


def conv_batch_norm(x: Any, weight: Any, bias: Any, mean: Any, var: Any, bn_weight: Any,
                    bn_bias: Any, eps: float, activation: str | None, stride: int,
                    padding: int, dilation: int, groups: int) -> Any:
    """``activation(batch_norm(conv1d(x)))`` on channels-last ``x``: the family's conv op
    with the norm folded in (:func:`folded`)."""
    from oasr_conv1d import ops

    w, b = folded(weight, bias, mean, var, bn_weight, bn_bias, eps)
    return ops.conv1d_activation(x, w, b, activation, stride, padding, dilation, groups)


_BATCH_NORM_OP: list[Any] = []


def batch_norm_op() -> Any:
    """``torch.ops.oasr.conv1d_batch_norm`` (registered on first use, with its fake)."""
    if not _BATCH_NORM_OP:
        from oasr_core.kit.ops import custom_op

        from oasr_conv1d.ops import _fake_out

        custom_op("conv1d_batch_norm", BATCH_NORM_SCHEMA, conv_batch_norm,
                  lambda x, weight, bias, mean, var, bn_weight, bn_bias, eps, activation,
                  stride, padding, dilation, groups: _fake_out(x, weight, stride, padding,
                                                               dilation))
        import torch

        _BATCH_NORM_OP.append(torch.ops.oasr.conv1d_batch_norm.default)
    return _BATCH_NORM_OP[0]


def patterns_for(quantization: str) -> list[Any]:
    """``oasr_compile_patterns``'s answer: the conv1d pattern, full precision only."""
    if quantization != "none":
        return []
    from oasr_core.compile import CONV1D, Pattern

    # The custom ops a compiled graph calls are registered now: a graph Inductor loads from
    # its cache calls them in a process where the pass never ran.
    from oasr_conv1d import ops  # noqa: F401

    batch_norm_op()
    return [Pattern(name="conv1d.conv", family="conv1d", kind=CONV1D, serve=serve_conv,
                    folds_batch_norm=True,
                    description="dense or depthwise 1-D convolution (+bias, +an eval "
                                "BatchNorm folded in, +activation)")]

"""The conv2d family's ops on NHWC data, eager and as torch custom ops.

``conv2d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1)`` is ``F.conv2d``
for NHWC ``x (B, H, W, Cin)`` and returns NHWC ``(B, H_out, W_out, Cout)``, both contiguous,
with torch's weight ``(Cout, Cin / groups, kh, kw)``; ``stride``, ``padding`` and
``dilation`` are an int or an ``(h, w)`` pair, as torch takes them. ``conv2d_activation(x,
weight, bias, activation, ...)`` fuses the bias and a ReLU, GELU (erf) or SiLU into the
kernel's epilogue: ops ``conv2d_relu``, ``conv2d_gelu``, ``conv2d_silu``, each keyed on its
own in a tuning file.

A call shape resolves once per tuning epoch through ``oasr_core.select("conv2d", op, dtype,
(Cin, Cout, W, kh, kw, sh, sw, ph, pw, dh, dw, groups), B * H_out * W_out, point="<B>x<H>")``;
the plan (a prepared launcher, or the torch path) is memoised per (op, dtype, shape, device)
by the kit's :class:`~oasr_core.kit.Serving` (:data:`oasr_conv2d.launch.SERVING`). The weight
is packed into the kernels' layout once and cached on it (:mod:`oasr_conv2d.weights`; never
during graph capture).

The torch path is ``F.conv2d`` on the NHWC data's channels-last view (cuDNN's NHWC kernels, no
copy), the activation, and the result viewed back as NHWC (:func:`oasr_conv2d.numerics.
torch_conv`). It serves what the kernels do not take (CPU tensors, fp32, depthwise and grouped
convs, string padding, channels not a multiple of the kernels' access width, non-contiguous or
misaligned tensors, autograd, an unpacked weight met during graph capture), and every shape no
tuning entry covers (``Family.untuned`` is torch: never slower than not installing oasr),
counted by reason (:func:`stats`); a module that cannot be built, or a launcher that refuses,
is warned about once per epoch and torch serves: slower, never wrong.

``torch.ops.oasr.conv2d`` / ``torch.ops.oasr.conv2d_activation`` are the same ops registered
with ``torch.library`` (with fake implementations), so they trace under ``torch.compile`` and
run in CUDA graphs; the Python functions route to them while compiling.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from oasr_core.kit import TORCH, convolution
from oasr_core.kit import ops as kit_ops
from oasr_core.kit.ops import HALF_DTYPES, resolve, torch_path, unsupported_operands
from oasr_core.runtime import device_arch_of

from oasr_conv2d import launch, weights
from oasr_conv2d.geometry import describe, geometry, out_length, pair
from oasr_conv2d.launch import SERVING
from oasr_conv2d.numerics import torch_conv
from oasr_conv2d.ops_names import ACTIVATIONS, OPS

__all__ = ["OPS", "conv2d", "conv2d_activation", "stats", "reset_stats", "clear_memo",
           "op_name", "params_of"]

_compiling = torch.compiler.is_compiling
_PLANS = SERVING.plans
stats, reset_stats, clear_memo = SERVING.stats, SERVING.reset_stats, SERVING.clear


op_name = functools.partial(kit_ops.op_name, "conv2d", ACTIVATIONS)
"""``op_name(activation)``: ``conv2d`` or ``conv2d_<activation>``, the op an activation is keyed
under."""


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def params_of(stride: Any, padding: Any, dilation: Any) -> tuple[int, ...] | None:
    """``(sh, sw, ph, pw, dh, dw)`` from torch's conv2d arguments (ints or pairs); None for
    anything else (string padding, a wrong length, a float)."""
    values = (*pair(stride), *pair(padding), *pair(dilation))
    ints = tuple(_int(v) for v in values)
    return None if any(v is None for v in ints) else ints  # type: ignore[return-value]


def _pairs(stride: Any, padding: Any, dilation: Any) -> tuple[list[int], list[int], list[int]]:
    """The custom ops' schema takes ``int[2]``: each parameter as a two-element list (the
    caller checked :func:`params_of` answers)."""
    sh, sw, ph, pw, dh, dw = params_of(stride, padding, dilation)
    return [sh, sw], [ph, pw], [dh, dw]


def conv2d(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
           stride: Any = 1, padding: Any = 0, dilation: Any = 1,
           groups: int = 1) -> torch.Tensor:
    """``F.conv2d`` on NHWC ``x (B, H, W, Cin)``: NHWC ``(B, H_out, W_out, Cout)``."""
    if _compiling() and params_of(stride, padding, dilation) is not None:
        return torch.ops.oasr.conv2d(x, weight, bias, *_pairs(stride, padding, dilation), groups)
    return _run("conv2d", None, x, weight, bias, stride, padding, dilation, groups)


def conv2d_activation(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                      activation: str | None = "relu", stride: Any = 1, padding: Any = 0,
                      dilation: Any = 1, groups: int = 1) -> torch.Tensor:
    """``activation(conv2d(x) + bias)`` fused (op ``conv2d_<activation>``; None: ``conv2d``)."""
    op = op_name(activation)
    if _compiling() and params_of(stride, padding, dilation) is not None:
        s, p, d = _pairs(stride, padding, dilation)
        if activation is None:
            return torch.ops.oasr.conv2d(x, weight, bias, s, p, d, groups)
        return torch.ops.oasr.conv2d_activation(x, weight, bias, activation, s, p, d, groups)
    return _run(op, activation, x, weight, bias, stride, padding, dilation, groups)


def _conv(activation: str | None, x: torch.Tensor, weight: torch.Tensor,
          bias: torch.Tensor | None, stride: Any, padding: Any, dilation: Any,
          groups: int) -> torch.Tensor:
    """The torch path: ``F.conv2d`` on the channels-last view
    (:func:`oasr_conv2d.numerics.torch_conv`)."""
    return torch_conv(x, weight, bias, stride, padding, dilation, groups, activation)


_torch_path = torch_path(SERVING, _conv)
"""``_torch_path(reason, activation, x, weight, bias, stride, padding, dilation, groups)``:
:func:`_conv`, counted."""


def _run(op: str, activation: str | None, x: torch.Tensor, weight: torch.Tensor,
         bias: torch.Tensor | None, stride: Any, padding: Any, dilation: Any,
         groups: int) -> torch.Tensor:
    params = params_of(stride, padding, dilation)
    if params is None or not isinstance(groups, int):
        return _torch_path("params", activation, x, weight, bias, stride, padding, dilation,
                           groups)
    sh, sw, ph, pw, dh, dw = params
    if x.dim() != 4 or weight.dim() != 4 or groups < 1 or x.shape[3] != weight.shape[1] * groups:
        return _torch_path("shape", activation, x, weight, bias, stride, padding, dilation,
                           groups)
    batch, h_in, w_in, cin = x.shape
    cout, _cpg, kh, kw = weight.shape
    valid = min(sh, sw, dh, dw) >= 1 and min(ph, pw) >= 0
    h_out = out_length(h_in, kh, sh, ph, dh) if valid else 0
    w_out = out_length(w_in, kw, sw, pw, dw) if valid else 0
    if h_out <= 0 or w_out <= 0 or batch == 0:
        return _torch_path("shape", activation, x, weight, bias, stride, padding, dilation,
                           groups)
    if groups != 1:
        return _torch_path("grouped", activation, x, weight, bias, stride, padding, dilation,
                           groups)
    dev = x.get_device()
    if dev < 0:
        return _torch_path("cpu", activation, x, weight, bias, stride, padding, dilation, groups)
    key = (op, x.dtype, batch, h_in, w_in, cin, cout, kh, kw, *params, dev)
    plan = _PLANS.table.get(key)
    if plan is TORCH:
        return _torch_path("selected", activation, x, weight, bias, stride, padding, dilation,
                           groups)
    reason = unsupported_operands(x, weight, bias, cout)
    if reason is not None:
        return _torch_path(reason, activation, x, weight, bias, stride, padding, dilation,
                           groups)
    if plan is None:
        plan = resolve(dev, _plan, key)
        if plan is TORCH:
            return _torch_path("selected", activation, x, weight, bias, stride, padding,
                               dilation, groups)
    packed = weights.packed(weight)
    if packed is None:
        return _torch_path("unpacked", activation, x, weight, bias, stride, padding, dilation,
                           groups)
    out = x.new_empty((batch, h_out, w_out, cout))
    x_ptr, w_ptr, o_ptr = x.data_ptr(), packed.data_ptr(), out.data_ptr()
    b_ptr = bias.data_ptr() if bias is not None else 0
    if (x_ptr | w_ptr | o_ptr | b_ptr) & 15:
        return _torch_path("misaligned", activation, x, weight, bias, stride, padding,
                           dilation, groups)
    status = plan(dev, x_ptr, w_ptr, b_ptr, o_ptr)
    if status:
        return _torch_path.refused(key, plan.config, launch.status_text(status),
                                   f"op={op} {describe(plan.record)}", activation, x, weight,
                                   bias, stride, padding, dilation, groups)
    return out


def _plan(key: tuple) -> Any:
    """Resolve one call shape: select a config, bind its launcher, prepare the call (the
    miss path, :func:`oasr_core.kit.ops.resolve`)."""
    import oasr_core

    op, tdtype, batch, h_in, w_in, cin, cout, kh, kw, sh, sw, ph, pw, dh, dw, dev = key
    dtype, arch = HALF_DTYPES[tdtype], device_arch_of(dev)
    activation = None if op == "conv2d" else op.removeprefix("conv2d_")
    geo = geometry(batch, h_in, w_in, cin, cout, kh, kw, sh, sw, ph, pw, dh, dw, 1)
    dims = (cin, cout, w_in, kh, kw, sh, sw, ph, pw, dh, dw, 1)
    return SERVING.plan(
        key, arch,
        select=lambda: oasr_core.select("conv2d", op, dtype, dims,
                                        batch * geo.h_out * geo.w_out, arch,
                                        point=f"{batch}x{h_in}").config,
        kernel_key=lambda config: config.id,
        prepare=lambda kernel: kernel.prepare(geo, dtype, activation),
        what=f"op={op} {dtype} {describe(geo)}")


def _fake_out(x, weight, stride, padding, dilation):
    h_out = out_length(x.shape[1], weight.shape[2], stride[0], padding[0], dilation[0])
    w_out = out_length(x.shape[2], weight.shape[3], stride[1], padding[1], dilation[1])
    return x.new_empty((x.shape[0], h_out, w_out, weight.shape[0]))


_conv2d_op, _conv2d_activation_op = convolution.custom_ops(
    "conv2d", "int[2]", lambda activation, *args: _run(op_name(activation), activation, *args),
    _fake_out)

"""The conv1d family's ops on channels-last data, eager and as torch custom ops.

``conv1d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1)`` is
``F.conv1d`` for ``x (B, T, Cin)`` and returns ``(B, T_out, Cout)``, both contiguous, with
torch's weight ``(Cout, Cin / groups, k)``. ``conv1d_activation(x, weight, bias,
activation, ...)`` fuses the bias and a ReLU, GELU (erf) or SiLU into the kernel's epilogue:
ops ``conv1d_relu``, ``conv1d_gelu``, ``conv1d_silu``, each keyed on its own in a tuning file
(an entry measured with one activation never speaks for another).

A call shape resolves once per tuning epoch through ``oasr_core.select("conv1d", op, dtype,
(Cin, Cout, k, stride, pad, dil, groups), B * T_out, point="<B>x<T>")``; the plan (a prepared
launcher, or the torch path) is memoised per (op, dtype, shape, device) by the kit's
:class:`~oasr_core.kit.Serving` (:data:`oasr_conv1d.launch.SERVING`). The weight is packed
into the kernels' layout once and cached on it (:mod:`oasr_conv1d.weights`; never during
graph capture).

The torch path is what a model does (transpose, ``F.conv1d`` on cuDNN, the activation,
transpose back). It serves what the kernels do not take (CPU tensors, fp32, grouped convs
that are neither dense nor depthwise, string padding, channels not a multiple of the
kernels' access width, non-contiguous or misaligned tensors, autograd, an unpacked weight met
during graph capture), counted by reason (:func:`stats`); a module that cannot be built, or a
launcher that refuses, is warned about once per epoch and torch serves: slower, never wrong.

``torch.ops.oasr.conv1d`` / ``torch.ops.oasr.conv1d_activation`` are the same ops registered
with ``torch.library`` (with fake implementations), so they trace under ``torch.compile`` and
run in CUDA graphs; the Python functions route to them while compiling.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from oasr_core.kit import TORCH, convolution
from oasr_core.kit import ops as kit_ops
from oasr_core.kit.ops import HALF_DTYPES, torch_path, unsupported_operands
from oasr_core.runtime import device_arch_of

from oasr_conv1d import launch, weights
from oasr_conv1d.geometry import geometry, out_length
from oasr_conv1d.launch import SERVING
from oasr_conv1d.numerics import torch_conv
from oasr_conv1d.ops_names import ACTIVATIONS, OPS

__all__ = ["OPS", "conv1d", "conv1d_activation", "stats", "reset_stats", "clear_memo", "op_name"]

_compiling = torch.compiler.is_compiling
_PLANS, _FALLBACKS = SERVING.plans, SERVING.fallbacks
stats, reset_stats, clear_memo = SERVING.stats, SERVING.reset_stats, SERVING.clear


op_name = functools.partial(kit_ops.op_name, "conv1d", ACTIVATIONS)
"""``op_name(activation)``: ``conv1d`` or ``conv1d_<activation>``, the op an activation is keyed
under."""


def _int(value: Any, name: str) -> int | None:
    """A conv parameter as one int (torch also takes a 1-tuple); None for anything else."""
    if isinstance(value, (tuple, list)) and len(value) == 1:
        value = value[0]
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def conv1d(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
           stride: int = 1, padding: int = 0, dilation: int = 1,
           groups: int = 1) -> torch.Tensor:
    """``F.conv1d`` on channels-last ``x (B, T, Cin)``: ``(B, T_out, Cout)``."""
    if _compiling():
        return torch.ops.oasr.conv1d(x, weight, bias, stride, padding, dilation, groups)
    return _run("conv1d", None, x, weight, bias, stride, padding, dilation, groups)


def conv1d_activation(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                      activation: str | None = "silu", stride: int = 1, padding: int = 0,
                      dilation: int = 1, groups: int = 1) -> torch.Tensor:
    """``activation(conv1d(x) + bias)`` fused (op ``conv1d_<activation>``; None: ``conv1d``)."""
    op = op_name(activation)
    if _compiling():
        if activation is None:
            return torch.ops.oasr.conv1d(x, weight, bias, stride, padding, dilation, groups)
        return torch.ops.oasr.conv1d_activation(x, weight, bias, activation, stride, padding,
                                                dilation, groups)
    return _run(op, activation, x, weight, bias, stride, padding, dilation, groups)


def _conv(activation: str | None, x: torch.Tensor, weight: torch.Tensor,
          bias: torch.Tensor | None, stride: Any, padding: Any, dilation: Any,
          groups: int) -> torch.Tensor:
    """The torch path: what a model does (:func:`oasr_conv1d.numerics.torch_conv`)."""
    return torch_conv(x, weight, bias, stride, padding, dilation, groups, activation)


_torch_path = torch_path(SERVING, _conv)
"""``_torch_path(reason, activation, x, weight, bias, stride, padding, dilation, groups)``:
:func:`_conv`, counted."""


def _key(op: str, x: torch.Tensor, weight: torch.Tensor, stride: Any, padding: Any,
         dilation: Any, groups: Any) -> tuple | None:
    """The plan key :func:`_run` files these operands under, ``(op, dtype, B, T, Cin, Cout,
    k, stride, pad, dil, groups, device)``; None where it files none (parameters that are not
    one int each, operands that are not 3-D)."""
    s, p, d = _int(stride, "stride"), _int(padding, "padding"), _int(dilation, "dilation")
    if s is None or p is None or d is None or x.dim() != 3 or weight.dim() != 3:
        return None
    batch, t_in, cin = x.shape
    cout, _cpg, k = weight.shape
    return (op, x.dtype, batch, t_in, cin, cout, k, s, p, d, groups, x.get_device())


def _run(op: str, activation: str | None, x: torch.Tensor, weight: torch.Tensor,
         bias: torch.Tensor | None, stride: Any, padding: Any, dilation: Any,
         groups: int) -> torch.Tensor:
    s, p, d = _int(stride, "stride"), _int(padding, "padding"), _int(dilation, "dilation")
    if s is None or p is None or d is None or not isinstance(groups, int):
        return _torch_path("params", activation, x, weight, bias, stride, padding, dilation,
                           groups)
    if x.dim() != 3 or weight.dim() != 3 or groups < 1 or x.shape[2] != weight.shape[1] * groups:
        return _torch_path("shape", activation, x, weight, bias, s, p, d, groups)
    batch, t_in, cin = x.shape
    cout, _cpg, k = weight.shape
    kind = weights.kind_of(cin, cout, groups)
    t_out = out_length(t_in, k, s, p, d) if min(s, d) >= 1 and p >= 0 else 0
    if kind is None or t_out <= 0 or batch == 0:
        return _torch_path("grouped" if kind is None else "shape", activation, x, weight,
                           bias, s, p, d, groups)
    dev = x.get_device()
    if dev < 0:
        return _torch_path("cpu", activation, x, weight, bias, s, p, d, groups)
    key = (op, x.dtype, batch, t_in, cin, cout, k, s, p, d, groups, dev)
    plan = _PLANS.table.get(key)
    if plan is TORCH:
        return _torch_path("selected", activation, x, weight, bias, s, p, d, groups)
    reason = unsupported_operands(x, weight, bias, cout)
    if reason is not None:
        return _torch_path(reason, activation, x, weight, bias, s, p, d, groups)
    if plan is None:
        plan = _plan(key, t_out)
        if plan is TORCH:
            return _torch_path("selected", activation, x, weight, bias, s, p, d, groups)
    packed = weights.packed(weight, kind)
    if packed is None:
        return _torch_path("unpacked", activation, x, weight, bias, s, p, d, groups)
    out = x.new_empty((batch, t_out, cout))
    x_ptr, w_ptr, o_ptr = x.data_ptr(), packed.data_ptr(), out.data_ptr()
    b_ptr = bias.data_ptr() if bias is not None else 0
    if (x_ptr | w_ptr | o_ptr | b_ptr) & 15:
        return _torch_path("misaligned", activation, x, weight, bias, s, p, d, groups)
    status = plan(dev, x_ptr, w_ptr, b_ptr, o_ptr)
    if status:
        return _torch_path.refused(key, plan.config, launch.status_text(status),
                                   f"op={op} {launch.describe(plan.record)}", activation, x,
                                   weight, bias, s, p, d, groups)
    return out


def _plan(key: tuple, t_out: int) -> Any:
    """Resolve one call shape: select a config, bind its launcher, prepare the call."""
    import oasr_core

    op, tdtype, batch, t_in, cin, cout, k, s, p, d, groups, dev = key
    dtype, arch = HALF_DTYPES[tdtype], device_arch_of(dev)
    activation = None if op == "conv1d" else op.removeprefix("conv1d_")
    geo = geometry(batch, t_in, cin, cout, k, s, p, d, groups)
    return SERVING.plan(
        key, arch,
        select=lambda: oasr_core.select("conv1d", op, dtype, (cin, cout, k, s, p, d, groups),
                                        batch * t_out, arch, point=f"{batch}x{t_in}").config,
        kernel_key=lambda config: config.id,
        prepare=lambda kernel: kernel.prepare(geo, dtype, activation),
        what=f"op={op} {dtype} Cin={cin} Cout={cout} k={k} stride={s} pad={p} dil={d} "
             f"groups={groups} B={batch} T={t_in}")


def _fake_out(x, weight, stride, padding, dilation):
    t_out = out_length(x.shape[1], weight.shape[2], stride, padding, dilation)
    return x.new_empty((x.shape[0], t_out, weight.shape[0]))


_conv1d_op, _conv1d_activation_op = convolution.custom_ops(
    "conv1d", "int", lambda activation, *args: _run(op_name(activation), activation, *args),
    _fake_out)

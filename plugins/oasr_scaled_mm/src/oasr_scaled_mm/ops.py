"""The scaled_mm family's ops: ``scaled_mm`` and ``scaled_mm_quant``, eager and as custom ops.

``scaled_mm(a, w, a_scale, w_scale, bias=None, out_dtype=torch.float16, out=None)``: ``a`` is
int8 ``[..., K]`` (leading dims flatten into M), ``w`` int8 ``[N, K]`` (``nn.Linear``
layout), ``a_scale`` float32 per token (M values), ``w_scale`` float32 per output channel (N
values), ``bias`` fp16/bf16/fp32 ``[N]`` or None. The result, in ``out_dtype`` (fp16 or
bf16), is ``((float(acc) * a_scale[m]) * w_scale[n]) + bias[n]`` with ``acc`` the exact
int32 dot product, each op one fp32 rounding in that order, rounded to nearest even at the end.

``scaled_mm_quant(a, w, a_scale, w_scale, out_scale, bias=None, out=None)`` is the same GEMM
writing int8 for the next GEMM: the same fp32 value **divided** by the per-tensor
``out_scale`` (an IEEE fp32 division, not a multiplication by a reciprocal), rounded to
nearest even and saturated to [-128, 127] (NaN to 0). ``out_scale`` is a float or a one-element
float32 tensor on the operands' device (read by the kernel at run time: a captured CUDA graph
follows its updates).

A call shape resolves once per tuning epoch through ``oasr_core.select("scaled_mm", op,
"int8", (N, K), M)`` (:func:`select_config`, :func:`select_quant_config`); the answer (a
prepared launcher, or the torch path) is memoised per (op, out dtype, N, K, M, device) in the
current epoch (the kit's :class:`oasr_core.kit.Serving`, :data:`oasr_scaled_mm.launch.SERVING`),
so a repeated call is one dict lookup, the tensor checks, one ctypes call and the launch on
torch's current stream (CUDA-graph capturable). The quant op never serves a Stream-K config:
such a selection is warned about once and the shape heuristic's config serves.

Inputs the kernels do not take (CPU tensors, N or K not a multiple of 16, non-contiguous or
misaligned tensors, an out_scale tensor on another device) take the torch path
(:mod:`oasr_scaled_mm.reference`: the same bits, computed by torch) and are counted
(:func:`stats`); on the meta device the ops return an empty tensor of the right shape. Bad
inputs (wrong dtypes or shapes, mixed devices) raise ``TypeError``/``ValueError``. A bias that
is not float32 is converted per call (exact); pass a float32 bias to avoid the extra kernel.

``torch.ops.oasr.scaled_mm`` / ``torch.ops.oasr.scaled_mm_quant`` are the same ops registered
with ``torch.library`` (with fake implementations), so they trace under ``torch.compile``; the
Python functions route to them while compiling.
"""

from __future__ import annotations

import sys
from typing import Any

import torch
from oasr_core.kit import TORCH
from oasr_core.kit.ops import into_out, on_device, torch_path
from oasr_core.types import Config, Problem, Tier

from oasr_scaled_mm import heuristic, launch, reference
from oasr_scaled_mm.config_space import FAMILY, OP_MM, OP_QUANT, serves
from oasr_scaled_mm.feasibility import ALIGN
from oasr_scaled_mm.launch import SERVING, reserve_workspace
from oasr_scaled_mm.w8a8 import scaled_ops

__all__ = ["scaled_mm", "scaled_mm_quant", "select_config", "select_quant_config",
           "unquantized", "reserve_workspace", "stats", "reset_stats", "clear_memo"]

DTYPE = "int8"
_OUT_NAMES = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.int8: "int8"}
_BIAS_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
_I8, _F32 = torch.int8, torch.float32
_compiling = torch.compiler.is_compiling
_PLANS, _FALLBACKS = SERVING.plans, SERVING.fallbacks
stats, reset_stats, clear_memo = SERVING.stats, SERVING.reset_stats, SERVING.clear


def scaled_mm(a: torch.Tensor, w: torch.Tensor, a_scale: torch.Tensor, w_scale: torch.Tensor,
              bias: torch.Tensor | None = None, out_dtype: torch.dtype = torch.float16,
              out: torch.Tensor | None = None) -> torch.Tensor:
    """``(a @ w.T) * a_scale * w_scale (+ bias)`` in ``out_dtype``; into ``out`` when given."""
    if _compiling():
        return into_out(torch.ops.oasr.scaled_mm(a, w, a_scale, w_scale, bias, out_dtype), out)
    return _run(OP_MM, a, w, a_scale, w_scale, bias, out_dtype, None, out)


def scaled_mm_quant(a: torch.Tensor, w: torch.Tensor, a_scale: torch.Tensor,
                    w_scale: torch.Tensor, out_scale: float | torch.Tensor,
                    bias: torch.Tensor | None = None,
                    out: torch.Tensor | None = None) -> torch.Tensor:
    """The scaled_mm value divided by ``out_scale``, rounded half-even, saturated to int8."""
    if _compiling():
        tensor, value = (out_scale, 1.0) if isinstance(out_scale, torch.Tensor) \
            else (None, float(out_scale))
        return into_out(torch.ops.oasr.scaled_mm_quant(a, w, a_scale, w_scale, tensor, value,
                                                       bias), out)
    return _run(OP_QUANT, a, w, a_scale, w_scale, bias, torch.int8, out_scale, out)


def unquantized(n: int, k: int, m: int, device: int, *, normed: bool = False) -> bool:
    """Whether a quantized linear of width ``(N, K)`` at ``M`` rows on CUDA ``device`` runs in
    its activation dtype (``F.linear``): the tiers name ``Sentinel.UNQUANTIZED`` there (a build
    measured the layer, the activation quantizer included, slower than fp16), or no entry
    covers the shape and the untuned route (:func:`oasr_scaled_mm.untuned.int8_wins`) does not
    predict the heuristic's int8 tile plus the quantizer to beat fp16
    (:func:`oasr_scaled_mm.w8a8.scaled_ops.unquantized_route`, memoised per epoch).
    ``normed``: the activation comes quantized by its layer norm
    (:class:`oasr_core.layers.NormedRows`), so the untuned route counts no quantizer; a tuning
    entry's verdict, measured with the quantizer, stands."""
    from oasr_scaled_mm import untuned

    def untuned_high(sel: Any) -> bool:
        return (sel.tier is Tier.HEURISTIC and sel.config is not None
                and not untuned.int8_wins(sel.lane, n, k, m, quantizer=not normed))

    return scaled_ops.unquantized_route(SERVING, FAMILY, OP_MM, DTYPE, n, k, m, device,
                                        untuned_high=untuned_high,
                                        label="oasr_scaled_mm", variant=normed)


def select_config(n: int, k: int, m: int, arch: str | None = None) -> Config | None:
    """The config serving ``scaled_mm`` at ``(N, K, M)`` on ``arch`` (None: the torch path).

    ``oasr_core.select`` under the family's tiers (user, system, model, heuristic); memoised
    there per epoch.
    """
    import oasr_core

    return oasr_core.select(FAMILY, OP_MM, DTYPE, (n, k), m, arch).config


def select_quant_config(n: int, k: int, m: int, arch: str | None = None) -> Config | None:
    """The config serving ``scaled_mm_quant`` at ``(N, K, M)`` (None: the torch path).

    A Stream-K config (which has no quantizing launcher) is warned about once and replaced by
    the shape heuristic's config.
    """
    import oasr_core
    from oasr_core.runtime import get_runtime

    sel = oasr_core.select(FAMILY, OP_QUANT, DTYPE, (n, k), m, arch)
    config = sel.config
    if config is None or serves(config, OP_QUANT):
        return config
    rt = get_runtime()
    rt.warn_once(f"{FAMILY}:quant-stream-k:{config.lane}:{config.id}",
                 f"oasr_scaled_mm: the {sel.tier.value} tier names Stream-K config {config.id} "
                 f"for scaled_mm_quant (N={n} K={k} M={m}); there is no quantizing Stream-K "
                 "launcher, so the shape heuristic's config serves instead")
    lane = rt.registry.lane(config.lane)
    problem = Problem(family=FAMILY, op=OP_QUANT, dtype=DTYPE, dims=(("N", n), ("K", k)), m=m)
    return heuristic.sentinel_heuristic(problem, lane)


def _check(op: str, a: Any, w: Any, a_scale: Any, w_scale: Any, bias: Any, out_dtype: Any,
           out_scale: Any, out: Any) -> tuple[int, int, int]:
    """Validate the arguments; ``(N, K, M)``. Raises TypeError/ValueError naming the problem."""
    if not isinstance(a, torch.Tensor) or not isinstance(w, torch.Tensor):
        raise TypeError(f"{op}: a and w must be tensors")
    if a.dtype != torch.int8 or w.dtype != torch.int8:
        raise TypeError(f"{op}: a and w must be int8, got {a.dtype} and {w.dtype}")
    if w.dim() != 2 or a.dim() < 1 or a.shape[-1] != w.shape[1]:
        raise ValueError(f"{op}: a [..., K] and w [N, K] do not match: a {tuple(a.shape)}, "
                         f"w {tuple(w.shape)}")
    n, k = w.shape
    m = a.numel() // k if k else 0
    for name, t, size in (("a_scale", a_scale, m), ("w_scale", w_scale, n)):
        if not isinstance(t, torch.Tensor) or t.dtype != torch.float32:
            raise TypeError(f"{op}: {name} must be a float32 tensor, got "
                            f"{getattr(t, 'dtype', type(t).__name__)}")
        if t.numel() != size:
            raise ValueError(f"{op}: {name} must hold {size} values, got {tuple(t.shape)}")
    if bias is not None:
        if not isinstance(bias, torch.Tensor) or bias.dtype not in _BIAS_DTYPES:
            raise TypeError(f"{op}: bias must be an fp16/bf16/fp32 tensor or None")
        if bias.numel() != n or bias.dim() != 1:
            raise ValueError(f"{op}: bias must be [{n}], got {tuple(bias.shape)}")
    if op == OP_MM and out_dtype not in (torch.float16, torch.bfloat16):
        raise ValueError(f"{op}: out_dtype must be torch.float16 or torch.bfloat16, got "
                         f"{out_dtype}")
    if op == OP_QUANT:
        if isinstance(out_scale, torch.Tensor):
            if out_scale.dtype != torch.float32 or out_scale.numel() != 1:
                raise TypeError(f"{op}: an out_scale tensor must hold one float32 value")
        elif not isinstance(out_scale, (float, int)) or isinstance(out_scale, bool):
            raise TypeError(f"{op}: out_scale must be a float or a float32 tensor")
    device = a.device
    for name, t in (("w", w), ("a_scale", a_scale), ("w_scale", w_scale), ("bias", bias),
                    ("out", out)):
        if t is not None and t.device != device:
            raise ValueError(f"{op}: {name} is on {t.device}, a on {device}")
    if out is not None:
        shape = (*a.shape[:-1], n)
        if tuple(out.shape) != shape or out.dtype != out_dtype:
            raise ValueError(f"{op}: out must be a {out_dtype} tensor of shape {shape}; got "
                             f"{out.dtype} {tuple(out.shape)}")
    return n, k, m


def _unsupported(a: torch.Tensor, w: torch.Tensor, a_scale: torch.Tensor,
                 w_scale: torch.Tensor, bias: torch.Tensor | None, out_scale: Any,
                 out: torch.Tensor | None, n: int, k: int) -> str | None:
    """Why the kernels cannot take these (already validated) operands; None when they can."""
    if not a.is_cuda:
        return "cpu"
    if n % ALIGN or k % ALIGN:
        return "unaligned"
    if not (a.is_contiguous() and w.is_contiguous() and a_scale.is_contiguous()
            and w_scale.is_contiguous() and (bias is None or bias.is_contiguous())
            and (out is None or out.is_contiguous())):
        return "noncontiguous"
    if isinstance(out_scale, torch.Tensor) and out_scale.device != a.device:
        return "out_scale"
    return None


def _reference(op: str, a: torch.Tensor, w: torch.Tensor, a_scale: torch.Tensor,
               w_scale: torch.Tensor, bias: torch.Tensor | None, out_dtype: torch.dtype,
               out_scale: Any, out: torch.Tensor | None) -> torch.Tensor:
    """The torch path: :mod:`oasr_scaled_mm.reference`, the kernels' bits computed by torch."""
    if op == OP_QUANT:
        result = reference.scaled_mm_quant(a, w, a_scale, w_scale, out_scale, bias)
    else:
        result = reference.scaled_mm(a, w, a_scale, w_scale, bias, out_dtype)
    return into_out(result, out)


_torch_path = torch_path(SERVING, _reference)
"""``_torch_path(reason, op, a, w, a_scale, w_scale, bias, out_dtype, out_scale, out)``:
:func:`_reference`, counted."""


def _run(op: str, a: torch.Tensor, w: torch.Tensor, a_scale: torch.Tensor,
         w_scale: torch.Tensor, bias: torch.Tensor | None, out_dtype: torch.dtype,
         out_scale: Any, out: torch.Tensor | None) -> torch.Tensor:
    n, k, m = _checked(op, a, w, a_scale, w_scale, bias, out_dtype, out_scale, out)
    dev = a.get_device()
    key = (op, out_dtype, n, k, m, dev)
    plan = _PLANS.table.get(key) if dev >= 0 else None
    # A plan exists only for aligned N, K (the key holds them); the rest is per call, checked
    # inline, the reason looked up only when a check fails.
    if plan is None or plan is TORCH or not (
            a.is_cuda and a.is_contiguous() and w.is_contiguous() and a_scale.is_contiguous()
            and w_scale.is_contiguous() and (bias is None or bias.is_contiguous())
            and (out is None or out.is_contiguous())
            and (not isinstance(out_scale, torch.Tensor) or out_scale.get_device() == dev)):
        if a.device.type == "meta":
            return out if out is not None else a.new_empty((*a.shape[:-1], n), dtype=out_dtype)
        reason = _unsupported(a, w, a_scale, w_scale, bias, out_scale, out, n, k)
        if reason is not None:
            return _torch_path(reason, op, a, w, a_scale, w_scale, bias, out_dtype, out_scale,
                               out)
        if m == 0:
            return out if out is not None else a.new_empty((*a.shape[:-1], n), dtype=out_dtype)
        if plan is None:
            plan = on_device(dev, lambda: _plan(key))  # the heuristic reads the SM count
        if plan is TORCH:
            return _torch_path("selected", op, a, w, a_scale, w_scale, bias, out_dtype,
                               out_scale, out)
    if bias is not None and bias.dtype is not _F32:
        bias = bias.to(_F32)
    if out is None:
        out = plan.output(a, n, out_dtype)
    if out_scale is None:
        os_ptr, os_val = 0, 1.0
    elif out_scale.__class__ is float:
        os_ptr, os_val = 0, out_scale
    else:
        os_ptr, os_val = launch.out_scale_args(out_scale)
    a_ptr, w_ptr, d_ptr = a.data_ptr(), w.data_ptr(), out.data_ptr()
    as_ptr, ws_ptr = a_scale.data_ptr(), w_scale.data_ptr()
    b_ptr = bias.data_ptr() if bias is not None else 0
    if (a_ptr | w_ptr | d_ptr | as_ptr | ws_ptr | b_ptr) & 15 or os_ptr & 3:
        return _torch_path("misaligned", op, a, w, a_scale, w_scale, bias, out_dtype,
                           out_scale, out)
    status = plan(dev, a_ptr, w_ptr, as_ptr, ws_ptr, b_ptr, os_ptr, os_val, d_ptr)
    if status:
        return _torch_path.refused(key, plan.config, launch.status_text(status),
                                   f"op={op} N={n} K={k} M={m}", op, a, w, a_scale, w_scale,
                                   bias, out_dtype, out_scale, out)
    return out


def _checked(op: str, a: Any, w: Any, a_scale: Any, w_scale: Any, bias: Any, out_dtype: Any,
             out_scale: Any, out: Any) -> tuple[int, int, int]:
    """``(N, K, M)`` of valid arguments: the common case checked inline, anything else (and
    every error) by :func:`_check`."""
    try:
        n, k = w.shape
        m = a.numel() // k
        device = a.device
        if (a.dtype is _I8 and w.dtype is _I8 and a.dim() >= 1 and a.shape[-1] == k
                and a_scale.dtype is _F32 and a_scale.numel() == m
                and w_scale.dtype is _F32 and w_scale.numel() == n
                and w.device == device and a_scale.device == device
                and w_scale.device == device and out is None
                and (bias is None or (bias.dtype in _BIAS_DTYPES and bias.dim() == 1
                                      and bias.numel() == n and bias.device == device))
                and (out_dtype is torch.float16 or out_dtype is torch.bfloat16
                     if op == OP_MM else out_scale.__class__ is float)):
            return n, k, m
    except (AttributeError, TypeError, ValueError, ZeroDivisionError):
        pass  # not the common case: _check names what is wrong
    return _check(op, a, w, a_scale, w_scale, bias, out_dtype, out_scale, out)


def _plan(key: tuple) -> Any:
    """Resolve one call shape: select a config, bind its launcher, prepare it."""
    return scaled_ops.plan_shape(SERVING, key, out_names=_OUT_NAMES, op_quant=OP_QUANT,
                                 select_mm=select_config, select_quant=select_quant_config)


_CUSTOM_OPS = scaled_ops.register_custom_ops(
    sys.modules[__name__], mm_name="scaled_mm", quant_name="scaled_mm_quant", op_mm=OP_MM,
    op_quant=OP_QUANT, quant_dtype=torch.int8)
"""``torch.ops.oasr.scaled_mm`` and ``torch.ops.oasr.scaled_mm_quant`` over :func:`_run`."""

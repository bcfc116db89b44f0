"""The scaled_mm_fp8 family's ops: ``scaled_mm_fp8`` and ``scaled_mm_fp8_quant``, eager and as
custom ops, and the quantized linear's route (:func:`unquantized`).

``scaled_mm_fp8(a, w, a_scale, w_scale, bias=None, out_dtype=torch.bfloat16, out=None)``:
``a`` e4m3 ``[..., K]`` (leading dims flatten into M), ``w`` e4m3 ``[N, K]``, ``a_scale``
float32 per token (M values), ``w_scale`` float32 per output channel (N values), ``bias``
fp16/bf16/fp32 ``[N]`` or None; the result in ``out_dtype`` (bf16 or fp16) is
``((acc * a_scale[m]) * w_scale[n]) + bias[n]``, ``acc`` the tensor cores' fp32 sum of the
fp8 products (see :mod:`oasr_scaled_mm_fp8.numerics` for how close to exact it is).

``scaled_mm_fp8_quant(a, w, a_scale, w_scale, out_scale, bias=None, out=None)`` writes the same
value divided by ``out_scale`` (IEEE fp32 division) as e4m3, rounded to nearest even and
**saturated**: a finite value beyond +-448 and an infinity become +-448; a NaN stays NaN.
``out_scale`` is a float or a one-element float32 tensor on the operands' device (read at run
time: a captured graph follows its updates).

A call shape resolves once per tuning epoch through ``oasr_core.select("scaled_mm_fp8", op,
"float8_e4m3fn", (N, K), M)`` to a prepared launcher or the torch path, memoised per (op, out
dtype, N, K, M, device) in the current epoch (the kit's :class:`oasr_core.kit.Serving`): a
repeated call is one dict lookup, the checks, one ctypes call and the launch on torch's current
stream (CUDA-graph capturable). The torch path (``torch._scaled_mm`` with row-wise scales on
CUDA, the fp32 reference elsewhere: :func:`oasr_scaled_mm_fp8.reference.torch_scaled_mm`)
serves what the kernels do not take -- CPU tensors, N or K not a multiple of 16,
non-contiguous or misaligned tensors, a ``torch`` or ``unquantized`` selection -- counted by
reason (:func:`stats`). On the meta device the ops return an empty tensor of the right shape;
bad inputs raise ``TypeError``/``ValueError``.

``torch.ops.oasr.scaled_mm_fp8`` / ``torch.ops.oasr.scaled_mm_fp8_quant`` are the same ops
registered with ``torch.library`` (fake implementations included), so they trace under
``torch.compile``; the Python functions route to them while compiling.
"""

from __future__ import annotations

import sys
from typing import Any

import torch
from oasr_core.kit import TORCH
from oasr_core.kit.ops import into_out, on_device, torch_path
from oasr_core.types import Config, Tier
from oasr_scaled_mm.w8a8 import scaled_ops

from oasr_scaled_mm_fp8 import launch, reference
from oasr_scaled_mm_fp8.config_space import DTYPE, FAMILY, OP_MM, OP_QUANT
from oasr_scaled_mm_fp8.feasibility import ALIGN
from oasr_scaled_mm_fp8.launch import SERVING, reserve_workspace

__all__ = ["scaled_mm_fp8", "scaled_mm_fp8_quant", "select_config", "select_quant_config",
           "unquantized", "reserve_workspace", "stats", "reset_stats", "clear_memo"]

_E4M3, _F32 = torch.float8_e4m3fn, torch.float32
_OUT_NAMES = {torch.float16: "fp16", torch.bfloat16: "bf16", _E4M3: "fp8"}
_BIAS_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
_compiling = torch.compiler.is_compiling
_PLANS = SERVING.plans
stats, reset_stats, clear_memo = SERVING.stats, SERVING.reset_stats, SERVING.clear


def scaled_mm_fp8(a: torch.Tensor, w: torch.Tensor, a_scale: torch.Tensor,
                  w_scale: torch.Tensor, bias: torch.Tensor | None = None,
                  out_dtype: torch.dtype = torch.bfloat16,
                  out: torch.Tensor | None = None) -> torch.Tensor:
    """``(a @ w.T) * a_scale * w_scale (+ bias)`` in ``out_dtype``; into ``out`` when given."""
    if _compiling():
        return into_out(torch.ops.oasr.scaled_mm_fp8(a, w, a_scale, w_scale, bias, out_dtype),
                        out)
    return _run(OP_MM, a, w, a_scale, w_scale, bias, out_dtype, None, out)


def scaled_mm_fp8_quant(a: torch.Tensor, w: torch.Tensor, a_scale: torch.Tensor,
                        w_scale: torch.Tensor, out_scale: float | torch.Tensor,
                        bias: torch.Tensor | None = None,
                        out: torch.Tensor | None = None) -> torch.Tensor:
    """The scaled_mm_fp8 value divided by ``out_scale``, as saturated e4m3."""
    if _compiling():
        tensor, value = (out_scale, 1.0) if isinstance(out_scale, torch.Tensor) \
            else (None, float(out_scale))
        return into_out(torch.ops.oasr.scaled_mm_fp8_quant(a, w, a_scale, w_scale, tensor,
                                                           value, bias), out)
    return _run(OP_QUANT, a, w, a_scale, w_scale, bias, _E4M3, out_scale, out)


def select_config(n: int, k: int, m: int, arch: str | None = None) -> Config | None:
    """The config serving ``scaled_mm_fp8`` at ``(N, K, M)`` on ``arch`` (None: torch)."""
    import oasr_core

    return oasr_core.select(FAMILY, OP_MM, DTYPE, (n, k), m, arch).config


def select_quant_config(n: int, k: int, m: int, arch: str | None = None) -> Config | None:
    """The config serving ``scaled_mm_fp8_quant`` at ``(N, K, M)`` on ``arch`` (None: torch)."""
    import oasr_core

    return oasr_core.select(FAMILY, OP_QUANT, DTYPE, (n, k), m, arch).config


def unquantized(n: int, k: int, m: int, device: int, *, normed: bool = False) -> bool:
    """Whether a quantized linear of width ``(N, K)`` at ``M`` rows on CUDA ``device`` runs in
    its activation dtype (``F.linear``): the tiers name ``Sentinel.UNQUANTIZED`` there, or no
    entry covers the shape and the untuned route (:func:`oasr_scaled_mm_fp8.untuned.fp8_wins`)
    does not predict the heuristic's fp8 tile plus the quantizer to beat bf16
    (:func:`oasr_scaled_mm.w8a8.scaled_ops.unquantized_route`, memoised per epoch). ``normed``: the
    activation comes quantized by its layer norm (:class:`oasr_core.kit.normed.NormedRows`),
    so the untuned route counts no quantizer; a tuning entry's verdict, measured with the
    quantizer, stands."""
    from oasr_scaled_mm_fp8 import untuned

    def untuned_high(sel: Any) -> bool:
        return (sel.tier is Tier.HEURISTIC and sel.config is not None
                and not untuned.fp8_wins(sel.lane, n, k, m, quantizer=not normed))

    return scaled_ops.unquantized_route(SERVING, FAMILY, OP_MM, DTYPE, n, k, m, device,
                                        untuned_high=untuned_high,
                                        label="oasr_scaled_mm_fp8", variant=normed)


def _check(op: str, a: Any, w: Any, a_scale: Any, w_scale: Any, bias: Any, out_dtype: Any,
           out_scale: Any, out: Any) -> tuple[int, int, int]:
    """Validate the arguments; ``(N, K, M)``. Raises TypeError/ValueError naming the problem."""
    if not isinstance(a, torch.Tensor) or not isinstance(w, torch.Tensor):
        raise TypeError(f"{op}: a and w must be tensors")
    if a.dtype != _E4M3 or w.dtype != _E4M3:
        raise TypeError(f"{op}: a and w must be torch.float8_e4m3fn, got {a.dtype} and "
                        f"{w.dtype}")
    if w.dim() != 2 or a.dim() < 1 or a.shape[-1] != w.shape[1]:
        raise ValueError(f"{op}: a [..., K] and w [N, K] do not match: a {tuple(a.shape)}, "
                         f"w {tuple(w.shape)}")
    n, k = w.shape
    m = a.numel() // k if k else 0
    for name, t, size in (("a_scale", a_scale, m), ("w_scale", w_scale, n)):
        if not isinstance(t, torch.Tensor) or t.dtype != _F32:
            raise TypeError(f"{op}: {name} must be a float32 tensor, got "
                            f"{getattr(t, 'dtype', type(t).__name__)}")
        if t.numel() != size:
            raise ValueError(f"{op}: {name} must hold {size} values, got {tuple(t.shape)}")
    if bias is not None and (not isinstance(bias, torch.Tensor)
                             or bias.dtype not in _BIAS_DTYPES):
        raise TypeError(f"{op}: bias must be an fp16/bf16/fp32 tensor or None")
    if bias is not None and (bias.numel() != n or bias.dim() != 1):
        raise ValueError(f"{op}: bias must be [{n}], got {tuple(bias.shape)}")
    if op == OP_MM and out_dtype not in (torch.float16, torch.bfloat16):
        raise ValueError(f"{op}: out_dtype must be torch.bfloat16 or torch.float16, got "
                         f"{out_dtype}")
    if op == OP_QUANT:
        if isinstance(out_scale, torch.Tensor):
            if out_scale.dtype != _F32 or out_scale.numel() != 1:
                raise TypeError(f"{op}: an out_scale tensor must hold one float32 value")
        elif not isinstance(out_scale, (float, int)) or isinstance(out_scale, bool):
            raise TypeError(f"{op}: out_scale must be a float or a float32 tensor")
    for name, t in (("w", w), ("a_scale", a_scale), ("w_scale", w_scale), ("bias", bias),
                    ("out", out)):
        if t is not None and t.device != a.device:
            raise ValueError(f"{op}: {name} is on {t.device}, a on {a.device}")
    if out is not None and (tuple(out.shape) != (*a.shape[:-1], n) or out.dtype != out_dtype):
        raise ValueError(f"{op}: out must be a {out_dtype} tensor of shape "
                         f"{(*a.shape[:-1], n)}; got {out.dtype} {tuple(out.shape)}")
    return n, k, m


def _kernel_ready(a: Any, w: Any, a_scale: Any, w_scale: Any, bias: Any, out_scale: Any,
                  out: Any, n: int, k: int) -> str | None:
    """Why the kernels cannot take these (validated) operands; None when they can."""
    if not a.is_cuda:
        return "cpu"
    if n % ALIGN or k % ALIGN:
        return "unaligned"
    tensors = (a, w, a_scale, w_scale, bias, out)
    if not all(t is None or t.is_contiguous() for t in tensors):
        return "noncontiguous"
    if any(t is not None and t.data_ptr() & 15 for t in tensors):
        return "misaligned"
    if isinstance(out_scale, torch.Tensor) and (out_scale.device != a.device
                                                or out_scale.data_ptr() & 3):
        return "out_scale"
    return None


def _reference(op: str, a: Any, w: Any, a_scale: Any, w_scale: Any, bias: Any,
               out_dtype: Any, out_scale: Any, out: Any) -> torch.Tensor:
    """The torch path: :func:`oasr_scaled_mm_fp8.reference.torch_scaled_mm`."""
    result = reference.torch_scaled_mm(a, w, a_scale, w_scale, bias, out_dtype,
                                       out_scale if op == OP_QUANT else None)
    return into_out(result, out)


_torch_path = torch_path(SERVING, _reference)
"""``_torch_path(reason, op, a, w, a_scale, w_scale, bias, out_dtype, out_scale, out)``:
:func:`_reference`, counted."""


def _run(op: str, a: torch.Tensor, w: torch.Tensor, a_scale: torch.Tensor,
         w_scale: torch.Tensor, bias: torch.Tensor | None, out_dtype: torch.dtype,
         out_scale: Any, out: torch.Tensor | None) -> torch.Tensor:
    n, k, m = _check(op, a, w, a_scale, w_scale, bias, out_dtype, out_scale, out)
    if a.device.type == "meta" or m == 0:
        return out if out is not None else a.new_empty((*a.shape[:-1], n), dtype=out_dtype)
    reason = _kernel_ready(a, w, a_scale, w_scale, bias, out_scale, out, n, k)
    if reason is not None:
        return _torch_path(reason, op, a, w, a_scale, w_scale, bias, out_dtype, out_scale, out)
    dev = a.get_device()
    key = (op, out_dtype, n, k, m, dev)
    plan = _PLANS.table.get(key)
    if plan is None:
        plan = on_device(dev, lambda: _plan(key))  # the heuristic reads the SM count
    if plan is TORCH:
        return _torch_path("selected", op, a, w, a_scale, w_scale, bias, out_dtype, out_scale,
                           out)
    if bias is not None and bias.dtype is not _F32:
        bias = bias.to(_F32)
    if out is None:
        out = plan.output(a, n, out_dtype)
    os_ptr, os_val = launch.out_scale_args(out_scale)
    status = plan(dev, a.data_ptr(), w.data_ptr(), a_scale.data_ptr(), w_scale.data_ptr(),
                  bias.data_ptr() if bias is not None else 0, os_ptr, os_val, out.data_ptr())
    if status:
        return _torch_path.refused(key, plan.config, launch.status_text(status),
                                   f"op={op} N={n} K={k} M={m}", op, a, w, a_scale, w_scale,
                                   bias, out_dtype, out_scale, out)
    return out


def _plan(key: tuple) -> Any:
    """Resolve one call shape: select a config, bind its launcher, prepare it."""
    return scaled_ops.plan_shape(SERVING, key, out_names=_OUT_NAMES, op_quant=OP_QUANT,
                                 select_mm=select_config, select_quant=select_quant_config)


_CUSTOM_OPS = scaled_ops.register_custom_ops(
    sys.modules[__name__], mm_name="scaled_mm_fp8", quant_name="scaled_mm_fp8_quant", op_mm=OP_MM,
    op_quant=OP_QUANT, quant_dtype=_E4M3)
"""``torch.ops.oasr.scaled_mm_fp8`` and ``torch.ops.oasr.scaled_mm_fp8_quant`` over :func:`_run`."""

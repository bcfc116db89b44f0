"""The gemm family's ops: ``gemm``, ``gemm_activation``, ``gemm_residual``,
``gemm_log_softmax``, ``bmm`` and ``group_gemm``, eager and as torch custom ops.

``gemm(a, w, bias=None, out=None)`` is ``torch.nn.functional.linear``: ``a`` is ``[..., K]``
(leading dims flattened into M), ``w`` is ``[N, K]``. ``gemm_activation`` adds a ReLU, GELU
(erf) or SiLU in the kernel's epilogue; ``gemm_residual`` adds the linear's output, scaled,
to a residual (``residual + alpha * (a @ w.T + bias)``; 3.x lane only); ``gemm_log_softmax``
is the CTC head, ``log_softmax(a @ w.T + bias, dim=-1)`` (a config's GEMM, then the row
log-softmax kernel over its output); ``bmm(a, b, out=None)`` is ``torch.bmm`` of 3-D operands
(attention written without SDPA, relative-position terms), keyed ``bmm_tn`` when ``b`` is the
transposed view of a contiguous ``[L, N, K]`` tensor and ``bmm_nn`` when ``b`` is a contiguous
``[L, K, N]``, with M the rows of ``a`` across the batch (``L * M``); ``group_gemm(xs, ws,
biases=None, out=None)`` is ``[F.linear(x, w, b) for x, w, b in zip(xs, ws, biases)]`` for a
group of problems of equal (N, K), with M the rows summed over the group. A call shape
resolves once per tuning epoch through ``oasr_core.select("gemm", op, dtype, (N, K), M)``;
the answer (a prepared launcher, or the torch path) is memoised per (op, activation, dtype,
N, K, M, device) in the current epoch (``bmm``'s with the batch count too, ``group_gemm``'s
with each problem's rows; the kit's :class:`oasr_core.kit.Serving`,
:data:`oasr_gemm.launch.SERVING`), so a repeated call is one dict lookup, a few tensor
checks, one ctypes call and the launch.

Inputs the kernels do not take (CPU tensors, fp32, N or K not a multiple of 8, non-contiguous
or misaligned tensors, autograd) take the torch path and are counted (:func:`stats`). A module
that cannot be built or loaded, or a launcher that refuses, is warned about once and the torch
path serves: slower, never wrong.

``torch.ops.oasr.gemm`` / ``gemm_activation`` / ``gemm_residual`` / ``gemm_log_softmax`` /
``bmm`` / ``group_gemm`` are the same ops registered with ``torch.library`` (with fake
implementations), so they trace under ``torch.compile`` and run in CUDA graphs; the Python
functions route to them while compiling.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from oasr_core.kit import TORCH
from oasr_core.kit.ops import SELECTED, check_like, custom_op, into_out, torch_path
from oasr_core.runtime import device_arch_of
from oasr_core.types import Tier

from oasr_gemm import launch
from oasr_gemm import log_softmax as row_log_softmax
from oasr_gemm.codegen import DTYPE_CODES
from oasr_gemm.config_space import (
    BMM_OPS,
    GROUP_OP,
    LOG_SOFTMAX_OP,
    RESIDUAL_OP,
    has_bmm,
    has_group,
)
from oasr_gemm.launch import SERVING, reserve_workspace
from oasr_gemm.numerics import ACTIVATIONS, apply_activation

__all__ = ["gemm", "gemm_activation", "gemm_residual", "gemm_log_softmax", "bmm",
           "group_gemm", "reserve_workspace", "stats", "reset_stats", "clear_memo"]

_DTYPES = {torch.float16: "fp16", torch.bfloat16: "bf16"}
_compiling = torch.compiler.is_compiling
_grad_enabled = torch.is_grad_enabled
_SELECTED = SELECTED
_PLANS, _FALLBACKS = SERVING.plans, SERVING.fallbacks
stats, reset_stats, clear_memo = SERVING.stats, SERVING.reset_stats, SERVING.clear


def gemm(a: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None = None,
         out: torch.Tensor | None = None) -> torch.Tensor:
    """``a @ w.T (+ bias)``, like ``F.linear``; written into ``out`` when given."""
    if _compiling():
        return into_out(torch.ops.oasr.gemm(a, w, bias), out)
    return _run("gemm", None, a, w, bias, out)


def gemm_activation(a: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None,
                    activation: str = "relu", out: torch.Tensor | None = None) -> torch.Tensor:
    """``act(a @ w.T + bias)`` with ``activation`` in relu, gelu (erf), silu, fused."""
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation {activation!r} is not one of {ACTIVATIONS}")
    if _compiling():
        return into_out(torch.ops.oasr.gemm_activation(a, w, bias, activation), out)
    return _run("gemm_activation", activation, a, w, bias, out)


def gemm_residual(a: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None,
                  residual: torch.Tensor, alpha: float = 1.0,
                  out: torch.Tensor | None = None) -> torch.Tensor:
    """``residual + alpha * (a @ w.T + bias)``: a linear added, scaled, to a residual stream
    (the Conformer's ``x + 0.5 * ff(x)``, a transformer's ``x + out(attn)``) in one kernel.

    ``residual`` has the output's shape ``[..., N]``, dtype and device (a ValueError
    otherwise); ``alpha`` is a run-time scalar, not part of the tuning key; ``out`` may be
    ``residual`` itself (in place). The kernel computes in fp32 and rounds once; the torch
    path (CPU, untuned, refused, unsupported inputs, autograd, the 2.x lane) is ``F.linear``
    then ``residual.add(y, alpha=alpha)``, never more kernels than the unfused model ran.
    There is no activation variant: none of the reference models' residual sites has an
    activation after its linear.
    """
    alpha = float(alpha)
    if _compiling():
        return into_out(torch.ops.oasr.gemm_residual(a, w, bias, residual, alpha), out)
    return _run_residual(a, w, bias, residual, alpha, out)


def gemm_log_softmax(a: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None = None,
                     out: torch.Tensor | None = None) -> torch.Tensor:
    """``log_softmax(a @ w.T + bias, dim=-1)``: the CTC head's linear and log-softmax over
    the vocabulary (N), in ``a``'s dtype; written into ``out`` when given.

    A kernel plan is the tuned gemm config writing the logits into the output, then the row
    log-softmax in place over it (fp32 online max and sum, rounded once). Untuned shapes,
    refused or unsupported calls and autograd take the torch path, ``F.linear`` then
    ``log_softmax`` (fp32 math inside for half inputs, as torch computes it).
    """
    if _compiling():
        return into_out(torch.ops.oasr.gemm_log_softmax(a, w, bias), out)
    return _run_log_softmax(a, w, bias, out)


def bmm(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """``torch.bmm(a, b)``: ``a [L, M, K] @ b [L, K, N]`` per batch, in the operands' dtype
    (fp32 accumulation); written into ``out`` when given.

    ``b`` is read in either layout the kernels have: a transposed view of a contiguous
    ``[L, N, K]`` tensor (``q @ k.transpose(-1, -2)``: op ``bmm_tn``) or a contiguous
    ``[L, K, N]`` one (``probs @ v``: op ``bmm_nn``); ``a`` and ``out`` are contiguous. A
    shape resolves once per epoch, keyed by (layout, N, K) and the rows of ``a`` across the
    batch, ``L * M``. Untuned shapes, other strides, N or K not a multiple of 8, CPU, fp32 and
    autograd take the torch path, ``torch.bmm`` (counted, :func:`stats`).
    """
    if _compiling():
        return into_out(torch.ops.oasr.bmm(a, b), out)
    return _run_bmm(a, b, out)


def group_gemm(xs: list[torch.Tensor], ws: list[torch.Tensor],
               biases: list[torch.Tensor | None] | None = None,
               out: list[torch.Tensor] | None = None) -> list[torch.Tensor]:
    """``[F.linear(x, w, b) for x, w, b in zip(xs, ws, biases)]``: G linears of equal weight
    shape ``[N, K]`` and any rows each (``x_g`` is ``[..., K]``, ``M_g = x_g.numel() // K``),
    written into the tensors of ``out`` when given.

    The shape of expert layers, per-layer adapters and the projections of different inputs
    at one width (``x W_q``, ``x W_k``, ``x W_v``, ``p W_pos``). A group resolves once per
    epoch keyed by (N, K) and the rows summed over it (the grid and the bytes scale with the
    sum); the plan is prepared for the group's list of rows. Groups of unequal (N, K), fp32,
    CPU, autograd, unaligned or non-contiguous operands, biases given for some problems only,
    and untuned groups take the torch path, the loop of ``F.linear`` (counted, :func:`stats`).
    """
    if _compiling():
        results = torch.ops.oasr.group_gemm(list(xs), list(ws), _group_biases(xs, biases))
        if out is None:
            return results
        _check_group_out(out, len(results))
        return [into_out(r, o) for r, o in zip(results, out, strict=True)]
    return _run_group(xs, ws, biases, out)


def _unsupported(a: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None, n: int,
                 k: int) -> str | None:
    """Why the kernels cannot take these operands (None: they can); shapes already match."""
    if not (a.is_cuda and w.is_cuda):
        return "cpu"
    dtype = a.dtype
    if dtype not in _DTYPES or w.dtype != dtype:
        return "dtype"
    if n % 8 or k % 8:
        return "unaligned"
    if not (a.is_contiguous() and w.is_contiguous()):
        return "noncontiguous"
    dev = a.get_device()
    if w.get_device() != dev:
        return "device"
    if bias is not None and (bias.dtype != dtype or bias.shape != (n,)
                             or bias.get_device() != dev or not bias.is_contiguous()):
        return "bias"
    if _grad_enabled() and (a.requires_grad or w.requires_grad
                                    or (bias is not None and bias.requires_grad)):
        return "autograd"
    return None


def _linear(activation: str | None, a: torch.Tensor, w: torch.Tensor,
            bias: torch.Tensor | None, out: torch.Tensor | None) -> torch.Tensor:
    """The torch path of ``gemm`` / ``gemm_activation``: ``F.linear`` and the activation."""
    result = F.linear(a, w, bias)
    if activation is not None:
        result = apply_activation(result, activation)
    return into_out(result, out)


_torch_path = torch_path(SERVING, _linear)
"""``_torch_path(reason, activation, a, w, bias, out)``: :func:`_linear`, counted."""


def _check_out(out: torch.Tensor, a: torch.Tensor, n: int) -> None:
    check_like(out, (*a.shape[:-1], n), a.dtype, a.device)


def _key(op: str, activation: str | None, a: torch.Tensor, w: torch.Tensor) -> tuple | None:
    """The plan key of a call, ``(op, activation, dtype, N, K, M, device)`` (:func:`_run`'s);
    None when ``w`` is not 2-D. A CPU tensor's device is -1 and an empty input's M is 0: no
    plan is ever stored under either."""
    try:
        n, k = w.shape
    except ValueError:
        return None
    return (op, activation, a.dtype, n, k, a.numel() // k if k else 0, a.get_device())


def _run(op: str, activation: str | None, a: torch.Tensor, w: torch.Tensor,
         bias: torch.Tensor | None, out: torch.Tensor | None) -> torch.Tensor:
    # The memo first: a shape the tiers leave to torch costs the key and one lookup on top of
    # F.linear (which checks the operands itself). The key holds M = numel / K, not a's
    # shape: a mismatched K still reaches F.linear, which raises as it would for the model.
    try:
        n, k = w.shape
    except ValueError:
        return _torch_path("shape", activation, a, w, bias, out)
    key = (op, activation, a.dtype, n, k, a.numel() // k if k else 0, a.get_device())
    plan = _PLANS.table.get(key)
    if plan is TORCH and out is None and activation is None:
        # The tiers chose torch for this shape: no operand checks, torch takes anything.
        _FALLBACKS[_SELECTED] += 1
        return F.linear(a, w, bias)
    ashape = a.shape
    if not ashape or ashape[-1] != k:
        return _torch_path("shape", activation, a, w, bias, out)
    if out is not None:
        _check_out(out, a, n)
    dev, m = key[6], key[5]
    if dev < 0:
        return _torch_path("cpu", activation, a, w, bias, out)
    if m == 0:
        return _torch_path("empty", activation, a, w, bias, out)
    dtype = key[2]
    if plan is TORCH:
        return _torch_path("selected", activation, a, w, bias, out)
    # A plan exists only for a dtype the kernels take and aligned N, K (the key holds them);
    # the rest is per call, checked inline, the reason looked up only when a check fails.
    if plan is None or not (
            a.is_cuda and w.is_cuda and w.dtype is dtype and a.is_contiguous()
            and w.is_contiguous() and w.get_device() == dev
            and (bias is None or (bias.dtype is dtype and bias.dim() == 1
                                  and bias.numel() == n and bias.get_device() == dev
                                  and bias.is_contiguous()))
            and not (_grad_enabled() and (a.requires_grad or w.requires_grad
                                          or (bias is not None and bias.requires_grad)))):
        reason = _unsupported(a, w, bias, n, k)
        if reason is not None:
            return _torch_path(reason, activation, a, w, bias, out)
        if plan is None:
            plan = _plan(key)
        if plan is TORCH:
            return _torch_path("selected", activation, a, w, bias, out)
    if out is None:
        out = plan.output(a, n)
    elif not out.is_contiguous():
        return _torch_path("noncontiguous", activation, a, w, bias, out)
    a_ptr, w_ptr, d_ptr = a.data_ptr(), w.data_ptr(), out.data_ptr()
    b_ptr = bias.data_ptr() if bias is not None else 0
    if (a_ptr | w_ptr | d_ptr | b_ptr) & 15:
        return _torch_path("misaligned", activation, a, w, bias, out)
    status = plan(dev, a_ptr, w_ptr, b_ptr, d_ptr)
    if status:
        return _torch_path.refused(key, plan.config, launch.status_text(status),
                                   f"op={op} N={n} K={k} M={m}", activation, a, w, bias, out)
    return out


def _linear_residual(a: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None,
                     residual: torch.Tensor, alpha: float, out: torch.Tensor | None
                     ) -> torch.Tensor:
    """The torch path of ``gemm_residual``: ``F.linear`` then the scaled add."""
    y = F.linear(a, w, bias)
    if out is None:
        return residual.add(y, alpha=alpha)
    return torch.add(residual, y, alpha=alpha, out=out)


_torch_residual = torch_path(SERVING, _linear_residual)
"""``_torch_residual(reason, a, w, bias, residual, alpha, out)``: :func:`_linear_residual`,
counted."""


def _check_residual(residual: torch.Tensor, a: torch.Tensor, n: int) -> None:
    check_like(residual, (*a.shape[:-1], n), a.dtype, a.device, name="residual")


def _run_residual(a: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None,
                  residual: torch.Tensor, alpha: float, out: torch.Tensor | None
                  ) -> torch.Tensor:
    """:func:`gemm_residual` outside compilation: :func:`_run`'s checks plus the residual's.

    As in :func:`_run`, the memo comes first: a shape the tiers leave to torch is
    ``F.linear`` and the add, the residual checked against the linear's output (shape and
    dtype, what the add would otherwise broadcast or promote) and, only when they differ,
    named by :func:`_check_residual`'s error."""
    try:
        n, k = w.shape
    except ValueError:
        return _torch_residual("shape", a, w, bias, residual, alpha, out)
    key = (RESIDUAL_OP, None, a.dtype, n, k, a.numel() // k if k else 0, a.get_device())
    plan = _PLANS.table.get(key)
    if plan is TORCH and out is None:
        y = F.linear(a, w, bias)
        if residual.shape != y.shape or residual.dtype is not y.dtype:
            _check_residual(residual, a, n)
        _FALLBACKS[_SELECTED] += 1
        return residual.add(y, alpha=alpha)
    ashape = a.shape
    if not ashape or ashape[-1] != k:
        return _torch_residual("shape", a, w, bias, residual, alpha, out)
    _check_residual(residual, a, n)
    if out is not None:
        _check_out(out, a, n)
    dev, m = key[6], key[5]
    if dev < 0:
        return _torch_residual("cpu", a, w, bias, residual, alpha, out)
    if m == 0:
        return _torch_residual("empty", a, w, bias, residual, alpha, out)
    dtype = key[2]
    if plan is TORCH:
        return _torch_residual("selected", a, w, bias, residual, alpha, out)
    if plan is None or not (
            a.is_cuda and w.is_cuda and w.dtype is dtype and a.is_contiguous()
            and w.is_contiguous() and w.get_device() == dev and residual.is_contiguous()
            and (bias is None or (bias.dtype is dtype and bias.dim() == 1
                                  and bias.numel() == n and bias.get_device() == dev
                                  and bias.is_contiguous()))
            and not (_grad_enabled() and (a.requires_grad or w.requires_grad
                                          or residual.requires_grad
                                          or (bias is not None and bias.requires_grad)))):
        reason = _unsupported(a, w, bias, n, k)
        if reason is None and not residual.is_contiguous():
            reason = "noncontiguous"
        if reason is None and _grad_enabled() and residual.requires_grad:
            reason = "autograd"
        if reason is not None:
            return _torch_residual(reason, a, w, bias, residual, alpha, out)
        if plan is None:
            plan = _plan(key)
        if plan is TORCH:
            return _torch_residual("selected", a, w, bias, residual, alpha, out)
    if out is None:
        out = plan.output(a, n)
    elif not out.is_contiguous():
        return _torch_residual("noncontiguous", a, w, bias, residual, alpha, out)
    a_ptr, w_ptr, r_ptr, d_ptr = a.data_ptr(), w.data_ptr(), residual.data_ptr(), out.data_ptr()
    b_ptr = bias.data_ptr() if bias is not None else 0
    if (a_ptr | w_ptr | r_ptr | d_ptr | b_ptr) & 15:
        return _torch_residual("misaligned", a, w, bias, residual, alpha, out)
    status = plan(dev, a_ptr, w_ptr, b_ptr, r_ptr, d_ptr, alpha)
    if status:
        return _torch_residual.refused(key, plan.config, launch.status_text(status),
                                       f"op={RESIDUAL_OP} N={n} K={k} M={m}", a, w, bias,
                                       residual, alpha, out)
    return out


def _linear_log_softmax(a: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None,
                        out: torch.Tensor | None) -> torch.Tensor:
    """The torch path of ``gemm_log_softmax``: ``F.linear`` then ``log_softmax`` over N."""
    return into_out(torch.log_softmax(F.linear(a, w, bias), dim=-1), out)


_torch_log_softmax = torch_path(SERVING, _linear_log_softmax)
"""``_torch_log_softmax(reason, a, w, bias, out)``: :func:`_linear_log_softmax`, counted."""


def _run_log_softmax(a: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None,
                     out: torch.Tensor | None) -> torch.Tensor:
    """:func:`gemm_log_softmax` outside compilation: :func:`_run`'s memo and checks, its plan a
    :class:`oasr_gemm.log_softmax.LogSoftmaxCall` (the GEMM, then the row kernel)."""
    try:
        n, k = w.shape
    except ValueError:
        return _torch_log_softmax("shape", a, w, bias, out)
    key = (LOG_SOFTMAX_OP, None, a.dtype, n, k, a.numel() // k if k else 0, a.get_device())
    plan = _PLANS.table.get(key)
    if plan is TORCH and out is None:
        _FALLBACKS[_SELECTED] += 1
        return torch.log_softmax(F.linear(a, w, bias), dim=-1)
    ashape = a.shape
    if not ashape or ashape[-1] != k:
        return _torch_log_softmax("shape", a, w, bias, out)
    if out is not None:
        _check_out(out, a, n)
    dev, m = key[6], key[5]
    if dev < 0:
        return _torch_log_softmax("cpu", a, w, bias, out)
    if m == 0:
        return _torch_log_softmax("empty", a, w, bias, out)
    if plan is TORCH:
        return _torch_log_softmax("selected", a, w, bias, out)
    dtype = key[2]
    if plan is None or not (
            a.is_cuda and w.is_cuda and w.dtype is dtype and a.is_contiguous()
            and w.is_contiguous() and w.get_device() == dev
            and (bias is None or (bias.dtype is dtype and bias.dim() == 1
                                  and bias.numel() == n and bias.get_device() == dev
                                  and bias.is_contiguous()))
            and not (_grad_enabled() and (a.requires_grad or w.requires_grad
                                          or (bias is not None and bias.requires_grad)))):
        reason = _unsupported(a, w, bias, n, k)
        if reason is not None:
            return _torch_log_softmax(reason, a, w, bias, out)
        if plan is None:
            plan = _plan(key)
        if plan is TORCH:
            return _torch_log_softmax("selected", a, w, bias, out)
    if out is None:
        out = plan.output(a, n)
    elif not out.is_contiguous():
        return _torch_log_softmax("noncontiguous", a, w, bias, out)
    a_ptr, w_ptr, d_ptr = a.data_ptr(), w.data_ptr(), out.data_ptr()
    b_ptr = bias.data_ptr() if bias is not None else 0
    if (a_ptr | w_ptr | d_ptr | b_ptr) & 15:
        return _torch_log_softmax("misaligned", a, w, bias, out)
    status = plan(dev, a_ptr, w_ptr, b_ptr, d_ptr)
    if status:
        return _torch_log_softmax.refused(key, plan.config, launch.status_text(status),
                                          f"op={LOG_SOFTMAX_OP} N={n} K={k} M={m}", a, w,
                                          bias, out)
    return out


def _bmm(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None) -> torch.Tensor:
    """The torch path of ``bmm``: ``torch.bmm`` (which checks the operands itself)."""
    if out is None:
        return torch.bmm(a, b)
    return torch.bmm(a, b, out=out)


_torch_bmm = torch_path(SERVING, _bmm)
"""``_torch_bmm(reason, a, b, out)``: :func:`_bmm`, counted."""


def bmm_layout(b: torch.Tensor) -> str | None:
    """The layout of a 3-D ``b [L, K, N]`` the batched kernels read: ``"nn"`` when it is
    contiguous, ``"tn"`` when it is the transposed view of a contiguous ``[L, N, K]`` tensor,
    else None (the torch path)."""
    if b.is_contiguous():
        return "nn"
    if b.transpose(1, 2).is_contiguous():
        return "tn"
    return None


def _unsupported_bmm(a: torch.Tensor, b: torch.Tensor) -> str | None:
    """Why the batched kernels cannot take these operands (None: they can); shapes match and
    ``b``'s layout is one of theirs."""
    if not (a.is_cuda and b.is_cuda):
        return "cpu"
    if a.dtype not in _DTYPES or b.dtype != a.dtype:
        return "dtype"
    if a.shape[2] % 8 or b.shape[2] % 8:
        return "unaligned"
    if not a.is_contiguous():
        return "noncontiguous"
    if b.get_device() != a.get_device():
        return "device"
    if _grad_enabled() and (a.requires_grad or b.requires_grad):
        return "autograd"
    return None


def _run_bmm(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None) -> torch.Tensor:
    """:func:`bmm` outside compilation: the memo first, then the checks, then one launch.

    The plan key is ``(op, None, dtype, N, K, L * M, device, L)``: the tiers' M is the rows
    of ``a`` across the batch, the launch needs the batch count as well."""
    try:
        batch, m, k = a.shape
        _, _, n = b.shape
    except ValueError:
        return _torch_bmm("shape", a, b, out)
    layout = bmm_layout(b)
    if layout is None:
        return _torch_bmm("noncontiguous", a, b, out)
    key = (BMM_OPS[layout], None, a.dtype, n, k, batch * m, a.get_device(), batch)
    plan = _PLANS.table.get(key)
    if plan is TORCH and out is None:
        _FALLBACKS[_SELECTED] += 1
        return torch.bmm(a, b)
    if b.shape[0] != batch or b.shape[1] != k:
        return _torch_bmm("shape", a, b, out)
    if out is not None:
        check_like(out, (batch, m, n), a.dtype, a.device)
    dev = key[6]
    if dev < 0:
        return _torch_bmm("cpu", a, b, out)
    if batch * m * n == 0 or k == 0:
        return _torch_bmm("empty", a, b, out)
    if plan is TORCH:
        return _torch_bmm("selected", a, b, out)
    if plan is None or not (
            a.is_cuda and b.is_cuda and b.dtype is a.dtype and a.is_contiguous()
            and b.get_device() == dev
            and not (_grad_enabled() and (a.requires_grad or b.requires_grad))):
        reason = _unsupported_bmm(a, b)
        if reason is not None:
            return _torch_bmm(reason, a, b, out)
        if plan is None:
            plan = _plan_bmm(key)
        if plan is TORCH:
            return _torch_bmm("selected", a, b, out)
    if out is None:
        out = plan.output(a, n)
    elif not out.is_contiguous():
        return _torch_bmm("noncontiguous", a, b, out)
    a_ptr, b_ptr, d_ptr = a.data_ptr(), b.data_ptr(), out.data_ptr()
    if (a_ptr | b_ptr | d_ptr) & 15:
        return _torch_bmm("misaligned", a, b, out)
    status = plan(dev, a_ptr, b_ptr, d_ptr, batch)
    if status:
        return _torch_bmm.refused(key, plan.config, launch.status_text(status),
                                  f"op={key[0]} N={n} K={k} L={batch} M={m}", a, b, out)
    return out


def _plan_bmm(key: tuple) -> Any:
    """Resolve one bmm call shape: the tiers' config for ``(op, dtype, (N, K), L * M)``, its
    batched launcher for the layout, prepared for ``L`` problems of ``M`` rows.

    As for ``gemm_residual``, the cost-model tier's answer is not served (that tier ranks the
    gemm production set, whose configs have no batched unit linked unless an entry names
    them), nor a config without batched units (split-K, Stream-K)."""
    import oasr_core

    op, _, tdtype, n, k, rows, dev, batch = key
    dtype, arch = _DTYPES[tdtype], device_arch_of(dev)
    layout = "tn" if op == BMM_OPS["tn"] else "nn"

    def select() -> Any:
        sel = oasr_core.select("gemm", op, dtype, (n, k), rows, arch)
        if sel.tier is Tier.MODEL or sel.config is None or not has_bmm(sel.config):
            return None
        return sel.config

    return SERVING.plan(
        key, arch, select=select, kernel_key=lambda config: launch.bmm_key(layout, config.id),
        prepare=lambda kernel: kernel.prepare(dtype, batch, rows // batch, n, k),
        what=f"op={op} {dtype} N={n} K={k}")


def _group_biases(xs: list[torch.Tensor], biases: list[torch.Tensor | None] | None
                  ) -> list[torch.Tensor | None]:
    """``biases`` as a list of one entry per problem (``None`` given: no bias anywhere); a
    list of another length is a ValueError naming both lengths."""
    if biases is None:
        return [None] * len(xs)
    if len(biases) != len(xs):
        raise ValueError(f"group_gemm: biases has {len(biases)} entries for {len(xs)} problems")
    return list(biases)


def _check_group_out(out: list[torch.Tensor], groups: int) -> None:
    if len(out) != groups:
        raise ValueError(f"group_gemm: out has {len(out)} tensors for {groups} problems")


def _linear_group(xs: list[torch.Tensor], ws: list[torch.Tensor],
                  biases: list[torch.Tensor | None], out: list[torch.Tensor] | None
                  ) -> list[torch.Tensor]:
    """The torch path of ``group_gemm``: one ``F.linear`` per problem (each checks its
    operands itself)."""
    if out is None:
        return [F.linear(x, w, b) for x, w, b in zip(xs, ws, biases, strict=True)]
    return [into_out(F.linear(x, w, b), o) for x, w, b, o in zip(xs, ws, biases, out,
                                                                  strict=True)]


_torch_group = torch_path(SERVING, _linear_group)
"""``_torch_group(reason, xs, ws, biases, out)``: :func:`_linear_group`, counted once per
group call."""


def _unsupported_group(xs: list[torch.Tensor], ws: list[torch.Tensor],
                       biases: list[torch.Tensor | None], n: int, k: int) -> str | None:
    """Why the grouped kernel cannot take this group (None: it can): each problem as
    :func:`_unsupported` judges a linear's operands, all on one device, in one dtype, with a
    bias on every problem or on none."""
    with_bias = biases[0] is not None
    dev, dtype = xs[0].get_device(), xs[0].dtype
    for x, w, b in zip(xs, ws, biases, strict=True):
        if (b is not None) != with_bias:
            return "bias"
        reason = _unsupported(x, w, b, n, k)
        if reason is not None:
            return reason
        if x.dtype != dtype:
            return "dtype"
        if x.get_device() != dev:
            return "device"
    return None


def _run_group(xs: list[torch.Tensor], ws: list[torch.Tensor],
               biases: list[torch.Tensor | None] | None, out: list[torch.Tensor] | None
               ) -> list[torch.Tensor]:
    """:func:`group_gemm` outside compilation: the argument checks, the memo, the operand
    checks, then one launch for the group.

    The plan key is ``(op, None, dtype, N, K, sum of M_g, device, (M_1, ..., M_G))``: the tiers'
    M is the rows summed over the group; the prepared call owns the problem records of its
    list of rows."""
    groups = len(xs)
    if groups == 0 or len(ws) != groups:
        raise ValueError(f"group_gemm: {groups} inputs and {len(ws)} weights; a group needs "
                         "one weight per input and at least one problem")
    bs = _group_biases(xs, biases)
    if out is not None:
        _check_group_out(out, groups)
    w0 = ws[0]
    if w0.dim() != 2 or any(w.shape != w0.shape for w in ws):
        return _torch_group("unequal", xs, ws, bs, out)
    n, k = w0.shape
    if any(not x.shape or x.shape[-1] != k for x in xs):
        return _torch_group("shape", xs, ws, bs, out)
    if out is not None:
        for x, o in zip(xs, out, strict=True):
            _check_out(o, x, n)
    rows = tuple(x.numel() // k if k else 0 for x in xs)
    dev = xs[0].get_device()
    key = (GROUP_OP, None, xs[0].dtype, n, k, sum(rows), dev, rows)
    plan = _PLANS.table.get(key)
    if plan is TORCH:
        return _torch_group("selected", xs, ws, bs, out)
    reason = _unsupported_group(xs, ws, bs, n, k)
    if reason is not None:
        return _torch_group(reason, xs, ws, bs, out)
    if key[5] == 0:
        return _torch_group("empty", xs, ws, bs, out)
    if plan is None:
        plan = _plan_group(key)
        if plan is TORCH:
            return _torch_group("selected", xs, ws, bs, out)
    if out is not None and not all(o.is_contiguous() for o in out):
        return _torch_group("noncontiguous", xs, ws, bs, out)
    outs = out if out is not None else [plan.output(x, n) for x in xs]
    ptrs = 0
    for t in (*xs, *ws, *outs, *(b for b in bs if b is not None)):
        ptrs |= t.data_ptr()
    if ptrs & 15:
        return _torch_group("misaligned", xs, ws, bs, out)
    status = plan(dev, xs, ws, bs, outs)
    if status:
        return _torch_group.refused(key, plan.config, launch.status_text(status),
                                    f"op={GROUP_OP} N={n} K={k} G={groups} M={key[5]}",
                                    xs, ws, bs, out)
    return outs


def _plan_group(key: tuple) -> Any:
    """Resolve one group: the tiers' config for ``(group_gemm, dtype, (N, K), sum of M_g)``
    and that config's grouped launcher (:func:`oasr_gemm.launch.group_key`), prepared for the
    group's rows.

    As for ``bmm``, the cost-model tier's answer is not served, nor a config without a
    grouped unit (:func:`oasr_gemm.config_space.has_group`: the split-free 2.x configs; on an
    sm90 device the tiers' lane is the 3.x one, which has none, so groups run on torch
    there); a config whose grouped launcher is not in the process's module is warned about
    once and torch serves."""
    import oasr_core

    op, _, tdtype, n, k, rows, dev, ms = key
    dtype, arch = _DTYPES[tdtype], device_arch_of(dev)

    def select() -> Any:
        sel = oasr_core.select("gemm", op, dtype, (n, k), rows, arch)
        if sel.tier is Tier.MODEL or sel.config is None or not has_group(sel.config):
            return None
        return sel.config

    return SERVING.plan(
        key, arch, select=select, kernel_key=lambda config: launch.group_key(config.id),
        prepare=lambda kernel: kernel.prepare(dtype, ms, n, k),
        what=f"op={op} {dtype} N={n} K={k} G={len(ms)}")


MEASURED_ACTIVATIONS = frozenset({"silu", "relu"})
"""Activations a ``gemm_activation`` entry's measurements speak for: the build measures SiLU
(:data:`oasr_gemm.bench.BENCH_ACTIVATION`) and ReLU's epilogue is cheaper. GELU (erf) is not
among them: on the H200 its fused epilogue made pp_128x192x64 take 97 us at M=12000 N=2048
K=512 where the build had timed it 55 us with SiLU and torch's linear + gelu took 79 us
(benchmarks/results/h200_served_gelu.md). The entries carry no activation, so a GELU call
runs on torch until they do."""


def _plan(key: tuple) -> Any:
    """Resolve one call shape: select a config, bind its launcher, size its workspace.

    A ``gemm_residual`` shape takes the config's fused-residual launcher
    (:func:`oasr_gemm.launch.residual_key`); the cost-model tier's answer is not served for it
    (that tier ranks the gemm production set, whose configs have no fused-residual unit
    linked unless an entry names them), so such a shape runs on torch, as untuned ones do.
    A ``gemm_log_softmax`` shape takes the config's own launcher (bias epilogue, no
    activation) composed with the row log-softmax (:func:`oasr_gemm.log_softmax.compose`);
    where the row kernel cannot load the shape runs on torch.
    """
    import oasr_core

    op, activation, tdtype, n, k, m, dev = key
    dtype, arch = _DTYPES[tdtype], device_arch_of(dev)
    unmeasured = activation is not None and activation not in MEASURED_ACTIVATIONS
    residual = op == RESIDUAL_OP

    def select() -> Any:
        if unmeasured:
            return None
        sel = oasr_core.select("gemm", op, dtype, (n, k), m, arch)
        return None if residual and sel.tier is Tier.MODEL else sel.config

    if op == LOG_SOFTMAX_OP:
        def prepare(kernel: Any) -> Any:
            return row_log_softmax.compose(kernel.prepare(dtype, m, n, k, None), arch,
                                           DTYPE_CODES[dtype], m, n)
    else:
        def prepare(kernel: Any) -> Any:
            return kernel.prepare(dtype, m, n, k, activation)

    return SERVING.plan(
        key, arch, select=select,
        kernel_key=(lambda config: launch.residual_key(config.id)) if residual
        else (lambda config: config.id),
        prepare=prepare, what=f"op={op} {dtype} N={n} K={k}")


def _linear_fake(a, w, *_):
    return a.new_empty((*a.shape[:-1], w.shape[0]))


_gemm_op = custom_op("gemm", "(Tensor a, Tensor w, Tensor? bias) -> Tensor",
                     lambda a, w, bias: _run("gemm", None, a, w, bias, None), _linear_fake)
_gemm_activation_op = custom_op(
    "gemm_activation", "(Tensor a, Tensor w, Tensor? bias, str activation) -> Tensor",
    lambda a, w, bias, activation: _run("gemm_activation", activation, a, w, bias, None),
    _linear_fake)
_gemm_residual_op = custom_op(
    "gemm_residual",
    "(Tensor a, Tensor w, Tensor? bias, Tensor residual, float alpha) -> Tensor",
    lambda a, w, bias, residual, alpha: _run_residual(a, w, bias, residual, alpha, None),
    _linear_fake)
_bmm_op = custom_op("bmm", "(Tensor a, Tensor b) -> Tensor",
                    lambda a, b: _run_bmm(a, b, None),
                    lambda a, b: a.new_empty((a.shape[0], a.shape[1], b.shape[2])))
_group_gemm_op = custom_op(
    "group_gemm", "(Tensor[] xs, Tensor[] ws, Tensor?[] biases) -> Tensor[]",
    lambda xs, ws, biases: _run_group(xs, ws, biases, None),
    lambda xs, ws, biases: [x.new_empty((*x.shape[:-1], w.shape[0]))
                            for x, w in zip(xs, ws, strict=True)])
_gemm_log_softmax_op = custom_op(
    "gemm_log_softmax", "(Tensor a, Tensor w, Tensor? bias) -> Tensor",
    lambda a, w, bias: _run_log_softmax(a, w, bias, None), _linear_fake)

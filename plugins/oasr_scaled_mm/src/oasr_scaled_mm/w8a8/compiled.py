"""A W8A8 format's pattern for ``torch.compile(backend="oasr", options={"quantization": ...})``
(``oasr_compile_patterns``): the compiled model's linears quantized where that pays.

Asked for the format's scheme (``int8_w8a8``, ``fp8_w8a8``), the family declares one linear
pattern. A linear site (``x [M, K] @ W^T + b`` in fp16/bf16; its activation or residual add
stays Inductor's, fused into its pointwise kernels) becomes ``oasr::<family>_linear(x, W, b)``
where the family's verdict at that shape is "quantized":

* a user or system tier entry naming one of its configs (``Sentinel.UNQUANTIZED``: the build
  measured the layer faster unquantized, so the site is left);
* at a shape no entry covers, the format's untuned route (``<package>.untuned.MODELS``: the
  heuristic's tile plus the activation quantizer predicted to beat the layer in its dtype);
  otherwise the site falls through to the full-precision patterns (gemm's, where its tiers
  choose it) or stays Inductor's.

A linear after a LayerNorm (``site.norm``) takes the norm's rows quantized in the norm:
``oasr::<family>_norm_quantize(x, weight, bias, eps)`` (the family's fused kernel), one per
norm and shared by every linear after it, then ``oasr::<family>_rows_linear(q, scale, W,
b)``; the untuned route then counts what quantizing in the norm adds, not a quantizer.

With a dynamic row count the site is quantized where an entry names a config in some M
region (a normed site too, as the plain quantized linear); the op then decides per call
exactly as the eager quantized linear does (``<package>.ops.unquantized``: quantized, or
``F.linear`` in the activation dtype).

The op quantizes the activation per token (the family's one-kernel quantizer) and the weight
once per output channel: the quantized weight is cached by the weight tensor's storage and
version (:func:`weight_for`, the kit's prepared-weight cache), so a compiled graph, whose
weights are inputs, quantizes each weight once, not per call. Importing this module imports
no torch.
"""

from __future__ import annotations

import functools
from typing import Any

from oasr_core.kit.weights import prepared, stamp

from oasr_scaled_mm.w8a8.formats import Format
from oasr_scaled_mm.w8a8.weights import QuantizedWeight

LINEAR_SCHEMA = "(Tensor x, Tensor w, Tensor? bias) -> Tensor"
NORM_SCHEMA = "(Tensor x, Tensor? weight, Tensor? bias, float eps) -> (Tensor, Tensor)"
ROWS_SCHEMA = "(Tensor q, Tensor scale, Tensor w, Tensor? bias) -> Tensor"


def op_name(fmt: Format) -> str:
    """The custom op's name under ``torch.ops.oasr``: ``<family>_linear``."""
    return f"{fmt.family}_linear"


_OWNERS: dict[tuple, Any] = {}
"""Where a weight's quantized form is kept (the kit's :func:`~oasr_core.kit.weights.prepared`
owner), by the weight's (device, storage pointer, family): a compiled graph hands the op the
weight's storage, not necessarily the same tensor object on every call."""


def weight_for(fmt: Format, w: Any, bias: Any) -> QuantizedWeight:
    """The quantized copy of the weight ``w [N, K]`` (per output channel) and the float32
    bias, made on first use and whenever ``w`` or ``bias`` changed (the kit's stamps)."""
    import types

    import torch

    from oasr_scaled_mm.w8a8.linear import reference_rows

    slot = (w.device, w.data_ptr() if w.device.type != "meta" else id(w), fmt.family)
    owner = _OWNERS.setdefault(slot, types.SimpleNamespace())

    def make() -> QuantizedWeight:
        q, scale = reference_rows(fmt, w.detach())
        b32 = bias.detach().to(torch.float32).contiguous() if bias is not None else None
        return QuantizedWeight(weight=q.contiguous(), scale=scale.contiguous(), bias=b32)

    return prepared(owner, fmt.cache_attr, (*stamp(w), *stamp(bias)), make, in_capture=True)


def linear(fmt: Format, x: Any, w: Any, bias: Any) -> Any:
    """``x @ w.T + bias`` (``x [M, K]`` fp16/bf16) as the format's W8A8 GEMM, or, where the
    family's route says unquantized at this shape (CUDA only), ``F.linear`` in ``x``'s dtype:
    what the eager quantized linear computes, for a compiled graph's weight tensor."""
    import torch

    ops, quantize = fmt.module("ops"), fmt.module("quantize")
    n, k = w.shape
    m = x.numel() // k if k else 0
    if x.is_cuda and ops.unquantized(n, k, m, x.device.index):
        return torch.nn.functional.linear(x, w, bias)
    state = weight_for(fmt, w, bias)
    q, a_scale = quantize.quantize_rows(x.contiguous())
    out_dtype = x.dtype if x.dtype in (torch.float16, torch.bfloat16) else torch.bfloat16
    y = getattr(ops, fmt.op_mm)(q, state.weight, a_scale, state.scale, state.bias,
                                out_dtype=out_dtype)
    return y if y.dtype == x.dtype else y.to(x.dtype)


@functools.cache
def custom_op(fmt: Format) -> Any:
    """``torch.ops.oasr.<family>_linear`` (registered on first use, with its fake)."""
    import torch

    @torch.library.custom_op(f"oasr::{op_name(fmt)}", mutates_args=(), schema=LINEAR_SCHEMA)
    def op(x, w, bias):
        return linear(fmt, x, w, bias)

    @op.register_fake
    def _fake(x, w, bias):
        return x.new_empty((*x.shape[:-1], w.shape[0]))

    return getattr(torch.ops.oasr, op_name(fmt)).default


def norm_quantize(fmt: Format, x: Any, weight: Any, bias: Any, eps: float) -> tuple[Any, Any]:
    """``(q [..., K], scale float32 [...])``: the rows of ``layer_norm(x)`` (over the last
    dim) quantized, in one pass by the family's fused kernel where it serves (contiguous
    fp16/bf16 CUDA rows), else torch's norm then the family's quantizer (what the eager
    quantized model's deferred norm computes, :mod:`oasr_scaled_mm.w8a8.normed`)."""
    import types

    from torch.nn import functional as F

    from oasr_scaled_mm.w8a8.normed import fusable

    quantize = fmt.module("quantize")
    norm = types.SimpleNamespace(weight=weight, bias=bias, eps=eps,
                                 normalized_shape=(x.shape[-1],))
    if fusable(x, norm):
        got = quantize.norm_quantize_rows(x.detach(), norm)
        if got is not None:
            return got
    return quantize.quantize_rows(F.layer_norm(x, (x.shape[-1],), weight, bias, eps))


def rows_linear(fmt: Format, q: Any, scale: Any, w: Any, bias: Any) -> Any:
    """``[M, N]`` in ``w``'s dtype: the format's GEMM of quantized rows ``q [..., K]`` (per-row
    ``scale``) with ``w``'s cached quantized form (:func:`weight_for`)."""
    ops = fmt.module("ops")
    k = w.shape[1]
    state = weight_for(fmt, w, bias)
    y = getattr(ops, fmt.op_mm)(q.reshape(-1, k), state.weight, scale.reshape(-1),
                                state.scale, state.bias, out_dtype=w.dtype)
    return y


@functools.cache
def norm_ops(fmt: Format) -> tuple[Any, Any]:
    """``torch.ops.oasr.<family>_norm_quantize`` (a LayerNorm's rows quantized, for every
    linear after it) and ``torch.ops.oasr.<family>_rows_linear`` (a linear of quantized
    rows), registered on first use with their fakes."""
    import torch

    element = getattr(torch, fmt.dtype)

    @torch.library.custom_op(f"oasr::{fmt.family}_norm_quantize", mutates_args=(),
                             schema=NORM_SCHEMA)
    def norm_op(x, weight, bias, eps):
        return norm_quantize(fmt, x, weight, bias, eps)

    @norm_op.register_fake
    def _norm_fake(x, weight, bias, eps):
        return x.new_empty(x.shape, dtype=element), \
            x.new_empty(x.shape[:-1], dtype=torch.float32)

    @torch.library.custom_op(f"oasr::{fmt.family}_rows_linear", mutates_args=(),
                             schema=ROWS_SCHEMA)
    def rows_op(q, scale, w, bias):
        return rows_linear(fmt, q, scale, w, bias)

    @rows_op.register_fake
    def _rows_fake(q, scale, w, bias):
        return w.new_empty((q.numel() // w.shape[1], w.shape[0]))

    ns = torch.ops.oasr
    return (getattr(ns, f"{fmt.family}_norm_quantize").default,
            getattr(ns, f"{fmt.family}_rows_linear").default)


def untuned_wins(fmt: Format, n: int, k: int, m: int, *, normed: bool = False) -> Any:
    """The format's untuned route as the pass's ``untuned(selection)``: quantized where the
    heuristic's tile plus the activation quantizer (``normed``: what quantizing in the
    LayerNorm adds to the norm) is predicted to beat the layer in its dtype on the
    selection's lane."""
    from oasr_core.types import Tier

    from oasr_scaled_mm.w8a8.untuned import quantized_wins

    def wins(sel: Any) -> bool:
        return (sel.tier is Tier.HEURISTIC and sel.config is not None
                and quantized_wins(fmt.module("untuned").MODELS, sel.lane, n, k, m,
                                   quantizer=not normed))

    return wins


def serve_linear(fmt: Format, site: Any) -> Any:
    """The quantized linear for a linear ``site``, or None (the next pattern, or Inductor).

    A site after a LayerNorm (``site.norm``, static rows) takes the norm's quantized rows,
    computed once for every linear after that norm (``Shared``); the untuned route then
    counts what quantizing in the norm adds instead of a quantizer."""
    from oasr_core.compile import Served, Shared, Slot

    if site.dtype not in fmt.linear_dtypes or site.quantization != fmt.quantization or \
            site.activation is not None or site.residual or (site.norm and site.m is None):
        return None
    n, k = site.dim("N"), site.dim("K")
    untuned = untuned_wins(fmt, n, k, site.m, normed=site.norm) if site.m is not None \
        else None
    if not site.serves(fmt.family, fmt.op_mm, (n, k), dtype=fmt.dtype, untuned=untuned):
        return None
    if site.norm:
        norm_op, rows_op = norm_ops(fmt)
        rows = (Slot.NORM_X, Slot.NORM_WEIGHT, Slot.NORM_BIAS, Slot.NORM_EPS)
        return Served(rows_op, (Shared(norm_op, rows, 0), Shared(norm_op, rows, 1),
                                Slot.WEIGHT, Slot.BIAS), family=fmt.family, op=fmt.op_mm)
    return Served(custom_op(fmt), (Slot.X, Slot.WEIGHT, Slot.BIAS), family=fmt.family,
                  op=fmt.op_mm)


def patterns_for(fmt: Format, quantization: str) -> list[Any]:
    """``oasr_compile_patterns``'s answer: the quantized linear for the format's scheme."""
    if quantization != fmt.quantization:
        return []
    from oasr_core.compile import LINEAR, Pattern

    # The custom ops a compiled graph calls are registered now: a graph Inductor loads from
    # its cache calls them in a process where the pass never ran.
    fmt.module("ops")
    custom_op(fmt)
    norm_ops(fmt)
    return [Pattern(name=f"{fmt.family}.linear", family=fmt.family, kind=LINEAR,
                    serve=functools.partial(serve_linear, fmt),
                    description=f"{fmt.quantization} linear (+bias): per-token activation "
                                "(in the LayerNorm before it, shared by the linears after "
                                "it), per-channel weight, quantized where it pays")]

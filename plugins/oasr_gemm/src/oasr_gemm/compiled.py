"""The gemm family's patterns for ``torch.compile(backend="oasr")`` (``oasr_compile_patterns``).

One linear pattern: a site with an activation becomes ``oasr::gemm_activation`` (only an
activation the family's entries were measured with, :data:`oasr_gemm.ops.MEASURED_ACTIVATIONS`),
one with a residual add ``oasr::gemm_residual``, one with a log-softmax after it (a CTC head)
``oasr::gemm_log_softmax``, the rest ``oasr::gemm``; each only where the tiers choose a gemm
config for that op and shape (``Site.serves``), so an untuned linear stays Inductor's (and a
CTC head the tiers leave to torch is offered as its bare linear next, its log-softmax
Inductor's). One batched-product pattern: a ``bmm`` site becomes ``oasr::bmm`` where the
tiers choose a gemm config for ``bmm_tn`` / ``bmm_nn`` (the site's layout) at its shape.
"""

from __future__ import annotations

from typing import Any

from oasr_gemm.linear import DTYPES


def serve_linear(site: Any) -> Any:
    """The gemm op for a linear ``site``, or None (the site stays Inductor's)."""
    from oasr_core.compile import Served, Slot

    if site.dtype not in DTYPES:
        return None
    import torch

    from oasr_gemm import ops

    dims = (site.dim("N"), site.dim("K"))
    if site.log_softmax:
        if not site.serves("gemm", "gemm_log_softmax", dims):
            return None
        return Served(torch.ops.oasr.gemm_log_softmax.default, (Slot.X, Slot.WEIGHT, Slot.BIAS),
                      family="gemm", op="gemm_log_softmax")
    if site.residual:
        if site.activation is not None or not site.serves("gemm", "gemm_residual", dims):
            return None
        return Served(torch.ops.oasr.gemm_residual.default,
                      (Slot.X, Slot.WEIGHT, Slot.BIAS, Slot.RESIDUAL, Slot.ALPHA),
                      family="gemm", op="gemm_residual")
    if site.activation is not None:
        if site.activation not in ops.MEASURED_ACTIVATIONS or \
                not site.serves("gemm", "gemm_activation", dims):
            return None
        return Served(torch.ops.oasr.gemm_activation.default,
                      (Slot.X, Slot.WEIGHT, Slot.BIAS, Slot.ACTIVATION),
                      family="gemm", op="gemm_activation")
    if not site.serves("gemm", "gemm", dims):
        return None
    return Served(torch.ops.oasr.gemm.default, (Slot.X, Slot.WEIGHT, Slot.BIAS),
                  family="gemm", op="gemm")


def serve_bmm(site: Any) -> Any:
    """``oasr::bmm`` for a batched-product ``site``, or None (the site stays Inductor's)."""
    from oasr_core.compile import Served, Slot

    from oasr_gemm.config_space import BMM_OPS

    if site.dtype not in DTYPES or site.layout not in BMM_OPS:
        return None
    op = BMM_OPS[site.layout]
    if not site.serves("gemm", op, (site.dim("N"), site.dim("K"))):
        return None
    import torch

    from oasr_gemm import ops  # noqa: F401  (registers torch.ops.oasr.bmm)

    return Served(torch.ops.oasr.bmm.default, (Slot.X, Slot.OTHER), family="gemm", op=op)


def patterns_for(quantization: str) -> list[Any]:
    """``oasr_compile_patterns``'s answer: the linear and batched-product patterns, full
    precision only."""
    if quantization != "none":
        return []
    from oasr_core.compile import BMM, LINEAR, Pattern

    # The custom ops a compiled graph calls are registered now: a graph Inductor loads from
    # its cache calls them in a process where the pass never ran.
    from oasr_gemm import ops  # noqa: F401

    return [Pattern(name="gemm.linear", family="gemm", kind=LINEAR, serve=serve_linear,
                    description="linear (+bias, +relu/silu, + alpha * residual, or a "
                                "log-softmax after it)"),
            Pattern(name="gemm.bmm", family="gemm", kind=BMM, serve=serve_bmm,
                    description="batched product of two 3-D operands (attention without SDPA)")]

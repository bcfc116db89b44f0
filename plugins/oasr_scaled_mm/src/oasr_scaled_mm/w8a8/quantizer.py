"""A W8A8 format's activation quantizer: the row quantizer and its fused layer norm, compiled
for the format's numerics (:attr:`Format.row_format`) into one tiny JIT module per arch.

:class:`ActivationQuantizer` is one format's: :meth:`~ActivationQuantizer.spec` is the module
(no CUTLASS; part of both lanes' production prebuild), :attr:`~ActivationQuantizer.kernel` /
:attr:`~ActivationQuantizer.norm_kernel` the loaded exports per arch (None, warned once, where
they cannot load: torch quantizes, the norm and quantizer run apart), and
:meth:`~ActivationQuantizer.quantize_rows` / :meth:`~ActivationQuantizer.norm_quantize_rows`
call them on CUDA tensors. The source is generated (:mod:`oasr_scaled_mm.w8a8.row_quantizer`),
not under the family's ``csrc/``, so the quantizer is not part of the GEMM kernels'
``impl_hash``: it changes no GEMM table. Importing this module imports no torch.
"""

from __future__ import annotations

from typing import Any

from oasr_scaled_mm.w8a8.formats import Format
from oasr_scaled_mm.w8a8.row_quantizer import jit_spec
from oasr_scaled_mm.w8a8.rows import (
    norm_quantize_rows_with,
    norm_quantizer,
    quantize_rows_with,
    row_quantizer,
)


class ActivationQuantizer:
    """The activation quantizer of format ``fmt`` (see the module docstring)."""

    def __init__(self, fmt: Format) -> None:
        self.format = fmt
        self.symbol, self.module, self.namespace = fmt.quantizer
        self.kernel = row_quantizer(self.spec, self.symbol,
                                    label=f"{fmt.package}: the activation quantizer")
        self.norm_kernel = norm_quantizer(self.spec, self.symbol,
                                          label=f"{fmt.package}: the fused layer-norm quantizer")

    def names(self) -> dict[str, Any]:
        """What a family's ``quantize_kernel`` module names: ``QUANTIZER`` (this), ``FORMAT``
        (the quantizer's numerics), ``SYMBOL``, ``MODULE``, ``spec``, ``KERNEL`` /
        ``NORM_KERNEL`` (the loaded quantizer and fused layer norm + quantizer per arch; None,
        warned once, where they cannot load), ``quantize_rows_cuda`` and
        ``norm_quantize_rows_cuda``."""
        return {"QUANTIZER": self, "FORMAT": self.format.row_format, "SYMBOL": self.symbol,
                "MODULE": self.module, "spec": self.spec, "KERNEL": self.kernel,
                "NORM_KERNEL": self.norm_kernel, "quantize_rows_cuda": self.quantize_rows,
                "norm_quantize_rows_cuda": self.norm_quantize_rows}

    def spec(self, arch: str) -> Any:
        """The quantizer's :class:`oasr_core.jit.JitSpec` for arch family ``arch``."""
        jit = self.format.module("jit")
        return jit_spec(self.format.row_format, module=self.module, symbol=self.symbol,
                        namespace=self.namespace,
                        title=f"{self.format.package} activation quantizer "
                              f"({self.format.package}.quantize_kernel)",
                        target=jit.jit_arch(arch), extra_flags=jit.EXTRA_FLAGS)

    def quantize_rows(self, x: Any, arch: str) -> tuple[Any, Any] | None:
        """``(q [..., K] in the format, scale float32 [...])`` of a contiguous fp16/bf16 CUDA
        tensor, or None when the kernel is unavailable or refused the call (the caller
        quantizes with torch)."""
        import torch

        return quantize_rows_with(self.kernel, x, arch, getattr(torch, self.format.dtype))

    def norm_quantize_rows(self, x: Any, norm: Any, arch: str) -> tuple[Any, Any] | None:
        """The quantized rows of ``norm(x)`` (an ``nn.LayerNorm`` over the last dimension, its
        parameters in ``x``'s dtype or absent) of contiguous fp16/bf16 CUDA rows in one pass,
        or None when the kernel is unavailable or refused the call (a row longer than 16384,
        not a multiple of 8, or misaligned)."""
        import torch

        return norm_quantize_rows_with(self.norm_kernel, x, norm, arch,
                                       getattr(torch, self.format.dtype))

"""C++ generation of the conv2d units: one translation unit per config.

A unit includes ``csrc/oasr_conv2d/sm80.cuh`` (implicit GEMM) or ``direct.cuh`` (a direct
config), names one kernel type per dtype and exports the
family's two functions (``csrc/oasr_conv2d/geometry.cuh`` states the ABI)::

    int32_t <symbol>(const oasr_kit::CallArgs* call, const oasr_conv2d::Geometry* geo,
                     const void* x, const void* w, const void* bias, void* out, stream)
    int64_t <symbol>_workspace(const oasr_conv2d::Geometry* geo, int32_t dtype)

Every op (``conv2d``, ``conv2d_relu``, ``conv2d_gelu``, ``conv2d_silu``) of a config runs in
the same unit: the kernels read the activation from ``call->act``, so a module compiles each
config once. The text is :func:`oasr_core.jit.kit.c_abi_unit`'s.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from oasr_core.jit import kit
from oasr_core.types import Config

from oasr_conv2d.geometry import ABI_UNIT, CSRC, DTYPE_CODE
from oasr_conv2d.lanes import symbol

DTYPES = ("fp16", "bf16")
_CXX_DTYPE = {"fp16": "cutlass::half_t", "bf16": "cutlass::bfloat16_t"}
_ALGO = {"analytic": 0, "optimized": 1, "few_channels": 2}
HEADER = "oasr_conv2d/sm80.cuh"
DIRECT_HEADER = "oasr_conv2d/direct.cuh"
EXTRA_FLAGS = ("-Xcompiler", "-fvisibility-inlines-hidden")
"""Hide inline functions too: CUTLASS's host code pulls in libstdc++ inline functions that
would otherwise be exported as weak symbols, and a module exports only its launchers."""


def headers() -> list[Path]:
    """The family's headers, sorted."""
    return sorted((CSRC / "oasr_conv2d").glob("*.cuh"))


def kernel_type(config: Config, dtype: str) -> str:
    """The C++ kernel type of ``config`` for ``dtype``."""
    p = config.params
    if p.get("kind") == "direct":
        return (f"oasr_conv2d::direct::Kernel<{DTYPE_CODE[dtype]}, {p['cpt']}, {p['ppt']}, "
                f"{p['threads']}>")
    args = [_CXX_DTYPE[dtype], *p["tile"], *p["warp"], p["stages"], _ALGO[p["algorithm"]],
            p["align_in"], p["align_out"]]
    return f"oasr_conv2d::sm80::Kernel<{', '.join(map(str, args))}>"


def unit_source(config: Config, dtypes: Iterable[str] = DTYPES) -> str:
    """The translation unit of ``config`` (every op, kernels for ``dtypes``)."""
    dtypes = kit.unit_dtypes(dtypes, DTYPE_CODE)
    return kit.c_abi_unit(
        title=f"oasr_conv2d {config.lane} unit {config.params['unit']} ({', '.join(dtypes)})",
        generator="oasr_conv2d.codegen",
        header=DIRECT_HEADER if config.params.get("kind") == "direct" else HEADER,
        kernels={DTYPE_CODE[d]: kernel_type(config, d) for d in dtypes},
        symbol=symbol(config), **ABI_UNIT)


def jit_units(config: Config, dtypes: Iterable[str] = DTYPES) -> list:
    """The :class:`oasr_core.jit.TranslationUnit` list compiling ``config`` (one unit)."""
    return kit.config_unit(config, unit_source(config, dtypes), symbol(config))


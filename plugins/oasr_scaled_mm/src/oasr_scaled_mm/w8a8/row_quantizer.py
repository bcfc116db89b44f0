"""A bandwidth-bound per-row (per-token) activation quantizer, as CUDA a W8A8 format loads.

Both W8A8 families quantize an fp16/bf16 activation ``X [rows, K]`` per row before their GEMM:
``scale[r] = f(amax_r)``, ``Q[r, i] = g(X[r, i], scale[r])``. The kernel skeleton is shared
and the numerics are the family's: a :class:`RowFormat` supplies the device functions
``row_scale(amax)`` and ``quantize_pair(a, b, s)`` (two elements -> two bytes, ``a`` in the
low byte) and whether the row's absmax propagates NaN. :func:`unit_source` writes the one
translation unit of the family's helper module, exporting the C ABI
:func:`oasr_scaled_mm.w8a8.rows.quantize_rows_with` calls::

    int32_t <symbol>(const void* x, int32_t dtype, int64_t rows, int64_t k, void* q,
                     void* scale, void* stream)   // dtype 0 fp16, 1 bf16 -> oasr_kit::Status

One pass over the activation, the row held in registers (the quantizer moves ``3 K + 4``
bytes per row of a 16-bit input and is meant to run at the memory's bandwidth):

- K a multiple of 8 and 16-byte aligned rows: 16-byte loads, 8-byte stores, 4 vectors of 8
  per thread in registers up to K = 8192:
  - at most 128 vectors (K <= 1024): a group of ``2^g`` lanes of one warp per row (fewer than
    32 below K = 1024), the row's absmax reduced by warp shuffles, many rows per block;
  - at most 1024 vectors (K <= 8192): 2, 4 or 8 warps per row, 4, 2 or 1 rows per block, the
    absmax through shared memory. On the H200 (fp8, bf16 rows, M 16384) this took K = 4096
    from 91.7 to 56.0 us and K = 2048 from 34.9 to 29.3 us (0.87 and 0.84 of ``copy_``'s
    bandwidth) against one warp a row holding 16 or 8 vectors a lane, of which fewer are
    resident, each loading, reducing and storing in turn;
  - at most 2048 vectors (K <= 16384): a block per row, 8 vectors per thread;
  - beyond: a block per row reading it twice (absmax, then quantize);
- anything else (K not a multiple of 8, a misaligned pointer): a block per row, one element
  per access, reading it twice.

Every kernel strides over the rows with a grid of the SM count times the blocks one SM holds
(queried for every kernel of a dtype on its first call, so that a call inside a CUDA graph
capture queries nothing). The absmax is taken on the 16-bit values (``__habs2`` /
``__hmax2``, exact: widening is monotonic) and widened once; every element's quotient is the
family's own expression in fp32, so the result does not depend on which kernel ran.
Importing this module imports no torch.
"""

from __future__ import annotations

import functools
from pathlib import Path

import attrs

GROUP_MAX_VECTORS = 128
"""Rows of at most this many 16-byte vectors (K <= 1024 at 16 bits) take the group kernel
(one warp or less per row); longer ones up to :data:`BLOCK_MAX_VECTORS` the block kernel."""
BLOCK_MAX_VECTORS = 2048
"""Rows of at most this many vectors (K <= 16384) are held in registers (the block kernel)."""
PATH_KS = (8, 16, 40, 72, 136, 512, 520, 1024, 1032, 2048, 2056, 4096, 4104, 8192, 8200,
           16392, 1004, 7)
"""Row lengths that reach every kernel and group width of :func:`kernel_of`, each at or just
past a boundary (tests and benchmarks; 1004 and 7 are not multiples of 8)."""
STRIDE_SHAPES = ((300000, 8), (150001, 40), (40001, 136), (20000, 1024), (20000, 2048),
                 (20000, 4096), (4097, 8192), (2049, 16384), (2049, 16392), (20000, 1004))
"""``(rows, K)`` with more rows than the grid holds at once on a 132-SM H200 (the blocks one
SM holds x 132 x rows per block), per kernel: the grid strides over them (tests)."""


@attrs.frozen
class RowFormat:
    """One family's quantized element: its numerics as device code and as words.

    ``device_code`` defines, inside the unit's namespace, ``__device__ float row_scale(float
    amax)`` and ``__device__ uint32_t quantize_pair(float a, float b, float s)`` (the two
    quantized bytes, ``a``'s in bits 0-7, ``b``'s in bits 8-15). ``propagate_nan``: a NaN in a
    row makes its absmax NaN (torch's ``amax``) rather than being skipped (``fmaxf``).
    ``headers`` are extra ``#include`` lines' targets; ``contract`` is the numerics in words,
    written into the unit's header comment.
    """

    name: str
    device_code: str
    propagate_nan: bool
    contract: str
    headers: tuple[str, ...] = ()


def kernel_of(k: int, *, aligned: bool = True) -> str:
    """Which kernel quantizes rows of ``k`` elements, in words: the launcher's dispatch
    (``aligned``: the input 16-byte and the output 8-byte aligned)."""
    if k < 1:
        raise ValueError(f"row quantizer: k must be positive, got {k}")
    vectors, rest = divmod(k, 8)
    if rest or not aligned:
        return "stream_rows, one element per access"
    if vectors <= GROUP_MAX_VECTORS:
        lanes = 1
        while 4 * lanes < vectors:
            lanes *= 2
        return f"group_rows<4>, {lanes} lane(s) per row"
    if vectors <= 1024:
        warps = 2
        while 4 * 32 * warps < vectors:
            warps *= 2
        return f"block_rows<4>, {warps} warps per row"
    if vectors <= BLOCK_MAX_VECTORS:
        return "block_rows<8>, 8 warps per row"
    return "stream_rows, 16-byte vectors"


TEMPLATES = Path(__file__).resolve().parent / "templates"
"""The quantizer's CUDA text: ``rows_common.cuh.in`` (element pairs, the absmax reductions,
the occupancy query), ``rows_quantize.cuh.in`` (the quantizer's kernels and dispatch) and
``rows_norm.cuh.in`` (the fused layer norm's). They are templates, not headers: ``@PROPAGATE@``,
``@GROUP_MAX@`` and ``@BLOCK_MAX@`` are filled in by :func:`unit_source`, which pastes them
into the unit after the format's device code (``row_scale``, ``quantize_pair``)."""


@functools.cache
def _template(name: str) -> str:
    return "\n" + (TEMPLATES / name).read_text()


def norm_symbol(symbol: str) -> str:
    """The export of the layer-norm-then-quantize unit beside a row quantizer's ``symbol``."""
    return f"{symbol}_layer_norm"


_QUANTIZE_ABI = ("const void* x, int32_t dtype, int64_t rows, int64_t k, void* q, void* scale, "
                 "void* stream", "x, dtype, rows, k, q, scale", "quantize")
_NORM_ABI = ("const void* x, const void* gamma, const void* beta, float eps, int32_t dtype, "
             "int64_t rows, int64_t k, void* q, void* scale, void* stream",
             "x, gamma, beta, eps, dtype, rows, k, q, scale", "norm_quantize")


def unit_source(fmt: RowFormat, *, namespace: str, symbol: str, title: str,
                norm: bool = False) -> str:
    """The translation unit of a row quantizer in ``fmt`` exporting ``symbol`` (the C ABI of
    the module docstring), its code in C++ namespace ``namespace``; ``title`` heads it.

    With ``norm``, the unit of the fused layer norm instead, exporting
    ``norm_symbol(symbol)``::

        int32_t <symbol>_layer_norm(const void* x, const void* gamma, const void* beta,
                                    float eps, int32_t dtype, int64_t rows, int64_t k,
                                    void* q, void* scale, void* stream)

    ``gamma``/``beta``: the norm's weight and bias in ``x``'s dtype, or null. It quantizes
    ``layer_norm(x)`` (computed in fp32 and rounded to ``x``'s dtype) in one pass for the rows
    the quantizer holds in registers, and refuses anything else with ``kErrShape``.
    """
    for what, name in (("namespace", namespace), ("symbol", symbol)):
        if not name.isidentifier():
            raise ValueError(f"row quantizer {title!r}: {what} {name!r} is not a C identifier")
    contract = "\n".join(f"//   {line}".rstrip() for line in fmt.contract.strip().splitlines())
    includes = "".join(f"#include <{h}>\n" for h in fmt.headers)
    kernels = _template("rows_norm.cuh.in" if norm else "rows_quantize.cuh.in")
    skeleton = ((_template("rows_common.cuh.in") + kernels).replace("@PROPAGATE@",
                                             "true" if fmt.propagate_nan else "false")
                .replace("@GROUP_MAX@", str(GROUP_MAX_VECTORS))
                .replace("@BLOCK_MAX@", str(BLOCK_MAX_VECTORS)))
    params, args, entry = _NORM_ABI if norm else _QUANTIZE_ABI
    export = norm_symbol(symbol) if norm else symbol
    what = ("layer norm, then per-row quantization of fp16/bf16 rows, one pass" if norm
            else "per-row quantization of fp16/bf16 rows, one pass")
    return (
        f"// {title}\n"
        f"// Generated by oasr_scaled_mm.w8a8.row_quantizer: {what}.\n//\n"
        f"// Numerics ({fmt.name}):\n{contract}\n//\n"
        f"// int32_t {export}({params});\n"
        f"//     dtype 0 = fp16, 1 = bf16; an oasr_kit::Status.\n"
        f"#include <cstdint>\n\n#include <cuda_bf16.h>\n"
        f"#include <cuda_fp16.h>\n{includes}\n#include \"oasr_kit/launcher.cuh\"\n\n"
        f"namespace {namespace} {{\n\n{fmt.device_code.strip()}\n{skeleton}\n"
        f"}}  // namespace {namespace}\n\n"
        f"OASR_EXPORT int32_t {export}({params}) {{\n"
        f"  return {namespace}::{entry}({args}, static_cast<cudaStream_t>(stream));\n}}\n")


def jit_spec(fmt: RowFormat, *, module: str, symbol: str, namespace: str, title: str,
             target: str, extra_flags: tuple[str, ...] = ()):
    """The :class:`oasr_core.jit.JitSpec` of a row-quantizer module for nvcc target ``target``
    (``"90a"``): no CUTLASS, the kit headers only; two units, the quantizer exporting
    ``symbol`` and the fused layer norm exporting ``norm_symbol(symbol)`` (each in its own
    C++ namespace, ``namespace`` and ``<namespace>_norm``)."""
    from oasr_core.jit import JitSpec, TranslationUnit

    units = (
        TranslationUnit(name="quantize_rows", exports=(symbol,), source=unit_source(
            fmt, namespace=namespace, symbol=symbol, title=title)),
        TranslationUnit(name="norm_quantize_rows", exports=(norm_symbol(symbol),),
                        source=unit_source(fmt, namespace=f"{namespace}_norm", symbol=symbol,
                                           title=title, norm=True)))
    return JitSpec(name=module, arch=target, units=units, extra_flags=extra_flags,
                   cutlass=False)

"""C++ generation: one translation unit per (config, op) of either fp8 lane.

A unit (:func:`oasr_core.jit.kit.c_abi_unit`) includes its lane's header
(``csrc/oasr_scaled_mm_fp8/sm89.cuh`` or ``sm90.cuh``), names one kernel type per output dtype
(bf16 and fp16 for ``scaled_mm_fp8``, e4m3 for ``scaled_mm_fp8_quant``) and exports::

    int32_t oasr_fp8_<lane>_<unit>(const CallArgs* call, a, w, a_scale, w_scale, bias,
                                   out_scale_ptr, float out_scale, d, stream)
    int64_t oasr_fp8_<lane>_<unit>_workspace(m, n, k, out_dtype)
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterable
from importlib import resources
from pathlib import Path

from oasr_core.jit import kit
from oasr_core.types import Config

from oasr_scaled_mm_fp8.config_space import LANE_SM89, LANE_SM90, OP_MM, OP_QUANT, unit_name

OUT_CODES = {"fp16": 0, "bf16": 1, "fp8": 2}
OP_OUT_DTYPES = {OP_MM: ("fp16", "bf16"), OP_QUANT: ("fp8",)}
STATUS = kit.STATUS
_CXX_OUT = {"fp16": "cutlass::half_t", "bf16": "cutlass::bfloat16_t",
            "fp8": "cutlass::float_e4m3_t"}
_LANE_TAG = {LANE_SM89: "sm89", LANE_SM90: "sm90"}
_HEADER = {LANE_SM89: "oasr_scaled_mm_fp8/sm89.cuh", LANE_SM90: "oasr_scaled_mm_fp8/sm90.cuh"}
_FAST_ACCUM = "FP8FastAccum"
"""CUTLASS's suffix of a 3.x main-loop schedule that skips accumulator promotion."""


def csrc_dir() -> Path:
    """The include dir holding ``oasr_scaled_mm_fp8/*.cuh`` (package data)."""
    return Path(str(resources.files("oasr_scaled_mm_fp8") / "csrc"))


def symbol(config: Config, op: str = OP_MM) -> str:
    """The launcher's C symbol for ``config`` serving ``op``."""
    return f"oasr_fp8_{_LANE_TAG[config.lane]}_{unit_name(config, op)}"


def workspace_symbol(config: Config, op: str = OP_MM) -> str:
    """The workspace query's C symbol for ``config`` serving ``op``."""
    return symbol(config, op) + "_workspace"


def sm89_kernel_type(config: Config, out_dtype: str) -> str:
    """The C++ type of a 2.x config's kernel writing ``out_dtype``."""
    p = config.params
    args = [_CXX_OUT[out_dtype], *p["tile"], *p["warp"], p["stages"],
            "true" if p["fast_accum"] else "false"]
    return f"oasr_fp8::sm89::Kernel<{', '.join(map(str, args))}>"


def sm90_mainloop(config: Config) -> str:
    """The 3.x main-loop schedule of ``config`` (its ``FP8FastAccum`` twin when fast)."""
    base = kit.SM90_MAINLOOP[config.params["schedule"]]
    return base + _FAST_ACCUM if config.params["fast_accum"] else base


def sm90_kernel_type(config: Config, out_dtype: str) -> str:
    """The C++ type of a 3.x config's kernel writing ``out_dtype``."""
    p = config.params
    args = [_CXX_OUT[out_dtype], *p["tile"], *p["cluster"], p["stages"], sm90_mainloop(config),
            kit.SM90_EPILOGUE[p["schedule"]]]
    return f"oasr_fp8::sm90::Kernel<{', '.join(map(str, args))}>"


_KERNEL_TYPES = {LANE_SM89: sm89_kernel_type, LANE_SM90: sm90_kernel_type}


def kernel_type(config: Config, out_dtype: str) -> str:
    """The C++ kernel type of ``config`` writing ``out_dtype`` (either lane)."""
    emit = _KERNEL_TYPES.get(config.lane)
    if emit is None:
        raise KeyError(f"config {config.id!r} belongs to lane {config.lane!r}, not an fp8 lane")
    return emit(config, out_dtype)


def unit_source(config: Config, op: str = OP_MM, out_dtypes: Iterable[str] | None = None) -> str:
    """The translation unit of ``config`` for ``op``, with kernels for ``out_dtypes`` (default:
    every output of the op; a subset compiles faster)."""
    allowed = OP_OUT_DTYPES[op]
    dtypes = tuple(out_dtypes) if out_dtypes is not None else allowed
    if not dtypes or any(d not in allowed for d in dtypes):
        raise ValueError(f"out_dtypes {dtypes!r} must be a non-empty subset of {allowed}")
    return kit.c_abi_unit(
        title=f"oasr_scaled_mm_fp8 {config.lane} unit {unit_name(config, op)} "
              f"({op}: {', '.join(dtypes)})",
        generator="oasr_scaled_mm_fp8.codegen",
        header=_HEADER[config.lane],
        kernels={OUT_CODES[d]: kernel_type(config, d) for d in dtypes},
        symbol=symbol(config, op),
        operands="const void* a, const void* w, const void* a_scale, const void* w_scale, "
                 "const void* bias, const void* out_scale_ptr, float out_scale, void* d",
        prologue="  oasr_fp8::Operands o{a, w, static_cast<const float*>(a_scale),\n"
                 "      static_cast<const float*>(w_scale), static_cast<const float*>(bias),\n"
                 "      static_cast<const float*>(out_scale_ptr), out_scale, d};\n",
        run="run(o, *c, static_cast<cudaStream_t>(stream))",
        workspace_params="int64_t m, int64_t n, int64_t k, int32_t out_dtype",
        workspace_switch="out_dtype",
        workspace="workspace(m, n, k)",
    )


@functools.cache
def impl_hash() -> str:
    """A short hash of what decides the generated code (this module, the family's and the
    kit's headers): the family's ``impl_hash`` soft validator."""
    digest = hashlib.sha256()
    digest.update(Path(__file__).read_bytes())
    kit.hash_headers(digest, [csrc_dir() / "oasr_scaled_mm_fp8"])
    return digest.hexdigest()[:16]

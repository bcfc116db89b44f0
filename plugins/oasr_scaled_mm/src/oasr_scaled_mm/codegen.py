"""C++ generation: one translation unit per (config, op) of either lane.

A unit (:func:`oasr_core.jit.kit.c_abi_unit`) includes its lane's header
(``csrc/oasr_scaled_mm/sm80.cuh`` or ``sm90.cuh``: the kernels; the call record, parameter
cache and launch helpers are the kit's ``oasr_kit/*.cuh``), names one kernel type per output dtype
(fp16 and bf16 for ``scaled_mm``, int8 for ``scaled_mm_quant``) and exports two ``extern "C"``
functions::

    int32_t oasr_smm_<lane>_<unit>(const CallArgs* call, a, w, a_scale, w_scale, bias,
                                   out_scale_ptr, float out_scale, d, stream)
    int64_t oasr_smm_<lane>_<unit>_workspace(m, n, k, out_dtype)

``CallArgs`` (sizes, output dtype code as ``dtype``, workspace) is prepared once per shape
(:class:`oasr_core.jit.kit.CallArgs`). The launcher returns a :data:`STATUS` code.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterable
from importlib import resources
from pathlib import Path

from oasr_core.jit import kit
from oasr_core.types import Config

from oasr_scaled_mm.config_space import LANE_SM80, LANE_SM90, OP_MM, OP_QUANT, serves, unit_name

OUT_CODES = {"fp16": 0, "bf16": 1, "int8": 2}
OP_OUT_DTYPES = {OP_MM: ("fp16", "bf16"), OP_QUANT: ("int8",)}
STATUS = kit.STATUS
_CXX_OUT = {"fp16": "cutlass::half_t", "bf16": "cutlass::bfloat16_t", "int8": "int8_t"}
EQUIVALENTS = Path(__file__).with_name("equivalent_impls.json")
"""Implementation hashes recorded as building the same machine code as an earlier one
(:func:`oasr_core.jit.kit.canonical_impl_hash`)."""
_LANE_TAG = {LANE_SM80: "sm80", LANE_SM90: "sm90"}
_HEADER = {LANE_SM80: "oasr_scaled_mm/sm80.cuh", LANE_SM90: "oasr_scaled_mm/sm90.cuh"}


def csrc_dir() -> Path:
    """The include dir holding ``oasr_scaled_mm/*.cuh`` (package data)."""
    return Path(str(resources.files("oasr_scaled_mm") / "csrc"))


def symbol(config: Config, op: str = OP_MM) -> str:
    """The launcher's C symbol for ``config`` serving ``op``."""
    return f"oasr_smm_{_LANE_TAG[config.lane]}_{unit_name(config, op)}"


def workspace_symbol(config: Config, op: str = OP_MM) -> str:
    """The workspace query's C symbol for ``config`` serving ``op``."""
    return symbol(config, op) + "_workspace"


def sm80_kernel_type(config: Config, out_dtype: str) -> str:
    """The C++ type of a 2.x config's kernel writing ``out_dtype``."""
    p = config.params
    args = [_CXX_OUT[out_dtype], *p["tile"], *p["warp"], p["stages"],
            "true" if p["stream_k"] else "false"]
    return f"oasr_smm::sm80::Kernel<{', '.join(map(str, args))}>"


def sm90_kernel_type(config: Config, out_dtype: str) -> str:
    """The C++ type of a 3.x config's kernel writing ``out_dtype``."""
    p = config.params
    args = [_CXX_OUT[out_dtype], *p["tile"], *p["cluster"], p["stages"],
            kit.SM90_MAINLOOP[p["schedule"]], kit.SM90_EPILOGUE[p["schedule"]],
            kit.sm90_scheduler(p["stream_k"])]
    return f"oasr_smm::sm90::Kernel<{', '.join(map(str, args))}>"


_KERNEL_TYPES = {LANE_SM80: sm80_kernel_type, LANE_SM90: sm90_kernel_type}


def kernel_type(config: Config, out_dtype: str) -> str:
    """The C++ kernel type of ``config`` writing ``out_dtype`` (either lane)."""
    emit = _KERNEL_TYPES.get(config.lane)
    if emit is None:
        raise KeyError(
            f"config {config.id!r} belongs to lane {config.lane!r}, not a scaled_mm lane")
    return emit(config, out_dtype)


def unit_source(config: Config, op: str = OP_MM, out_dtypes: Iterable[str] | None = None) -> str:
    """The translation unit of ``config`` for ``op``, with kernels for ``out_dtypes``.

    ``out_dtypes`` defaults to every output of the op (fp16 and bf16, or int8); a subset
    compiles faster (tests).
    """
    if not serves(config, op):
        raise ValueError(f"config {config.id!r} has no {op} launcher (Stream-K)")
    allowed = OP_OUT_DTYPES[op]
    dtypes = tuple(out_dtypes) if out_dtypes is not None else allowed
    if not dtypes or any(d not in allowed for d in dtypes):
        raise ValueError(f"out_dtypes {dtypes!r} must be a non-empty subset of {allowed}")
    return kit.c_abi_unit(
        title=f"oasr_scaled_mm {config.lane} unit {unit_name(config, op)} "
              f"({op}: {', '.join(dtypes)})",
        generator="oasr_scaled_mm.codegen",
        header=_HEADER[config.lane],
        kernels={OUT_CODES[d]: kernel_type(config, d) for d in dtypes},
        symbol=symbol(config, op),
        operands="const void* a, const void* w, const void* a_scale, const void* w_scale, "
                 "const void* bias, const void* out_scale_ptr, float out_scale, void* d",
        prologue="  oasr_smm::Operands o{a, w, static_cast<const float*>(a_scale),\n"
                 "      static_cast<const float*>(w_scale), static_cast<const float*>(bias),\n"
                 "      static_cast<const float*>(out_scale_ptr), out_scale, d};\n",
        run="run(o, *c, static_cast<cudaStream_t>(stream))",
        workspace_params="int64_t m, int64_t n, int64_t k, int32_t out_dtype",
        workspace_switch="out_dtype",
        workspace="workspace(m, n, k)",
    )


@functools.cache
def impl_hash() -> str:
    """A short hash of what decides the generated code: this module and the family's and the
    kit's headers.

    The family's ``impl_hash`` soft validator: an entry measured under another implementation
    is marked stale.
    """
    digest = hashlib.sha256()
    digest.update(Path(__file__).read_bytes())
    kit.hash_headers(digest, [csrc_dir() / "oasr_scaled_mm"])
    return kit.canonical_impl_hash(digest.hexdigest()[:16], EQUIVALENTS)

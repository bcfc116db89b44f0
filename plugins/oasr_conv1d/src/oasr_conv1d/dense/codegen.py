"""C++ generation of the dense conv1d units: one translation unit per config.

A unit includes its kind's header (``csrc/oasr_conv1d/dense/sm80.cuh`` for CUTLASS 2.x
configs, ``sm90.cuh`` for 3.x ones), names one kernel type per dtype and exports the family's
two functions (``csrc/oasr_conv1d/geometry.cuh`` states the ABI)::

    int32_t <symbol>(const oasr_kit::CallArgs* call, const oasr_conv1d::Geometry* geo,
                     const void* x, const void* w, const void* bias, void* out, stream)
    int64_t <symbol>_workspace(const oasr_conv1d::Geometry* geo, int32_t dtype)

Every op (``conv1d``, ``conv1d_relu``, ``conv1d_gelu``, ``conv1d_silu``) of a config runs in
the same unit: the kernels read the activation from ``call->act``, so :func:`symbol` and
:func:`unit_name` are the same for all four and a lane module compiles each config once.
The text is :func:`oasr_core.jit.kit.c_abi_unit`'s.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from pathlib import Path

from oasr_core.jit import kit
from oasr_core.types import Config

from oasr_conv1d.dense.config_space import LANE_SM80, LANE_SM90
from oasr_conv1d.geometry import CSRC

OPS = ("conv1d", "conv1d_relu", "conv1d_gelu", "conv1d_silu")
"""The ops a dense unit serves (all through one launcher)."""
ACTIVATION_OF_OP = {"conv1d": None, "conv1d_relu": "relu", "conv1d_gelu": "gelu",
                    "conv1d_silu": "silu"}
DTYPES = ("fp16", "bf16")
DTYPE_CODES = {"fp16": 0, "bf16": 1}
"""``CallArgs.dtype`` codes (``oasr_conv1d::DType``)."""
_CXX_DTYPE = {"fp16": "cutlass::half_t", "bf16": "cutlass::bfloat16_t"}
_ALGO = {"analytic": 0, "optimized": 1, "few_channels": 2}
_LANE_TAG = {LANE_SM80: "sm80", LANE_SM90: "sm90"}
HEADER = {2: "oasr_conv1d/dense/sm80.cuh", 3: "oasr_conv1d/dense/sm90.cuh"}
EXTRA_FLAGS = ("-Xcompiler", "-fvisibility-inlines-hidden")
"""Hide inline functions too: CUTLASS's host code pulls in libstdc++ inline functions that
would otherwise be exported as weak symbols, and a module exports only its launchers."""
LANE_FLAGS = {LANE_SM80: (), LANE_SM90: ("-DCUTLASS_ENABLE_GDC_FOR_SM90",)}
"""The 3.x kernels carry CUTLASS's grid-dependency instructions, so a unit may be launched
with programmatic dependent launch (``kFlagPdl``); the 2.x kernels ignore the flag."""


def csrc_dir() -> Path:
    """The include dir the dense units need (``oasr_conv1d/dense/*.cuh`` beside the family's
    ``oasr_conv1d/geometry.cuh``)."""
    return CSRC


def headers() -> list[Path]:
    """The dense headers and the family ABI header they include, sorted."""
    return sorted([*(CSRC / "oasr_conv1d" / "dense").glob("*.cuh"),
                   CSRC / "oasr_conv1d" / "geometry.cuh"])


def _check_op(op: str) -> None:
    if op not in OPS:
        raise ValueError(f"oasr_conv1d.dense: op {op!r} is not one of {OPS}")


def unit_name(config: Config, op: str = "conv1d") -> str:
    """The translation unit holding ``config``'s kernels for ``op`` (one per config)."""
    _check_op(op)
    return config.params["unit"]


def symbol(config: Config, op: str = "conv1d") -> str:
    """The launcher's C symbol for (``config``, ``op``); the workspace query's is this plus
    ``_workspace``."""
    _check_op(op)
    tag = _LANE_TAG.get(config.lane)
    if tag is None:
        raise KeyError(f"config {config.id!r} belongs to lane {config.lane!r}, not a dense "
                       f"conv1d lane")
    return f"oasr_conv1d_dense_{tag}_{config.params['unit']}"


def workspace_symbol(config: Config, op: str = "conv1d") -> str:
    """The workspace query's C symbol."""
    return symbol(config, op) + "_workspace"


def kernel_type(config: Config, dtype: str) -> str:
    """The C++ kernel type of ``config`` for ``dtype``."""
    p = config.params
    if p["cutlass"] == 2:
        args = [_CXX_DTYPE[dtype], *p["tile"], *p["warp"], p["stages"], _ALGO[p["algorithm"]],
                p["align_in"], p["align_out"]]
        return f"oasr_conv1d::dense::sm80::Kernel<{', '.join(map(str, args))}>"
    schedule = p["schedule"]
    args = [_CXX_DTYPE[dtype], *p["tile"], *p["cluster"], p["stages"],
            kit.SM90_MAINLOOP[schedule], kit.SM90_EPILOGUE[schedule]]
    return f"oasr_conv1d::dense::sm90::Kernel<{', '.join(map(str, args))}>"


def pdl_capable(config: Config) -> bool:
    """Whether ``config``'s kernels wait on the previous grid (3.x): programmatic dependent
    launch helps them; 2.x kernels run the same with or without it."""
    return config.params["cutlass"] == 3


def unit_source(config: Config, op: str = "conv1d", dtypes: Iterable[str] = DTYPES) -> str:
    """The translation unit of ``config`` (every op, kernels for ``dtypes``)."""
    _check_op(op)
    dtypes = kit.unit_dtypes(dtypes, DTYPE_CODES)
    return kit.c_abi_unit(
        title=f"oasr_conv1d dense {config.lane} unit {config.params['unit']} "
              f"({', '.join(dtypes)})",
        generator="oasr_conv1d.dense.codegen",
        header=HEADER[config.params["cutlass"]],
        kernels={DTYPE_CODES[d]: kernel_type(config, d) for d in dtypes},
        symbol=symbol(config, op),
        operands="const oasr_conv1d::Geometry* geo, const void* x, const void* w, "
                 "const void* bias, void* out",
        run="run(c, geo, x, w, bias, out, static_cast<cudaStream_t>(stream))",
        workspace_params="const oasr_conv1d::Geometry* geo, int32_t dtype",
        workspace_switch="dtype",
        workspace="workspace(geo)",
    )


def jit_units(config: Config, dtypes: Iterable[str] = DTYPES) -> list:
    """The :class:`oasr_core.jit.TranslationUnit` list compiling ``config`` (one unit)."""
    from oasr_core.jit import TranslationUnit

    return [TranslationUnit(name=unit_name(config), source=unit_source(config, dtypes=dtypes),
                            exports=(symbol(config), workspace_symbol(config)))]


def flags(lane: str) -> tuple[str, ...]:
    """The nvcc flags a lane module holding dense units needs (beside the core's)."""
    return EXTRA_FLAGS + LANE_FLAGS[lane]


@functools.cache
def impl_inputs() -> tuple[tuple[str, bytes], ...]:
    """What defines the dense units' binaries, as ``(name, bytes)`` pairs in a fixed order:
    every config's unit text (both lanes, both dtypes), the lanes' flags and the dense and
    geometry headers (the kit's headers are the plugin's to add, through
    :func:`oasr_core.jit.kit.hash_headers`). The family's ``impl_hash`` digests them."""
    from oasr_conv1d.dense.config_space import LANES, space

    items: list[tuple[str, bytes]] = []
    for lane in LANES:
        items.append((f"flags:{lane}", " ".join(flags(lane)).encode()))
        for config in space(lane):
            items.append((f"unit:{lane}:{config.id}", unit_source(config).encode()))
    for header in headers():
        items.append((f"header:{header.relative_to(CSRC)}", header.read_bytes()))
    return tuple(items)


def module_spec(lane: str, arch: str, configs: Iterable[Config], *, name: str,
                dtypes: Iterable[str] = DTYPES):
    """A :class:`oasr_core.jit.JitSpec` of the dense units of ``configs`` alone, for arch
    family ``arch`` (tests and probes; the plugin's lane modules link :func:`jit_units`
    beside the depthwise units)."""
    from oasr_core import jit as core_jit

    dtypes = tuple(dtypes)
    units = [u for c in configs for u in jit_units(c, dtypes)]
    return core_jit.JitSpec(name=name, arch=core_jit.family_target(arch), units=tuple(units),
                            include_dirs=(str(csrc_dir()),), extra_flags=flags(lane))

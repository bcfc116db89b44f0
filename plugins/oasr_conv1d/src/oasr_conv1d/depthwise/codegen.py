"""C++ generation of the depthwise units: one translation unit per config, both dtypes.

A unit includes ``oasr_conv1d/depthwise.cuh``, aliases one ``Kernel`` type per dtype and
exports the family's ABI (``csrc/oasr_conv1d/geometry.cuh``)::

    int32_t oasr_conv1d_<lane tag>_<config id>(const CallArgs*, const Geometry*, x, w, bias,
                                               out, stream)
    int64_t oasr_conv1d_<lane tag>_<config id>_workspace(const Geometry*, int32_t dtype)

The activation is a runtime code (``CallArgs.act``) switched to one kernel instantiation per
activation inside the unit, so one symbol serves ``conv1d`` and every ``conv1d_<act>`` op.
"""

from __future__ import annotations

from collections.abc import Sequence

from oasr_core.jit import kit
from oasr_core.types import Config

from oasr_conv1d.geometry import ABI_UNIT, DTYPE_CODE, LANE_SM80, LANE_SM90

DTYPES = ("fp16", "bf16")
_CODE = DTYPE_CODE
_CXX = {"fp16": "__half", "bf16": "__nv_bfloat16"}
_STAGE = {"reg": "oasr_conv1d::depthwise::kStageReg", "smem": "oasr_conv1d::depthwise::kStageSmem"}
LANE_TAG = {LANE_SM80: "sm80", LANE_SM90: "sm90"}
HEADER = "oasr_conv1d/depthwise.cuh"


def symbol(config: Config) -> str:
    """The launcher's C symbol of a depthwise config (the same for every op)."""
    return f"oasr_conv1d_{LANE_TAG[config.lane]}_{config.params['unit']}"


def kernel_type(config: Config, dtype: str) -> str:
    """The C++ type of ``config``'s kernel for ``dtype``."""
    p = config.params
    args = [_CXX[dtype], p["vec"], p["cv"], p["ty"], p["tp"], p["taps"], _STAGE[p["stage"]]]
    return f"oasr_conv1d::depthwise::Kernel<{', '.join(map(str, args))}>"


def unit_source(config: Config, dtypes: Sequence[str] = DTYPES) -> str:
    """The translation unit of ``config`` with kernels for ``dtypes``."""
    dtypes = kit.unit_dtypes(dtypes, _CODE)
    return kit.c_abi_unit(
        title=f"oasr_conv1d {config.lane} depthwise unit {config.params['unit']} "
              f"({', '.join(dtypes)})",
        generator="oasr_conv1d.depthwise.codegen", header=HEADER,
        kernels={_CODE[d]: kernel_type(config, d) for d in dtypes}, symbol=symbol(config),
        **ABI_UNIT)


def translation_unit(config: Config, dtypes: Sequence[str] = DTYPES):
    """The :class:`oasr_core.jit.TranslationUnit` compiling ``config``."""
    from oasr_core.jit import TranslationUnit

    return TranslationUnit(name=config.params["unit"],
                           source=unit_source(config, dtypes),
                           exports=(symbol(config), symbol(config) + "_workspace"))

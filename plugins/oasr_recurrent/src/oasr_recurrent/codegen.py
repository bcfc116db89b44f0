"""C++ generation of the recurrent units: one translation unit per config.

A unit includes ``csrc/oasr_recurrent/lstm_step.cuh``, names one kernel type per dtype and
exports the family's two functions (the header states the ABI)::

    int32_t <symbol>(const oasr_kit::CallArgs* call, x, h, c0, w_ih, w_hh, b_ih, b_hh, h1, c1,
                     stream)
    int64_t <symbol>_workspace(int64_t batch, int64_t input, int64_t hidden, int32_t dtype)

The text is :func:`oasr_core.jit.kit.c_abi_unit`'s.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from oasr_core.jit import kit
from oasr_core.types import Config

from oasr_recurrent.lanes import symbol

CSRC = Path(__file__).resolve().parent / "csrc"
"""The include dir holding ``oasr_recurrent/*.cuh`` (the family's headers)."""
DTYPES = ("fp16", "bf16")
DTYPE_CODE = {"fp16": 0, "bf16": 1}
"""``CallArgs.dtype`` code per dtype (``oasr_recurrent::DType``)."""
HEADER = "oasr_recurrent/lstm_step.cuh"
EXTRA_FLAGS = ("-Xcompiler", "-fvisibility-inlines-hidden")
"""A module exports only its launchers."""
OPERANDS = ("const void* x, const void* h, const void* c0, const void* w_ih, const void* w_hh, "
            "const void* b_ih, const void* b_hh, void* h1, void* c1")
RUN = "run(c, x, h, c0, w_ih, w_hh, b_ih, b_hh, h1, c1, static_cast<cudaStream_t>(stream))"


def headers() -> list[Path]:
    """The family's headers, sorted."""
    return sorted((CSRC / "oasr_recurrent").glob("*.cuh"))


def kernel_type(config: Config, dtype: str) -> str:
    """The C++ kernel type of ``config`` for ``dtype``."""
    p = config.params
    args = (DTYPE_CODE[dtype], p["units"], p["rows"], p["threads"], p["ksplit"])
    return f"oasr_recurrent::LstmStep<{', '.join(map(str, args))}>"


def unit_source(config: Config, dtypes: Iterable[str] = DTYPES) -> str:
    """The translation unit of ``config`` (kernels for ``dtypes``)."""
    dtypes = kit.unit_dtypes(dtypes, DTYPE_CODE)
    return kit.c_abi_unit(
        title=f"oasr_recurrent {config.lane} unit {config.params['unit']} ({', '.join(dtypes)})",
        generator="oasr_recurrent.codegen", header=HEADER,
        kernels={DTYPE_CODE[d]: kernel_type(config, d) for d in dtypes},
        symbol=symbol(config), operands=OPERANDS, run=RUN,
        workspace_params="int64_t batch, int64_t input, int64_t hidden, int32_t dtype",
        workspace_switch="dtype", workspace="workspace(batch, input, hidden)")


def jit_units(config: Config, dtypes: Iterable[str] = DTYPES) -> list:
    """The :class:`oasr_core.jit.TranslationUnit` list compiling ``config`` (one unit)."""
    return kit.config_unit(config, unit_source(config, dtypes), symbol(config))


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
from oasr_recurrent.ops_names import CELL_OPS
from oasr_recurrent.space import cell_feasible

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


CELL_TYPE = {"lstm_step": "LstmStep<", "rnn_tanh_step": "RnnStep<0, ",
             "rnn_relu_step": "RnnStep<1, ", "gru_step": "GruStep<"}
"""The kernel type template of each cell (``RnnAct`` codes: 0 tanh, 1 relu)."""


def kernel_type(config: Config, dtype: str, cell: str = "lstm_step") -> str:
    """The C++ kernel type of ``config`` for ``dtype`` and ``cell`` (one of ``CELL_OPS``)."""
    p = config.params
    args = (DTYPE_CODE[dtype], p["units"], p["rows"], p["threads"], p["ksplit"])
    return f"oasr_recurrent::{CELL_TYPE[cell]}{', '.join(map(str, args))}>"


def unit_source(config: Config, dtypes: Iterable[str] = DTYPES, cell: str = "lstm_step") -> str:
    """The translation unit of ``config`` (kernels for ``dtypes``) computing ``cell``; an RNN
    step's unit has the same ABI, its ``c0`` and ``c1`` unused (null)."""
    dtypes = kit.unit_dtypes(dtypes, DTYPE_CODE)
    what = "unit" if cell == "lstm_step" else f"{cell} unit"
    return kit.c_abi_unit(
        title=f"oasr_recurrent {config.lane} {what} {config.params['unit']} "
              f"({', '.join(dtypes)})",
        generator="oasr_recurrent.codegen", header=HEADER,
        kernels={DTYPE_CODE[d]: kernel_type(config, d, cell) for d in dtypes},
        symbol=symbol(config, cell), operands=OPERANDS, run=RUN,
        workspace_params="int64_t batch, int64_t input, int64_t hidden, int32_t dtype",
        workspace_switch="dtype", workspace="workspace(batch, input, hidden)")


def jit_units(config: Config, dtypes: Iterable[str] = DTYPES) -> list:
    """The :class:`oasr_core.jit.TranslationUnit` list compiling ``config`` (one unit)."""
    return kit.config_unit(config, unit_source(config, dtypes), symbol(config))


def cell_units(config: Config, cell: str, dtypes: Iterable[str] = DTYPES) -> list:
    """The :class:`oasr_core.jit.TranslationUnit` list compiling ``config`` for ``cell`` (one
    unit, named ``<cell>_<unit>`` for an RNN step); a ``ValueError`` naming both when the
    config does not build for it (:func:`oasr_recurrent.space.cell_feasible`)."""
    from oasr_core.jit import TranslationUnit

    if cell == "lstm_step":
        return jit_units(config, dtypes)
    if not cell_feasible(config, cell):
        raise ValueError(f"oasr_recurrent.codegen: config {config.id} does not build for "
                         f"{cell} (too few gate rows for its warp groups)")
    name = symbol(config, cell)
    return [TranslationUnit(name=f"{cell}_{config.params['unit']}",
                            source=unit_source(config, dtypes, cell),
                            exports=(name, name + "_workspace"))]


def config_units(config: Config, dtypes: Iterable[str] = DTYPES) -> list:
    """Every unit of ``config``: its LSTM step's, then each other cell's it builds for (the
    units a whole-space module links, and what the implementation hash reads)."""
    dtypes = tuple(dtypes)
    return [u for cell in CELL_OPS if cell == "lstm_step" or cell_feasible(config, cell)
            for u in cell_units(config, cell, dtypes)]

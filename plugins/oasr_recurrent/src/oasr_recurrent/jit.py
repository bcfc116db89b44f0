"""JIT specs of the recurrent lane: one library per arch, one unit per config.

The lane's **production module** links its production set (:data:`PRODUCTION`, the kit's
:class:`oasr_core.kit.ProductionSet`): the lane default and every config this epoch's tuning
tiers reference; ``OASR_RECURRENT_COMPILE_SET=all`` links the lane's whole space.

Nothing here runs at import; building happens in :func:`oasr_core.jit.load` calls made by
:mod:`oasr_recurrent.launch`, the bench adapter, the benchmark and ``oasr tune prebuild``.
"""

from __future__ import annotations

import functools
from pathlib import Path

from oasr_core.jit import kit
from oasr_core.kit import ProductionSet
from oasr_core.kit.production import KernelModule, LaneModules

from oasr_recurrent import codegen
from oasr_recurrent.lanes import ALWAYS, fits_arch, space
from oasr_recurrent.ops_names import FAMILY, LANE

MODULE_PREFIX = {LANE: "recurrent_sm80"}
COMPILE_SET_ENV = "OASR_RECURRENT_COMPILE_SET"
EQUIVALENTS = Path(__file__).with_name("equivalent_impls.json")
"""Implementation hashes recorded as building the same machine code as an earlier one
(:func:`oasr_core.jit.kit.canonical_impl_hash`)."""

PRODUCTION = ProductionSet(family=FAMILY, compile_set_env=COMPILE_SET_ENV, space=space,
                           fits_arch=fits_arch, always=lambda lane, arch: ALWAYS)
"""The recurrent lane's production set: its default and the tiers' configs."""
lane_configs = PRODUCTION.lane_configs

MODULES = LaneModules(production=PRODUCTION, prefix=MODULE_PREFIX, units=codegen.jit_units,
                      include_dir=str(codegen.CSRC), flags=lambda lane: codegen.EXTRA_FLAGS,
                      dtypes=codegen.DTYPES, default_arch=lambda lane: "sm80")
"""The lane's modules (the kit's :class:`~oasr_core.kit.production.LaneModules`)."""


def cell_spec(configs, cells, arch: str, *, name: str, dtypes=codegen.DTYPES):
    """A :class:`oasr_core.jit.JitSpec` linking the units of ``configs`` for each of ``cells``
    (:func:`oasr_recurrent.codegen.cell_units`; a ``ValueError`` for a config a cell does not
    build for) on ``arch``: the RNN steps' units, which no production module links yet."""
    from oasr_core import jit as core_jit

    units = [u for c in configs for cell in cells for u in codegen.cell_units(c, cell, dtypes)]
    return core_jit.JitSpec(name=name, arch=core_jit.family_target(arch), units=tuple(units),
                            include_dirs=(str(codegen.CSRC),), extra_flags=codegen.EXTRA_FLAGS)


class RecurrentKernelModule(KernelModule):
    """``Lane.jit_module``: the JIT module of one recurrent config."""

    modules = MODULES


@functools.cache
def impl_hash() -> str:
    """A short hash of what decides the family's binaries (every config's unit text, the
    flags and the family's headers: :meth:`MODULES.impl_inputs
    <oasr_core.kit.production.LaneModules.impl_inputs>`) and the kit's headers, named as
    ``equivalent_impls.json`` records it. A tuning entry measured under another hash is
    stale."""
    return kit.impl_hash(MODULES.impl_inputs(codegen.headers()),
                         [codegen.CSRC / "oasr_recurrent"], EQUIVALENTS)


def soft_validators() -> dict[str, str | None]:
    """``Family.soft_validators``: the implementation hash (the units use no CUTLASS)."""
    return {"impl_hash": impl_hash()}

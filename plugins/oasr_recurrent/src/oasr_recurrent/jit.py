"""JIT specs of the recurrent lane: one library per arch, one unit per config and cell.

A config's units are one per cell op it builds for (:func:`oasr_recurrent.codegen.
config_units`). The lane's **production module** links, per op, the units of the configs
this epoch's tuning tiers name for that op (:func:`production_cells`): for ``lstm_step`` also
the lane default (:data:`PRODUCTION`, the kit's :class:`oasr_core.kit.ProductionSet`, asked
for that op's configs), for the RNN and GRU steps nothing more (their untuned shapes are
torch's). So a module serving LSTM tiers alone is the one it was before the other cells were
ops, and a tier of another op adds its configs' units for that op only.
``OASR_RECURRENT_COMPILE_SET=all`` links every unit of the lane's whole space.

Nothing here runs at import; building happens in :func:`oasr_core.jit.load` calls made by
:mod:`oasr_recurrent.launch`, the bench adapter, the benchmark and ``oasr tune prebuild``.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import attrs
from oasr_core import jit as core_jit
from oasr_core.jit import kit
from oasr_core.kit import ProductionSet
from oasr_core.kit.production import KernelModule, LaneModules
from oasr_core.types import Config

from oasr_recurrent import codegen
from oasr_recurrent.lanes import ALWAYS, fits_arch, space
from oasr_recurrent.ops_names import CELL_OPS, FAMILY, LANE
from oasr_recurrent.space import cell_feasible

MODULE_PREFIX = {LANE: "recurrent_sm80"}
COMPILE_SET_ENV = "OASR_RECURRENT_COMPILE_SET"
EQUIVALENTS = Path(__file__).with_name("equivalent_impls.json")
"""Implementation hashes recorded as building the same machine code as an earlier one
(:func:`oasr_core.jit.kit.canonical_impl_hash`)."""

PRODUCTION = ProductionSet(family=FAMILY, compile_set_env=COMPILE_SET_ENV, space=space,
                           fits_arch=fits_arch, always=lambda lane, arch: ALWAYS)
"""The recurrent lane's production set: its default and the tiers' configs (the ``lstm_step``
units of :func:`production_cells`)."""
lane_configs = PRODUCTION.lane_configs


def referenced(lane: str, arch: str) -> dict[str, frozenset[str]]:
    """Per cell op, the config ids this epoch's tuning tiers serve it with on ``arch`` (the
    runtime's :meth:`~oasr_core.runtime.Runtime.referenced_configs` of that op)."""
    from oasr_core.runtime import get_runtime

    runtime = get_runtime()
    return {op: runtime.referenced_configs(FAMILY, arch, lane, ops={op}) for op in CELL_OPS}


def production_cells(lane: str, arch: str,
                     referenced_ids: Mapping[str, Iterable[str]] | None = None
                     ) -> dict[str, tuple[Config, ...]]:
    """Per cell op, the configs whose units for it the production module links (module
    docstring): ``referenced_ids`` (default: :func:`referenced`) per op, those that fit
    ``arch`` and build for the cell, with the lane default for ``lstm_step``; the whole
    space's under ``OASR_RECURRENT_COMPILE_SET=all``."""
    if PRODUCTION.compile_set() == "all":
        chosen = {op: lane_configs(lane, arch) for op in CELL_OPS}
    else:
        if referenced_ids is None:
            referenced_ids = referenced(lane, arch)
        chosen = {"lstm_step": PRODUCTION.configs(lane, arch,
                                                  referenced_ids.get("lstm_step", ()))}
        for op in CELL_OPS[1:]:
            wanted = set(referenced_ids.get(op, ()))
            chosen[op] = tuple(c for c in lane_configs(lane, arch) if c.id in wanted)
    return {op: tuple(c for c in configs if cell_feasible(c, op))
            for op, configs in chosen.items()}


def wanted(lane: str, arch: str) -> tuple[tuple[str, str], ...]:
    """``(op, config id)`` of every unit a loaded production module must hold in this epoch
    (``()`` under ``all``: the whole space never lacks one); the libraries' ``wanted``."""
    if PRODUCTION.compile_set() == "all":
        return ()
    return tuple((op, c.id) for op, configs in production_cells(lane, arch).items()
                 for c in configs)


@attrs.frozen
class CellModules(LaneModules):
    """The lane's modules: the kit's :class:`~oasr_core.kit.production.LaneModules` over
    every cell's units (:func:`oasr_recurrent.codegen.config_units`), whose production module
    links per op what :func:`production_cells` names."""

    def production_spec(self, lane: str, arch: str,
                        referenced_ids: Mapping[str, Iterable[str]] | None = None) -> Any:
        """The lane's production module on ``arch`` (every unit of the whole space under
        ``COMPILE_SET=all``)."""
        if PRODUCTION.compile_set() == "all":
            return self.full_spec(lane, arch)
        cells = production_cells(lane, arch, referenced_ids)
        return _spec(self.prefix[lane], arch, [u for op, configs in cells.items()
                                               for c in configs
                                               for u in codegen.cell_units(c, op, self.dtypes)])


MODULES = CellModules(production=PRODUCTION, prefix=MODULE_PREFIX, units=codegen.config_units,
                      include_dir=str(codegen.CSRC), flags=lambda lane: codegen.EXTRA_FLAGS,
                      dtypes=codegen.DTYPES, default_arch=lambda lane: "sm80")
"""The lane's modules (:class:`CellModules`)."""


def cell_spec(configs, cells, arch: str, *, name: str, dtypes=codegen.DTYPES):
    """A :class:`oasr_core.jit.JitSpec` linking the units of ``configs`` for each of ``cells``
    (:func:`oasr_recurrent.codegen.cell_units`; a ``ValueError`` for a config a cell does not
    build for) on ``arch``: a few kinds' units of some cells (the GPU tests)."""
    return _spec(name, arch, [u for c in configs for cell in cells
                              for u in codegen.cell_units(c, cell, dtypes)])


def _spec(name: str, arch: str, units: list) -> Any:
    """A :class:`oasr_core.jit.JitSpec` called ``name`` linking ``units`` for ``arch`` with
    the family's include dir and flags."""
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

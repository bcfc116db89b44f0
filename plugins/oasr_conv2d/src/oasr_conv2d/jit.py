"""JIT specs of the conv2d lane: one library per arch, one unit per config.

The lane's **production module** links its production set (:data:`PRODUCTION`, the kit's
:class:`oasr_core.kit.ProductionSet`): the configs the family heuristic names
(:data:`oasr_conv2d.lanes.ALWAYS`) and every config this epoch's tuning tiers reference,
filtered to what fits the arch; ``OASR_CONV2D_COMPILE_SET=all`` links the lane's whole space.

Nothing here runs at import; building happens in :func:`oasr_core.jit.load` calls made by
:mod:`oasr_conv2d.launch`, the bench adapter, the benchmark and ``oasr tune prebuild``.
"""

from __future__ import annotations

import functools
from pathlib import Path

from oasr_core.jit import kit
from oasr_core.kit import ProductionSet, cutlass_stamps
from oasr_core.kit.production import KernelModule, LaneModules

from oasr_conv2d import codegen
from oasr_conv2d.geometry import CSRC, LANE
from oasr_conv2d.lanes import ALWAYS, fits_arch, space

MODULE_PREFIX = {LANE: "conv2d_sm80"}
COMPILE_SET_ENV = "OASR_CONV2D_COMPILE_SET"
ALL_DTYPES = codegen.DTYPES
EQUIVALENTS = Path(__file__).with_name("equivalent_impls.json")
"""Implementation hashes recorded as building the same machine code as an earlier one
(:func:`oasr_core.jit.kit.canonical_impl_hash`)."""

PRODUCTION = ProductionSet(family="conv2d", compile_set_env=COMPILE_SET_ENV, space=space,
                           fits_arch=fits_arch, always=lambda lane, arch: ALWAYS)
"""The conv2d lane's production set: the heuristic's configs and the tiers'."""
lane_configs = PRODUCTION.lane_configs


MODULES = LaneModules(production=PRODUCTION, prefix=MODULE_PREFIX, units=codegen.jit_units,
                      include_dir=str(CSRC), flags=lambda lane: codegen.EXTRA_FLAGS,
                      dtypes=ALL_DTYPES, default_arch=lambda lane: "sm80")
"""The lane's modules (the kit's :class:`~oasr_core.kit.production.LaneModules`)."""


class Conv2dKernelModule(KernelModule):
    """``Lane.jit_module``: the JIT module of one conv2d config."""

    modules = MODULES


@functools.cache
def impl_hash() -> str:
    """A short hash of what decides the family's binaries (every config's unit text, the
    flags and the family's headers: :meth:`MODULES.impl_inputs
    <oasr_core.kit.production.LaneModules.impl_inputs>`) and the kit's headers (its
    ``conv/`` headers too), named as ``equivalent_impls.json`` records it
    (:func:`oasr_core.jit.kit.impl_hash`). A tuning entry measured under another hash is
    stale."""
    return kit.impl_hash(MODULES.impl_inputs(codegen.headers()),
                         [CSRC / "oasr_conv2d", kit.CONV_DIR], EQUIVALENTS)


def soft_validators() -> dict[str, str | None]:
    """``Family.soft_validators``: the implementation hash and the CUTLASS version."""
    return cutlass_stamps(impl_hash())

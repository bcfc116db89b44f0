"""JIT specs of the conv1d lanes: one library per lane and arch, one unit per config.

A lane's **production module** links its production set (:data:`PRODUCTION`, the kit's
:class:`oasr_core.kit.ProductionSet`): the lane default, the depthwise configs the family
heuristic names (:data:`oasr_conv1d.lanes.DEPTHWISE_ALWAYS`) and every config this epoch's
tuning tiers reference, filtered to what fits the arch; ``OASR_CONV1D_COMPILE_SET=all`` links
the lane's whole space. Dense units come from :mod:`oasr_conv1d.dense.codegen`, depthwise
units from :mod:`oasr_conv1d.depthwise.codegen`; a module holding both compiles with the
dense package's flags for the lane (they do not change a depthwise unit's meaning).

Nothing here runs at import; building happens in :func:`oasr_core.jit.load` calls made by
:mod:`oasr_conv1d.launch`, the bench adapter, the benchmark and ``oasr tune prebuild``.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Sequence
from pathlib import Path

from oasr_core.jit import kit
from oasr_core.kit import ProductionSet, cutlass_stamps
from oasr_core.kit.production import KernelModule, LaneModules
from oasr_core.types import Config

from oasr_conv1d import dense
from oasr_conv1d import depthwise as dw
from oasr_conv1d.depthwise import codegen as dw_codegen
from oasr_conv1d.geometry import CSRC, LANE_SM80, LANE_SM90, LANES
from oasr_conv1d.lanes import DEFAULTS, DEPTHWISE_ALWAYS, fits_arch, space

MODULE_PREFIX = {LANE_SM80: "conv1d_sm80", LANE_SM90: "conv1d_sm90"}
COMPILE_SET_ENV = "OASR_CONV1D_COMPILE_SET"
ALL_DTYPES = ("fp16", "bf16")
EQUIVALENTS = Path(__file__).with_name("equivalent_impls.json")
"""Implementation hashes recorded as building the same machine code as an earlier one
(:func:`oasr_core.jit.kit.canonical_impl_hash`)."""

PRODUCTION = ProductionSet(family="conv1d", compile_set_env=COMPILE_SET_ENV, space=space,
                           fits_arch=fits_arch,
                           always=lambda lane, arch: (DEFAULTS[lane], *DEPTHWISE_ALWAYS))
"""The conv1d lanes' production sets: default, the heuristic's depthwise picks, the tiers'."""
lane_configs = PRODUCTION.lane_configs


def units(config: Config, dtypes: Sequence[str] = ALL_DTYPES) -> list:
    """The translation units compiling ``config`` (one, dense or depthwise)."""
    if dw.is_depthwise(config):
        return [dw_codegen.translation_unit(config, dtypes)]
    return dense.jit_units(config, dtypes)


MODULES = LaneModules(production=PRODUCTION, prefix=MODULE_PREFIX, units=units,
                      include_dir=str(CSRC), flags=dense.flags, dtypes=ALL_DTYPES,
                      default_arch=lambda lane: "sm90" if lane == LANE_SM90 else "sm80")
"""The lanes' modules (the kit's :class:`~oasr_core.kit.production.LaneModules`)."""
module_spec = MODULES.module_spec
production_spec = MODULES.production_spec
full_spec = MODULES.full_spec
subset_spec = MODULES.subset_spec
lane_specs = MODULES.lane_specs


class Conv1dKernelModule(KernelModule):
    """``Lane.jit_module``: the JIT module of one conv1d config."""

    modules = MODULES


@functools.cache
def impl_hash() -> str:
    """A short hash of what decides the family's binaries: the dense package's units, flags
    and headers (:func:`oasr_conv1d.dense.codegen.impl_inputs`), every depthwise unit of both
    lanes, the family's headers and the kit's (its ``conv/`` headers too), named as
    ``equivalent_impls.json`` records it (:func:`oasr_core.jit.kit.canonical_impl_hash`). A
    tuning entry measured under another hash is stale; editing a generator without changing a
    unit leaves the tables current."""
    digest = hashlib.sha256()
    for name, data in dense.impl_inputs():
        digest.update(name.encode())
        digest.update(data)
    for lane in LANES:
        for config in dw.configs(lane):
            digest.update(dw_codegen.unit_source(config).encode())
    kit.hash_headers(digest, [CSRC / "oasr_conv1d", kit.CONV_DIR])
    return kit.canonical_impl_hash(digest.hexdigest()[:16], EQUIVALENTS)


def soft_validators() -> dict[str, str | None]:
    """``Family.soft_validators``: the implementation hash and the CUTLASS version."""
    return cutlass_stamps(impl_hash())

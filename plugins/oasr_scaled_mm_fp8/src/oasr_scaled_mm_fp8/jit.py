"""JIT specs of the scaled_mm_fp8 lanes: the W8A8 code base's
(:class:`oasr_scaled_mm.w8a8.jit.LaneModules`) for :data:`oasr_scaled_mm_fp8.format.E4M3`: one
translation unit per (config, op), one library per lane and arch; a lane's production module
links its default, its heuristic ladder and what the loaded tiers reference
(``OASR_SCALED_MM_FP8_COMPILE_SET=all``: the whole space). Nothing here runs at import.
"""

from __future__ import annotations

from oasr_scaled_mm.w8a8.jit import EXTRA_FLAGS, LaneModules, jit_arch

from oasr_scaled_mm_fp8 import config_space as cs
from oasr_scaled_mm_fp8.config_space import unit_name
from oasr_scaled_mm_fp8.format import E4M3

MODULE_PREFIX = {cs.LANE_SM89: "scaled_mm_fp8_sm89_mma", cs.LANE_SM90: "scaled_mm_fp8_sm90_wgmma"}
COMPILE_SET_ENV = "OASR_SCALED_MM_FP8_COMPILE_SET"
MODULES = LaneModules(E4M3, MODULE_PREFIX, COMPILE_SET_ENV)
PRODUCTION = MODULES.production
"""The lanes' production sets: default, heuristic ladder, what the tiers reference."""
compile_set, lane_configs = PRODUCTION.compile_set, PRODUCTION.lane_configs
production_ids = PRODUCTION.ids
heuristic_ids = MODULES.ladder_ids
unit, module_spec = MODULES.unit, MODULES.module_spec
production_spec, full_spec = MODULES.production_spec, MODULES.full_spec
lane_specs, soft_validators = MODULES.lane_specs, MODULES.soft_validators
KernelModule = Fp8KernelModule = MODULES.kernel_module()
"""``Lane.jit_module``: the JIT module of one config."""

__all__ = [
    "COMPILE_SET_ENV", "EXTRA_FLAGS", "MODULE_PREFIX", "PRODUCTION", "KernelModule",
    "Fp8KernelModule", "compile_set", "full_spec", "jit_arch", "lane_configs", "lane_specs",
    "module_spec", "production_ids", "production_spec", "soft_validators", "unit", "unit_name",
]

"""JIT specs of the scaled_mm_fp8 lanes: one translation unit per (config, op), one library per
lane and arch.

A lane's production module links its production set (:data:`PRODUCTION`, the kit's
:class:`oasr_core.kit.ProductionSet`): what the loaded tuning tiers reference for this arch and
lane, the lane's default and every tile the shape heuristic can pick
(:mod:`oasr_scaled_mm_fp8.heuristic`), each with both ops' units.
``OASR_SCALED_MM_FP8_COMPILE_SET=all`` links the whole space (what a build measures). Units
compile with ``--fmad=false``, so the epilogue's fp32 ops stay separate, in a fixed order.
Nothing here runs at import.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from oasr_core import jit as core_jit
from oasr_core.kit import ProductionSet, cutlass_stamps
from oasr_core.kit import lane_specs as _lane_specs
from oasr_core.types import Config

from oasr_scaled_mm_fp8 import codegen
from oasr_scaled_mm_fp8.config_space import DEFAULTS, FAMILY, LANE_SM89, LANE_SM90, OPS, space
from oasr_scaled_mm_fp8.config_space import unit_name as unit_name
from oasr_scaled_mm_fp8.feasibility import fits_arch

MODULE_PREFIX = {LANE_SM89: "scaled_mm_fp8_sm89_mma", LANE_SM90: "scaled_mm_fp8_sm90_wgmma"}
COMPILE_SET_ENV = "OASR_SCALED_MM_FP8_COMPILE_SET"
EXTRA_FLAGS = ("--fmad=false", "-Xcompiler", "-fvisibility-inlines-hidden")


def jit_arch(arch_family: str) -> str:
    """The nvcc target of an arch family (``sm90`` -> ``90a``: wgmma needs the ``a`` target)."""
    return core_jit.family_target(arch_family)


def heuristic_ids(lane: str, arch: str) -> tuple[str, ...]:
    """The config ids the shape heuristic can pick on ``lane`` on ``arch`` (its ladder's
    rungs)."""
    from oasr_scaled_mm_fp8.heuristic import ladder_for

    return ladder_for(lane, arch).rungs


PRODUCTION = ProductionSet(family=FAMILY, compile_set_env=COMPILE_SET_ENV, space=space,
                           fits_arch=fits_arch,
                           always=lambda lane, arch: (DEFAULTS[lane], *heuristic_ids(lane, arch)))
"""The fp8 lanes' production sets: default, heuristic tiles, what the tiers reference."""
compile_set = PRODUCTION.compile_set
lane_configs = PRODUCTION.lane_configs


def unit(config: Config, op: str, out_dtypes: Sequence[str] | None = None):
    """The translation unit compiling ``config`` for ``op``."""
    from oasr_core.jit import TranslationUnit

    return TranslationUnit(
        name=unit_name(config, op), source=codegen.unit_source(config, op, out_dtypes),
        exports=(codegen.symbol(config, op), codegen.workspace_symbol(config, op)))


def module_spec(lane: str, arch: str, configs: Iterable[Config], *, name: str | None = None,
                ops: Sequence[str] = OPS, out_dtypes: Sequence[str] | None = None):
    """A :class:`oasr_core.jit.JitSpec` linking the units of ``configs`` for ``ops``
    (``out_dtypes`` restricts the ``scaled_mm_fp8`` units' kernels: tests)."""
    from oasr_core.jit import JitSpec

    units = [unit(c, op, out_dtypes if op == OPS[0] else None)
             for c in dict.fromkeys(configs) for op in ops]
    return JitSpec(name=name or MODULE_PREFIX[lane], arch=jit_arch(arch), units=tuple(units),
                   include_dirs=(str(codegen.csrc_dir()),), extra_flags=EXTRA_FLAGS)


def production_spec(lane: str, arch: str, referenced: Iterable[str] | None = None):
    """The lane's production module on ``arch`` (the whole space under ``COMPILE_SET=all``)."""
    if compile_set() == "all":
        return full_spec(lane, arch)
    return module_spec(lane, arch, PRODUCTION.configs(lane, arch, referenced))


def full_spec(lane: str, arch: str):
    """Every config of ``lane`` that fits ``arch``, in one module (builds, benchmarks, tests)."""
    return module_spec(lane, arch, lane_configs(lane, arch), name=MODULE_PREFIX[lane] + "_all")


def lane_specs(lane: str, arch: str, scope: str) -> list:
    """``Lane.jit_specs``: the production module (``"production"``) or the whole space
    (``"all"``), then the activation quantizer (:mod:`oasr_scaled_mm_fp8.quantize_kernel`)."""
    from oasr_scaled_mm_fp8 import quantize_kernel

    specs = _lane_specs(lane, arch, scope, production=PRODUCTION,
                        production_spec=production_spec, full_spec=full_spec)
    return [*specs, quantize_kernel.spec(arch)] if specs else specs


class Fp8KernelModule:
    """The JIT module of one fp8 config (``Lane.jit_module``); constructing it compiles nothing."""

    def __init__(self, config: Config, arch: str | None = None) -> None:
        if config.lane not in MODULE_PREFIX:
            raise ValueError(f"config {config.id!r} belongs to lane {config.lane!r}")
        self.config = config
        self.arch = arch or ("sm90" if config.lane == LANE_SM90 else "sm89")

    def spec(self, ops: Sequence[str] = OPS, out_dtypes: Sequence[str] | None = None):
        """A module holding this config's units alone (optionally some ops / dtypes)."""
        name = f"{MODULE_PREFIX[self.config.lane]}_{self.config.params['unit']}"
        if tuple(ops) != OPS:
            name += "_" + "_".join(ops)
        if out_dtypes is not None:
            name += "_" + "_".join(out_dtypes)
        return module_spec(self.config.lane, self.arch, [self.config], name=name.lower(),
                           ops=ops, out_dtypes=out_dtypes)

    def exports(self, op: str = OPS[0]) -> tuple[str, str]:
        """The launcher and workspace-query symbols for ``op``."""
        return codegen.symbol(self.config, op), codegen.workspace_symbol(self.config, op)


KernelModule = Fp8KernelModule
"""``Lane.jit_module`` (the name the W8A8 lane records read)."""


def soft_validators() -> dict[str, str | None]:
    """The family's soft stamps: the generator/headers hash and the CUTLASS version."""
    return cutlass_stamps(codegen.impl_hash())

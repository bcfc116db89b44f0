"""JIT specs of the scaled_mm lanes: one translation unit per (config, op), one library per lane.

A lane's **production module** links its production set on an arch (:data:`PRODUCTION`, the
kit's :class:`oasr_core.kit.ProductionSet`): the configs the loaded tuning tiers reference for
this arch and lane, the lane's default and every rung of its heuristic ladder
(:mod:`oasr_scaled_mm.heuristic`), filtered to what fits the arch, each with its ``scaled_mm``
unit and (data-parallel configs) its ``scaled_mm_quant`` unit.
``OASR_SCALED_MM_COMPILE_SET=all`` links the lane's whole space (what a build measures).
Objects are cached per unit by content (:mod:`oasr_core.jit`; no device in the key), so a
production module that gains a config compiles its units and relinks.

Units compile with ``--fmad=false``: the epilogue's multiplies and adds stay separate fp32 ops
in a fixed order, which is what makes every variant (and the torch reference) bitwise equal.
Nothing here runs at import.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from oasr_core import jit as core_jit
from oasr_core.kit import ProductionSet, cutlass_stamps
from oasr_core.kit import lane_specs as _lane_specs
from oasr_core.types import Config

from oasr_scaled_mm import codegen
from oasr_scaled_mm.config_space import (
    DEFAULTS,
    FAMILY,
    LANE_SM80,
    LANE_SM90,
    OPS,
    serves,
    space,
    unit_name,
)
from oasr_scaled_mm.feasibility import fits_arch

MODULE_PREFIX = {LANE_SM80: "scaled_mm_sm80_int8_mma", LANE_SM90: "scaled_mm_sm90_int8_wgmma"}
COMPILE_SET_ENV = "OASR_SCALED_MM_COMPILE_SET"
EXTRA_FLAGS = ("--fmad=false", "-Xcompiler", "-fvisibility-inlines-hidden")
"""``--fmad=false``: no FMA contraction (bitwise-equal epilogues). Hidden inline functions: a
module exports only its launchers (libstdc++ inlines would otherwise be weak exports)."""


def jit_arch(arch_family: str) -> str:
    """The nvcc target of an arch family: ``sm90`` -> ``90a`` (wgmma needs the ``a`` target)."""
    return core_jit.family_target(arch_family)


def ladder_ids(lane: str, arch: str) -> tuple[str, ...]:
    """The config ids on ``lane``'s heuristic ladder for ``arch``."""
    from oasr_scaled_mm.heuristic import ladder_for

    return ladder_for(lane, arch).rungs


PRODUCTION = ProductionSet(family=FAMILY, compile_set_env=COMPILE_SET_ENV, space=space,
                           fits_arch=fits_arch,
                           always=lambda lane, arch: (DEFAULTS[lane], *ladder_ids(lane, arch)))
"""The scaled_mm lanes' production sets: default, heuristic ladder, what the tiers reference."""
compile_set = PRODUCTION.compile_set
lane_configs = PRODUCTION.lane_configs
production_ids = PRODUCTION.ids


def unit(config: Config, op: str, out_dtypes: Sequence[str] | None = None):
    """The translation unit compiling ``config`` for ``op``."""
    from oasr_core.jit import TranslationUnit

    return TranslationUnit(
        name=unit_name(config, op), source=codegen.unit_source(config, op, out_dtypes),
        exports=(codegen.symbol(config, op), codegen.workspace_symbol(config, op)))


def module_spec(lane: str, arch: str, configs: Iterable[Config], *, name: str | None = None,
                ops: Sequence[str] = OPS):
    """A :class:`oasr_core.jit.JitSpec` linking the units of ``configs`` for ``ops``."""
    from oasr_core.jit import JitSpec

    units = [unit(c, op) for c in dict.fromkeys(configs) for op in ops if serves(c, op)]
    return JitSpec(name=name or MODULE_PREFIX[lane], arch=jit_arch(arch), units=tuple(units),
                   include_dirs=(str(codegen.csrc_dir()),), extra_flags=EXTRA_FLAGS)


def production_spec(lane: str, arch: str, referenced: Iterable[str] | None = None):
    """The lane's production module on ``arch`` (the whole space under ``COMPILE_SET=all``;
    ``referenced`` defaults to what the runtime's tuning tiers reference)."""
    if compile_set() == "all":
        return full_spec(lane, arch)
    return module_spec(lane, arch, PRODUCTION.configs(lane, arch, referenced))


def full_spec(lane: str, arch: str):
    """Every config of ``lane`` that fits ``arch``, in one module (builds, benchmarks, tests)."""
    return module_spec(lane, arch, lane_configs(lane, arch), name=MODULE_PREFIX[lane] + "_all")


def lane_specs(lane: str, arch: str, scope: str) -> list:
    """``Lane.jit_specs``: ``lane``'s production module on ``arch`` (``scope="production"``)
    or its whole space (``"all"``), then the activation quantizer the quantized linear calls
    (:mod:`oasr_scaled_mm.quantize_kernel`); none where the lane has no config."""
    from oasr_scaled_mm import quantize_kernel

    specs = _lane_specs(lane, arch, scope, production=PRODUCTION,
                        production_spec=production_spec, full_spec=full_spec)
    return [*specs, quantize_kernel.spec(arch)] if specs else specs


class ScaledMmKernelModule:
    """The JIT module of one scaled_mm config (``Lane.jit_module``; the core instantiates it).

    Knows the config's units and a module holding them alone (to build or try one config);
    the lane-wide production module is :func:`production_spec`. Constructing it compiles
    nothing.
    """

    def __init__(self, config: Config, arch: str | None = None) -> None:
        if config.lane not in MODULE_PREFIX:
            raise ValueError(f"config {config.id!r} belongs to lane {config.lane!r}")
        self.config = config
        self.arch = arch or ("sm90" if config.lane == LANE_SM90 else "sm80")

    @property
    def ops(self) -> tuple[str, ...]:
        """The ops this config has launchers for."""
        return tuple(op for op in OPS if serves(self.config, op))

    def translation_units(self, out_dtypes: Sequence[str] | None = None) -> list:
        """The units of this config (``out_dtypes`` restricts the scaled_mm unit's kernels)."""
        return [unit(self.config, op, out_dtypes if op == OPS[0] else None) for op in self.ops]

    def spec(self, ops: Sequence[str] | None = None, out_dtypes: Sequence[str] | None = None):
        """A module holding this config's units alone (optionally some ops / dtypes)."""
        from oasr_core.jit import JitSpec

        wanted = tuple(ops) if ops is not None else self.ops
        units = [unit(self.config, op, out_dtypes if op == OPS[0] else None)
                 for op in wanted if serves(self.config, op)]
        suffix = "" if out_dtypes is None else "_" + "_".join(out_dtypes)
        name = f"{MODULE_PREFIX[self.config.lane]}_{self.config.params['unit']}"
        if tuple(wanted) != self.ops:
            name += "_" + "_".join(wanted)
        return JitSpec(name=(name + suffix).lower(), arch=jit_arch(self.arch), units=tuple(units),
                       include_dirs=(str(codegen.csrc_dir()),), extra_flags=EXTRA_FLAGS)

    def exports(self, op: str = OPS[0]) -> tuple[str, str]:
        """The launcher and workspace-query symbols for ``op``."""
        return codegen.symbol(self.config, op), codegen.workspace_symbol(self.config, op)


KernelModule = ScaledMmKernelModule
"""``Lane.jit_module`` (the name the W8A8 lane records read)."""


def soft_validators() -> dict[str, str | None]:
    """The family's soft stamps: the generator/headers hash and the CUTLASS version."""
    return cutlass_stamps(codegen.impl_hash())


__all__ = [
    "COMPILE_SET_ENV", "EXTRA_FLAGS", "MODULE_PREFIX", "PRODUCTION", "ScaledMmKernelModule",
    "compile_set",
    "full_spec", "jit_arch", "lane_configs", "lane_specs", "module_spec", "production_ids",
    "production_spec", "soft_validators", "unit", "unit_name",
]

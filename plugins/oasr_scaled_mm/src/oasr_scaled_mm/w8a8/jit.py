"""JIT specs of a W8A8 family's lanes: one translation unit per (config, op), one library per
lane and arch.

A lane's **production module** links its production set on an arch (the kit's
:class:`oasr_core.kit.ProductionSet`): the configs the loaded tuning tiers reference for this
arch and lane, the lane's default and every rung of its heuristic ladder, filtered to what
fits the arch, each with the units of the ops it serves. ``OASR_<FAMILY>_COMPILE_SET=all``
links the lane's whole space (what a build measures). Objects are cached per unit by content
(:mod:`oasr_core.jit`; no device in the key), so a production module that gains a config
compiles its units and relinks. Units compile with ``--fmad=false``: the epilogue's multiplies
and adds stay separate fp32 ops in a fixed order. :class:`LaneModules` is one family's, built
from its :class:`~oasr_scaled_mm.w8a8.formats.Format` and its ``codegen`` / ``config_space`` /
``feasibility`` / ``heuristic`` / ``quantize_kernel`` modules. Nothing here runs at import.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from oasr_core import jit as core_jit
from oasr_core.kit import ProductionSet, cutlass_stamps
from oasr_core.kit import lane_specs as _lane_specs
from oasr_core.types import Config

from oasr_scaled_mm.w8a8.formats import Format

EXTRA_FLAGS = ("--fmad=false", "-Xcompiler", "-fvisibility-inlines-hidden")
"""``--fmad=false``: no FMA contraction (bitwise-equal epilogues). Hidden inline functions: a
module exports only its launchers (libstdc++ inlines would otherwise be weak exports)."""


def jit_arch(arch_family: str) -> str:
    """The nvcc target of an arch family: ``sm90`` -> ``90a`` (wgmma needs the ``a`` target)."""
    return core_jit.family_target(arch_family)


class LaneModules:
    """One W8A8 family's JIT specs (see the module docstring): ``module_prefix`` names each
    lane's module (its :class:`~oasr_scaled_mm.w8a8.formats.LaneFormat`'s ``module``),
    ``compile_set_env`` (``OASR_<FAMILY>_COMPILE_SET``) the variable that links the whole
    space."""

    def __init__(self, fmt: Format):
        self.format = fmt
        self.module_prefix = {lane.name: lane.module for lane in fmt.lanes}
        self.compile_set_env = compile_set_env = f"OASR_{fmt.family.upper()}_COMPILE_SET"
        cs, fe = fmt.module("config_space"), fmt.module("feasibility")
        self.production = ProductionSet(
            family=fmt.family, compile_set_env=compile_set_env, space=cs.space,
            fits_arch=fe.fits_arch,
            always=lambda lane, arch: (cs.DEFAULTS[lane], *self.ladder_ids(lane, arch)))

    def ladder_ids(self, lane: str, arch: str) -> tuple[str, ...]:
        """The config ids on ``lane``'s heuristic ladder for ``arch``."""
        return self.format.module("heuristic").ladder_for(lane, arch).rungs

    def unit(self, config: Config, op: str, out_dtypes: Sequence[str] | None = None) -> Any:
        """The translation unit compiling ``config`` for ``op``."""
        from oasr_core.jit import TranslationUnit

        codegen, cs = self.format.module("codegen"), self.format.module("config_space")
        return TranslationUnit(
            name=cs.unit_name(config, op), source=codegen.unit_source(config, op, out_dtypes),
            exports=(codegen.symbol(config, op), codegen.workspace_symbol(config, op)))

    def module_spec(self, lane: str, arch: str, configs: Iterable[Config], *,
                    name: str | None = None, ops: Sequence[str] | None = None,
                    out_dtypes: Sequence[str] | None = None) -> Any:
        """A :class:`oasr_core.jit.JitSpec` linking the units of ``configs`` for ``ops`` (every
        op by default; each config's units of the ops it serves); ``out_dtypes`` restricts
        the GEMM op's kernels (tests)."""
        from oasr_core.jit import JitSpec

        cs = self.format.module("config_space")
        wanted = self.format.ops if ops is None else tuple(ops)
        units = [self.unit(c, op, out_dtypes if op == self.format.op_mm else None)
                 for c in dict.fromkeys(configs) for op in wanted if cs.serves(c, op)]
        return JitSpec(name=name or self.module_prefix[lane], arch=jit_arch(arch),
                       units=tuple(units),
                       include_dirs=self.format.module("codegen").include_dirs(),
                       extra_flags=EXTRA_FLAGS)

    def production_spec(self, lane: str, arch: str, referenced: Iterable[str] | None = None
                        ) -> Any:
        """The lane's production module on ``arch`` (the whole space under ``COMPILE_SET=all``;
        ``referenced`` defaults to what the runtime's tuning tiers reference)."""
        if self.production.compile_set() == "all":
            return self.full_spec(lane, arch)
        return self.module_spec(lane, arch, self.production.configs(lane, arch, referenced))

    def full_spec(self, lane: str, arch: str) -> Any:
        """Every config of ``lane`` that fits ``arch``, in one module (builds, benchmarks,
        tests)."""
        return self.module_spec(lane, arch, self.production.lane_configs(lane, arch),
                                name=self.module_prefix[lane] + "_all")

    def lane_specs(self, lane: str, arch: str, scope: str) -> list:
        """``Lane.jit_specs``: ``lane``'s production module on ``arch`` (``"production"``)
        or its whole space (``"all"``), then the activation quantizer the quantized linear
        calls; none where the lane has no config."""
        specs = _lane_specs(lane, arch, scope, production=self.production,
                            production_spec=self.production_spec, full_spec=self.full_spec)
        return [*specs, self.format.module("quantize_kernel").spec(arch)] if specs else specs

    def names(self) -> dict[str, Any]:
        """What a family's ``jit`` module names: ``MODULE_PREFIX``, ``COMPILE_SET_ENV``,
        ``EXTRA_FLAGS``, ``PRODUCTION`` (the lanes' production sets: default, heuristic ladder,
        what the tiers reference) with its ``compile_set`` / ``lane_configs`` /
        ``production_ids``, ``ladder_ids``, ``unit``, ``module_spec``, ``production_spec``,
        ``full_spec``, ``lane_specs``, ``soft_validators``, ``jit_arch``, ``unit_name`` and
        ``KernelModule`` (``Lane.jit_module``: the JIT module of one config)."""
        production = self.production
        return {"MODULE_PREFIX": self.module_prefix, "COMPILE_SET_ENV": self.compile_set_env,
                "EXTRA_FLAGS": EXTRA_FLAGS, "MODULES": self, "PRODUCTION": production,
                "compile_set": production.compile_set, "lane_configs": production.lane_configs,
                "production_ids": production.ids, "ladder_ids": self.ladder_ids,
                "unit": self.unit, "module_spec": self.module_spec,
                "production_spec": self.production_spec, "full_spec": self.full_spec,
                "lane_specs": self.lane_specs, "soft_validators": self.soft_validators,
                "jit_arch": jit_arch,
                "unit_name": self.format.module("config_space").unit_name,
                "KernelModule": self.kernel_module()}

    def soft_validators(self) -> dict[str, str | None]:
        """The family's soft stamps: the generator/headers hash and the CUTLASS version."""
        return cutlass_stamps(self.format.module("codegen").impl_hash())

    def kernel_module(self) -> type:
        """The family's ``Lane.jit_module`` class: the JIT module of one config (its units
        and a module holding them alone, to build or try one config); constructing it
        compiles nothing."""
        modules, fmt = self, self.format
        arch_of = {lf.name: lf.arch_families[0] for lf in fmt.lanes}

        class KernelModule:
            __doc__ = LaneModules.kernel_module.__doc__

            def __init__(self, config: Config, arch: str | None = None) -> None:
                if config.lane not in modules.module_prefix:
                    raise ValueError(f"config {config.id!r} belongs to lane {config.lane!r}")
                self.config = config
                self.arch = arch or arch_of[config.lane]

            @property
            def ops(self) -> tuple[str, ...]:
                """The ops this config has launchers for."""
                cs = fmt.module("config_space")
                return tuple(op for op in fmt.ops if cs.serves(self.config, op))

            def translation_units(self, out_dtypes: Sequence[str] | None = None) -> list:
                """The units of this config (``out_dtypes`` restricts the GEMM unit's
                kernels)."""
                return [modules.unit(self.config, op, out_dtypes if op == fmt.op_mm else None)
                        for op in self.ops]

            def spec(self, ops: Sequence[str] | None = None,
                     out_dtypes: Sequence[str] | None = None) -> Any:
                """A module holding this config's units alone (optionally some ops /
                dtypes)."""
                wanted = tuple(ops) if ops is not None else self.ops
                name = f"{modules.module_prefix[self.config.lane]}_{self.config.params['unit']}"
                if wanted != self.ops:
                    name += "_" + "_".join(wanted)
                if out_dtypes is not None:
                    name += "_" + "_".join(out_dtypes)
                return modules.module_spec(self.config.lane, self.arch, [self.config],
                                           name=name.lower(), ops=wanted, out_dtypes=out_dtypes)

            def exports(self, op: str = fmt.op_mm) -> tuple[str, str]:
                """The launcher and workspace-query symbols for ``op``."""
                codegen = fmt.module("codegen")
                return codegen.symbol(self.config, op), codegen.workspace_symbol(self.config, op)

        KernelModule.__module__ = f"{fmt.package}.jit"
        return KernelModule

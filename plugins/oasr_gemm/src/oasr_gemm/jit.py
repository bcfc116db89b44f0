"""JIT specs of the gemm lanes: one translation unit per compiled config, one library per lane.

A lane's **production module** links its production set (:data:`PRODUCTION`, the kit's
:class:`oasr_core.kit.ProductionSet`): the configs the loaded tuning tiers reference for this
arch and lane, the lane's default and its coverage basis (:data:`oasr_gemm.config_space.BASIS`),
filtered to what fits the arch. ``OASR_GEMM_COMPILE_SET=all`` links the lane's whole space
instead. Objects are cached per unit by the core JIT (:mod:`oasr_core.jit`), so a production
module that gains a config compiles one unit and relinks.

Fused-residual units (op ``gemm_residual``, 3.x configs only) are linked where that op needs
them and nowhere else: the production module links those of the configs the tiers name in
``gemm_residual`` entries (:func:`residual_configs`; none by default, the op's untuned choice
being torch, and the same under ``COMPILE_SET=all``); a build links them only into the modules
of the ``gemm_residual`` signatures it measures (:func:`bench_spec` with ``residual=True``,
:func:`residual_full_spec`). The whole-space module (:func:`full_spec`) holds none.

Batched units (op ``bmm``, one per split-free config and layout) follow the same rule: the
production module links those of the configs the tiers name in ``bmm_tn`` / ``bmm_nn``
entries (:func:`bmm_configs`; none by default, an untuned bmm being torch's), and a build
measures from a module of every split-free config's batched units of one layout
(:func:`bmm_full_spec`) or of the configs it times (:func:`bmm_bench_spec`).

Nothing here runs at import; building happens in :func:`oasr_core.jit.build`/``prebuild``/
``load`` calls made by :mod:`oasr_gemm.launch`, the benchmark and ``oasr tune prebuild``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import attrs
from oasr_core import jit as core_jit
from oasr_core.kit import ProductionSet, cutlass_stamps
from oasr_core.kit import lane_specs as _lane_specs
from oasr_core.kit.production import matching
from oasr_core.types import Config

from oasr_gemm import codegen
from oasr_gemm.config_space import (
    BASIS,
    BMM_LAYOUTS,
    BMM_OPS,
    DEFAULTS,
    FAMILY,
    GROUP_OP,
    LANE_SM80,
    LANE_SM90,
    RESIDUAL_OP,
    has_bmm,
    has_group,
    space,
    units,
)
from oasr_gemm.feasibility import fits_arch

MODULE_PREFIX = {LANE_SM80: "gemm_sm80_mma", LANE_SM90: "gemm_sm90_wgmma"}
COMPILE_SET_ENV = "OASR_GEMM_COMPILE_SET"
ALL_DTYPES = ("fp16", "bf16")
EXTRA_FLAGS = ("-Xcompiler", "-fvisibility-inlines-hidden")
"""Hide inline functions too: libstdc++'s ``std::ctype<char>::do_widen`` (pulled in by
CUTLASS's host code) is otherwise exported as a weak symbol, and a module must export only its
launchers."""
LANE_FLAGS = {LANE_SM80: (), LANE_SM90: ("-DCUTLASS_ENABLE_GDC_FOR_SM90",)}
"""Per-lane flags: the 3.x kernels carry CUTLASS's grid-dependency instructions, so they can be
launched with programmatic dependent launch (``oasr_gemm.launch``, ``OASR_GEMM_PDL``)."""


PRODUCTION = ProductionSet(family="gemm", compile_set_env=COMPILE_SET_ENV, space=space,
                           fits_arch=fits_arch,
                           always=lambda lane, arch: (DEFAULTS[lane], *BASIS[lane]))
"""The gemm lanes' production sets: default, coverage basis, and what the tiers reference."""
compile_set = PRODUCTION.compile_set
lane_configs = PRODUCTION.lane_configs
production_ids = PRODUCTION.ids


def jit_arch(arch_family: str) -> str:
    """The nvcc target of an arch family: ``sm90`` -> ``90a`` (wgmma needs the ``a`` target)."""
    return core_jit.family_target(arch_family)


def unit(config: Config, dtypes: Sequence[str] = ALL_DTYPES):
    """The translation unit compiling ``config``'s unit for ``dtypes``."""
    from oasr_core.jit import TranslationUnit

    return TranslationUnit(name=config.params["unit"], source=codegen.unit_source(config, dtypes),
                           exports=(codegen.symbol(config), codegen.workspace_symbol(config)))


def residual_unit(config: Config, dtypes: Sequence[str] = ALL_DTYPES):
    """The translation unit compiling ``config``'s fused-residual kernel for ``dtypes``."""
    from oasr_core.jit import TranslationUnit

    return TranslationUnit(name=codegen.residual_unit(config),
                           source=codegen.residual_unit_source(config, dtypes),
                           exports=(codegen.residual_symbol(config),
                                    codegen.residual_workspace_symbol(config)))


def bmm_unit(config: Config, layout: str, dtypes: Sequence[str] = ALL_DTYPES):
    """The translation unit compiling ``config``'s batched kernel (op ``bmm``) for ``layout``
    (``"tn"`` or ``"nn"``) and ``dtypes``."""
    from oasr_core.jit import TranslationUnit

    return TranslationUnit(name=codegen.bmm_unit(config, layout),
                           source=codegen.bmm_unit_source(config, layout, dtypes),
                           exports=(codegen.bmm_symbol(config, layout),
                                    codegen.bmm_workspace_symbol(config, layout)))


def group_unit(config: Config, dtypes: Sequence[str] = ALL_DTYPES):
    """The translation unit compiling ``config``'s grouped kernel (op ``group_gemm``)."""
    from oasr_core.jit import TranslationUnit

    symbol = codegen.group_symbol(config)
    return TranslationUnit(name=codegen.group_unit(config),
                           source=codegen.group_unit_source(config, dtypes),
                           exports=(symbol, symbol + "_workspace"))


def module_spec(lane: str, arch: str, configs: Iterable[Config], *, name: str | None = None,
                dtypes: Sequence[str] = ALL_DTYPES,
                unit_dtypes: Callable[[Config], Sequence[str]] | None = None,
                residual: Iterable[Config] = (), bmm: Iterable[tuple[Config, str]] = (),
                group: Iterable[Config] = ()):
    """A :class:`oasr_core.jit.JitSpec` linking the units behind ``configs`` for ``arch``
    (each unit with ``dtypes``, or ``unit_dtypes(config)`` per unit), then the fused-residual
    units of ``residual`` (3.x configs; the others have none and are skipped), then the
    batched units of ``bmm``, ``(config, layout)`` pairs (split-free configs; others are
    skipped), then the grouped units of ``group`` (op ``group_gemm``: split-free 2.x
    configs)."""
    from oasr_core.jit import JitSpec

    configs = tuple(configs)
    by_unit = {c.params["unit"]: c for c in configs}
    with_residual = {c.params["unit"]: c for c in residual if codegen.has_residual(c)}
    batched = {codegen.bmm_unit(c, layout): (c, layout) for c, layout in bmm
               if codegen.has_bmm(c)}
    suffix = "" if tuple(dtypes) == ALL_DTYPES else "_" + "_".join(dtypes)
    pick = unit_dtypes or (lambda _c: dtypes)
    return JitSpec(
        name=name or f"{MODULE_PREFIX[lane]}{suffix}", arch=jit_arch(arch),
        units=(*(unit(by_unit[u], tuple(pick(by_unit[u]))) for u in units(configs)),
               *(residual_unit(c, tuple(pick(c))) for c in with_residual.values()),
               *(bmm_unit(c, layout, tuple(pick(c))) for c, layout in batched.values()),
               *(group_unit(c, tuple(pick(c))) for c in group if has_group(c))),
        include_dirs=(str(codegen.csrc_dir()),), extra_flags=EXTRA_FLAGS + LANE_FLAGS[lane],
    )


def residual_referenced(lane: str, arch: str) -> frozenset[str]:
    """Config ids of ``lane`` that this epoch's tuning tiers serve in ``gemm_residual``
    entries on ``arch``: the configs they name and the one their ``default`` regions launch
    (the runtime's :meth:`~oasr_core.runtime.Runtime.referenced_configs` of that op)."""
    from oasr_core.runtime import get_runtime

    return get_runtime().referenced_configs(FAMILY, arch, lane, ops={RESIDUAL_OP})


def residual_configs(lane: str, arch: str,
                     referenced: Iterable[str] | None = None) -> tuple[Config, ...]:
    """The configs whose fused-residual units the production module links: those of
    ``referenced`` (default: :func:`residual_referenced`) that fit ``arch`` and have one.

    Nothing is always linked: an untuned ``gemm_residual`` call is served by torch, and the
    cost-model tier (whose candidates are the gemm production set) does not serve the op.
    ``OASR_GEMM_COMPILE_SET=all`` widens the gemm units only.
    """
    if referenced is None:
        referenced = residual_referenced(lane, arch)
    wanted = set(referenced)
    return tuple(c for c in lane_configs(lane, arch) if c.id in wanted and codegen.has_residual(c))


def bmm_configs(lane: str, arch: str,
                referenced: Mapping[str, Iterable[str]] | None = None
                ) -> dict[str, tuple[Config, ...]]:
    """Per layout (``"tn"``, ``"nn"``), the configs whose batched units the production
    module links: those ``referenced[layout]`` names (default: what this epoch's tiers serve
    in ``bmm_tn`` / ``bmm_nn`` entries on ``arch``) that fit ``arch`` and are split-free.

    Nothing is always linked: an untuned bmm is served by torch, and the cost-model tier
    (whose candidates are the gemm production set) does not serve the op."""
    if referenced is None:
        from oasr_core.runtime import get_runtime

        runtime = get_runtime()
        referenced = {layout: runtime.referenced_configs(FAMILY, arch, lane,
                                                         ops={BMM_OPS[layout]})
                      for layout in BMM_LAYOUTS}
    out = {}
    for layout in BMM_LAYOUTS:
        wanted = set(referenced.get(layout, ()))
        out[layout] = tuple(c for c in lane_configs(lane, arch) if c.id in wanted and has_bmm(c))
    return out


def group_configs(lane: str, arch: str, referenced: Iterable[str] | None = None
                  ) -> tuple[Config, ...]:
    """The configs whose grouped units (op ``group_gemm``) the production module links: those
    ``referenced`` names (default: what this epoch's tiers serve in ``group_gemm`` entries on
    ``arch``) that fit ``arch`` and have one (split-free 2.x configs). Nothing is always
    linked: an untuned group is served by torch."""
    if referenced is None:
        from oasr_core.runtime import get_runtime

        referenced = get_runtime().referenced_configs(FAMILY, arch, lane, ops={GROUP_OP})
    wanted = set(referenced)
    return tuple(c for c in lane_configs(lane, arch) if c.id in wanted and has_group(c))


def group_full_spec(lane: str, arch: str):
    """Every grouped unit of ``lane`` (op ``group_gemm``) that runs on ``arch``, in a module
    of their own: what an exhaustive build measures a ``group_gemm`` signature from."""
    return module_spec(lane, arch, (), name=f"{MODULE_PREFIX[lane]}_group",
                       group=[c for c in lane_configs(lane, arch) if has_group(c)])


def group_bench_spec(lane: str, arch: str, configs: Iterable[Config],
                     dtypes: Sequence[str] | None = None):
    """The grouped units of ``configs`` (those with one) in one module: what a pruned build
    compiles to time a ``group_gemm`` signature; ``dtypes`` None compiles every dtype."""
    wanted = tuple(dtypes) if dtypes else ALL_DTYPES
    return module_spec(lane, arch, (), name=f"{MODULE_PREFIX[lane]}_group_bench",
                       dtypes=wanted, group=[c for c in configs if has_group(c)])


def _bmm_pairs(chosen: Mapping[str, Iterable[Config]]) -> tuple[tuple[Config, str], ...]:
    return tuple((c, layout) for layout, configs in chosen.items() for c in configs)


def production_spec(lane: str, arch: str, referenced: Iterable[str] | None = None,
                    residual: Iterable[str] | None = None,
                    bmm: Mapping[str, Iterable[str]] | None = None,
                    group: Iterable[str] | None = None):
    """The lane's production module on ``arch`` (the whole space under ``COMPILE_SET=all``).

    ``referenced`` defaults to what the runtime's tuning tiers reference; the fused-residual
    units are those of :func:`residual_configs` (``residual``: the ids the tiers name under
    ``gemm_residual``, by default read from the runtime's tiers), the batched units those of
    :func:`bmm_configs` (``bmm``: the ids per layout, by default the tiers'), the grouped
    units those of :func:`group_configs` (``group``: the ids, by default the tiers').
    """
    return module_spec(lane, arch, PRODUCTION.configs(lane, arch, referenced),
                       residual=residual_configs(lane, arch, residual),
                       bmm=_bmm_pairs(bmm_configs(lane, arch, bmm)),
                       group=group_configs(lane, arch, group))


def bmm_full_spec(lane: str, arch: str, layout: str):
    """The batched units of ``layout`` of every split-free config of ``lane`` that fits
    ``arch``, in a module of their own: what an exhaustive build measures a ``bmm_tn`` or
    ``bmm_nn`` signature from (compiled on its first such signature)."""
    if layout not in BMM_LAYOUTS:
        raise ValueError(f"bmm layout {layout!r} is not one of {BMM_LAYOUTS}")
    return module_spec(lane, arch, (), name=f"{MODULE_PREFIX[lane]}_bmm_{layout}",
                       bmm=[(c, layout) for c in lane_configs(lane, arch) if has_bmm(c)])


def bmm_bench_spec(lane: str, arch: str, layout: str, configs: Iterable[Config],
                   dtypes: Sequence[str] | None = None):
    """A module of exactly ``configs``' batched units of ``layout`` (the split-free ones), for
    a build to time a ``bmm_tn`` / ``bmm_nn`` signature; ``dtypes`` None compiles every
    dtype, else only those."""
    wanted = tuple(d for d in ALL_DTYPES if dtypes is None or d in dtypes) or ALL_DTYPES
    return module_spec(lane, arch, (), name=f"{MODULE_PREFIX[lane]}_bmm_{layout}_bench",
                       dtypes=wanted, bmm=[(c, layout) for c in configs if has_bmm(c)])


def full_spec(lane: str, arch: str, dtypes: Sequence[str] = ALL_DTYPES):
    """Every config of ``lane`` that fits ``arch``, in one module (tuning, benchmarks, tests)."""
    return module_spec(lane, arch, lane_configs(lane, arch), name=None, dtypes=dtypes)


def residual_full_spec(lane: str, arch: str):
    """The fused-residual units of every config of ``lane`` that fits ``arch`` and has one, in
    a module of their own: what an exhaustive build measures a ``gemm_residual`` signature
    from (compiled on its first such signature). ValueError for a lane without any."""
    return module_spec(lane, arch, (), name=f"{MODULE_PREFIX[lane]}_residual",
                       residual=_with_residual(lane, lane_configs(lane, arch)))


def _with_residual(lane: str, configs: Iterable[Config]) -> tuple[Config, ...]:
    """``configs`` that have a fused-residual unit; ValueError when none has."""
    chosen = tuple(c for c in configs if codegen.has_residual(c))
    if not chosen:
        raise ValueError(f"lane {lane} has no fused-residual kernel (op {RESIDUAL_OP} is "
                         "served by torch there)")
    return chosen


def subset_spec(lane: str, arch: str, patterns: Iterable[str]):
    """A module of the configs of ``lane`` on ``arch`` whose ids match any of the fnmatch
    ``patterns`` (benchmarks and probes that time a few configs: the objects are the
    whole-space module's, so a prebuilt cache serves both). ValueError when none match."""
    chosen = matching(lane_configs(lane, arch), patterns, lane, arch)
    return module_spec(lane, arch, chosen, name=f"{MODULE_PREFIX[lane]}_subset")


_BENCH_DTYPES: dict[tuple[str, str, tuple[str, ...]], tuple[str, ...]] = {}
"""Per (unit, arch, measured dtypes): the dtypes a build module compiles it with, decided
once per process so the module a build compiles is the one it loads."""


def _bench_dtypes(config: Config, arch: str, wanted: tuple[str, ...],
                  residual: bool = False) -> tuple[str, ...]:
    """Every dtype when that unit's production object (its fused-residual unit's with
    ``residual``) is in the JIT cache already (a prebuilt cache: nothing to compile), else
    only ``wanted``."""
    key = (codegen.residual_unit(config) if residual else config.params["unit"], arch, wanted)
    if key not in _BENCH_DTYPES:
        from oasr_core.jit import cache
        from oasr_core.jit.spec import plan

        full = plan(module_spec(config.lane, arch, [], residual=[config]) if residual
                    else module_spec(config.lane, arch, [config]))
        cached = cache.object_path(cache.cache_dir(), full.units[0].key).is_file()
        _BENCH_DTYPES[key] = ALL_DTYPES if cached else wanted
    return _BENCH_DTYPES[key]


def bench_spec(lane: str, arch: str, configs: Iterable[Config],
               dtypes: Sequence[str] | None = None,
               groups: Sequence[Sequence[Config]] | None = None):
    """A module of exactly ``configs`` for a build to time them (``Lane.bench_modules``).

    ``dtypes`` None compiles every dtype (the production module's objects, reused by it);
    ``("fp16",)`` compiles half the kernels of each unit whose production object is not
    cached yet (objects only builds use; the production module compiles its own).
    ``groups`` (the build's :func:`oasr_core.jit.bundles.plan_groups` over every config it
    will time) compiles each group's build-only units as one bundle (:func:`_bundled`); the
    module links every bundle holding one of ``configs``, so signatures sharing a unit share
    its bundle."""
    wanted = tuple(d for d in ALL_DTYPES if dtypes is None or d in dtypes) or ALL_DTYPES
    pick = None if wanted == ALL_DTYPES else (lambda c: _bench_dtypes(c, arch, wanted))
    spec = module_spec(lane, arch, configs, name=f"{MODULE_PREFIX[lane]}_bench",
                       unit_dtypes=pick)
    if not groups or pick is None:
        return spec
    return attrs.evolve(spec, units=_bundled(spec.units, configs, groups, arch, wanted))


def residual_bench_spec(lane: str, arch: str, configs: Iterable[Config],
                        dtypes: Sequence[str] | None = None,
                        groups: Sequence[Sequence[Config]] | None = None):
    """A module of exactly ``configs``' fused-residual units, for a build to time a
    ``gemm_residual`` signature (which times nothing else); ``dtypes`` and ``groups`` as in
    :func:`bench_spec` (a unit whose production object is cached compiles every dtype; a
    group's bundle is the one :func:`bench_spec` links too)."""
    configs = _with_residual(lane, configs)
    wanted = tuple(d for d in ALL_DTYPES if dtypes is None or d in dtypes) or ALL_DTYPES
    pick = None if wanted == ALL_DTYPES else (
        lambda c: _bench_dtypes(c, arch, wanted, residual=True))
    spec = module_spec(lane, arch, (), name=f"{MODULE_PREFIX[lane]}_residual_bench",
                       unit_dtypes=pick, residual=configs)
    if not groups or pick is None:
        return spec
    return attrs.evolve(spec, units=_bundled(spec.units, configs, groups, arch, wanted))


def _build_units(config: Config, arch: str, wanted: tuple[str, ...],
                 ops: frozenset[str] | None = None) -> list:
    """The build-only units of ``config`` (its production objects not cached): its own unit
    unless only ``gemm_residual`` times its group, and, on the 3.x lane, its fused-residual
    unit when ``gemm_residual`` does (``ops`` None: both), each with ``wanted``."""
    out = []
    if (ops is None or ops - {RESIDUAL_OP}) and _bench_dtypes(config, arch,
                                                            wanted) != ALL_DTYPES:
        out.append(unit(config, wanted))
    if (ops is None or RESIDUAL_OP in ops) and codegen.has_residual(config) and _bench_dtypes(
            config, arch, wanted, residual=True) != ALL_DTYPES:
        out.append(residual_unit(config, wanted))
    return out


def _bundled(solo: Sequence, configs: Iterable[Config], groups: Sequence[Sequence[Config]],
             arch: str, wanted: tuple[str, ...]) -> tuple:
    """``solo`` (one unit per config) with the build-only units of each group touching
    ``configs`` compiled as bundles of the whole group (same-prelude members only).

    A group's bundle holds its members' own units and their fused-residual units, those of
    the ops that time the group (``Group.ops``; a plain tuple: both): the two share the main
    loop, which is what nvcc spends its time on (:mod:`oasr_core.jit.bundles`), so a config
    both a ``gemm`` and a ``gemm_residual`` signature time compiles once, and the modules of
    either op link the same object. Measured with nvcc 13.0 on 2 cores (2026-12-01), a bundle
    of two configs took 44.5 s of CPU alone and 50.8 s with their fused-residual kernels."""
    from oasr_core.jit import bundles

    needed = {c.params["unit"] for c in configs}
    bundled: dict[str, Any] = {}
    for group in groups:
        members = list({c.params["unit"]: c for c in group}.values())
        if not needed & {c.params["unit"] for c in members}:
            continue
        ops = bundles.ops_of(group)
        tus = [tu for c in members for tu in _build_units(c, arch, wanted, ops)]
        if len(tus) > 1:
            bundled.update(bundles.bundles_of(tus))
    out: dict[str, Any] = {}
    for tu in solo:
        chosen = bundled.get(tu.name, tu)
        out.setdefault(chosen.name, chosen)
    return tuple(out.values())


def lane_specs(lane: str, arch: str, scope: str) -> list:
    """``Lane.jit_specs``: the production module (``scope="production"``) or the whole space
    (``"all"``) of ``lane`` on ``arch``, then the row log-softmax op ``gemm_log_softmax``
    launches after a config's GEMM (:mod:`oasr_gemm.log_softmax`); none for an arch the lane
    has no config for."""
    from oasr_gemm import log_softmax

    specs = _lane_specs(lane, arch, scope, production=PRODUCTION,
                        production_spec=production_spec, full_spec=full_spec)
    return [*specs, log_softmax.spec(arch)] if specs else specs


class GemmKernelModule:
    """The JIT module of one gemm config (``Lane.jit_module``; the core instantiates it).

    ``GemmKernelModule(config)`` knows the config's translation unit and a one-unit spec for
    building or loading it alone (e.g. to try a candidate); the lane-wide production module is
    :func:`production_spec`. Constructing it compiles nothing.
    """

    def __init__(self, config: Config, arch: str | None = None) -> None:
        if config.lane not in MODULE_PREFIX:
            raise ValueError(f"config {config.id!r} belongs to lane {config.lane!r}")
        self.config = config
        self.arch = arch or ("sm90" if config.lane == LANE_SM90 else "sm80")

    def translation_unit(self, dtypes: Sequence[str] = ALL_DTYPES):
        """The unit compiling this config."""
        return unit(self.config, dtypes)

    def spec(self, dtypes: Sequence[str] = ALL_DTYPES):
        """A module holding this config's unit alone."""
        name = f"{MODULE_PREFIX[self.config.lane]}_{self.config.params['unit']}"
        return module_spec(self.config.lane, self.arch, [self.config], name=name, dtypes=dtypes)

    @property
    def exports(self) -> tuple[str, str]:
        """The launcher and workspace-query symbols."""
        return codegen.symbol(self.config), codegen.workspace_symbol(self.config)


def soft_validators() -> dict[str, str | None]:
    """The family's soft stamps: the generator/headers hash and the CUTLASS version."""
    return cutlass_stamps(codegen.impl_hash())

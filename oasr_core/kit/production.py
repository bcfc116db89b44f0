"""A lane's production compile set, from its space, its always-linked ids and the tiers.

A family's production module for a lane on an arch links: the lane's default, the ids the
family always wants there (a coverage basis, a heuristic's ladder), and every config of the
lane that this epoch's tuning tiers reference, filtered to what fits the arch; with
``OASR_<FAMILY>_COMPILE_SET=all`` it links the lane's whole space instead. A family's
``jit.py`` keeps one :class:`ProductionSet` and builds its module specs from its answers, and
its launcher uses :meth:`ProductionSet.wanted` to refresh a loaded module after a reload.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from oasr_core import jit as core_jit
from oasr_core.errors import ToolchainError
from oasr_core.jit import cutlass_version
from oasr_core.jit import kit as jit_kit
from oasr_core.jit.bundles import variant_bundles
from oasr_core.runtime import get_runtime
from oasr_core.types import Config


@attrs.frozen
class ProductionSet:
    """The production set of one family's lanes (see the module docstring)."""

    family: str
    compile_set_env: str
    """The variable choosing ``tuned`` (default) or ``all``, e.g. ``OASR_GEMM_COMPILE_SET``."""
    space: Callable[[str], Sequence[Config]]
    """``space(lane)``: the lane's registered (feasible) configs."""
    fits_arch: Callable[[Config, str], bool]
    """``fits_arch(config, arch)``: the config runs on arch family ``arch``."""
    always: Callable[[str, str], Iterable[str]]
    """``always(lane, arch)``: ids linked whatever the tiers say, the default first."""

    def compile_set(self) -> str:
        """``tuned`` or ``all``, from :attr:`compile_set_env` (a bad value raises)."""
        return core_jit.compile_set(self.compile_set_env)

    def lane_configs(self, lane: str, arch: str) -> tuple[Config, ...]:
        """The configs of ``lane`` that run on arch family ``arch``."""
        return tuple(c for c in self.space(lane) if self.fits_arch(c, arch))

    def ids(self, lane: str, arch: str, referenced: Iterable[str] = ()) -> tuple[str, ...]:
        """The production ids of ``lane`` on ``arch``: :attr:`always`, then ``referenced``.

        Ids not in the lane's space or not fitting the arch are dropped (a stale tuning file
        cannot break the module); the order is stable, the default first.
        """
        fitting = {c.id for c in self.lane_configs(lane, arch)}
        wanted = [*self.always(lane, arch), *sorted(referenced)]
        return tuple(i for i in dict.fromkeys(wanted) if i in fitting)

    def referenced(self, lane: str, arch: str) -> frozenset[str]:
        """What this process's tuning tiers reference on ``lane`` for ``arch``."""
        return get_runtime().referenced_configs(self.family, arch, lane)

    def configs(self, lane: str, arch: str,
                referenced: Iterable[str] | None = None) -> tuple[Config, ...]:
        """The configs the production module links (the whole fitting space under ``all``).

        ``referenced`` defaults to what the runtime's tiers reference.
        """
        if self.compile_set() == "all":
            return self.lane_configs(lane, arch)
        if referenced is None:
            referenced = self.referenced(lane, arch)
        by_id = {c.id: c for c in self.lane_configs(lane, arch)}
        return tuple(by_id[i] for i in self.ids(lane, arch, referenced))

    def wanted(self, lane: str, arch: str) -> tuple[str, ...]:
        """What a loaded production module must hold in this epoch (``()`` under ``all``:
        the whole space never lacks anything); :class:`~oasr_core.jit.libraries.Libraries`'
        ``wanted``."""
        if self.compile_set() == "all":
            return ()
        return self.ids(lane, arch, self.referenced(lane, arch))


def lane_specs(lane: str, arch: str, scope: str, *, production: ProductionSet,
               production_spec: Callable[[str, str], object],
               full_spec: Callable[[str, str], object]) -> list:
    """``Lane.jit_specs``: the modules ``lane`` loads on ``arch``; ``scope`` is
    ``production`` or ``all``. An arch the lane has no config for gets none.

    The production module compiles each config's unit and its variants (a fused-residual or
    fused-quantize epilogue over the same main loop) as one file
    (:func:`oasr_core.jit.bundles.variant_bundles`): what a process loads to serve ops, and
    what ``oasr tune prebuild`` and a finished build compile, in about half the nvcc work.
    """
    if scope not in ("production", "all"):
        raise ValueError(f"scope {scope!r} is not 'production' or 'all'")
    if not production.lane_configs(lane, arch):
        return []
    if scope == "all":
        return [full_spec(lane, arch)]
    return [bundled(production_spec(lane, arch), production.space(lane))]


def bundled(spec: Any, space: Iterable[Config]) -> Any:
    """``spec`` with its units' variants bundled (:func:`lane_specs`), the primaries being
    the units of the lane's configs ``space``.

    A spec holding every unit of the space (``OASR_<FAMILY>_COMPILE_SET=all``) is returned as
    it is: it is the module ``oasr tune prebuild --all`` compiles unit by unit, and bundling
    it would name other objects than the ones that prebuild left in the cache. So is a spec
    that is not a :class:`~oasr_core.jit.JitSpec`."""
    units = getattr(spec, "units", None)
    if units is None:
        return spec
    primaries = {str(c.params.get("unit", c.id)) for c in space}
    if primaries <= {u.name for u in units}:
        return spec
    grouped = variant_bundles(units, primaries)
    return spec if grouped == tuple(units) else attrs.evolve(spec, units=grouped)


def cutlass_stamps(impl_hash: str) -> dict[str, str | None]:
    """``Family.soft_validators`` of a CUTLASS family: its generator/headers hash and the
    CUTLASS version (None when no CUTLASS wheel is installed, which marks nothing stale)."""
    try:
        cutlass = cutlass_version()
    except ToolchainError:
        cutlass = None
    return {"impl_hash": impl_hash, "cutlass": cutlass}


def matching(configs: Iterable[Config], patterns: Iterable[str], lane: str,
             arch: str) -> list[Config]:
    """The ``configs`` (of ``lane`` on ``arch``) whose ids match any of the fnmatch
    ``patterns``: a family's ``subset_spec`` links them in one module (benchmarks and probes
    that time a few configs; the objects are the whole-space module's, so a prebuilt cache
    serves both). ValueError when none match."""
    import fnmatch

    patterns = tuple(patterns)
    chosen = [c for c in configs if any(fnmatch.fnmatchcase(c.id, pat) for pat in patterns)]
    if not chosen:
        raise ValueError(f"no {lane} config on {arch} matches {', '.join(patterns)}")
    return chosen


@attrs.frozen
class LaneModules:
    """The JIT modules of a family whose lanes compile one library per lane and arch from one
    unit (or a few) per config: the whole-space, production and subset specs, ``Lane.jit_specs``
    and ``Lane.jit_module``, written once. The family says what differs: its production set,
    module names, units, include dir and flags; constructing nothing compiles."""

    production: ProductionSet
    prefix: Mapping[str, str]
    """Module name prefix by lane (``conv1d_sm80``); a lane not here has no modules."""
    units: Callable[[Config, Sequence[str]], list]
    """``units(config, dtypes)``: the translation units compiling ``config``."""
    include_dir: str
    """The family's csrc dir (its headers, included as ``<family>/...``)."""
    flags: Callable[[str], tuple[str, ...]]
    """``flags(lane)``: extra nvcc flags of the lane's modules."""
    dtypes: tuple[str, ...]
    """Every dtype a module compiles by default."""
    default_arch: Callable[[str], str]
    """``default_arch(lane)``: the arch a one-config module targets when none is named."""

    def module_spec(self, lane: str, arch: str, configs: Iterable[Config], *,
                    name: str | None = None, dtypes: Sequence[str] | None = None) -> Any:
        """A :class:`oasr_core.jit.JitSpec` linking the units behind ``configs`` for ``arch``."""
        dtypes = self.dtypes if dtypes is None else tuple(dtypes)
        seen: dict[str, object] = {}
        for config in configs:
            for unit in self.units(config, dtypes):
                seen.setdefault(unit.name, unit)
        suffix = "" if tuple(dtypes) == self.dtypes else "_" + "_".join(dtypes)
        return core_jit.JitSpec(name=name or f"{self.prefix[lane]}{suffix}",
                                arch=core_jit.family_target(arch), units=tuple(seen.values()),
                                include_dirs=(self.include_dir,), extra_flags=self.flags(lane))

    def production_spec(self, lane: str, arch: str,
                        referenced: Iterable[str] | None = None) -> Any:
        """The lane's production module on ``arch`` (the whole space under
        ``COMPILE_SET=all``)."""
        return self.module_spec(lane, arch, self.production.configs(lane, arch, referenced))

    def full_spec(self, lane: str, arch: str, dtypes: Sequence[str] | None = None) -> Any:
        """Every config of ``lane`` that fits ``arch`` in one module (builds, benchmarks,
        tests)."""
        return self.module_spec(lane, arch, self.production.lane_configs(lane, arch),
                                dtypes=dtypes)

    def subset_spec(self, lane: str, arch: str, patterns: Iterable[str]) -> Any:
        """A module of the configs of ``lane`` on ``arch`` whose ids match any fnmatch pattern
        (:func:`matching`)."""
        chosen = matching(self.production.lane_configs(lane, arch), patterns, lane, arch)
        return self.module_spec(lane, arch, chosen, name=f"{self.prefix[lane]}_subset")

    def impl_inputs(self, headers: Iterable[Path]) -> tuple[tuple[str, bytes], ...]:
        """What defines the binaries of a family whose lanes share their flags
        (:func:`oasr_core.jit.kit.impl_inputs`): the flags, the text of each unit of every
        config of each lane's space (every dtype of :attr:`dtypes`), and ``headers`` (named
        below :attr:`include_dir`). ValueError where the lanes' flags differ."""
        flags = {self.flags(lane) for lane in self.prefix}
        if len(flags) != 1:
            raise ValueError(f"the lanes {', '.join(self.prefix)} have different flags: name "
                             f"each lane's flags in the implementation inputs")
        units = ((lane, config.id, unit.source) for lane in self.prefix
                 for config in self.production.space(lane)
                 for unit in self.units(config, self.dtypes))
        return jit_kit.impl_inputs(flags=flags.pop(), units=units, headers=headers,
                                   root=Path(self.include_dir))

    def lane_specs(self, lane: str, arch: str, scope: str) -> list:
        """``Lane.jit_specs``: the production module or the whole space (:func:`lane_specs`)."""
        return lane_specs(lane, arch, scope, production=self.production,
                          production_spec=self.production_spec, full_spec=self.full_spec)



class KernelModule:
    """The JIT module of one config (``Lane.jit_module``; constructing compiles nothing): its
    units and a one-config spec for building or loading it alone. A family subclasses it
    naming its :class:`LaneModules` as ``modules`` (the core instantiates the class)."""

    modules: LaneModules

    def __init__(self, config: Config, arch: str | None = None) -> None:
        if config.lane not in self.modules.prefix:
            raise ValueError(f"config {config.id!r} belongs to lane {config.lane!r}")
        self.config = config
        self.arch = arch or self.modules.default_arch(config.lane)

    def translation_units(self, dtypes: Sequence[str] | None = None) -> list:
        """The units compiling this config."""
        return self.modules.units(self.config, self.modules.dtypes if dtypes is None
                                  else tuple(dtypes))

    def spec(self, dtypes: Sequence[str] | None = None) -> Any:
        """A module holding this config's unit alone."""
        name = f"{self.modules.prefix[self.config.lane]}_{self.config.params['unit']}"
        return self.modules.module_spec(self.config.lane, self.arch, [self.config], name=name,
                                        dtypes=dtypes)

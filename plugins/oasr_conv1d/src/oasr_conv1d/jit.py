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
from collections.abc import Iterable, Sequence

from oasr_core import jit as core_jit
from oasr_core.jit import kit
from oasr_core.kit import ProductionSet, cutlass_stamps
from oasr_core.kit import lane_specs as _lane_specs
from oasr_core.kit.production import matching
from oasr_core.types import Config

from oasr_conv1d import dense
from oasr_conv1d import depthwise as dw
from oasr_conv1d.depthwise import codegen as dw_codegen
from oasr_conv1d.geometry import CSRC, LANE_SM80, LANE_SM90, LANES
from oasr_conv1d.lanes import DEFAULTS, DEPTHWISE_ALWAYS, fits_arch, space

MODULE_PREFIX = {LANE_SM80: "conv1d_sm80", LANE_SM90: "conv1d_sm90"}
COMPILE_SET_ENV = "OASR_CONV1D_COMPILE_SET"
ALL_DTYPES = ("fp16", "bf16")

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


def module_spec(lane: str, arch: str, configs: Iterable[Config], *, name: str | None = None,
                dtypes: Sequence[str] = ALL_DTYPES):
    """A :class:`oasr_core.jit.JitSpec` linking the units behind ``configs`` for ``arch``."""
    from oasr_core.jit import JitSpec

    seen: dict[str, object] = {}
    for config in configs:
        for unit in units(config, dtypes):
            seen.setdefault(unit.name, unit)
    suffix = "" if tuple(dtypes) == ALL_DTYPES else "_" + "_".join(dtypes)
    return JitSpec(name=name or f"{MODULE_PREFIX[lane]}{suffix}",
                   arch=core_jit.family_target(arch), units=tuple(seen.values()),
                   include_dirs=(str(CSRC),), extra_flags=dense.flags(lane))


def production_spec(lane: str, arch: str, referenced: Iterable[str] | None = None):
    """The lane's production module on ``arch`` (the whole space under ``COMPILE_SET=all``)."""
    return module_spec(lane, arch, PRODUCTION.configs(lane, arch, referenced))


def full_spec(lane: str, arch: str, dtypes: Sequence[str] = ALL_DTYPES):
    """Every config of ``lane`` that fits ``arch`` in one module (builds, benchmarks, tests)."""
    return module_spec(lane, arch, lane_configs(lane, arch), dtypes=dtypes)


def subset_spec(lane: str, arch: str, patterns: Iterable[str]):
    """A module of the configs of ``lane`` on ``arch`` whose ids match any fnmatch pattern
    (the objects are the whole-space module's, so a prebuilt cache serves both)."""
    chosen = matching(lane_configs(lane, arch), patterns, lane, arch)
    return module_spec(lane, arch, chosen, name=f"{MODULE_PREFIX[lane]}_subset")


def lane_specs(lane: str, arch: str, scope: str) -> list:
    """``Lane.jit_specs``: the production module or the whole space of ``lane`` on ``arch``."""
    return _lane_specs(lane, arch, scope, production=PRODUCTION, production_spec=production_spec,
                       full_spec=full_spec)


class Conv1dKernelModule:
    """The JIT module of one conv1d config (``Lane.jit_module``; constructing compiles
    nothing): its units and a one-config spec for building or loading it alone."""

    def __init__(self, config: Config, arch: str | None = None) -> None:
        if config.lane not in MODULE_PREFIX:
            raise ValueError(f"config {config.id!r} belongs to lane {config.lane!r}")
        self.config = config
        self.arch = arch or ("sm90" if config.lane == LANE_SM90 else "sm80")

    def translation_units(self, dtypes: Sequence[str] = ALL_DTYPES) -> list:
        """The units compiling this config."""
        return units(self.config, dtypes)

    def spec(self, dtypes: Sequence[str] = ALL_DTYPES):
        """A module holding this config's unit alone."""
        name = f"{MODULE_PREFIX[self.config.lane]}_{self.config.params['unit']}"
        return module_spec(self.config.lane, self.arch, [self.config], name=name, dtypes=dtypes)


@functools.cache
def impl_hash() -> str:
    """A short hash of what decides the family's binaries: the dense package's units, flags
    and headers (:func:`oasr_conv1d.dense.codegen.impl_inputs`), every depthwise unit of both
    lanes, the family's headers and the kit's. A tuning entry measured under another hash is
    stale; editing a generator without changing a unit leaves the tables current."""
    digest = hashlib.sha256()
    for name, data in dense.impl_inputs():
        digest.update(name.encode())
        digest.update(data)
    for lane in LANES:
        for config in dw.configs(lane):
            digest.update(dw_codegen.unit_source(config).encode())
    kit.hash_headers(digest, [CSRC / "oasr_conv1d"])
    return digest.hexdigest()[:16]


def soft_validators() -> dict[str, str | None]:
    """``Family.soft_validators``: the implementation hash and the CUTLASS version."""
    return cutlass_stamps(impl_hash())

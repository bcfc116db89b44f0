"""The conv1d family's two lanes: dense and depthwise configs in one space per lane.

The core serves one lane per (family, arch) (``Registry.active_lane``), so each lane holds
both kinds of kernel: ``sm80_conv1d`` (default on sm80/sm86/sm89, runs on sm90 too) and
``sm90_conv1d`` (default on sm90). A lane's space is the dense configs of
:mod:`oasr_conv1d.dense` (implicit GEMM on CUTLASS) followed by the depthwise configs of
:mod:`oasr_conv1d.depthwise` (the family's direct kernels, ``kind: depthwise``); every
predicate here dispatches on that kind, so a dense config is offered only dense problems
(groups == 1) and a depthwise config only depthwise ones (groups == Cin == Cout). Grouped
convolutions between the two (wav2vec2's positional conv) have no config: the torch path
serves them.

The family heuristic (``Sentinel.HEURISTIC``, the build's baseline) names the dense default
of the lane for a dense problem, the depthwise default for a depthwise one, and the first
config that supports the problem when those do not.
"""

from __future__ import annotations

from collections.abc import Iterable

from oasr_core.kit import lanes as kit_lanes
from oasr_core.kit.lanes import LaneSpaces
from oasr_core.types import Config, Problem

from oasr_conv1d import dense
from oasr_conv1d import depthwise as dw
from oasr_conv1d.depthwise import codegen as dw_codegen
from oasr_conv1d.geometry import FAMILY, LANE_SM80, LANE_SM90, LANES

ARCHES = {LANE_SM80: kit_lanes.CUTLASS2_ARCHES, LANE_SM90: kit_lanes.CUTLASS3_ARCHES}
DEFAULT_ON = {LANE_SM80: kit_lanes.CUTLASS2_DEFAULT_ON, LANE_SM90: kit_lanes.CUTLASS3_ARCHES}
DEFAULTS = dict(dense.DEFAULTS)
"""The lane default (``Sentinel.DEFAULT``): the dense default of the lane."""
DEPTHWISE_ALWAYS = (dw.space.DEFAULT, dw.space.GENERAL_DEFAULT, dw.space.NARROW_DEFAULT)
"""The depthwise configs the heuristic names, linked into every production module."""


def _listed(lane: str) -> Iterable[Config]:
    yield from dense.listed(lane)
    yield from dw.configs(lane)


def is_feasible(config: Config) -> bool:
    """Static predicate: the config builds and computes the right thing on its lane."""
    if config.lane not in LANES:
        return False
    return dw.is_feasible(config) if dw.is_depthwise(config) else dense.is_feasible(config)


def supports(config: Config, problem: Problem) -> bool:
    """Per-problem predicate: dense configs take dense problems, depthwise configs depthwise
    ones, each with its own shape rules."""
    if dw.is_depthwise(config):
        return dw.supports(config, problem)
    return dense.supports(config, problem)


def fits_arch(config: Config, arch: str) -> bool:
    """Whether ``config`` runs on arch family ``arch``: the lane's arches (depthwise CTAs use
    at most 96 KiB of shared memory, within every listed arch's limit) or the dense rules."""
    if dw.is_depthwise(config):
        return arch in ARCHES.get(config.lane, ()) and dw.is_feasible(config)
    return dense.fits_arch(config, arch)


SPACES = LaneSpaces(FAMILY, {lane: (lambda lane=lane: _listed(lane)) for lane in LANES},
                    lambda: is_feasible)
"""The lanes' listed and feasible spaces (cached once per process)."""
full_space = SPACES.full
space = SPACES.space
config = SPACES.config


def symbol(config: Config) -> str:
    """The launcher symbol of ``config`` (every op of a config shares one)."""
    if dw.is_depthwise(config):
        return dw_codegen.symbol(config)
    return dense.symbol(config)


def pdl_capable(config: Config) -> bool:
    """Whether ``config``'s kernels wait on the previous grid: the depthwise kernels built
    for the Hopper lane, and the dense kernels the dense package says."""
    if dw.is_depthwise(config):
        return config.lane == LANE_SM90
    return dense.pdl_capable(config)


UNTUNED_MIN_M = 256
"""Below this many output rows the heuristic's config does not reliably beat torch."""
UNTUNED_MIN_DENSE_CIN = 8
"""Dense convs over fewer input channels (a raw-audio front end, Cin = 1) stay on torch."""


def untuned_gate(config: Config, problem: Problem) -> bool:
    """``Family.untuned_gate``: whether the heuristic's ``config`` serves an uncovered shape.

    Measured on the H200 (``benchmarks/results/conv1d_vs_torch_tuned.jsonl``, every config
    screened at 79 shapes; replayed by ``benchmarks/conv1d_untuned_offline.py``): the
    heuristic's pick beats torch's transpose + cuDNN + activation by 2.1-3.6x geomean per set,
    except at M = B * T_out <= 100 (0.95-0.96x) and on the few-channel kernels of a Cin = 1
    raw-audio conv (0.51-0.85x). Those shapes stay on torch, and so does a pick outside the
    production module (the dense default and the depthwise defaults are in it).
    """
    if problem.m < UNTUNED_MIN_M or config.id not in (DEFAULTS[config.lane], *DEPTHWISE_ALWAYS):
        return False  # small, or a config the production module does not link
    return dw.is_depthwise(config) or problem.dim("Cin") >= UNTUNED_MIN_DENSE_CIN


def heuristic(problem: Problem, lane) -> Config:
    """``Family.sentinel_heuristic``: the config ``HEURISTIC`` names for ``problem`` on
    ``lane`` (a :class:`~oasr_core.types.Lane`; see the module docstring)."""
    name = lane.name
    if dw.space.is_depthwise_problem(problem):
        pick = dw.space.heuristic(problem, name)
        if pick is not None:
            return pick
    else:
        try:
            pick = config(name, DEFAULTS[name])
        except KeyError:
            pick = None
        if pick is not None and supports(pick, problem):
            return pick
    for candidate in space(name):
        if supports(candidate, problem):
            return candidate
    return config(name, DEFAULTS[name])

"""Feasibility of the dense conv1d configs: static (does it build and compute the right thing)
and per problem (can it run this convolution), and their cost-model features.

Static rules:

- 2.x: CUTLASS's implicit-GEMM rules (:func:`oasr_core.kit.implicit_gemm.is_feasible`: warp
  tiles of mma.sync shapes, the CTA's N at least 32, cp.async access widths, few-channels
  accesses, the stages' shared memory within the arch's opt-in limit);
- 3.x: the non-persistent warp-specialized schedule (the only one CUTLASS 4.2 builds for
  convolutions), CUTLASS's wgmma tile rules for one consumer warpgroup (M 64 or 128; N a
  multiple of 16 up to 256; K 64 or 128), clusters of at most 2 CTAs, at most 128 fp32
  accumulators per consumer thread, 16-byte accesses (TMA).

Per problem (:func:`supports`): groups == 1; Cin a multiple of the input access width and
Cout of the output one (CUTLASS's ``can_implement`` checks the same and the launcher answers
``kErrShape`` otherwise); for the 2.x kernels the optimized iterator's 32 filter-tap mask bits,
few-channels kernels only for narrow inputs and tensors whose bytes fit 32-bit offsets
(:func:`oasr_core.kit.implicit_gemm.supports`); strides up to :data:`TMA_MAX_STRIDE` for the
3.x kernels.
"""

from __future__ import annotations

from oasr_core.kit import implicit_gemm, lanes
from oasr_core.types import Config, Problem

from oasr_conv1d.dense.config_space import LANE_SM80, LANE_SM90, SM90_SCHEDULES

SMEM_LIMIT = lanes.SMEM_LIMIT
ARCHES = {LANE_SM80: lanes.CUTLASS2_ARCHES, LANE_SM90: lanes.CUTLASS3_ARCHES}
DEFAULT_ON = {LANE_SM80: lanes.CUTLASS2_DEFAULT_ON, LANE_SM90: lanes.CUTLASS3_ARCHES}
TMA_MAX_STRIDE = 8
"""Largest traversal stride of a TMA im2col descriptor (``cuTensorMapEncodeIm2col``'s element
strides are 1..8): the 3.x kernels' limit."""
_SM90_EPILOGUE_SMEM = 8192
_ELEMENT_BYTES = implicit_gemm.ELEMENT_BYTES
sm80_smem = implicit_gemm.smem
"""Shared memory of a 2.x config's main loop: stages x (A tile + B tile), 16-bit."""


def sm90_smem(config: Config) -> int:
    """Lower bound of a 3.x config's shared memory (its fixed stage count, else two stages,
    plus the epilogue's double-buffered subtile)."""
    tm, tn, tk = config.params["tile"]
    stages = config.params["stages"] or 2
    return stages * (tm + tn) * tk * _ELEMENT_BYTES + _SM90_EPILOGUE_SMEM


def smem(config: Config) -> int:
    """Shared memory estimate of either kind of config."""
    return sm80_smem(config) if config.params["cutlass"] == 2 else sm90_smem(config)


def _cutlass3_static(config: Config) -> bool:
    p = config.params
    tm, tn, tk = p["tile"]
    cm, cn = p["cluster"]
    schedule = p["schedule"]
    if schedule not in SM90_SCHEDULES or p["align_in"] != 8 or p["align_out"] != 8:
        return False
    if tm not in (64, 128):
        return False
    if tn % 16 or not 16 <= tn <= 256 or tk not in (64, 128):
        return False
    if cm < 1 or cn < 1 or cm * cn > 2 or (p["stages"] and p["stages"] < 2):
        return False
    if tm * tn // 128 > 128:
        return False
    return sm90_smem(config) <= SMEM_LIMIT["sm90"]


def is_feasible(config: Config) -> bool:
    """Static predicate: ``config`` is a dense config of its lane that builds and is right."""
    if config.lane not in ARCHES:
        return False
    kind = config.params.get("cutlass")
    if kind == 2:
        return implicit_gemm.is_feasible(config)
    return kind == 3 and config.lane == LANE_SM90 and _cutlass3_static(config)


def fits_arch(config: Config, arch: str) -> bool:
    """Whether ``config`` runs on arch family ``arch`` (lane arches, shared memory)."""
    return (arch in ARCHES.get(config.lane, ()) and is_feasible(config)
            and smem(config) <= SMEM_LIMIT.get(arch, 0))


def supports(config: Config, problem: Problem) -> bool:
    """Per-problem predicate: ``config`` can run ``problem`` (dims ``Cin, Cout, k, stride,
    pad, dil, groups``; ``m = B * T_out``)."""
    p = config.params
    cin, cout, taps = problem.dim("Cin"), problem.dim("Cout"), problem.dim("k")
    stride = problem.dim("stride")
    if problem.dim("groups") != 1 or problem.m < 1 or min(cin, cout, taps, stride) < 1:
        return False
    if p["cutlass"] == 2:
        # T_in is at most stride * T_out + the window: the activation's elements, bounded.
        rows_in = problem.m * stride + problem.dim("dil") * (taps - 1) + 1
        return implicit_gemm.supports(config, cin, cout, taps,
                                      (rows_in * cin, problem.m * cout, cout * taps * cin))
    if cin % p["align_in"] or cout % p["align_out"]:
        return False
    if p["cutlass"] == 3:
        return stride <= TMA_MAX_STRIDE
    return True


_STRUCTURE = {
    2: {"sync_mma": True},
    "ws": {"warps": 8, "producer_warps": 4, "epilogue_smem": True},
}


def cost_features(config: Config) -> dict[str, object]:
    """The cost-model features of a dense config (``Lane.cost_features``, the contract of
    :mod:`oasr_core.cost_model.features`): one calibration kind per iterator algorithm (2.x)
    or schedule (3.x)."""
    p = config.params
    features: dict[str, object] = {"tile": list(p["tile"]), "stages": p["stages"],
                                   "smem": smem(config)}
    if p["cutlass"] == 2:
        features.update(_STRUCTURE[2], warp=list(p["warp"]), kind=f"ig_{p['algorithm']}")
    else:
        features.update(_STRUCTURE[p["schedule"]], cluster=list(p["cluster"]),
                        kind=f"igh_{p['schedule']}")
        del features["smem"]
    return features

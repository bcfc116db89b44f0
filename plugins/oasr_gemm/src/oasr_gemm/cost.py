"""The gemm lanes' cost-model features (``Lane.cost_features``).

:func:`oasr_gemm.feasibility.cost_features` describes a config in the lanes' own terms (tile,
warps or cluster, CUTLASS schedule, stages, split, shared memory). The core's cost model knows
no kernel library's schedules, so :func:`cost_features` translates each schedule into the
structure the model's contract describes (:mod:`oasr_core.cost_model.features`): warps and
producer warps per CTA, whether it is persistent and how many tiles a CTA has in flight,
whether the main loop issues ``mma.sync``, the epilogue stages through shared memory and
split fix-ups exchange fp32 partials. The schedule's name becomes the config's ``kind``, so
configs calibrate in one group per schedule and K decomposition.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from oasr_core.types import Config

from oasr_gemm import feasibility

_WARP_SPECIALIZED = {"producer_warps": 4, "epilogue_smem": True, "fp32_partials": True}
STRUCTURE: Mapping[str, Mapping[str, Any]] = MappingProxyType({
    # CUTLASS 2.x multistage: cp.async + mma.sync, one CTA per tile, warps from the warp tile.
    "mma_sync": MappingProxyType({"sync_mma": True}),
    # CUTLASS 3.x TMA warp-specialized: a producer warpgroup and one consumer warpgroup.
    "ws": MappingProxyType({"warps": 8, **_WARP_SPECIALIZED}),
    # Persistent, two consumer warpgroups on alternate tiles (one epilogue hides).
    "pingpong": MappingProxyType({"warps": 12, "persistent": True, "tiles_in_flight": 2,
                                  **_WARP_SPECIALIZED}),
    # Persistent, two consumer warpgroups sharing one tile.
    "cooperative": MappingProxyType({"warps": 12, "persistent": True, **_WARP_SPECIALIZED}),
})
"""The contract's structure descriptors of each schedule the gemm lanes build."""


def cost_features(config: Config) -> dict[str, object]:
    """The cost-model features of a gemm config (see the module docstring)."""
    features = feasibility.cost_features(config)
    schedule = features.pop("schedule")
    structure = STRUCTURE.get(schedule)
    if structure is None:
        raise ValueError(f"config {config.id!r}: schedule {schedule!r} has no cost-model "
                         f"structure (known: {', '.join(STRUCTURE)})")
    features.update(structure, kind=schedule)
    return features

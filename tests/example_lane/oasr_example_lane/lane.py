"""The ``example_simt`` lane: SIMT GEMM tiles as data, with their feasibility predicates.

Each config names its tile explicitly (``tile_m`` x ``tile_n`` x ``tile_k``, warps, pipeline
stages). The lane runs wherever CUDA cores do (sm80 to sm90) and is the default nowhere, so it
serves a shape only when asked for by name or chosen by a tuning entry.
"""

from __future__ import annotations

from oasr_core.types import Config, Lane, Problem

LANE = "example_simt"
DEFAULT_CONFIG = "simt_64x64x8_w4"
STATIC_SMEM_BYTES = 48 * 1024
_TILES = (  # tile_m, tile_n, tile_k, warps, stages
    (32, 64, 8, 2, 2),
    (64, 64, 8, 4, 2),
    (128, 64, 8, 8, 2),
    (128, 128, 8, 8, 2),
)


def config_space() -> list[Config]:
    """Every config of the lane, ids spelled ``simt_<m>x<n>x<k>_w<warps>``."""
    return [
        Config(id=f"simt_{m}x{n}x{k}_w{w}", lane=LANE,
               params={"tile_m": m, "tile_n": n, "tile_k": k, "warps": w, "stages": s})
        for m, n, k, w, s in _TILES
    ]


def is_feasible(config: Config) -> bool:
    """The fp16 operand tiles of every stage fit in static shared memory."""
    p = config.params
    return p["stages"] * (p["tile_m"] + p["tile_n"]) * p["tile_k"] * 2 <= STATIC_SMEM_BYTES


def supports(config: Config, problem: Problem) -> bool:
    """Vectorised loads need N a multiple of 4 and K a multiple of the K tile."""
    return problem.dim("N") % 4 == 0 and problem.dim("K") % config.params["tile_k"] == 0


def example_simt_lane() -> Lane:
    """The lane record returned by ``oasr_register_lanes``."""
    return Lane(
        name=LANE,
        family="gemm",
        arch_families=("sm80", "sm86", "sm89", "sm90"),
        config_space=config_space(),
        default_config=DEFAULT_CONFIG,
        is_feasible=is_feasible,
        supports=supports,
        description="SIMT fp16/bf16 GEMM tiles (example third-party lane)",
    )

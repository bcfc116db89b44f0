"""The int8 quantized linear's untuned route: int8 only where it is predicted to beat fp16.

At a shape no tuning entry covers, the tiers answer the shape heuristic's tile; the quantized
linear's other choice is the layer in its own dtype (``F.linear``), which needs no activation
quantizer. :func:`int8_wins` predicts both with the W8A8 route's rooflines
(:class:`oasr_scaled_mm.w8a8.untuned.RouteModel`: ``dense`` is fp16 ``F.linear``, ``gemm``
the int8 tile), and :func:`oasr_scaled_mm.ops.unquantized` routes an uncovered shape to the
unquantized linear unless int8 wins. The op itself is unchanged (the heuristic's tile still
serves it).

The dense and GEMM rooflines are fitted on the H200 sweep
(``benchmarks/results/h200_scaled_mm_sweep.jsonl``: every int8 tile and fp16 ``F.linear`` at
15 widths, N 256..5120, K 256..1536, M 16..32768) by ``benchmarks/int8_untuned_offline.py``,
which also checks the route against the whole layers the shipped table's build measured with
the real int8 quantizer (``db/sm90/measurements/scaled_mm.jsonl``) and writes
``benchmarks/results/int8_untuned_offline.md``. The quantizer is the W8A8 row quantizer's fit
(one CUDA skeleton for both formats). A lane without a fitted model (``sm80_int8_mma``: never
measured) keeps int8 everywhere.
"""

from __future__ import annotations

from oasr_scaled_mm.config_space import LANE_SM90
from oasr_scaled_mm.w8a8.untuned import RouteModel, quantized_wins

MARGIN = 1.25
"""int8 must be predicted this much faster than fp16: the smallest of 1.0, 1.05, ... that leaves
no point of the sweep slower than fp16, also with each width left out of the fit (1.0 leaves
19, worst 0.75x; 1.2 two, worst 0.94x; 1.25 none: 22 of 270 points int8, 1.026x geomean over
the sweep against 0.755x for int8 everywhere). int8's GEMM gains less over fp16 than fp8's over
bf16 at these widths, so the margin is fp8's 1.2 plus a step."""

MODELS = {LANE_SM90: RouteModel(dense_launch_us=3.137, dense_flops_per_us=6.569e8,
                                gemm_launch_us=3.153, gemm_flops_per_us=1.142e9, margin=MARGIN)}
"""The fitted route per lane: ``sm90_int8_wgmma`` on the H200 (``h200_scaled_mm_sweep.jsonl``,
270 points; ``int8_untuned_offline.py`` reproduces these constants from it)."""


def int8_wins(lane: str | None, n: int, k: int, m: int, *, quantizer: bool = True) -> bool:
    """Whether an uncovered ``(N, K)`` layer at ``M`` rows runs int8 on ``lane`` (True on a
    lane without a fitted model); ``quantizer`` False: its activation arrives quantized by the
    fused layer norm, so what that adds to the norm is counted instead."""
    return quantized_wins(MODELS, lane, n, k, m, quantizer=quantizer)

"""The quantized linear's untuned route: fp8 only where it is predicted to beat bf16.

At a shape no tuning entry covers, the tiers answer the shape heuristic's tile
(``Tier.HEURISTIC``). For the op that is the right answer (its caller hands it fp8 operands),
but the quantized linear has a second choice: the layer in its own dtype (``F.linear``, what
``Sentinel.UNQUANTIZED`` names), which needs no activation quantizer. Measured on the H200
(``benchmarks/results/h200_fp8.jsonl``, 2026-12-02, the one-pass row quantizer), the heuristic's
fp8 tile (its fitted ladder) with the quantizer loses to bf16 at 114 of the 196 uncovered
sweep points (down to 0.58x; N 512..4096, K 256..4096, M 256..16384), so :func:`fp8_wins`
predicts both and :func:`oasr_scaled_mm_fp8.ops.unquantized` routes such a shape to the
unquantized linear unless fp8 wins.
The op itself is unchanged (the heuristic's tile still serves it).

The prediction is the W8A8 route's roofline per arm
(:class:`oasr_scaled_mm.w8a8.untuned.RouteModel`: ``dense`` is bf16 ``F.linear``, ``gemm``
the fp8 tile), fitted on the log's arms by ``benchmarks/fp8_untuned_offline.py --fit``, and fp8
serves when ``(fp8 + quant) * margin < bf16``. In the compute-bound regime the GEMM
saving grows with ``M N K`` and the quantizer's cost with ``M K``, so the crossover is mostly a
width: ``N > 1.5 / (quantizer_bytes_per_us * (1 / bf16_flops - 1 / fp8_flops))`` (~700 with
the fitted constants, before the margin), plus the launch costs at small M. The quantizer's
bandwidth (``quantizer_bytes_per_us``) is the constant that moves it: fitted on the log's
``quantize`` arm (the one-pass row quantizer, ~3.5 TB/s over the sweep; 2.2 TB/s was the
one-block-per-row kernel before it). Refit after an H200 run of ``fp8_vs_torch.py``:
``python3 benchmarks/fp8_untuned_offline.py <its jsonl> --fit --out <md>`` prints every
constant.

The log's points have M >= 256 and N, K in 256..4096; elsewhere the rooflines extrapolate
(a few rows of a wide layer are weight-bound, and fp8 halves the weight's bytes). A lane
without a fitted model (``sm89_fp8_mma``: never measured) keeps fp8 everywhere.
"""

from __future__ import annotations

from oasr_scaled_mm.w8a8.untuned import RouteModel, quantized_wins

from oasr_scaled_mm_fp8.config_space import LANE_SM90

MARGIN = 1.2
"""fp8 must be predicted this much faster than bf16: the smallest of 1.0, 1.05, 1.1, ...
that leaves no point of the log slower than bf16 (1.0 leaves 15, worst 0.84x; 1.1 two; 1.15
one at 0.985x; 1.2: none, 56 of 220 points fp8, 1.079x geomean over the sweep, also with
each width left out of the fit). The rooflines miss single arms by 10-15 %, and a wrong fp8
pick costs the layer where a wrong bf16 pick only forgoes a gain."""

MODELS = {LANE_SM90: RouteModel(dense_launch_us=3.450, dense_flops_per_us=7.328e8,
                                gemm_launch_us=3.362, gemm_flops_per_us=1.311e9, margin=MARGIN)}
"""The fitted route per lane: ``sm90_fp8_wgmma`` on the H200 (``h200_fp8.jsonl``, 220 points;
``fp8_untuned_offline.py --fit`` reproduces these constants from it; the quantizer and norm
constants are the W8A8 route's defaults, fitted on the same logs)."""


def fp8_wins(lane: str | None, n: int, k: int, m: int, *, quantizer: bool = True) -> bool:
    """Whether an uncovered ``(N, K)`` layer at ``M`` rows runs fp8 on ``lane`` (True on a
    lane without a fitted model: fp8, as before the route existed); ``quantizer`` False: its
    activation arrives quantized (the fused layer norm), only the GEMMs are compared."""
    return quantized_wins(MODELS, lane, n, k, m, quantizer=quantizer)

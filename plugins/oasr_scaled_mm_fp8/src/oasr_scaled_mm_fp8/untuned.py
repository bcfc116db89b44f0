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

The prediction is a roofline per arm, microseconds, fitted on the log's arms by
``benchmarks/fp8_untuned_offline.py --fit`` (:class:`RouteModel`)::

    bf16  = bf16_launch_us + max(2 M N K / bf16_flops_per_us, 2 (M K + N K + M N) / hbm)
    fp8   = fp8_launch_us  + max(2 M N K / fp8_flops_per_us,  (M K + N K + 2 M N) / hbm)
    quant = quantizer_launch_us + (3 M K + 4 M) / quantizer_bytes_per_us

and fp8 serves when ``(fp8 + quant) * margin < bf16``. In the compute-bound regime the GEMM
saving grows with ``M N K`` and the quantizer's cost with ``M K``, so the crossover is mostly a
width: ``N > 1.5 / (quantizer_bytes_per_us * (1 / bf16_flops - 1 / fp8_flops))`` (~700 with
the fitted constants, before the margin), plus the launch costs at small M. The quantizer's
bandwidth (:data:`QUANTIZER_BYTES_PER_US`) is the constant that moves it: fitted on the log's
``quantize`` arm (the one-pass row quantizer, ~3.5 TB/s over the sweep; 2.2 TB/s was the
one-block-per-row kernel before it). Refit after an H200 run of ``fp8_vs_torch.py``:
``python3 benchmarks/fp8_untuned_offline.py <its jsonl> --fit --out <md>`` prints every
constant.

The log's points have M >= 256 and N, K in 256..4096; elsewhere the rooflines extrapolate
(a few rows of a wide layer are weight-bound, and fp8 halves the weight's bytes). A lane
without a fitted model (``sm89_fp8_mma``: never measured) keeps fp8 everywhere.
"""

from __future__ import annotations

import attrs

from oasr_scaled_mm_fp8.config_space import LANE_SM90

HBM_BYTES_PER_US = 4.8e6
"""The H200's HBM3e bandwidth, bytes per microsecond (4.8 TB/s): the rooflines' memory term."""
QUANTIZER_LAUNCH_US = 2.284
"""The activation quantizer's fixed cost per call on the H200, microseconds (fitted)."""
QUANTIZER_BYTES_PER_US = 3.529e6
"""The activation quantizer's bandwidth on the H200, bytes per microsecond, counting the
``3 M K + 4 M`` bytes a 16-bit input moves (fitted on the log's ``quantize`` arm: 3.5 TB/s,
the one-pass row quantizer with several warps a row from K = 1032; 3.0 TB/s with one warp a
row up to K = 4096; the one-block-per-row kernel before it fitted 2.2 TB/s). Refit it from a new
``fp8_vs_torch.py`` log (``fp8_untuned_offline.py --fit``); ``quantizer_bandwidth.py``'s
fp8 GB/s x 1e3 is the same quantity at large M."""
NORM_QUANTIZER_LAUNCH_US = 3.431
"""The fused layer norm + quantizer's fixed cost per call on the H200, microseconds (fitted on
``h200_fp8_normed.jsonl``'s ``norm_quantize`` arm, counting ``3 M K + 4 M`` bytes)."""
NORM_QUANTIZER_BYTES_PER_US = 2.112e6
"""The fused layer norm + quantizer's bandwidth on the H200, bytes per microsecond (fitted)."""
LAYER_NORM_LAUNCH_US = 3.125
"""torch's ``F.layer_norm``'s fixed cost per call on the H200, microseconds (fitted on the
``layer_norm`` arm, counting the ``4 M K`` bytes of a 16-bit norm)."""
LAYER_NORM_BYTES_PER_US = 2.086e6
"""torch's ``F.layer_norm``'s bandwidth on the H200, bytes per microsecond (fitted)."""
NORM_EXTRA_FLOOR_US = 0.884
"""The least the fused norm is counted to add to torch's norm, microseconds: the median of its
measured excess where it is slower (rows of K <= 1024 at M <= 1024, 0.4-1.5 us; torch's norm
is not linear in bytes there, so the two linear fits above miss it and left two points of the
log 0.94-0.98x bf16 at K 512, M 1024)."""
MARGIN = 1.2
"""fp8 must be predicted this much faster than bf16: the smallest of 1.0, 1.05, 1.1, ...
that leaves no point of the log slower than bf16 (1.0 leaves 15, worst 0.84x; 1.1 two; 1.15
one at 0.985x; 1.2: none, 56 of 220 points fp8, 1.079x geomean over the sweep, also with
each width left out of the fit). The
rooflines miss single arms by 10-15 %, and a wrong fp8 pick costs the layer where a wrong
bf16 pick only forgoes a gain."""


@attrs.frozen
class RouteModel:
    """The rooflines of one lane's untuned route (see the module docstring)."""

    bf16_launch_us: float
    bf16_flops_per_us: float
    fp8_launch_us: float
    fp8_flops_per_us: float
    quantizer_launch_us: float = QUANTIZER_LAUNCH_US
    quantizer_bytes_per_us: float = QUANTIZER_BYTES_PER_US
    hbm_bytes_per_us: float = HBM_BYTES_PER_US
    margin: float = MARGIN
    norm_quantizer_launch_us: float = NORM_QUANTIZER_LAUNCH_US
    norm_quantizer_bytes_per_us: float = NORM_QUANTIZER_BYTES_PER_US
    layer_norm_launch_us: float = LAYER_NORM_LAUNCH_US
    layer_norm_bytes_per_us: float = LAYER_NORM_BYTES_PER_US
    norm_extra_floor_us: float = NORM_EXTRA_FLOOR_US

    def bf16_us(self, m: int, n: int, k: int) -> float:
        """Predicted ``F.linear`` time in bf16."""
        return self.bf16_launch_us + max(2.0 * m * n * k / self.bf16_flops_per_us,
                                         2.0 * (m * k + n * k + m * n) / self.hbm_bytes_per_us)

    def fp8_us(self, m: int, n: int, k: int) -> float:
        """Predicted fp8 GEMM time (the heuristic's tile, bf16 out)."""
        return self.fp8_launch_us + max(2.0 * m * n * k / self.fp8_flops_per_us,
                                        (m * k + n * k + 2.0 * m * n) / self.hbm_bytes_per_us)

    def quantizer_us(self, m: int, k: int) -> float:
        """Predicted activation quantizer time."""
        return self.quantizer_launch_us + (3.0 * m * k + 4.0 * m) / self.quantizer_bytes_per_us

    def norm_extra_us(self, m: int, k: int) -> float:
        """What quantizing in the layer norm adds to the norm the model runs anyway: the fused
        kernel's predicted time less torch's norm's, at least :data:`NORM_EXTRA_FLOOR_US`
        (where the fused one is faster, at large rows, it writes one byte an element where the
        norm writes two, and the floor keeps the rule conservative)."""
        fused = self.norm_quantizer_launch_us + (3.0 * m * k + 4.0 * m) / \
            self.norm_quantizer_bytes_per_us
        torch_norm = self.layer_norm_launch_us + 4.0 * m * k / self.layer_norm_bytes_per_us
        return max(self.norm_extra_floor_us, fused - torch_norm)

    def fp8_wins(self, m: int, n: int, k: int, *, quantizer: bool = True) -> bool:
        """Whether the quantized layer (quantizer + fp8 GEMM; without ``quantizer``, the GEMM
        and what the fused layer norm adds to the norm: the activation came quantized by it)
        is predicted to beat bf16."""
        quant = self.quantizer_us(m, k) if quantizer else self.norm_extra_us(m, k)
        return (self.fp8_us(m, n, k) + quant) * self.margin < self.bf16_us(m, n, k)


MODELS = {LANE_SM90: RouteModel(bf16_launch_us=3.450, bf16_flops_per_us=7.328e8,
                                fp8_launch_us=3.362, fp8_flops_per_us=1.311e9)}
"""The fitted route per lane: ``sm90_fp8_wgmma`` on the H200 (``h200_fp8.jsonl``, 220 points;
``fp8_untuned_offline.py --fit`` reproduces these constants from it)."""


def fp8_wins(lane: str | None, n: int, k: int, m: int, *, quantizer: bool = True) -> bool:
    """Whether an uncovered ``(N, K)`` layer at ``M`` rows runs fp8 on ``lane`` (True on a
    lane without a fitted model: fp8, as before the route existed); ``quantizer`` False: its
    activation arrives quantized (the fused layer norm), only the GEMMs are compared."""
    model = MODELS.get(lane) if lane is not None else None
    return True if model is None else model.fp8_wins(m, n, k, quantizer=quantizer)

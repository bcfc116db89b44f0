"""The quantized linear's untuned route: quantized only where it is predicted to win.

At a shape no tuning entry covers, the tiers answer the shape heuristic's tile
(``Tier.HEURISTIC``). For the op that is the right answer (its caller hands it quantized
operands), but the quantized linear has a second choice: the layer in its own dtype
(``F.linear``, what ``Sentinel.UNQUANTIZED`` names), which needs no activation quantizer. A
format's untuned route predicts both from rooflines fitted on an H200 log and keeps the layer
quantized only where the heuristic's tile plus the quantizer is predicted to beat it
(:meth:`RouteModel.quantized_wins`); each format ships its fitted :class:`RouteModel` per lane
(``oasr_scaled_mm.untuned``, ``oasr_scaled_mm_fp8.untuned``). The prediction, microseconds::

    dense     = dense_launch_us + max(2 M N K / dense_flops_per_us, 2 (M K + N K + M N) / hbm)
    quantized = gemm_launch_us  + max(2 M N K / gemm_flops_per_us, (M K + N K + 2 M N) / hbm)
    quantizer = quantizer_launch_us + (3 M K + 4 M) / quantizer_bytes_per_us

and the layer stays quantized when ``(quantized + quantizer) * margin < dense``. In the
compute-bound regime the GEMM saving grows with ``M N K`` and the quantizer's cost with
``M K``, so the crossover is mostly a width, plus the launch costs at small M. After a layer
norm that quantizes (``quantizer=False``), the quantizer is replaced by what the fused norm
adds to torch's norm (:meth:`RouteModel.norm_extra_us`). A lane without a fitted model keeps
the layer quantized everywhere (the behaviour before a route existed).
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

HBM_BYTES_PER_US = 4.8e6
"""The H200's HBM3e bandwidth, bytes per microsecond (4.8 TB/s): the rooflines' memory term."""
QUANTIZER_LAUNCH_US = 2.284
"""The activation quantizer's fixed cost per call on the H200, microseconds (fitted on the fp8
log's ``quantize`` arm: the row quantizer's one skeleton serves both formats)."""
QUANTIZER_BYTES_PER_US = 3.529e6
"""The activation quantizer's bandwidth on the H200, bytes per microsecond, counting the
``3 M K + 4 M`` bytes a 16-bit input moves (fitted on ``h200_fp8.jsonl``'s ``quantize`` arm:
3.5 TB/s, the one-pass row quantizer with several warps a row from K = 1032; 3.0 TB/s with one
warp a row up to K = 4096; the one-block-per-row kernel before it fitted 2.2 TB/s).
``quantizer_bandwidth.py``'s GB/s x 1e3 is the same quantity at large M."""
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
is not linear in bytes there, so the two linear fits above miss it)."""


@attrs.frozen
class RouteModel:
    """The rooflines of one lane's untuned route (see the module docstring): ``dense_*`` the
    layer in its activation dtype (``F.linear``), ``gemm_*`` the quantized GEMM on the
    heuristic's tile, ``margin`` how much faster the quantized layer must be predicted."""

    dense_launch_us: float
    dense_flops_per_us: float
    gemm_launch_us: float
    gemm_flops_per_us: float
    margin: float
    quantizer_launch_us: float = QUANTIZER_LAUNCH_US
    quantizer_bytes_per_us: float = QUANTIZER_BYTES_PER_US
    hbm_bytes_per_us: float = HBM_BYTES_PER_US
    norm_quantizer_launch_us: float = NORM_QUANTIZER_LAUNCH_US
    norm_quantizer_bytes_per_us: float = NORM_QUANTIZER_BYTES_PER_US
    layer_norm_launch_us: float = LAYER_NORM_LAUNCH_US
    layer_norm_bytes_per_us: float = LAYER_NORM_BYTES_PER_US
    norm_extra_floor_us: float = NORM_EXTRA_FLOOR_US

    def dense_us(self, m: int, n: int, k: int) -> float:
        """Predicted ``F.linear`` time in the activation dtype."""
        return self.dense_launch_us + max(2.0 * m * n * k / self.dense_flops_per_us,
                                          2.0 * (m * k + n * k + m * n) / self.hbm_bytes_per_us)

    def gemm_us(self, m: int, n: int, k: int) -> float:
        """Predicted quantized GEMM time (the heuristic's tile, 16-bit out)."""
        return self.gemm_launch_us + max(2.0 * m * n * k / self.gemm_flops_per_us,
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

    def quantized_wins(self, m: int, n: int, k: int, *, quantizer: bool = True) -> bool:
        """Whether the quantized layer (quantizer + GEMM; without ``quantizer``, the GEMM and
        what the fused layer norm adds to the norm: the activation came quantized by it) is
        predicted to beat the layer in its activation dtype."""
        quant = self.quantizer_us(m, k) if quantizer else self.norm_extra_us(m, k)
        return (self.gemm_us(m, n, k) + quant) * self.margin < self.dense_us(m, n, k)


def quantized_wins(models: Mapping[str, RouteModel], lane: str | None, n: int, k: int, m: int,
                   *, quantizer: bool = True) -> bool:
    """Whether an uncovered ``(N, K)`` layer at ``M`` rows stays quantized on ``lane`` under a
    format's fitted ``models`` (True on a lane without one: quantized, as before the route
    existed)."""
    model = models.get(lane) if lane is not None else None
    return True if model is None else model.quantized_wins(m, n, k, quantizer=quantizer)

"""The quantized linear's untuned route (:mod:`oasr_scaled_mm_fp8.untuned`): its rooflines,
the crossover they put at the H200 sweep's widths, and what moves it."""

from __future__ import annotations

import attrs
import pytest
from oasr_scaled_mm.w8a8 import untuned as w8a8_untuned

from oasr_scaled_mm_fp8 import untuned
from oasr_scaled_mm_fp8.config_space import LANE_SM89, LANE_SM90

MODEL = untuned.MODELS[LANE_SM90]
HBM = w8a8_untuned.HBM_BYTES_PER_US


def test_the_rooflines_are_the_stated_formulas():
    m, n, k = 4096, 2048, 1024
    flops = 2.0 * m * n * k
    assert MODEL.dense_us(m, n, k) == pytest.approx(
        MODEL.dense_launch_us + max(flops / MODEL.dense_flops_per_us,
                                    2.0 * (m * k + n * k + m * n) / HBM))
    assert MODEL.gemm_us(m, n, k) == pytest.approx(
        MODEL.gemm_launch_us + max(flops / MODEL.gemm_flops_per_us,
                                   (m * k + n * k + 2.0 * m * n) / HBM))
    assert MODEL.quantizer_us(m, k) == pytest.approx(
        w8a8_untuned.QUANTIZER_LAUNCH_US
        + (3.0 * m * k + 4.0 * m) / w8a8_untuned.QUANTIZER_BYTES_PER_US)
    fp8 = MODEL.gemm_us(m, n, k) + MODEL.quantizer_us(m, k)
    assert MODEL.quantized_wins(m, n, k) is (fp8 * untuned.MARGIN < MODEL.dense_us(m, n, k))


def test_fp8_serves_wide_layers_and_bf16_narrow_ones():
    # the H200 log: fp8 loses at N = 1024 at every M and K, wins at N = 4096 from M = 4096
    for k in (1024, 2048, 4096):
        for m in (1024, 4096, 16384):
            assert not untuned.fp8_wins(LANE_SM90, 1024, k, m), (k, m)
            assert untuned.fp8_wins(LANE_SM90, 4096, k, m) or m < 4096, (k, m)
    assert not untuned.fp8_wins(LANE_SM90, 256, 256, 16384)   # the Conformer's widths
    assert not untuned.fp8_wins(LANE_SM90, 512, 512, 16)      # a few rows: launch costs
    assert untuned.fp8_wins(LANE_SM90, 8192, 8192, 1)         # weight-bound: fp8 halves it


def test_a_faster_quantizer_only_adds_fp8_picks():
    fast = attrs.evolve(MODEL, quantizer_bytes_per_us=4.5e6, quantizer_launch_us=1.5)
    shapes = [(m, n, k) for m in (256, 1024, 4096, 16384) for n in (512, 1024, 2048, 4096)
              for k in (256, 1024, 4096)]
    slow_picks = {s for s in shapes if MODEL.quantized_wins(*s)}
    fast_picks = {s for s in shapes if fast.quantized_wins(*s)}
    assert slow_picks < fast_picks
    assert (1024, 4096, 1024) in fast_picks - slow_picks


def test_a_lane_without_a_fitted_model_keeps_fp8():
    assert LANE_SM89 not in untuned.MODELS
    assert untuned.fp8_wins(LANE_SM89, 256, 256, 16) is True
    assert untuned.fp8_wins(None, 256, 256, 16) is True

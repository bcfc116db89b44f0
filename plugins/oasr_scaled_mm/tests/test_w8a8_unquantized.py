"""Each W8A8 format's ``unquantized`` arm through the generic build, on a scripted device (int8
``scaled_mm``, fp8 e4m3 ``scaled_mm_fp8``; the fp8 rows skipped where its package is not
installed): a build measures it beside every tile, names it where ``F.linear`` beats the
quantized GEMM with its activation quantizer, and the quantized linear's route then runs those
shapes unquantized; a shape no entry covers is quantized only where the format's untuned route
predicts the quantized GEMM to win. int8's route model and quantized linear are named tests."""

from __future__ import annotations

import importlib

import oasr_core
import pytest
import torch
from oasr_core import runtime
from oasr_core.database import read_tuning_file
from oasr_core.testing import pretend_cuda_device
from oasr_core.types import Sentinel, Tier

from oasr_scaled_mm.w8a8.testing import ARCH, ScriptedFormat

FORMATS = {
    "int8": ("oasr_scaled_mm", "pp_128x128x128_c1x1",
             ((1024, 1024, 4096), (512, 512, 64), (5120, 1280, 16384), (4096, 4096, 8192))),
    "fp8": ("oasr_scaled_mm_fp8", "pp_128x128x128_c1x1_fa",
            ((512, 1024, 64), (1024, 1024, 16384), (4096, 4096, 4096))),
}
"""Per format: its package, the tile the scripted device makes fastest above M = 1024, and
(N, K, M) points no entry covers: two the untuned route leaves unquantized, then others, the
last one quantized."""


@pytest.fixture(params=sorted(FORMATS))
def built(request, tmp_path, monkeypatch):
    """The format's sm90 lane built on the scripted device into the user tier."""
    if request.param == "fp8":
        pytest.importorskip("oasr_scaled_mm_fp8")
    package, fastest, uncovered = FORMATS[request.param]
    scripted = ScriptedFormat(package, fastest, tmp_path, monkeypatch)
    scripted.uncovered = uncovered
    scripted.build()
    yield scripted
    runtime.install_runtime(None)


def test_the_build_measures_unquantized_and_names_it_where_f_linear_wins(built):
    cs, rt = built.cs, built.rt
    lane = rt.registry.lane(cs.LANE_SM90)
    for problem, names in built.bench.benched:
        pick = rt.registry.family(cs.FAMILY).sentinel_heuristic(problem, lane)
        assert set(names) == {"heuristic", "torch", "unquantized"} | {
            c.id for c in lane.config_space if c.id != pick.id}
    entry = read_tuning_file(built.out).entries[built.key]
    assert [tuple(r) for r in entry.regions] == [(512, "unquantized"), (4096, built.fastest)]


def test_the_route_runs_unquantized_regions_unquantized(built):
    cs, ops = built.cs, built.ops
    pretend_cuda_device(0, ARCH)
    assert ops.unquantized(256, 1024, 300, 0) is True
    assert ops.unquantized(256, 1024, 4000, 0) is False
    sel = oasr_core.select(cs.FAMILY, cs.OP_MM, ops.DTYPE, (256, 1024), 64, ARCH)
    assert (sel.choice, sel.tier, sel.config) == (Sentinel.UNQUANTIZED, Tier.USER, None)
    assert ops.select_config(256, 1024, 64, ARCH) is None  # a direct op call serves torch


def test_uncovered_shapes_are_quantized_only_where_the_untuned_route_predicts_a_win(built):
    cs, ops = built.cs, built.ops
    pretend_cuda_device(0, ARCH)
    model = importlib.import_module(f"{cs.__package__}.untuned").MODELS[cs.LANE_SM90]
    for n, k, m in built.uncovered:
        sel = oasr_core.select(cs.FAMILY, cs.OP_MM, ops.DTYPE, (n, k), m, ARCH)
        assert sel.tier is Tier.HEURISTIC and sel.config is not None  # the op keeps its tile
        assert ops.unquantized(n, k, m, 0) is not model.quantized_wins(m, n, k)
    first, second, *_, last = built.uncovered
    assert ops.unquantized(*first, 0) and ops.unquantized(*second, 0)
    assert not ops.unquantized(*last, 0)
    assert ops.unquantized(256, 1024, 4000, 0) is False     # a tuned entry is not second-guessed
    assert ops.unquantized(520, 1000, 4096, 0) is False     # no tile runs it: as before


@pytest.fixture
def int8(tmp_path, monkeypatch):
    package, fastest, _ = FORMATS["int8"]
    scripted = ScriptedFormat(package, fastest, tmp_path, monkeypatch)
    scripted.build()
    yield scripted
    runtime.install_runtime(None)


def test_int8_after_a_quantizing_norm_only_the_fused_norm_is_counted(int8):
    from oasr_scaled_mm import untuned

    pretend_cuda_device(0, ARCH)
    model = untuned.MODELS[int8.cs.LANE_SM90]
    # After a layer norm that quantizes, only what the fused norm adds is counted: the
    # quantizer's cost no longer tips (1024, 1024) at M 4096 to fp16.
    assert int8.ops.unquantized(1024, 1024, 4096, 0)
    assert model.quantized_wins(4096, 1024, 1024, quantizer=False)
    assert int8.ops.unquantized(1024, 1024, 4096, 0, normed=True) is False


def test_int8_route_model_is_the_w8a8_rooflines_and_a_lane_without_one_stays_int8():
    from oasr_scaled_mm import config_space as cs
    from oasr_scaled_mm import untuned

    assert cs.LANE_SM80 not in untuned.MODELS
    assert untuned.int8_wins(cs.LANE_SM80, 256, 256, 16) is True
    assert untuned.int8_wins(None, 256, 256, 16) is True
    # The sweep's widths: narrow layers lose to fp16 with the quantizer, wide deep ones win.
    assert not untuned.int8_wins(cs.LANE_SM90, 256, 256, 16384)
    assert untuned.int8_wins(cs.LANE_SM90, 5120, 1280, 16384)


def test_int8_quantized_linear_takes_f_linear_where_the_route_says(int8, monkeypatch):
    from oasr_scaled_mm.quantize import quantized_linear

    layer = torch.nn.Linear(1024, 256)
    x = torch.randn(300, 1024)
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda _t: True))
    monkeypatch.setattr(torch.Tensor, "device", property(lambda _t: torch.device("cuda", 0)))
    calls = []
    monkeypatch.setattr(int8.ops, "unquantized",
                        lambda n, k, m, d, normed=False: calls.append((n, k, m, d)) or True)
    y = quantized_linear(x, layer)
    assert calls == [(256, 1024, 300, 0)]
    assert torch.equal(y, torch.nn.functional.linear(x, layer.weight, layer.bias))
    assert not hasattr(layer, "_oasr_int8_w8a8")  # no quantized weight was made

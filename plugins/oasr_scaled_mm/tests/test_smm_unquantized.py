"""The int8 family's ``unquantized`` arm through the generic build, on a scripted device: a
build measures it beside every tile, names it where fp16 ``F.linear`` beats int8 with the
activation quantizer, and the quantized linear's route then runs those shapes in fp16; a shape
no entry covers stays int8 only where the untuned route predicts int8 to win."""

from __future__ import annotations

import oasr_core
import pytest
import torch
from oasr_core import build, runtime
from oasr_core.database import read_tuning_file
from oasr_core.testing import ScriptedBench, install_scripted, pretend_cuda_device
from oasr_core.types import Sentinel, Tier

from oasr_scaled_mm import config_space as cs
from oasr_scaled_mm import hooks, ops
from oasr_scaled_mm.quantize import quantized_linear

ARCH = "sm90"
KEY = "scaled_mm|op=scaled_mm|N=256|K=1024"


def time_us(name, config, problem):
    """F.linear wins below M=1024 (the quantizer's launch costs more than int8 saves there)."""
    if name == Sentinel.UNQUANTIZED.value:
        return 5.0 if problem.m < 1024 else 60.0
    if name == Sentinel.TORCH.value:
        return 9.0 if problem.m < 1024 else 40.0
    return 8.0 if problem.m < 1024 else 25.0


@pytest.fixture
def scripted(tmp_path, monkeypatch):
    bench = ScriptedBench(time_us, sigma_rel=0.002)
    monkeypatch.setenv("OASR_TUNE_USER_DB", str(tmp_path / "user"))
    rt = install_scripted(hooks, bench, "scaled_mm")
    family = rt.registry.family(cs.FAMILY)
    census = build.census_from_widths(family, "256,1024", "64,512,4096", op=cs.OP_MM)
    out = tmp_path / "user" / ARCH / "scaled_mm.json"
    build.build_live(census, family=family, lane=rt.registry.lane(cs.LANE_SM90), arch=ARCH,
                     out=out, timer=bench.timer, soft={"impl_hash": "int8-test"},
                     options=build.BuildOptions(fill=False))
    rt.reload()
    yield bench, out
    runtime.install_runtime(None)


def test_the_build_measures_unquantized_and_names_it_where_fp16_wins(scripted):
    bench, out = scripted
    assert all(Sentinel.UNQUANTIZED.value in names for _p, names in bench.benched)
    regions = [tuple(r) for r in read_tuning_file(out).entries[KEY].regions]
    assert regions[0] == (512, "unquantized") and regions[-1][1] != "unquantized"


def test_the_route_runs_unquantized_regions_in_fp16_and_leaves_the_rest_int8(scripted):
    pretend_cuda_device(0, ARCH)
    assert ops.unquantized(256, 1024, 300, 0) is True
    assert ops.unquantized(256, 1024, 4000, 0) is False
    sel = oasr_core.select(cs.FAMILY, cs.OP_MM, ops.DTYPE, (256, 1024), 64, ARCH)
    assert (sel.choice, sel.tier, sel.config) == (Sentinel.UNQUANTIZED, Tier.USER, None)
    assert ops.select_config(256, 1024, 64, ARCH) is None  # a direct op call serves torch


def test_uncovered_shapes_run_int8_only_where_the_untuned_route_predicts_a_win(scripted):
    from oasr_scaled_mm import untuned

    pretend_cuda_device(0, ARCH)
    model = untuned.MODELS[cs.LANE_SM90]
    for n, k, m in ((1024, 1024, 4096), (512, 512, 64), (5120, 1280, 16384), (4096, 4096, 8192)):
        sel = oasr_core.select(cs.FAMILY, cs.OP_MM, ops.DTYPE, (n, k), m, ARCH)
        assert sel.tier is Tier.HEURISTIC and sel.config is not None  # the op keeps its tile
        assert ops.unquantized(n, k, m, 0) is not model.quantized_wins(m, n, k)
    assert ops.unquantized(1024, 1024, 4096, 0) and ops.unquantized(512, 512, 64, 0)
    assert not ops.unquantized(4096, 4096, 8192, 0)
    assert ops.unquantized(256, 1024, 4000, 0) is False     # a tuned entry is not second-guessed
    # After a layer norm that quantizes, only what the fused norm adds is counted: the
    # quantizer's cost no longer tips (1024, 1024) at M 4096 to fp16.
    assert model.quantized_wins(4096, 1024, 1024, quantizer=False)
    assert ops.unquantized(1024, 1024, 4096, 0, normed=True) is False


def test_the_route_model_is_the_w8a8_rooflines_and_a_lane_without_one_stays_int8():
    from oasr_scaled_mm import untuned

    assert cs.LANE_SM80 not in untuned.MODELS
    assert untuned.int8_wins(cs.LANE_SM80, 256, 256, 16) is True
    assert untuned.int8_wins(None, 256, 256, 16) is True
    # The sweep's widths: narrow layers lose to fp16 with the quantizer, wide deep ones win.
    assert not untuned.int8_wins(cs.LANE_SM90, 256, 256, 16384)
    assert untuned.int8_wins(cs.LANE_SM90, 5120, 1280, 16384)


def test_the_quantized_linear_takes_f_linear_where_the_route_says(scripted, monkeypatch):
    layer = torch.nn.Linear(1024, 256)
    x = torch.randn(300, 1024)
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda _t: True))
    monkeypatch.setattr(torch.Tensor, "device", property(lambda _t: torch.device("cuda", 0)))
    calls = []
    monkeypatch.setattr(ops, "unquantized",
                        lambda n, k, m, d, normed=False: calls.append((n, k, m, d)) or True)
    y = quantized_linear(x, layer)
    assert calls == [(256, 1024, 300, 0)]
    assert torch.equal(y, torch.nn.functional.linear(x, layer.weight, layer.bias))
    assert not hasattr(layer, "_oasr_int8_w8a8")  # no quantized weight was made

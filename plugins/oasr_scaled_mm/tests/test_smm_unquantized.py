"""The int8 family's ``unquantized`` arm through the generic build, on a scripted device: a
build measures it beside every tile, names it where fp16 ``F.linear`` beats int8 with the
activation quantizer, and the quantized linear's route then runs those shapes in fp16; a shape
no entry covers stays int8."""

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
    # A shape no entry covers keeps the heuristic's int8 tile.
    assert ops.unquantized(1024, 1024, 4096, 0) is False


def test_the_quantized_linear_takes_f_linear_where_the_route_says(scripted, monkeypatch):
    layer = torch.nn.Linear(1024, 256)
    x = torch.randn(300, 1024)
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda _t: True))
    monkeypatch.setattr(torch.Tensor, "device", property(lambda _t: torch.device("cuda", 0)))
    calls = []
    monkeypatch.setattr(ops, "unquantized", lambda n, k, m, d: calls.append((n, k, m, d)) or True)
    y = quantized_linear(x, layer)
    assert calls == [(256, 1024, 300, 0)]
    assert torch.equal(y, torch.nn.functional.linear(x, layer.weight, layer.bias))
    assert not hasattr(layer, "_oasr_int8_w8a8")  # no quantized weight was made
